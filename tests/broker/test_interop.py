"""Standard Kafka clients against a LocalCluster of 3 broker processes: kafka-python and
confluent-kafka (librdkafka) create, list and delete topics, produce, and consume by
assignment (no group); keys, values, headers and timestamps round-trip byte for byte."""

from __future__ import annotations

import os
import signal
import time

from helpers import wait_until

N = 60
BASE_TS = 1_700_000_000_000


def _records(tag: str):
    """(key, value, headers, timestamp_ms) with awkward bytes: empty, binary, None key."""
    out = []
    for i in range(N):
        key = None if i % 7 == 0 else f"{tag}-k{i}".encode()
        value = b"" if i % 11 == 0 else os.urandom(i % 5) + f"{tag}-v{i}".encode() + bytes(range(i % 13))
        headers = [("h1", f"x{i}".encode()), ("bin", bytes([i, 0, 255]))] if i % 3 else []
        out.append((key, value, headers, BASE_TS + i * 1000))
    return out


def _kp_consume(bootstrap: str, topic: str, n_partitions: int, expected: int):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(n_partitions)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
        return got
    finally:
        consumer.close()


def _ck_consume(bootstrap: str, topic: str, n_partitions: int, expected: int):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-by-assign",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n_partitions)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None or m.error():
                continue
            got.append(m)
        return got
    finally:
        consumer.close()


def _normalize_kp(m):
    return (m.key, m.value, [(k, v) for k, v in (m.headers or [])], m.timestamp)


def _normalize_ck(m):
    return (m.key(), m.value() if m.value() is not None else b"", [(k, v) for k, v in (m.headers() or [])],
            m.timestamp()[1])


def _sort_key(rec):
    k, v, h, ts = rec
    return (ts, k or b"", v)


def _expected(records):
    return sorted(records, key=_sort_key)


def _got(messages, normalize):
    return sorted((normalize(m) for m in messages), key=_sort_key)


def test_kafka_python_admin_produce_consume(cluster):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-topic", 6, 1)])
        wait_until(lambda: "kp-topic" in admin.list_topics(), timeout=20, message="kp-topic listed")
        records = _records("kp")
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, compression_type="gzip", linger_ms=5,
                                 enable_idempotence=False)  # InitProducerId is not served
        for k, v, h, ts in records:
            producer.send("kp-topic", key=k, value=v, headers=h, timestamp_ms=ts)
        producer.flush(30)
        producer.close()
        got = _kp_consume(cluster.bootstrap, "kp-topic", 6, N)
        assert _got(got, _normalize_kp) == _expected(records)
        # the partitions are spread over the three brokers
        leaders = {p.get("leader", p.get("leader_id"))
                   for t in admin.describe_topics(["kp-topic"]) for p in t["partitions"]}
        assert leaders == {0, 1, 2}
        admin.delete_topics(["kp-topic"])
        wait_until(lambda: "kp-topic" not in admin.list_topics(), timeout=20, message="kp-topic gone")
    finally:
        admin.close()


def test_confluent_kafka_admin_produce_consume(cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("ck-topic", 5, 1)], operation_timeout=20).values():
        f.result(30)
    wait_until(lambda: "ck-topic" in admin.list_topics(timeout=10).topics, timeout=20, message="ck-topic listed")
    records = _records("ck")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "lz4", "linger.ms": 5,
                         "acks": "all"})
    errors = []
    for k, v, h, ts in records:
        producer.produce("ck-topic", key=k, value=v, headers=h, timestamp=ts,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert errors == []
    got = _ck_consume(cluster.bootstrap, "ck-topic", 5, N)
    assert _got(got, _normalize_ck) == _expected(records)
    # cross-client: kafka-python reads what librdkafka wrote
    assert _got(_kp_consume(cluster.bootstrap, "ck-topic", 5, N), _normalize_kp) == _expected(records)
    for f in admin.delete_topics(["ck-topic"], operation_timeout=20).values():
        f.result(30)
    wait_until(lambda: "ck-topic" not in admin.list_topics(timeout=10).topics, timeout=20, message="ck-topic gone")


def test_broker_restart_keeps_data_and_sigterm_exits_cleanly(cluster):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic("restart", 3, 1)])
        wait_until(lambda: "restart" in admin.list_topics(), timeout=20, message="topic listed")
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=False)
    for i in range(30):
        producer.send("restart", value=b"r%d" % i, partition=i % 3)
    producer.flush(30)
    producer.close()
    assert cluster.kill_broker(1, signal.SIGTERM) == 0  # clean stop: exit code 0
    cluster.start_broker(1)
    assert cluster.kill_broker(2, signal.SIGKILL) == -signal.SIGKILL
    cluster.start_broker(2)  # back at once: its stale registration at its own address is replaced
    got = _kp_consume(cluster.bootstrap, "restart", 3, 30)
    assert sorted(m.value for m in got) == sorted(b"r%d" % i for i in range(30))
