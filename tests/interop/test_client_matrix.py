"""Interop with Kafka clients no one here wrote, against a 3-broker cluster.

Each client produces with every compression codec; the *other* client and our
own reader consume by assignment (no group), and keys, values, headers and
timestamps must round-trip byte for byte.  Both admin clients create, list and
delete topics.
"""

from __future__ import annotations

import base64
import json
import re
import time

import pytest
from helpers import local_cluster, wait_until

from spark_coord.client.admin import EARLIEST, AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.records.reader import iter_records

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
N = 60


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("interop"), 3, "interop") as c:
        yield c


def expected_records(tag: str):
    base_ts = 1_700_000_000_000
    out = []
    for i in range(N):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        value = None if i % 17 == 5 else (f"{tag}-value-{i}-" + "x" * (i * 7)).encode()
        headers = [("h1", f"hv{i}".encode()), ("empty", b"")] if i % 3 else []
        out.append((key, value, headers, base_ts + i))
    return out


def create_topic(cluster, name):
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(name, PARTITIONS)


def produce_confluent(bootstrap, topic, codec, records):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                  "acks": "all", "enable.idempotence": False})
    errors = []
    for i, (k, v, h, ts) in enumerate(records):
        p.produce(topic, value=v, key=k, headers=h or None, timestamp=ts, partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0
    assert not errors, errors


def produce_kafka_python(bootstrap, topic, codec, records):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                      linger_ms=5, acks="all")
    futures = [p.send(topic, value=v, key=k, headers=h, timestamp_ms=ts, partition=i % PARTITIONS)
               for i, (k, v, h, ts) in enumerate(records)]
    for f in futures:
        f.get(timeout=30)
    p.close()


def consume_confluent(bootstrap, topic, count):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop-unused", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "log_level": 3})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None:
            continue
        assert not msg.error(), msg.error()
        got.append((msg.partition(), msg.offset(), msg.key(), msg.value(), list(msg.headers() or []),
                    msg.timestamp()[1]))
    c.close()
    return got


def consume_kafka_python(bootstrap, topic, count):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got, deadline = [], time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for _tp, msgs in c.poll(timeout_ms=500).items():
            for m in msgs:
                got.append((m.partition, m.offset, m.key, m.value, list(m.headers), m.timestamp))
    c.close()
    return got


def consume_ours(bootstrap, topic, count):
    got = []
    with ClusterClient(bootstrap) as cluster:
        starts = AdminClient(cluster).list_offsets(topic, None, EARLIEST)
        for p, pos in starts.items():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                data = fetch(cluster.connection(cluster.leader(topic, p)), {(topic, p): pos}, max_wait_ms=200)[0]
                assert data.error == 0
                for r in iter_records(data.records or b"", min_offset=pos):
                    got.append((p, r.offset, r.key, r.value, list(r.headers), r.timestamp))
                    pos = r.offset + 1
                if pos >= data.high_watermark:
                    break
    return got


def normalise(rows):
    """(partition, key, value, headers, timestamp) sorted, with None/b'' and header forms made comparable."""
    out = []
    for p, _off, k, v, h, ts in rows:
        out.append((p, k, v, tuple((hk, bytes(hv) if hv is not None else None) for hk, hv in h), ts))
    return sorted(out, key=repr)


def expected_rows(records):
    return sorted(((i % PARTITIONS, k, v, tuple(h), ts) for i, (k, v, h, ts) in enumerate(records)), key=repr)


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python}
CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python, "spark-coord": consume_ours}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_produce_with_codec_and_consume_with_every_client(cluster, producer, codec):
    topic = f"interop-{producer}-{codec}"
    create_topic(cluster, topic)
    records = expected_records(f"{producer}/{codec}")
    PRODUCERS[producer](cluster.bootstrap, topic, codec, records)
    want = expected_rows(records)
    for name, consume in CONSUMERS.items():
        got = consume(cluster.bootstrap, topic, len(records))
        offsets = sorted((p, off) for p, off, *_ in got)
        assert len(set(offsets)) == len(offsets), f"{name} saw duplicates"
        assert normalise(got) == want, f"{name} read back something else than {producer} produced with {codec}"


def test_confluent_admin_create_list_delete(cluster):
    from confluent_kafka.admin import AdminClient as CAdmin
    from confluent_kafka.admin import NewTopic
    admin = CAdmin({"bootstrap.servers": cluster.bootstrap})
    name = "admin-confluent"
    fs = admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1)], operation_timeout=10)
    fs[name].result(timeout=30)
    # a broker other than the one that created it may list the topic a moment later
    topic = wait_until(lambda: admin.list_topics(timeout=10).topics.get(name), timeout=20, message=f"{name} listed")
    assert len(topic.partitions) == 4
    leaders = {p.leader for p in topic.partitions.values()}
    assert leaders <= set(cluster.brokers) and len(leaders) > 1, "partitions were not spread over brokers"
    fs = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        fs[name].result(timeout=30)
    admin.delete_topics([name], operation_timeout=10)[name].result(timeout=30)
    deadline = time.monotonic() + 20
    while name in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.1)


