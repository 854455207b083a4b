"""Kafka's own group consumers and admin tools in coordkafka groups (DESIGN.md "One registry, several doors").

confluent-kafka (librdkafka 2.x) and kafka-python consumers ``subscribe()`` against a
3-broker cluster of ours: they find the coordinator, join, read everything, commit, and
their offsets are in ZooKeeper in Kafka's layout.  Both clients' admin APIs list and
describe the groups and read their offsets -- a group of our own members included, as
lag tools would.  Raw requests to a broker that is not the coordinator get
NOT_COORDINATOR, not a closed connection.
"""

from __future__ import annotations

import uuid

import pytest
from helpers import group_offsets, local_cluster, wait_until

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.consumer.consumer import Consumer as OurConsumer
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

PARTITIONS = 3
N = 90


@pytest.fixture(scope="module")
def ours(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("kgroups"), 3, "kgroups") as c:
        yield c


def _topic(cluster, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
        p = Producer(cc)
        for i in range(N):
            p.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        p.flush()
    return topic


def _ends(cluster, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ends-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def test_confluent_kafka_subscribe_reads_commits_and_admin_sees_the_group(ours):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    topic, group = _topic(ours, "ck"), f"ck-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": ours.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    seen = set()
    try:
        wait_until(lambda: _poll_into(c, seen) >= N, timeout=60, message=lambda: f"{N} records; have {len(seen)}")
        assert seen == {(f"k{i}", f"v{i}") for i in range(N)}
        assert sorted(tp.partition for tp in c.assignment()) == list(range(PARTITIONS))
        c.commit(asynchronous=False)
        ends = _ends(ours, topic)
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        c.close()
    assert group_offsets(ours.zk_connect, group, topic) == ends

    admin = KafkaAdmin({"bootstrap.servers": ours.bootstrap})
    listed = admin.list_consumer_groups().result(timeout=20)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert described.group_id == group and described.members == []  # it left on close
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert {tp.partition: tp.offset for tp in future.result(timeout=20).topic_partitions if tp.topic == topic} == ends


def _poll_into(c, seen: set) -> int:
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        seen.add((m.key().decode(), m.value().decode()))
    return len(seen)


def test_kafka_python_group_consumer_and_admin(ours):
    import kafka.errors
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    topic, group = _topic(ours, "kp"), f"kp-{uuid.uuid4().hex[:8]}"
    c = KafkaConsumer(bootstrap_servers=ours.bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    c.subscribe([topic])
    seen = set()

    def poll() -> int:
        for records in c.poll(500).values():
            seen.update((r.key.decode(), r.value.decode()) for r in records)
        return len(seen)

    try:
        wait_until(lambda: poll() >= N, timeout=60, message=lambda: f"{N} records; have {len(seen)}")
        assert seen == {(f"k{i}", f"v{i}") for i in range(N)}
        c.commit()
    finally:
        c.close()
    ends = _ends(ours, topic)
    assert group_offsets(ours.zk_connect, group, topic) == ends

    admin = KafkaAdminClient(bootstrap_servers=ours.bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == ends
        assert group in {g["group_id"] for g in admin.list_groups()}
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Empty" and described["members"] == []
        # a reset tool on the empty group (OffsetCommit outside any generation): back to 0 and to 5
        reset = admin.reset_group_offsets(group, {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 5})
        assert {tp.partition: r["offset"] for tp, r in reset.items()} == {0: 0, 1: 5}
        assert all(r["error"] is kafka.errors.NoError for r in reset.values()), reset
        assert group_offsets(ours.zk_connect, group, topic) == {**ends, 0: 0, 1: 5}
    finally:
        admin.close()


def test_lag_tools_see_a_group_of_our_own_members(ours):
    """A group of thin consumers (as a Spark query's): Kafka's AdminClient reads its offsets and
    describes its member with its partitions."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    topic, group = _topic(ours, "lag"), f"lag-{uuid.uuid4().hex[:8]}"
    consumer = OurConsumer(ours.bootstrap, group, topics=[topic], auto_offset_reset="smallest",
                           session_timeout_ms=6000)
    try:
        got = []
        wait_until(lambda: got.extend(consumer.messages(timeout=0.5)) or len(got) >= N, timeout=60,
                   message=lambda: f"{N} records; have {len(got)}")
        consumer.commit(consumer.positions(), timeout=10)
        ends = _ends(ours, topic)
        admin = KafkaAdmin({"bootstrap.servers": ours.bootstrap})
        [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        assert {tp.partition: tp.offset for tp in future.result(timeout=20).topic_partitions} == ends
        described = admin.describe_consumer_groups([group])[group].result(timeout=20)
        assert [m.member_id for m in described.members] == [consumer.consumer_id]
        assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == \
            list(range(PARTITIONS))
        assert str(described.state).endswith("STABLE")
    finally:
        consumer.close()


def test_group_requests_to_other_brokers_get_not_coordinator(ours):
    """Every broker names the same coordinator for a group (the holder of its shard), batched
    keys each their own; the others answer the group's requests NOT_COORDINATOR -- but for
    OffsetFetch, which every broker answers from ZooKeeper (test_offset_fetch_off_coordinator)."""
    from spark_coord.client.connection import BrokerConnection

    seen = []
    keys = ["a", "b", "g"]

    def agreed():  # every broker names the same coordinator per key, and g's serves it: (its id,)
        named: dict[str, set] = {k: set() for k in keys}
        seen[:] = [named]
        for host, port in ours.brokers.values():
            with BrokerConnection(host, port) as conn:
                found = conn.request(ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}, version=3)
                named["g"].add(found["node_id"] if found["error_code"] == 0 else None)
                batched = conn.request(ApiKey.FIND_COORDINATOR, {"coordinator_keys": keys, "key_type": 0},
                                       version=4)["coordinators"]
                assert [c["key"] for c in batched] == keys
                for c in batched:
                    named[c["key"]].add(c["node_id"] if c["error_code"] == 0 else None)
        if any(len(ids) != 1 or None in ids for ids in named.values()):
            return None
        [coordinator] = named["g"]
        host, port = ours.brokers[coordinator]
        with BrokerConnection(host, port) as conn:
            beat = conn.request(ApiKey.HEARTBEAT, {"group_id": "g", "generation_id": 1, "member_id": "m"})
        seen.append(beat)
        return (coordinator,) if beat["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID else None

    [coordinator] = wait_until(agreed, timeout=30, message=lambda: f"the brokers to agree on the coordinators: {seen}")
    with ClusterClient(ours.bootstrap) as cc:
        others = [b for b in ours.brokers if b != coordinator]
        assert others
        for b in others:
            host, port = ours.brokers[b]
            with BrokerConnection(host, port) as conn:
                answer = conn.request(ApiKey.HEARTBEAT, {"group_id": "g", "generation_id": 1, "member_id": "m"})
                assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
                fetched = conn.request(ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": None}, version=5)
                assert (fetched["error_code"], fetched["topics"]) == (0, [])  # g has no offsets
                fetched = conn.request(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": "g", "topics": None}]}, version=8)
                assert [(g["error_code"], g["topics"]) for g in fetched["groups"]] == [(0, [])]
                listed = conn.request(ApiKey.LIST_GROUPS, {})
                assert listed["error_code"] == 0  # the groups of the shards it holds, never g
                assert "g" not in {g["group_id"] for g in listed["groups"]}
        txn = cc.request_any(ApiKey.FIND_COORDINATOR, {"key": "t", "key_type": 1}, version=3)
        assert txn["error_code"] == ErrorCode.NONE and txn["node_id"] in ours.brokers  # its shard's holder
