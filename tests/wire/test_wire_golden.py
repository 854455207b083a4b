"""Golden bytes: frames real clients send, and hand-assembled encodings."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from helpers import read_exactly

from spark_coord.wire import protocol
from spark_coord.wire.protocol import UnsupportedRequest
from spark_coord.wire.registry import ApiKey


class CapturingBroker:
    """A plain socket server that records request frames and answers ApiVersions and Metadata
    with our own encoder, so a real client gets far enough to send its Metadata request; with
    a ``topic``, Metadata lists it (one partition, led by this server) and a consumer assigned
    to it goes on to send Fetch requests, answered with no records."""

    def __init__(self, topic: str | None = None, topic_id: bytes = bytes(16)):
        self.topic = topic
        self.topic_id = topic_id
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.frames: list[bytes] = []
        self.cond = threading.Condition()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                while not self.stopped:
                    size = struct.unpack(">i", read_exactly(conn, 4))[0]
                    frame = read_exactly(conn, size)
                    with self.cond:
                        self.frames.append(frame)
                        self.cond.notify_all()
                    try:
                        header, request = protocol.decode_request(frame)
                    except UnsupportedRequest as e:
                        if e.header.api_key == ApiKey.API_VERSIONS:
                            conn.sendall(b"".join(protocol.encode_api_versions_fallback(e.header.correlation_id)))
                            continue
                        return
                    if header.api_key == ApiKey.API_VERSIONS:
                        body = {"api_keys": protocol.api_versions_table()}
                    elif header.api_key == ApiKey.METADATA:
                        body = {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                                "cluster_id": "golden", "controller_id": 0, "topics": self._topics()}
                    elif header.api_key == ApiKey.FETCH:
                        body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
                            {"topic": t["topic"], "topic_id": t["topic_id"], "partitions": [
                                {"partition_index": p["partition"], "error_code": 0, "high_watermark": 0,
                                 "last_stable_offset": 0, "log_start_offset": 0, "aborted_transactions": None,
                                 "preferred_read_replica": -1, "records": b""} for p in t["partitions"]]}
                            for t in request["topics"]]}
                    else:
                        return
                    conn.sendall(b"".join(protocol.encode_response(header, body)))
            except (EOFError, OSError):
                return

    def _topics(self) -> list[dict]:
        if self.topic is None:
            return []
        return [{"error_code": 0, "name": self.topic, "topic_id": self.topic_id, "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 0, "leader_epoch": 0, "replica_nodes": [0],
             "isr_nodes": [0], "offline_replicas": []}]}]

    def wait_for(self, api_key: int, timeout: float = 20.0) -> bytes:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for f in self.frames:
                    if struct.unpack(">h", f[:2])[0] == api_key:
                        return f
                left = deadline - time.monotonic()
                assert left > 0, f"no request with api key {api_key} arrived; got {self.frames!r}"
                self.cond.wait(left)

    def close(self):
        self.stopped = True
        self.sock.close()


@pytest.fixture
def capture():
    broker = CapturingBroker()
    yield broker
    broker.close()


def test_librdkafka_first_requests(capture):
    import confluent_kafka
    producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{capture.port}",
                                         "client.id": "golden-rd", "log_level": 0})
    try:
        first = capture.wait_for(ApiKey.API_VERSIONS)
        header, body = protocol.decode_request(first)
        assert header.api_key == ApiKey.API_VERSIONS and header.api_version == 3
        assert header.client_id == "golden-rd"
        assert body["client_software_name"] == "confluent-kafka-python"
        assert body["client_software_version"].startswith(confluent_kafka.version()[0])
        # exact bytes of the frame librdkafka sends (only the version string varies)
        name = b"confluent-kafka-python"
        ver = body["client_software_version"].encode()
        assert first == (b"\x00\x12\x00\x03" + struct.pack(">i", header.correlation_id) + b"\x00\x09golden-rd"
                         + b"\x00" + bytes([len(name) + 1]) + name + bytes([len(ver) + 1]) + ver + b"\x00")
        # it accepted our ApiVersions answer: the next thing it sends is a Metadata request we can read
        meta_header, meta = protocol.decode_request(capture.wait_for(ApiKey.METADATA))
        assert 4 <= meta_header.api_version <= 12
        assert "topics" in meta and "allow_auto_topic_creation" in meta
    finally:
        producer.flush(0)
        del producer


def test_kafka_python_first_requests(capture):
    import kafka
    result = {}

    def make():
        try:
            result["producer"] = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{capture.port}",
                                                     client_id="golden-kp", request_timeout_ms=5000,
                                                     max_block_ms=5000)
        except Exception as e:  # noqa: BLE001 -- the test asserts on the frames, not on the client's fate
            result["error"] = e

    t = threading.Thread(target=make, daemon=True)
    t.start()
    try:
        first = capture.wait_for(ApiKey.API_VERSIONS)
        header, body = protocol.decode_request(first)
        assert header.api_key == ApiKey.API_VERSIONS and header.api_version == 4
        assert header.client_id == "golden-kp"
        assert body == {"client_software_name": "kafka-python", "client_software_version": kafka.__version__}
        meta_header, meta = protocol.decode_request(capture.wait_for(ApiKey.METADATA))
        assert meta_header.client_id == "golden-kp"
    finally:
        t.join(15)
        if "producer" in result:
            result["producer"].close(timeout=1)
    assert "error" not in result, result.get("error")


# ---------------------------------------------------------------- Fetch from real consumers
#: Fetch settings both consumers are given, so every field of their request is known.
FETCH_MAX_WAIT_MS, FETCH_MIN_BYTES, FETCH_MAX_BYTES, PARTITION_MAX_BYTES = 321, 7, 1_000_000, 65536
FETCH_OFFSET = 42


def _fetch_v12_frame(correlation_id: int, client_id: bytes, session_epoch: int) -> bytes:
    """A Fetch v12 request (flexible: request header v2) for golden-t partition 0 at FETCH_OFFSET,
    assembled field by field (Kafka's FetchRequest.json)."""
    return (struct.pack(">hhi", ApiKey.FETCH, 12, correlation_id) + struct.pack(">h", len(client_id)) + client_id
            + b"\x00"                                                     # header tags
            + struct.pack(">iiii", -1, FETCH_MAX_WAIT_MS, FETCH_MIN_BYTES, FETCH_MAX_BYTES)  # replica id ..
            + b"\x00"                                                     # isolation level: read_uncommitted
            + struct.pack(">ii", 0, session_epoch)                        # session id, epoch
            + b"\x02" + b"\x09golden-t"                                   # topics[1], compact name
            + b"\x02" + struct.pack(">iiqiqi", 0, 0, FETCH_OFFSET, -1, -1, PARTITION_MAX_BYTES)
            + b"\x00"                                                     # partition tags
            + b"\x00"                                                     # topic tags
            + b"\x01"                                                     # forgotten topics: []
            + b"\x01"                                                     # rack id: ""
            + b"\x00")                                                    # request tags


def _check_fetch(frame: bytes, client_id: str, session_epoch: int) -> None:
    header, body = protocol.decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (ApiKey.FETCH, 12, client_id)
    assert frame == _fetch_v12_frame(header.correlation_id, client_id.encode(), session_epoch)
    assert body["topics"] == [{"topic": "golden-t", "topic_id": bytes(16), "partitions": [
        {"partition": 0, "current_leader_epoch": 0, "fetch_offset": FETCH_OFFSET, "last_fetched_epoch": -1,
         "log_start_offset": -1, "partition_max_bytes": PARTITION_MAX_BYTES, "replica_directory_id": bytes(16)}]}]
    # our encoder writes the same bytes for what we decoded (the client and we agree on every field)
    assert protocol.encode_request(ApiKey.FETCH, 12, header.correlation_id, client_id, body)[4:] == frame


@pytest.fixture
def fetch_capture():
    broker = CapturingBroker(topic="golden-t")
    yield broker
    broker.close()


def test_librdkafka_fetch_request(fetch_capture):
    """librdkafka asks for Fetch v12 without a fetch session (epoch -1) for a topic whose
    Metadata id is the zero uuid, though Fetch up to v17 is offered: by id needs an id."""
    import confluent_kafka
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": f"127.0.0.1:{fetch_capture.port}", "group.id": "golden", "client.id": "golden-rd",
        "fetch.wait.max.ms": FETCH_MAX_WAIT_MS, "fetch.min.bytes": FETCH_MIN_BYTES,
        "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": PARTITION_MAX_BYTES,
        "isolation.level": "read_uncommitted", "log_level": 0})
    consumer.assign([confluent_kafka.TopicPartition("golden-t", 0, FETCH_OFFSET)])
    poller = threading.Thread(target=consumer.poll, args=(5,), daemon=True)
    poller.start()
    try:
        _check_fetch(fetch_capture.wait_for(ApiKey.FETCH), "golden-rd", session_epoch=-1)
    finally:
        poller.join(10)
        consumer.close()


