"""Hostile and malformed input: each bad client is dealt with (closed or answered with
an error code) while a well-behaved client connected at the same time keeps being served."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka_io import connect, is_closed, recv_exactly, roundtrip

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

TOPIC = "bad-input"


def _header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"evil") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _create(conn: BrokerConnection, name: str = TOPIC, partitions: int = 1) -> dict:
    return conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": partitions,
                                                           "replication_factor": 1}], "timeout_ms": 10000})


def _produce(conn: BrokerConnection, records: bytes, topic: str = TOPIC, partition: int = 0) -> dict:
    out = conn.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return out["responses"][0]["partition_responses"][0]


def _fetch(conn: BrokerConnection, offset: int = 0, topic: str = TOPIC, partition: int = 0) -> dict:
    out = conn.request(ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                      "topics": [{"topic": topic, "partitions": [
                                          {"partition": partition, "fetch_offset": offset,
                                           "partition_max_bytes": 1 << 20}]}]})
    return out["responses"][0]["partitions"][0]


def _batch(n: int = 3, value_size: int = 10) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(b"v%d" % i + b"x" * value_size, key=b"k%d" % i)
    return b.build()


@pytest.fixture
def good(broker):
    """A well-behaved client, connected before the bad one acts."""
    with BrokerConnection(*broker.address, timeout=10) as conn:
        yield conn


def _still_served(good: BrokerConnection) -> None:
    out = good.request(ApiKey.METADATA, {"topics": None})
    assert [b["node_id"] for b in out["brokers"]] == [0]


def test_size_prefix_above_max_is_refused_without_allocating(broker, good):
    s = connect(broker.address)
    s.sendall(struct.pack(">i", 2_000_000_000))  # just the 4 bytes: the broker must not wait for (or allocate) 2 GB
    assert is_closed(s)
    s = connect(broker.address)
    s.sendall(struct.pack(">i", -5))
    assert is_closed(s)
    _still_served(good)


def test_huge_array_count_in_small_frame(broker, good):
    s = connect(broker.address)
    t0 = time.monotonic()
    s.sendall(_frame(_header(ApiKey.METADATA, 1) + struct.pack(">i", 0x7FFFFFFF)))
    assert is_closed(s)
    assert time.monotonic() - t0 < 5
    _still_served(good)


def test_truncated_frame_then_close(broker, good):
    s = connect(broker.address)
    s.sendall(struct.pack(">i", 100) + _header(ApiKey.METADATA, 1)[:6])
    s.close()
    s = connect(broker.address)
    s.sendall(struct.pack(">h", 1))  # inside the size prefix
    s.close()
    _still_served(good)


def test_malformed_body_closes_only_that_connection(broker, good):
    s = connect(broker.address)
    s.sendall(_frame(_header(ApiKey.METADATA, 1) + b"\x00"))  # array count cut short
    assert is_closed(s)
    _still_served(good)


def test_unknown_api_key_closes(broker, good):
    s = connect(broker.address)
    s.sendall(_frame(_header(777, 0) + b"\x00" * 8))
    assert is_closed(s)
    _still_served(good)


def test_unsupported_version_closes(broker, good):
    s = connect(broker.address)
    s.sendall(_frame(_header(ApiKey.PRODUCE, 2) + b"\x00" * 16))  # message format v0/v1 era: not served
    assert is_closed(s)
    _still_served(good)


def test_api_versions_at_unknown_version_gets_v0_fallback(broker, good):
    s = connect(broker.address)
    s.sendall(_frame(_header(18, 99, correlation_id=42) + b"\x00" * 4))
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    from spark_coord.wire.protocol import decode_response

    cid, body = decode_response(18, 0, recv_exactly(s, size))
    assert cid == 42
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {e["api_key"] for e in body["api_keys"]} >= {0, 1, 2, 3, 18, 19, 20}
    _still_served(good)


def test_api_versions_lists_exactly_what_is_dispatched(broker, good):
    s = connect(broker.address)
    out = roundtrip(s, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    served = {e["api_key"]: (e["min_version"], e["max_version"]) for e in out["api_keys"]}
    assert set(served) == set(broker.broker.server.handlers)
    assert set(served) >= {0, 1, 2, 3, 18, 19, 20, 1000, 1001}
    assert served[ApiKey.PRODUCE][0] == 3 and served[ApiKey.FETCH][0] == 4


def test_corrupt_crc_is_rejected_and_nothing_appended(broker, good):
    _create(good)
    assert _produce(good, _batch())["error_code"] == ErrorCode.NONE
    bad = bytearray(_batch())
    bad[-1] ^= 0xFF  # a record byte: CRC no longer matches
    r = _produce(good, bytes(bad))
    assert r["error_code"] == ErrorCode.CORRUPT_MESSAGE
    # a good batch followed by a bad one in the same record set: nothing of it is appended
    r = _produce(good, _batch() + bytes(bad))
    assert r["error_code"] == ErrorCode.CORRUPT_MESSAGE
    f = _fetch(good)
    assert f["high_watermark"] == 3
    assert _fetch(good, 3)["records"] in (None, b"") or len(_fetch(good, 3)["records"]) == 0
    _still_served(good)


def test_bad_magic_is_rejected(broker, good):
    _create(good)
    bad = bytearray(_batch())
    bad[16] = 1  # magic
    assert _produce(good, bytes(bad))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert _fetch(good)["high_watermark"] == 0


def test_batch_above_message_max_bytes(broker, good):
    _create(good)
    big = _batch(n=2, value_size=40 * 1024)  # > 64 KiB message.max.bytes of the fixture
    r = _produce(good, big)
    assert r["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
    assert _fetch(good)["high_watermark"] == 0


def test_produce_errors_per_partition(broker, good):
    _create(good, partitions=1)
    assert _produce(good, _batch(), partition=5)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _produce(good, _batch(), topic="nope")["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    out = good.request(ApiKey.PRODUCE, {"acks": 2, "timeout_ms": 1000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch()}]}]})
    assert out["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS
    assert _fetch(good, 0)["high_watermark"] == 0


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "spaces not allowed", "ünïcode"])
def test_invalid_topic_name_in_create_topics(broker, good, name):
    out = _create(good, name)["topics"][0]
    assert out["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert out["error_message"]
    _still_served(good)


def test_create_topics_errors(broker, good):
    out = good.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "rf3", "num_partitions": 1, "replication_factor": 3},
        {"name": "zero", "num_partitions": 0, "replication_factor": 1},
        {"name": "ok", "num_partitions": -1, "replication_factor": -1},
        {"name": "assigned", "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [0]}, {"partition_index": 1, "broker_ids": [0]}]},
        {"name": "validated", "num_partitions": 4, "replication_factor": 1},
    ], "timeout_ms": 10000})
    codes = {t["name"]: t["error_code"] for t in out["topics"]}
    assert codes == {"rf3": ErrorCode.INVALID_REPLICATION_FACTOR, "zero": ErrorCode.INVALID_PARTITIONS,
                     "ok": 0, "assigned": 0, "validated": 0}
    assert "one replica" in out["topics"][0]["error_message"]
    assert _create(good, "ok")["topics"][0]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    meta = good.request(ApiKey.METADATA, {"topics": [{"name": "ok"}, {"name": "assigned"}, {"name": "missing"}]})
    by_name = {t["name"]: t for t in meta["topics"]}
    assert len(by_name["ok"]["partitions"]) == 2  # num.partitions of the fixture
    assert len(by_name["assigned"]["partitions"]) == 2
    assert by_name["missing"]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    out = good.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "dry", "num_partitions": 3, "replication_factor": 1}],
                                              "timeout_ms": 10000, "validate_only": True})
    assert out["topics"][0]["error_code"] == 0
    meta = good.request(ApiKey.METADATA, {"topics": [{"name": "dry"}]})
    assert meta["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_idle_connection_is_closed(broker_factory):
    b = broker_factory(0, **{"connections.max.idle.ms": 300})
    with BrokerConnection(*b.address, timeout=10) as good:
        s = connect(b.address)
        s.settimeout(0.05)
        t0 = time.monotonic()
        while True:  # 'good' keeps talking, so only the silent socket goes idle
            good.request(ApiKey.METADATA, {"topics": None})
            try:
                if not s.recv(1):
                    break
            except socket.timeout:
                pass
            assert time.monotonic() - t0 < 10, "idle connection was not closed"
        assert time.monotonic() - t0 > 0.2
        good.request(ApiKey.METADATA, {"topics": None})


# ------------------------------------------------------------------ topic ids on the wire
ODD_ID = b"\xab" * 16

_BY_ID = {
    "fetch-v13": (ApiKey.FETCH, 13, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [
        {"topic_id": ODD_ID, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]}),
    "metadata-v12": (ApiKey.METADATA, 12, {"topics": [{"topic_id": ODD_ID, "name": None}]}),
    "delete-topics-v6": (ApiKey.DELETE_TOPICS, 6, {"topics": [{"topic_id": ODD_ID, "name": None}],
                                                   "timeout_ms": 1000}),
}


def _by_id_frame(kind: str) -> tuple[bytes, int]:
    """A request naming a topic by ODD_ID (size prefix stripped) and where the id starts in it."""
    from spark_coord.wire.protocol import encode_request

    api_key, version, body = _BY_ID[kind]
    frame = encode_request(api_key, version, 5, "evil", body)[4:]
    return frame, frame.index(ODD_ID)


@pytest.mark.parametrize("kind", sorted(_BY_ID))
def test_a_request_ending_inside_a_topic_id_closes_only_that_connection(broker, good, kind):
    frame, at = _by_id_frame(kind)
    s = connect(broker.address)
    s.sendall(_frame(frame[:at + 7]))  # 7 of the id's 16 bytes, then the frame ends
    assert is_closed(s)
    _still_served(good)


@pytest.mark.parametrize("kind", sorted(_BY_ID))
@pytest.mark.parametrize("size", [15, 17], ids=["15-bytes", "17-bytes"])
def test_a_topic_id_that_is_not_16_bytes_is_refused(broker, good, kind, size):
    """An id a byte short or long shifts everything after it: the frame no longer parses, so
    the broker closes that connection (as for any malformed request) and serves everyone else."""
    frame, at = _by_id_frame(kind)
    s = connect(broker.address)
    s.sendall(_frame(frame[:at] + b"\xab" * size + frame[at + 16:]))
    assert is_closed(s)
    _still_served(good)
