"""kafkajs 2.2 as a peer: against our broker (produce, topic offsets, plain Fetch), and its
group consumer and group admin against Tansu (a real group coordinator) and against our
coordinator, with the same assertions."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from helpers import group_offsets, local_cluster
from peers.kafkajs import by_event

from spark_coord.client.admin import AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.groups import GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.coordinator.doors.classic import LEADER
from spark_coord.records.reader import iter_records

PARTITIONS = 3
N = 30


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def ours(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("kafkajs"), 1, "kafkajs") as c:
        yield c


def _expected(prefix: str) -> set[tuple[str, str, str]]:
    return {(f"{prefix}-key-{i}", f"{prefix}-value-{i}", str(i)) for i in range(N)}


def _consume_all_and_commit(kafkajs, brokers: list[str], topic: str, group: str, prefix: str,
                            leader: str | None = None, **options) -> dict[tuple[str, int], int]:
    """kafkajs's group consumer, alone in ``group``, is given every partition, reads the N records
    produced with ``prefix`` and commits each partition's end, as its admin's fetchOffsets shows;
    returns those offsets.  ``leader``: the leader the JoinGroup names (None: the member itself)."""
    events = kafkajs.run("consume", brokers=brokers, topic=topic, groupId=group, count=N, sessionTimeout=6000,
                         heartbeatInterval=500, **options)
    [joined] = by_event(events, "joined")
    assert joined["leaderId"] == (leader or joined["memberId"])
    assert joined["assignment"] == {topic: list(range(PARTITIONS))}
    records = by_event(events, "record")
    assert {(r["key"], r["value"], r["headers"]["i"]) for r in records} == _expected(prefix)
    ends = {}
    for r in records:
        ends[r["partition"]] = max(ends.get(r["partition"], 0), r["offset"] + 1)

    [offsets] = by_event(kafkajs.run("fetch-offsets", brokers=brokers, groupId=group, topics=[topic]), "offsets")
    committed = {(t["topic"], p["partition"]): p["offset"] for t in offsets["topics"] for p in t["partitions"]}
    assert committed == {(topic, p): end for p, end in ends.items()}
    return committed


def _list_describe_delete(kafkajs, brokers: list[str], group: str) -> None:
    """kafkajs's admin lists the group, describes it with no members (its consumer left on
    disconnect) and deletes it."""
    [listed] = by_event(kafkajs.run("list-groups", brokers=brokers), "groups")
    assert {"groupId": group, "protocolType": "consumer"} in listed["groups"]
    [described] = by_event(kafkajs.run("describe-groups", brokers=brokers, groupIds=[group]), "described")
    assert [(g["groupId"], g["members"]) for g in described["groups"]] == [(group, [])]  # it left on disconnect
    [deleted] = by_event(kafkajs.run("delete-groups", brokers=brokers, groupIds=[group]), "deleted")
    assert deleted["results"] == [{"groupId": group, "errorCode": 0}]


def test_kafkajs_produces_to_our_broker_and_reads_back_by_fetch(ours, kafkajs):
    brokers = [ours.bootstrap]
    topic = _name("js")
    assert by_event(kafkajs.run("create-topic", brokers=brokers, topic=topic, partitions=PARTITIONS), "created")
    [produced] = by_event(kafkajs.run("produce", brokers=brokers, topic=topic, count=N, prefix="js"), "produced")
    assert produced["count"] == N
    [offsets] = by_event(kafkajs.run("topic-offsets", brokers=brokers, topic=topic), "topic_offsets")
    assert sorted(p["partition"] for p in offsets["partitions"]) == list(range(PARTITIONS))
    assert all(p["low"] == 0 for p in offsets["partitions"]) and sum(p["high"] for p in offsets["partitions"]) == N

    events = kafkajs.run("fetch", brokers=brokers, topic=topic, partitions=list(range(PARTITIONS)))
    records = by_event(events, "record")
    assert by_event(events, "fetched") == [{"event": "fetched", "count": N}]
    assert {(r["key"], r["value"], r["headers"]["i"]) for r in records} == _expected("js")
    # offsets are dense per partition, as our broker assigned them
    per_partition = Counter(r["partition"] for r in records)
    assert {(r["partition"], r["offset"]) for r in records} == {
        (p, o) for p, n in per_partition.items() for o in range(n)}

    # and our own Fetch path reads what kafkajs wrote
    with ClusterClient(ours.bootstrap) as cluster:
        seen = set()
        for p in range(PARTITIONS):
            for pd in fetch(cluster.connection(cluster.leader(topic, p)), {(topic, p): 0}, max_wait_ms=0):
                for rec in iter_records(pd.records or b""):
                    seen.add((rec.key.decode(), rec.value.decode(), dict(rec.headers)["i"].decode()))
        assert seen == _expected("js")


def test_kafkajs_group_consumer_and_admin_on_tansu(tansu, kafkajs):
    brokers = [tansu.bootstrap]
    topic, group = _name("jsg"), _name("js-group")
    kafkajs.run("create-topic", brokers=brokers, topic=topic, partitions=PARTITIONS)
    kafkajs.run("produce", brokers=brokers, topic=topic, count=N, prefix="g")

    committed = _consume_all_and_commit(kafkajs, brokers, topic, group, "g")
    # the offsets kafkajs committed, as our group client reads them
    with ClusterClient(tansu.bootstrap) as cluster, GroupClient(cluster) as groups:
        assert {tp: c.offset for tp, c in groups.fetch_offsets(group).items()} == committed

    _list_describe_delete(kafkajs, brokers, group)


def test_kafkajs_group_consumer_and_admin_on_our_broker(ours, kafkajs):
    """The same run as on Tansu, against our coordinator: kafkajs joins, reads everything, commits;
    its offsets are in ZooKeeper in Kafka's layout; its admin lists, describes and deletes the group."""
    brokers = [ours.bootstrap]
    topic, group = _name("jso"), _name("js-ours")
    with ClusterClient(ours.bootstrap) as cluster:
        AdminClient(cluster).create_topic(topic, PARTITIONS)
    kafkajs.run("produce", brokers=brokers, topic=topic, count=N, prefix="o")
    # no member leads here (the coordinator assigns): kafkajs syncs as a follower and gets every partition
    committed = _consume_all_and_commit(kafkajs, brokers, topic, group, "o", leader=LEADER, timeout=60)
    assert {(topic, p): o for p, o in group_offsets(ours.zk_connect, group, topic).items()} == committed

    _list_describe_delete(kafkajs, brokers, group)