#: The topic id the capturing broker's Metadata gives golden-t (bytes 0x00..0x0f).
GOLDEN_TOPIC_ID = bytes(range(16))


def _fetch_v16_frame(correlation_id: int, client_id: bytes) -> bytes:
    """A Fetch v16 request for golden-t partition 0 at FETCH_OFFSET, the topic named by its id
    (v13+, KIP-516) and no replica id (a tagged ReplicaState from v15, left out by a consumer)."""
    return (struct.pack(">hhi", ApiKey.FETCH, 16, correlation_id) + struct.pack(">h", len(client_id)) + client_id
            + b"\x00"                                                     # header tags
            + struct.pack(">iii", FETCH_MAX_WAIT_MS, FETCH_MIN_BYTES, FETCH_MAX_BYTES)  # no replica id
            + b"\x00"                                                     # isolation level: read_uncommitted
            + struct.pack(">ii", 0, -1)                                   # session id, epoch: no session
            + b"\x02" + GOLDEN_TOPIC_ID                                   # topics[1], topic id
            + b"\x02" + struct.pack(">iiqiqi", 0, 0, FETCH_OFFSET, -1, -1, PARTITION_MAX_BYTES)
            + b"\x00"                                                     # partition tags
            + b"\x00"                                                     # topic tags
            + b"\x01"                                                     # forgotten topics: []
            + b"\x01"                                                     # rack id: ""
            + b"\x00")                                                    # request tags


