"""One group, three kinds of member: our thin consumer (the coordinator protocol),
confluent-kafka and kafka-python (Kafka's group protocol), each a real process.

They share the partitions disjointly and completely; SIGKILL of the confluent-kafka
process hands its partitions to the other two within its session timeout; with the
producer stopped, the group's committed offsets reach the log end.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from helpers import wait_until
from support import log_end, topic_partitions, wait_caught_up

from spark_coord.coordinator.core.assignors import thread_owner
from testkit.zk_history import read_partitions

KAFKA_SESSION_MS = 6000
PARTITIONS = 12


def KafkaPeer(kind: str, bootstrap: str, group: str, topic: str, client_id: str, workdir: Path):
    """A Kafka-client group consumer process with its default (eager) assignors."""
    from peers.group_peers import KafkaPeer as Peer

    return Peer(kind, bootstrap, group, topic, client_id, workdir, None, KAFKA_SESSION_MS)


def _owners_by_member(czk, group: str) -> dict[str, set]:
    owners: dict[str, set] = {}
    for tp, thread in read_partitions(czk, group, "owners").items():
        owners.setdefault(thread_owner(str(thread)), set()).add(tp)
    return owners


def _kind(member_id: str) -> str:
    for prefix in ("confluent", "kpython"):
        if member_id.startswith(prefix):
            return prefix
    return member_id


def test_mixed_group_shares_partitions_and_hands_over_after_sigkill(cluster, czk, members, producer_factory,
                                                                      create, tmp_path):
    group, topic = "g-mixed", "mixed"
    create(topic, PARTITIONS)
    parts = topic_partitions(topic, PARTITIONS)
    producer = producer_factory(topic, PARTITIONS)
    ours = members("ours", group, topics=[topic])
    peers = [KafkaPeer("confluent", cluster.bootstrap, group, topic, "confluent", tmp_path),
             KafkaPeer("kafka-python", cluster.bootstrap, group, topic, "kpython", tmp_path)]
    try:
        def shared(without: str | None = None):
            """The owners by kind once the range assignment of the expected members is written (the
            owner znodes are read one by one, so a read during a rewrite can mix two generations)."""
            owners = _owners_by_member(czk, group)
            kinds = {_kind(m): tps for m, tps in owners.items()}
            union = set().union(*owners.values()) if owners else set()
            want = {"ours", "kpython"} | ({"confluent"} if without is None else set())
            share = PARTITIONS // len(want)
            if set(kinds) != want or union != parts or any(len(tps) != share for tps in kinds.values()):
                return None
            return kinds

        wait_until(shared, timeout=60, interval=0.2,
                   message=lambda: f"three kinds of member to share {PARTITIONS} partitions; owners now "
                                   f"{_owners_by_member(czk, group)}")
        wait_until(lambda: all(p.read() > 0 for p in peers), timeout=30,
                   message=lambda: f"both Kafka clients to read records; {[p.read() for p in peers]}")

        victim = peers[0]
        t_kill = time.monotonic()
        victim.stop(signal.SIGKILL)
        wait_until(lambda: shared(without="confluent"), timeout=KAFKA_SESSION_MS / 1000 + 30, interval=0.2,
                   message=lambda: f"the survivors to take the killed member's partitions; owners now "
                                   f"{_owners_by_member(czk, group)}")
        moved = time.monotonic() - t_kill
        print(f"\npartitions of the SIGKILLed confluent-kafka member moved in {moved:.2f} s")
        assert moved < KAFKA_SESSION_MS / 1000 + 2.0, f"partitions moved {moved:.2f} s after the SIGKILL"

        producer.stop()
        ends = log_end(cluster.bootstrap, topic)
        wait_caught_up(czk, group, ends, timeout=60)
        assert ours.alive() and peers[1].proc.poll() is None
    finally:
        for p in peers:
            p.stop()


def test_kafka_clients_ride_through_a_coordinator_sigkill(cluster, czk, producer_factory, create, tmp_path):
    """SIGKILL of the coordinator's broker under confluent-kafka and kafka-python members: they
    find the new coordinator, are taken back into the restored generation (no rebalance), keep
    reading, and the group's offsets reach the log end once the broker is back."""
    from support import leaders

    from spark_coord.coordinator.storage.zk_store import parse_state
    from spark_coord.zk import paths
    from testkit.zk_history import read_coordinator

    group, topic = "g-kafka-failover", "kfail"
    create(topic, PARTITIONS)
    parts = topic_partitions(topic, PARTITIONS)
    producer = producer_factory(topic, PARTITIONS)
    peers = [KafkaPeer("confluent", cluster.bootstrap, group, topic, "confluent", tmp_path),
             KafkaPeer("kafka-python", cluster.bootstrap, group, topic, "kpython", tmp_path)]

    def generation() -> int:
        return parse_state(czk.get(paths.group_state(group))[0], group)

    try:
        def both():
            owners = _owners_by_member(czk, group)
            ok = {_kind(m) for m in owners} == {"confluent", "kpython"} and set().union(*owners.values()) == parts \
                and all(len(tps) == PARTITIONS // 2 for tps in owners.values())  # not a read torn by a rewrite
            return owners if ok else None

        before = wait_until(both, timeout=60, interval=0.2, message=lambda: f"both Kafka clients owning partitions; "
                                                                            f"{_owners_by_member(czk, group)}")
        gen = generation()
        victim = wait_until(lambda: (c := read_coordinator(czk)) is not None and (c,), message="a coordinator")[0]
        led = {p for p, b in leaders(cluster.bootstrap, topic).items() if b == victim}
        producer.allowed -= led
        cluster.kill_broker(victim)
        wait_until(lambda: (c := read_coordinator(czk)) is not None and c != victim, timeout=60,
                   message="another broker to become coordinator")
        reads = [p.read() for p in peers]
        wait_until(lambda: all(p.read() > r for p, r in zip(peers, reads, strict=True)), timeout=60,
                   message="both clients to read on after the failover")
        cluster.start_broker(victim)
        producer.allowed |= led
        producer.stop()
        ends = log_end(cluster.bootstrap, topic)
        wait_caught_up(czk, group, ends, timeout=60)
        assert generation() == gen, "the failover rebalanced the group"
        assert _owners_by_member(czk, group) == before
    finally:
        for p in peers:
            p.stop()
