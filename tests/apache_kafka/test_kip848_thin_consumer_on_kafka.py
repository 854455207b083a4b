"""The thin consumer with Kafka 4's consumer group protocol (``group_protocol="consumer"``,
KIP-848) on Apache Kafka 4.2: beside a confluent-kafka member of the same group it reads every
record once, a member leaving moves only its partitions, and Kafka's own
``kafka-consumer-groups --describe`` shows our members and, at the end, lag 0;
``spark-coord consume --group-protocol consumer`` reads a topic and commits; a subscription by
regular expression is resolved by Kafka (KIP-848's ``SubscribedTopicRegex``); the server-side
assignors ``uniform`` and ``range`` are used as named (``group_remote_assignor``), and an unknown
one ends ``spark-coord consume`` with one error line (UNSUPPORTED_ASSIGNOR) and exit status 1; a
static member (``group_instance_id``) closed and started again gets its partitions back, the other
member unmoved."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from helpers import wait_until
from kip848_readers import ThinReader, committed, produce
from peers.apache_kafka import CONSUMER_GROUPS
from peers.group_peers import KafkaPeer

PARTITIONS = 12


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
        return {p: c.offset for (_, p), c in gc.fetch_offsets(group).items()}


def _log_end(bootstrap: str, topic: str) -> dict[int, int]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return dict(AdminClient(cc).list_offsets(topic, None, LATEST))


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, partitions)
        cc.topic(topic, refresh=True, wait=30)


def _lags(described: str, topic: str) -> dict[int, str]:
    """partition -> LAG column of ``kafka-consumer-groups --describe`` (offsets view)."""
    lines = [line.split() for line in described.splitlines() if line.strip()]
    header = next(line for line in lines if "LAG" in line and "PARTITION" in line)
    at = {name: i for i, name in enumerate(header)}
    return {int(row[at["PARTITION"]]): row[at["LAG"]] for row in lines
            if len(row) == len(header) and row[at["TOPIC"]] == topic}


def test_thin_kip848_members_on_apache_kafka(apache_kafka, kafka_tool, tmp_path):
    from spark_coord.consumer.consumer import Consumer

    bootstrap = apache_kafka.bootstrap
    group, topic = f"g-thin-{uuid.uuid4().hex[:8]}", f"thin-{uuid.uuid4().hex[:8]}"
    _create(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS, 15)

    def thin(name: str) -> ThinReader:
        return ThinReader(Consumer(bootstrap, group, topics=[topic], group_protocol="consumer",
                                   auto_offset_reset="smallest", auto_commit_interval_ms=200), name)

    readers = {n: thin(n) for n in ("t1", "t2")}
    for r in readers.values():
        r.start()
    peer = KafkaPeer("confluent", bootstrap, group, topic, "k1", tmp_path, "consumer")
    try:
        def owned() -> dict[str, set[int]]:
            return {**{n: r.owned() for n, r in readers.items()}, "k1": peer.owned()}

        def split(o: dict[str, set[int]]) -> bool:
            parts = [p for ps in o.values() for p in ps]
            return sorted(parts) == list(range(PARTITIONS)) and all(o.values())

        before = wait_until(lambda: split(o := owned()) and o, timeout=120, interval=0.3,
                            message=lambda: f"the three members to split the partitions: {owned()}")
        members = kafka_tool(CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group,
                             "--members", check=True).stdout
        for r in readers.values():
            assert r.consumer.consumer_id in members, members
        produce(bootstrap, topic, PARTITIONS, 15, start=PARTITIONS * 15)

        t_leave = time.time()
        readers["t2"].stop()
        assert readers["t2"].consumer.connector.left_cleanly
        after = wait_until(lambda: split(o := {n: ps for n, ps in owned().items() if n != "t2"}) and o,
                           timeout=120, interval=0.3, message=lambda: f"t1 and k1 to take t2's partitions: {owned()}")
        assert after["t1"] >= before["t1"] and after["k1"] >= before["k1"], (before, after)
        assert peer.revoked_after(t_leave) == [], "k1 gave up partitions although only t2 left"
        produce(bootstrap, topic, PARTITIONS, 15, start=PARTITIONS * 30)

        ends = _log_end(bootstrap, topic)
        wait_until(lambda: _committed(bootstrap, group) == ends, timeout=60, interval=0.5,
                   message=lambda: f"commits at the log end {ends}: {_committed(bootstrap, group)}")
        described = kafka_tool(CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group,
                               check=True).stdout
        assert readers["t1"].consumer.consumer_id in described, described
        assert _lags(described, topic) == {p: "0" for p in range(PARTITIONS)}, described
    finally:
        peer.stop()
        for r in readers.values():
            if not r.closed:
                r.stop()
    reads = Counter(x for r in readers.values() for x in r.read()) + Counter(peer.records())
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    assert set(reads) == expected, f"missing {sorted(expected - set(reads))[:10]}"
    assert [x for x, n in reads.items() if n > 1] == [], "records read twice"
    assert all(r.error is None for r in readers.values())


def test_consume_cli_with_the_consumer_group_protocol_on_apache_kafka(apache_kafka, kafka_tool):
    bootstrap = apache_kafka.bootstrap
    group, topic = f"g-cli-{uuid.uuid4().hex[:8]}", f"cli-{uuid.uuid4().hex[:8]}"
    _create(bootstrap, topic, 3)
    produce(bootstrap, topic, 3, 10)
    done = subprocess.run([sys.executable, "-m", "spark_coord.cli", "--log-level", "INFO", "consume", "-b", bootstrap,
                           "--group", group, "--group-protocol", "consumer", "--topic", topic, "--from-beginning",
                           "--count", "30"], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(done.stdout.split()) == sorted(f"v{i}" for i in range(30)), done.stdout
    assert _committed(bootstrap, group) == {0: 10, 1: 10, 2: 10}
    described = kafka_tool(CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group,
                           check=True).stdout
    assert _lags(described, topic) == {0: "0", 1: "0", 2: "0"}, described


def _thin(bootstrap: str, group: str, name: str, **kwargs) -> ThinReader:
    from spark_coord.consumer.consumer import Consumer

    reader = ThinReader(Consumer(bootstrap, group, group_protocol="consumer", auto_offset_reset="smallest",
                                 auto_commit_interval_ms=200, **kwargs), name)
    reader.start()
    return reader


def test_a_regex_subscription_on_apache_kafka(apache_kafka):
    bootstrap, tag = apache_kafka.bootstrap, uuid.uuid4().hex[:8]
    group = f"g-rx-{tag}"
    for topic in (f"rx-{tag}-a", f"rx-{tag}-b", f"nx-{tag}"):
        _create(bootstrap, topic, 2)
        produce(bootstrap, topic, 2, 5)
    reader = _thin(bootstrap, group, "r1", pattern=f"rx-{tag}-.*")
    wanted = {(f"rx-{tag}-{t}", p) for t in "ab" for p in range(2)}
    try:
        wait_until(lambda: set(reader.consumer.assignment()) == wanted, timeout=60, interval=0.3,
                   message=lambda: f"Kafka to resolve the regex to {sorted(wanted)}: {reader.consumer.assignment()}")
        wait_until(lambda: committed(bootstrap, group) == {tp: 5 for tp in wanted}, timeout=60,
                   interval=0.5, message=lambda: f"commits: {committed(bootstrap, group)}")
    finally:
        reader.stop()
    assert reader.error is None and len(reader.read()) == 20


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_a_server_side_assignor_on_apache_kafka(apache_kafka, kafka_tool, assignor):
    bootstrap, tag = apache_kafka.bootstrap, uuid.uuid4().hex[:8]
    group, topics = f"g-{assignor}-{tag}", [f"{assignor}-{tag}-a", f"{assignor}-{tag}-b"]
    for topic in topics:
        _create(bootstrap, topic, 4)
    readers = [_thin(bootstrap, group, n, topics=topics, group_remote_assignor=assignor) for n in ("m1", "m2")]
    try:
        def assigned() -> list[set]:
            return [set(r.consumer.assignment()) for r in readers]

        wait_until(lambda: all(len(a) == 4 for a in assigned()) and len(set.union(*assigned())) == 8, timeout=90,
                   interval=0.3, message=lambda: f"the members to share the 8 partitions: {assigned()}")
        if assignor == "range":  # ranges of each topic, the same partition numbers in both (co-partitioned)
            for a in assigned():
                numbers = [sorted(p for t, p in a if t == topic) for topic in topics]
                assert numbers[0] == numbers[1] and numbers[0] in ([0, 1], [2, 3]), assigned()
        described = kafka_tool(CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group,
                               "--state", check=True).stdout
        assert assignor in described.split(), described
    finally:
        for r in readers:
            r.stop()
    assert all(r.error is None for r in readers)


def test_consume_cli_with_an_unknown_assignor_on_apache_kafka(apache_kafka):
    bootstrap, tag = apache_kafka.bootstrap, uuid.uuid4().hex[:8]
    _create(bootstrap, f"cli-{tag}", 1)
    done = subprocess.run([sys.executable, "-m", "spark_coord.cli", "consume", "-b", bootstrap, "--group", f"g-{tag}",
                           "--group-protocol", "consumer", "--topic", f"cli-{tag}", "--group-remote-assignor", "bogus"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "ERROR" in last and "UNSUPPORTED_ASSIGNOR" in last and "bogus" in last, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def test_a_static_member_restarted_on_apache_kafka_gets_its_partitions_back(apache_kafka):
    bootstrap, tag = apache_kafka.bootstrap, uuid.uuid4().hex[:8]
    group, topic = f"g-static-{tag}", f"static-{tag}"
    _create(bootstrap, topic, 4)
    produce(bootstrap, topic, 4, 5)
    s1, s2 = (_thin(bootstrap, group, n, topics=[topic], group_instance_id=f"{n}-{tag}") for n in ("s1", "s2"))
    readers = [s1, s2]
    try:
        wait_until(lambda: sorted(s1.owned() | s2.owned()) == [0, 1, 2, 3] and s1.owned() and s2.owned(),
                   timeout=60, interval=0.3, message=lambda: f"s1 {s1.owned()} and s2 {s2.owned()} to split")
        wait_until(lambda: _committed(bootstrap, group) == {p: 5 for p in range(4)}, timeout=60, interval=0.5,
                   message=lambda: f"commits: {_committed(bootstrap, group)}")
        held, s2_assignments = s1.owned(), list(s2.assignments)
        s1.stop()  # epoch -2: Kafka keeps its partitions for the session timeout (45 s)
        produce(bootstrap, topic, 4, 5, start=20)
        again = _thin(bootstrap, group, "s1-again", topics=[topic], group_instance_id=f"s1-{tag}")
        readers.append(again)
        wait_until(lambda: again.owned() == held, timeout=30, interval=0.3,
                   message=lambda: f"the restarted s1 to get {held} back: {again.owned()}")
        wait_until(lambda: _committed(bootstrap, group) == {p: 10 for p in range(4)}, timeout=60, interval=0.5,
                   message=lambda: f"commits: {_committed(bootstrap, group)}")
        assert s2.assignments == s2_assignments, f"s2 moved: {s2.assignments} (was {s2_assignments})"
    finally:
        for r in readers:
            if not r.closed:
                r.stop()
    reads = Counter(x for r in readers for x in r.read())
    assert set(reads) == {(p, o) for p in range(4) for o in range(10)}
    assert [x for x, n in reads.items() if n > 1] == [], "records read twice"