def test_kafkajs_librdkafka_and_our_consumer_share_a_group_and_kill9_hands_over(ours, kafkajs, tmp_path):
    """kafkajs (its protocol is called RoundRobinAssigner), confluent-kafka with librdkafka's default
    assignors (range, roundrobin) and ``spark-coord consume`` in one group: protocol names need not
    agree, since the coordinator assigns.  Each reads its share; after kill -9 of kafkajs its
    partitions go to the other two, which read on; every record is read, and the group's offsets
    reach the log end."""
    import time

    from helpers import group_owners, owners_by_member, wait_until
    from peers.group_peers import CliConsumer, KafkaPeer, topic_index

    from testkit.producer import AckingProducer

    topic, group, parts = _name("mixjs"), _name("mixjs"), 6
    with ClusterClient(ours.bootstrap) as cluster:
        AdminClient(cluster).create_topic(topic, parts)
    producer = AckingProducer(ours.bootstrap, topic, parts, batch=2, interval=0.1)
    producer.start()
    js = kafkajs.start("consume", brokers=[ours.bootstrap], topic=topic, groupId=group, count=10**9,
                       sessionTimeout=6000, heartbeatInterval=500)
    lib = KafkaPeer("confluent", ours.bootstrap, group, topic, "librdkafka", tmp_path, None, 6000)
    cli = CliConsumer(ours.bootstrap, group, topic, tmp_path, name="ours", session_ms=6000)
    js_lines: list[dict] = []

    def js_events() -> list[dict]:
        import json
        import select

        while select.select([js.stdout], [], [], 0)[0]:
            line = js.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                js_lines.append(json.loads(line))
        return js_lines

    def owners() -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for member, ps in owners_by_member(group_owners(ours.zk_connect, group, topic)).items():
            out.setdefault(member.split("-")[0], set()).update(ps)
        return out

    try:
        def sharing(kinds: set[str]):
            o = owners()
            return o if set(o) == kinds and set().union(*o.values()) == set(range(parts)) else None

        shared = wait_until(lambda: sharing({"kafkajs_peer", "librdkafka", "ours"}), timeout=90, interval=0.3,
                            message=lambda: f"kafkajs, librdkafka and our consumer sharing {parts} partitions; "
                                            f"{owners()}")
        assert {len(ps) for ps in shared.values()} == {2}
        wait_until(lambda: by_event(js_events(), "record"), timeout=30, message="kafkajs reading records")
        js.kill()  # kill -9: no LeaveGroup, no commit
        js.wait(10)
        t_kill = time.monotonic()
        after = wait_until(lambda: sharing({"librdkafka", "ours"}), timeout=60, interval=0.3,
                           message=lambda: f"the two survivors owning everything; {owners()}")
        print(f"\nkafkajs's partitions moved {time.monotonic() - t_kill:.1f} s after its SIGKILL")
        assert after["librdkafka"] >= shared["librdkafka"] and after["ours"] >= shared["ours"]
        # librdkafka's own view (its rebalance callback) comes a moment after the coordinator wrote the
        # owners: its SyncGroup answer, then the application's poll runs the callback (a CI run saw set())
        wait_until(lambda: lib.owned() == after["librdkafka"], timeout=30, interval=0.2,
                   message=lambda: f"librdkafka's callbacks to assign it {after['librdkafka']}; it has {lib.owned()}")
        producer.stop()
        index = topic_index(ours.bootstrap, topic)
        js_read = {(r["partition"], int(r["offset"])) for r in by_event(js_events(), "record")}

        def read() -> set[tuple[int, int]]:
            return js_read | lib.records() | {index[v] for v in cli.values() if v in index}

        wait_until(lambda: read() >= set(index.values()), timeout=60, interval=0.5,
                   message=lambda: f"every record read; missing {len(set(index.values()) - read())}")
        ends = {p: len([o for q, o in index.values() if q == p]) for p in range(parts)}
        wait_until(lambda: group_offsets(ours.zk_connect, group, topic) == ends, timeout=60, interval=0.5,
                   message=lambda: f"offsets at the log end {ends}: {group_offsets(ours.zk_connect, group, topic)}")
    finally:
        if producer.is_alive():
            producer.stop()
        if js.poll() is None:
            js.kill()
        cli.stop()
        lib.stop()