def test_kafka_python_admin_create_list_delete(cluster):
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    name = "admin-kafka-python"
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
    # CreateTopics answers once the receiving broker sees the topic; list_topics may ask another
    # broker, whose ZooKeeper watch fires a moment later (Kafka's metadata is eventual the same way)
    wait_until(lambda: name in admin.list_topics(), timeout=20, message=f"{name} listed")
    admin.delete_topics([name])
    deadline = time.monotonic() + 20
    while name in admin.list_topics():
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.1)
    admin.close()


# ------------------------------------------------------------------ topic ids (KIP-516)

def zk_topic_id(cluster, name):
    """The topic id ZooKeeper keeps for ``name``, in Kafka's text form."""
    from spark_coord.zk import paths
    from spark_coord.zk.client import close, connect
    zk = connect(cluster.zk_connect)
    try:
        return json.loads(zk.get(paths.topic(name))[0])["topic_id"]
    finally:
        close(zk)


class RdkafkaLog:
    """librdkafka's debug log, kept (the consumer's ``logger``)."""

    def __init__(self):
        import logging
        self.lines = []
        self.logger = logging.getLogger(f"rdkafka-{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        handler = logging.Handler()
        handler.emit = lambda record: self.lines.append(record.getMessage())
        self.logger.addHandler(handler)

    def versions(self, request: str) -> set[int]:
        return {int(m.group(1)) for line in self.lines for m in [re.search(rf"Sent {request} \(v(\d+),", line)] if m}


def test_confluent_consumer_reads_by_topic_id_and_follows_a_topic_created_again(cluster):
    """librdkafka 2.16 fetches by topic id (Fetch v16, the highest both sides serve); when the
    topic is deleted and created again, its fetches by the old id answer UNKNOWN_TOPIC_ID, it
    learns the new id from Metadata and reads the new topic from its start."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    name = "ids-confluent"
    create_topic(cluster, name)
    records = expected_records("by-id")
    produce_confluent(cluster.bootstrap, name, "lz4", records)
    rdlog = RdkafkaLog()
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ids-unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000,
                  "debug": "protocol,fetch", "logger": rdlog.logger})
    try:
        c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

        def drain(count, tag):
            got, deadline = [], time.monotonic() + 60
            while len(got) < count and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg.value())
            assert len(got) == count, f"{tag}: read {len(got)} of {count}"
            return got

        assert sorted(drain(N, "first topic"), key=repr) == sorted((v for _, v, _, _ in records), key=repr)
        assert rdlog.versions("FetchRequest") == {16}

        with ClusterClient(cluster.bootstrap) as client:
            admin = AdminClient(client)
            old_id = zk_topic_id(cluster, name)
            admin.delete_topic(name)
            admin.create_topic(name, PARTITIONS)
        assert zk_topic_id(cluster, name) != old_id
        again = [(None, f"again-{i}".encode(), [], 1_800_000_000_000 + i) for i in range(9)]
        produce_confluent(cluster.bootstrap, name, "none", again)
        assert sorted(drain(len(again), "topic created again")) == sorted(v for _, v, _, _ in again)
        assert any("UNKNOWN_TOPIC_ID" in line or "Unknown topic id" in line for line in rdlog.lines) or \
            any("changed id" in line for line in rdlog.lines), "the client never noticed the new topic id"
    finally:
        c.close()


def test_admin_clients_see_the_topic_id_zookeeper_keeps(cluster):
    """confluent-kafka's describe_topics and kafka-python's (by name and by id, KIP-516) answer
    the id in the topic's znode; kafka-python deletes by id (DeleteTopics v6), and the id
    then names nothing."""
    import uuid

    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient as CAdmin
    from kafka.admin import KafkaAdminClient
    name = "ids-admin"
    create_topic(cluster, name)
    text = zk_topic_id(cluster, name)
    raw = base64.urlsafe_b64decode(text + "==")

    cadmin = CAdmin({"bootstrap.servers": cluster.bootstrap})
    described = cadmin.describe_topics(TopicCollection([name]))[name].result(timeout=30)
    # librdkafka prints ids in standard base64 ("+", "/"), Kafka in base64url ("-", "_"): same 16 bytes
    assert base64.b64decode(str(described.topic_id) + "==") == raw
    assert described.topic_id.get_most_significant_bits() == int.from_bytes(raw[:8], "big", signed=True)
    assert described.topic_id.get_least_significant_bits() == int.from_bytes(raw[8:], "big", signed=True)

    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        [by_name] = kadmin.describe_topics([name])
        assert uuid.UUID(str(by_name["topic_id"])) == uuid.UUID(bytes=raw)
        [by_id] = kadmin.describe_topics([uuid.UUID(bytes=raw)])
        assert (by_id["error_code"], by_id["name"]) == (0, name)
        result = kadmin.delete_topics([uuid.UUID(bytes=raw)], timeout_ms=20000)
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(name, 0)]
        [gone] = wait_until(lambda: [t for t in kadmin.describe_topics([uuid.UUID(bytes=raw)])
                                     if t["error_code"] == 100], timeout=20, message="the old id to name nothing")
        assert gone["name"] is None
    finally:
        kadmin.close()
