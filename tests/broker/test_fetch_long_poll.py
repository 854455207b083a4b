"""Long-poll Fetch: answers early when data arrives, after ~max_wait_ms when none does."""

from __future__ import annotations

import threading
import time

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.reader import iter_records
from spark_coord.wire.registry import ApiKey

TOPIC = "poll"


def _fetch_body(offset: int, max_wait_ms: int, min_bytes: int = 1, partition_max_bytes: int = 1 << 20,
                max_bytes: int = 1 << 20, partitions=(0,)) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes}
                for p in partitions]}]}


def _produce(conn, values, partition=0):
    b = BatchBuilder()
    for v in values:
        b.append(v)
    out = conn.request(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": b.build()}]}]})
    r = out["responses"][0]["partition_responses"][0]
    assert r["error_code"] == 0
    return r["base_offset"]


def _setup(broker):
    conn = BrokerConnection(*broker.address, timeout=30)
    out = conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 2,
                                                          "replication_factor": 1}], "timeout_ms": 10000})
    assert out["topics"][0]["error_code"] == 0
    return conn


def test_fetch_waits_max_wait_when_no_data(broker):
    with _setup(broker) as conn:
        t0 = time.monotonic()
        out = conn.request(ApiKey.FETCH, _fetch_body(0, 600))
        elapsed = time.monotonic() - t0
        p = out["responses"][0]["partitions"][0]
        assert p["error_code"] == 0 and p["high_watermark"] == 0
        assert not p["records"]
        assert 0.5 <= elapsed < 3.0
        assert out["session_id"] == 0


def test_fetch_answers_early_when_data_arrives(broker):
    with _setup(broker) as conn, BrokerConnection(*broker.address) as producer:
        result = {}

        def fetch():
            t0 = time.monotonic()
            result["out"] = conn.request(ApiKey.FETCH, _fetch_body(0, 20000, partitions=(0, 1)))
            result["elapsed"] = time.monotonic() - t0

        t = threading.Thread(target=fetch)
        t.start()
        deadline = time.monotonic() + 10  # wait until the fetch is parked in the broker
        while broker.broker.ctx.appends.waiting() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _produce(producer, [b"hello", b"world"], partition=1)
        t.join(15)
        assert not t.is_alive()
        assert result["elapsed"] < 10
        parts = {p["partition_index"]: p for p in result["out"]["responses"][0]["partitions"]}
        assert [r.value for r in iter_records(parts[1]["records"])] == [b"hello", b"world"]
        assert parts[1]["high_watermark"] == 2
        assert not parts[0]["records"]


def test_fetch_offsets_limits_and_out_of_range(broker):
    with _setup(broker) as conn:
        for i in range(5):
            assert _produce(conn, [b"x" * 100, b"y" * 100]) == 2 * i
        out = conn.request(ApiKey.FETCH, _fetch_body(3, 0, min_bytes=0))
        p = out["responses"][0]["partitions"][0]
        recs = list(iter_records(p["records"], min_offset=3))
        assert [r.offset for r in recs] == [3, 4, 5, 6, 7, 8, 9]
        assert p["log_start_offset"] == 0 and p["last_stable_offset"] == 10
        # a tiny partition_max_bytes still returns one whole batch (KIP-74)
        out = conn.request(ApiKey.FETCH, _fetch_body(0, 0, min_bytes=0, partition_max_bytes=10))
        recs = list(iter_records(out["responses"][0]["partitions"][0]["records"]))
        assert [r.offset for r in recs] == [0, 1]
        out = conn.request(ApiKey.FETCH, _fetch_body(11, 0, min_bytes=0))
        assert out["responses"][0]["partitions"][0]["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert conn.request(ApiKey.FETCH, _fetch_body(10, 0, min_bytes=0))["responses"][0]["partitions"][0][
            "error_code"] == 0
        # ListOffsets agrees
        lo = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "timestamp": -2}, {"partition_index": 1, "timestamp": -1}]}]})
        offsets = {p["partition_index"]: p["offset"] for p in lo["topics"][0]["partitions"]}
        assert offsets == {0: 0, 1: 0}