def test_librdkafka_fetch_request_by_topic_id():
    """Offered Fetch up to v17 and a topic id in Metadata, librdkafka 2.16 asks for Fetch v16
    naming the topic by id; with the zero uuid (above) it stays at v12, by name."""
    import confluent_kafka
    broker = CapturingBroker(topic="golden-t", topic_id=GOLDEN_TOPIC_ID)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "golden", "client.id": "golden-rd",
        "fetch.wait.max.ms": FETCH_MAX_WAIT_MS, "fetch.min.bytes": FETCH_MIN_BYTES,
        "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": PARTITION_MAX_BYTES,
        "isolation.level": "read_uncommitted", "log_level": 0})
    consumer.assign([confluent_kafka.TopicPartition("golden-t", 0, FETCH_OFFSET)])
    poller = threading.Thread(target=consumer.poll, args=(5,), daemon=True)
    poller.start()
    try:
        frame = broker.wait_for(ApiKey.FETCH)
        header, body = protocol.decode_request(frame)
        assert (header.api_key, header.api_version, header.client_id) == (ApiKey.FETCH, 16, "golden-rd")
        assert frame == _fetch_v16_frame(header.correlation_id, b"golden-rd")
        assert [(t["topic_id"], [p["fetch_offset"] for p in t["partitions"]]) for t in body["topics"]] == [
            (GOLDEN_TOPIC_ID, [FETCH_OFFSET])]
        assert protocol.encode_request(ApiKey.FETCH, 16, header.correlation_id, "golden-rd", body)[4:] == frame
    finally:
        poller.join(10)
        consumer.close()
        broker.close()


