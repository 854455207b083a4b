"""The thin consumer as a member of Kafka 4's consumer group protocol (KIP-848,
``Consumer(group_protocol="consumer")``) on our brokers, in one group with a confluent-kafka
consumer (``group.protocol=consumer``): every record is read once across them, each member sees
its share, a member leaving moves only its partitions, and the committed offsets reach the log
end."""

from __future__ import annotations

import time
from collections import Counter

from helpers import wait_until
from kip848_readers import ThinReader, produce
from peers.group_peers import KafkaPeer
from support import log_end

PARTITIONS = 12


def _thin(bootstrap: str, group: str, topic: str, **kwargs):
    from spark_coord.consumer.consumer import Consumer

    kwargs.setdefault("auto_commit_interval_ms", 200)
    return Consumer(bootstrap, group, topics=[topic], group_protocol="consumer", auto_offset_reset="smallest",
                    session_timeout_ms=6000, **kwargs)


def _split(owned: dict[str, set[int]]) -> bool:
    """Every partition owned by exactly one member, none left out, none empty-handed."""
    parts = [p for ps in owned.values() for p in ps]
    return len(parts) == PARTITIONS and set(parts) == set(range(PARTITIONS)) and all(owned.values())


def test_thin_kip848_members_share_a_group_with_a_confluent_member(cluster, create, tmp_path):
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    group, topic = "g-kip848-thin", "k848thin"
    create(topic, PARTITIONS)
    produce(cluster.bootstrap, topic, PARTITIONS, 20)
    readers = {n: ThinReader(_thin(cluster.bootstrap, group, topic), n) for n in ("t1", "t2")}
    for r in readers.values():
        r.start()
    peer = KafkaPeer("confluent", cluster.bootstrap, group, topic, "k1", tmp_path, "consumer")
    try:
        def owned() -> dict[str, set[int]]:
            return {**{n: r.owned() for n, r in readers.items()}, "k1": peer.owned()}

        before = wait_until(lambda: _split(owned()) and owned(), timeout=60, interval=0.2,
                            message=lambda: f"the three members to split the partitions: {owned()}")
        assert {len(ps) for ps in before.values()} == {PARTITIONS // 3}, before
        for r in readers.values():
            assert r.consumer.generation >= 1 and r.consumer.connector.epoch >= 1
        produce(cluster.bootstrap, topic, PARTITIONS, 20, start=PARTITIONS * 20)

        # t2 leaves: its partitions go to the others, who keep theirs
        t_leave = time.time()
        readers["t2"].stop()
        assert readers["t2"].consumer.connector.left_cleanly
        left = {n: ps for n, ps in owned().items() if n != "t2"}
        after = wait_until(lambda: (o := {n: ps for n, ps in owned().items() if n != "t2"}) and _split(o) and o,
                           timeout=60, interval=0.2, message=lambda: f"t1 and k1 to take over t2's partitions: "
                                                                     f"{owned()}")
        assert after["t1"] >= before["t1"] and after["k1"] >= before["k1"], (before, after)
        assert peer.revoked_after(t_leave) == [], "k1 gave up partitions although only t2 left"
        assert left["t1"] >= before["t1"]
        produce(cluster.bootstrap, topic, PARTITIONS, 20, start=PARTITIONS * 40)

        ends = log_end(cluster.bootstrap, topic)
        with ClusterClient(cluster.bootstrap) as cc, GroupClient(cc) as gc:
            def committed() -> dict[int, int]:
                return {p: c.offset for (_, p), c in gc.fetch_offsets(group).items()}
            wait_until(lambda: committed() == {p: o for (_, p), o in ends.items()}, timeout=60, interval=0.3,
                       message=lambda: f"the group's commits at the log end {ends}: {committed()}")
    finally:
        peer.stop()
        for r in readers.values():
            if not r.closed:
                r.stop()

    reads = Counter(r for reader in readers.values() for r in reader.read()) + Counter(peer.records())
    expected = {(p, o) for (_, p), end in ends.items() for o in range(end)}
    assert set(reads) == expected, \
        f"missing {sorted(expected - set(reads))[:10]}, extra {sorted(set(reads) - expected)[:10]}"
    assert [r for r, n in reads.items() if n > 1] == [], "records read twice"
    for name, reader in readers.items():
        assert reader.error is None, f"{name}: {reader.error!r}"
        assert any(reader.assignments), f"{name} never held a partition"
