"""Against Tansu, a Kafka-compatible broker we did not write: confluent-kafka round trips,
our own producer, admin client and Fetch path, and the group client's offsets as
confluent-kafka's admin client and consumer see them."""

from __future__ import annotations

import time
import uuid

import pytest
from helpers import wait_until

from spark_coord.client.admin import EARLIEST, AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.groups import CommittedOffset, GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.records.reader import iter_records

PARTITIONS = 3


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster(tansu):
    with ClusterClient(tansu.bootstrap, timeout=10) as c:
        yield c


@pytest.fixture
def topic(cluster):
    name = _name("t")
    AdminClient(cluster).create_topic(name, PARTITIONS, 1)
    return name


def _read_all(cluster: ClusterClient, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``topic`` through our Fetch path: (partition, offset, key, value)."""
    out = []
    for p in range(PARTITIONS):
        conn = cluster.connection(cluster.leader(topic, p))
        position, end = 0, None
        while end is None or position < end:
            [pd] = fetch(conn, {(topic, p): position}, max_wait_ms=100)
            assert pd.error == 0, pd
            end = pd.high_watermark
            for rec in iter_records(pd.records or b"", min_offset=position):
                out.append((p, rec.offset, rec.key, rec.value))
                position = rec.offset + 1
    return sorted(out)


def test_confluent_kafka_produces_and_reads_back(tansu, topic):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from confluent_kafka import Producer as CKProducer

    producer = CKProducer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5, "log_level": 3})
    sent = [(f"k{i}".encode(), f"value-{i}".encode(), i % PARTITIONS) for i in range(30)]
    for key, value, p in sent:
        producer.produce(topic, value=value, key=key, partition=p, headers=[("h", key)])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": _name("unused"), "log_level": 3,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.key(), msg.value(), msg.partition()))
                assert msg.headers() == [("h", msg.key())]
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_our_producer_admin_client_and_fetch_path(cluster, compression):
    admin = AdminClient(cluster)
    topic = _name(f"ours-{compression}")
    assert admin.create_topic(topic, PARTITIONS, 1) == PARTITIONS
    assert topic in admin.list_topics()
    producer = Producer(cluster, compression=compression, batch_size=512)
    sent = {(f"key-{i}".encode(), f"v{i}".encode() * 20) for i in range(200)}
    for key, value in sorted(sent):
        producer.send(topic, value, key=key)
    producer.flush()
    records = _read_all(cluster, topic)
    assert {(k, v) for _, _, k, v in records} == sent and len(records) == len(sent)
    # keys were partitioned as Kafka's Java client does, so each key sits in one partition
    assert len({k for _, _, k, _ in records}) == len(sent)
    assert admin.list_offsets(topic, None, EARLIEST) == {p: 0 for p in range(PARTITIONS)}
    rows = admin.describe([topic])
    assert [r["partition"] for r in rows] == list(range(PARTITIONS))
    admin.delete_topic(topic)
    assert topic not in admin.list_topics()


def test_confluent_kafka_reads_what_our_producer_wrote(tansu, cluster, topic):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    Producer(cluster, compression="lz4").send_many(topic, [f"ours-{i}".encode() for i in range(40)])
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": _name("unused"), "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = set()
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.add(msg.value())
    finally:
        consumer.close()
    assert got == {f"ours-{i}".encode() for i in range(40)}


def test_group_client_offsets_as_confluent_admin_sees_them(tansu, cluster, topic):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient as CKAdmin

    group = _name("mirror")
    with GroupClient(cluster) as groups:
        assert groups.coordinator(group).port == tansu.port
        groups.commit_offsets(group, {(topic, 0): 10, (topic, 1): CommittedOffset(20, "from-spark-coord"),
                                      (topic, 2): 30})
        # (Tansu 0.6 keeps no commit metadata, for any client: compare offsets only)
        assert {tp: c.offset for tp, c in groups.fetch_offsets(group).items()} == {
            (topic, 0): 10, (topic, 1): 20, (topic, 2): 30}
        assert {tp: c.offset for tp, c in groups.fetch_offsets(group, [(topic, 1)]).items()} == {(topic, 1): 20}

        admin = CKAdmin({"bootstrap.servers": tansu.bootstrap, "log_level": 3})
        [(_, future)] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).items()
        seen = {(tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions}
        assert seen == {(topic, 0): 10, (topic, 1): 20, (topic, 2): 30}

        # a second commit moves them, and confluent-kafka sees the move
        groups.commit_offsets(group, {(topic, 0): 11})
        [(_, future)] = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]).items()
        assert [tp.offset for tp in future.result(30).topic_partitions] == [11]

        assert group in {g.group_id for g in groups.list_groups()}
        assert groups.describe_groups([group])[group].members == []
        assert groups.fetch_offsets_many({group: None, _name("never"): None})[group][(topic, 2)].offset == 30
        assert groups.delete_groups([group]) == {group: 0}
        assert groups.fetch_offsets(group) == {}


def test_confluent_consumer_group_commits_read_by_group_client(tansu, cluster, topic):
    from confluent_kafka import Consumer

    Producer(cluster).send_many(topic, [f"m{i}".encode() for i in range(30)])
    group = _name("ck-group")
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "log_level": 3})
    positions = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while sum(positions.values()) < 30 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                positions[(msg.topic(), msg.partition())] = msg.offset() + 1
        assert sum(positions.values()) == 30, positions
        consumer.commit(asynchronous=False)
        with GroupClient(cluster) as groups:
            assert {tp: c.offset for tp, c in groups.fetch_offsets(group).items()} == positions
            # the member as the coordinator describes it (Tansu 0.6 leaves its metadata,
            # assignment, client id and protocol name empty; real clients' consumer-protocol
            # bytes are read in tests/wire/test_wire_golden_groups.py)
            described = wait_until(lambda: (d := groups.describe_groups([group])[group]).members and d,
                                   timeout=20, message="a described member")
            assert described.is_consumer_group and described.state == "Stable"
            [member] = described.members
            assert member.member_id.startswith("rdkafka-")
    finally:
        consumer.close()