def test_kafka_python_fetch_request(fetch_capture):
    """kafka-python asks for Fetch v12 opening an incremental fetch session (epoch 0); the broker
    answers session id 0, so it keeps sending full fetches."""
    import kafka
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{fetch_capture.port}", client_id="golden-kp",
                                   fetch_max_wait_ms=FETCH_MAX_WAIT_MS, fetch_min_bytes=FETCH_MIN_BYTES,
                                   fetch_max_bytes=FETCH_MAX_BYTES, max_partition_fetch_bytes=PARTITION_MAX_BYTES,
                                   enable_auto_commit=False)
    tp = kafka.TopicPartition("golden-t", 0)
    consumer.assign([tp])
    consumer.seek(tp, FETCH_OFFSET)
    poller = threading.Thread(target=consumer.poll, args=(5000,), daemon=True)
    poller.start()
    try:
        _check_fetch(fetch_capture.wait_for(ApiKey.FETCH), "golden-kp", session_epoch=0)
    finally:
        poller.join(10)
        consumer.close()


# ---------------------------------------------------------------- hand-assembled
def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_metadata_v0_request_bytes():
    expected = _frame(b"\x00\x03\x00\x00" + struct.pack(">i", 7) + b"\x00\x01c"
                      + struct.pack(">i", 1) + b"\x00\x02ab")
    assert protocol.encode_request(3, 0, 7, "c", {"topics": [{"name": "ab"}]}) == expected


def test_metadata_v9_request_bytes_flexible():
    expected = _frame(b"\x00\x03\x00\x09" + struct.pack(">i", 7) + b"\x00\x01c" + b"\x00"   # header v2
                      + b"\x02" + b"\x03ab" + b"\x00"      # compact array of 1: compact string, tags
                      + b"\x01\x00\x00" + b"\x00")         # auto-create, two flags, tags
    assert protocol.encode_request(3, 9, 7, "c", {"topics": [{"name": "ab"}]}) == expected
    header, body = protocol.decode_request(expected[4:])
    assert body["topics"] == [{"name": "ab", "topic_id": bytes(16)}]
    assert body["allow_auto_topic_creation"] is True


def test_produce_v3_request_bytes():
    records = b"\x00" * 12 + b"batch"
    expected = _frame(b"\x00\x00\x00\x03" + struct.pack(">i", 1) + b"\xff\xff"
                      + b"\xff\xff" + b"\x00\x01" + struct.pack(">i", 1000)
                      + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 1)
                      + struct.pack(">i", 0) + struct.pack(">i", len(records)) + records)
    body = {"acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}
    assert protocol.encode_request(0, 3, 1, None, body) == expected


def test_list_offsets_v0_response_bytes():
    body = {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "old_style_offsets": [5], "offset": 99}]}]}
    parts = protocol.encode_response(protocol.RequestHeader(2, 0, 3, None), body)
    expected = _frame(struct.pack(">i", 3) + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 1)
                      + struct.pack(">ihi", 0, 0, 1) + struct.pack(">q", 5))
    assert b"".join(parts) == expected
    _, decoded = protocol.decode_response(2, 0, expected[4:])
    assert decoded["topics"][0]["partitions"][0] == {
        "partition_index": 0, "error_code": 0, "old_style_offsets": [5], "timestamp": -1, "offset": -1,
        "leader_epoch": -1}


def test_produce_v9_response_bytes_flexible():
    body = {"responses": [{"name": "t", "partition_responses": [
        {"index": 2, "error_code": 0, "base_offset": 10}]}], "throttle_time_ms": 0}
    parts = protocol.encode_response(protocol.RequestHeader(0, 9, 4, None), body)
    expected = _frame(struct.pack(">i", 4) + b"\x00"                     # header v1
                      + b"\x02" + b"\x02t" + b"\x02"                     # responses[1], name, partitions[1]
                      + struct.pack(">ihqqq", 2, 0, 10, -1, -1)          # index .. log_start_offset
                      + b"\x01" + b"\x00" + b"\x00"                      # record_errors [], error_message null, tags
                      + b"\x00"                                          # topic tags
                      + struct.pack(">i", 0) + b"\x00")                  # throttle, tags
    assert b"".join(parts) == expected


def test_fetch_v13_response_bytes_by_topic_id():
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "ignored from v13", "topic_id": GOLDEN_TOPIC_ID, "partitions": [
            {"partition_index": 1, "error_code": 100, "high_watermark": -1, "records": None}]}]}
    parts = protocol.encode_response(protocol.RequestHeader(1, 13, 5, None), body)
    expected = _frame(struct.pack(">i", 5) + b"\x00"                        # header v1
                      + struct.pack(">ihi", 0, 0, 0)                         # throttle, error, session
                      + b"\x02" + GOLDEN_TOPIC_ID                            # responses[1], topic id
                      + b"\x02" + struct.pack(">ihqqq", 1, 100, -1, -1, -1)  # UNKNOWN_TOPIC_ID, offsets
                      + b"\x00"                                              # aborted transactions: null
                      + struct.pack(">i", -1)                                # preferred read replica
                      + b"\x00"                                              # records: null
                      + b"\x00" + b"\x00" + b"\x00")                          # partition, topic, response tags
    assert b"".join(parts) == expected


def test_metadata_v12_request_by_topic_id_bytes():
    expected = _frame(b"\x00\x03\x00\x0c" + struct.pack(">i", 7) + b"\x00\x01c" + b"\x00"   # header v2
                      + b"\x02" + GOLDEN_TOPIC_ID + b"\x00" + b"\x00"  # topics[1]: id, name null, tags
                      + b"\x00\x00" + b"\x00")                          # auto-create, topic auth ops, tags
    body = {"topics": [{"topic_id": GOLDEN_TOPIC_ID, "name": None}], "allow_auto_topic_creation": False}
    assert protocol.encode_request(3, 12, 7, "c", body) == expected
    _, decoded = protocol.decode_request(expected[4:])
    assert decoded["topics"] == [{"topic_id": GOLDEN_TOPIC_ID, "name": None}]


def test_delete_topics_v6_request_bytes():
    expected = _frame(b"\x00\x14\x00\x06" + struct.pack(">i", 9) + b"\x00\x01c" + b"\x00"   # header v2
                      + b"\x03"                                          # topics[2]
                      + b"\x00" + GOLDEN_TOPIC_ID + b"\x00"              # name null, id, tags
                      + b"\x02t" + bytes(16) + b"\x00"                   # name "t", zero id, tags
                      + struct.pack(">i", 1000) + b"\x00")               # timeout, tags
    body = {"topics": [{"name": None, "topic_id": GOLDEN_TOPIC_ID}, {"name": "t"}], "timeout_ms": 1000}
    assert protocol.encode_request(20, 6, 9, "c", body) == expected
    _, decoded = protocol.decode_request(expected[4:])
    assert decoded["topics"] == [{"name": None, "topic_id": GOLDEN_TOPIC_ID}, {"name": "t", "topic_id": bytes(16)}]


def test_create_topics_v7_response_bytes_carry_the_id():
    body = {"throttle_time_ms": 0, "topics": [{"name": "t", "topic_id": GOLDEN_TOPIC_ID, "error_code": 0,
                                               "error_message": None, "num_partitions": 3, "replication_factor": 1,
                                               "configs": []}]}
    parts = protocol.encode_response(protocol.RequestHeader(19, 7, 2, None), body)
    expected = _frame(struct.pack(">i", 2) + b"\x00"                        # header v1
                      + struct.pack(">i", 0)                                 # throttle
                      + b"\x02" + b"\x02t" + GOLDEN_TOPIC_ID                  # topics[1]: name, id
                      + struct.pack(">h", 0) + b"\x00"                       # error code, message null
                      + struct.pack(">ih", 3, 1) + b"\x01"                    # partitions, rf, configs []
                      + b"\x00" + b"\x00")                                    # topic tags, tags
    assert b"".join(parts) == expected
