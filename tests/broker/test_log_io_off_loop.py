"""The broker's event loop does not wait for the disk: fsyncs a produce must wait for and
segment scans of ListOffsets run on the log's I/O threads, while other connections (and
the coordinator's pings, which share the loop) are served.  ListOffsets -3 (KIP-734).

A slow disk is simulated by making each fsync (or each segment header walk) take
``SLOW_S`` longer than it does.
"""

from __future__ import annotations

import threading
import time

import pytest

from spark_coord.client.connection import BrokerConnection
from spark_coord.log.segment import LogSegment
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

TOPIC = "disk"
SLOW_S = 1.5


def _create(conn, partitions: int = 2) -> None:
    out = conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": partitions,
                                                          "replication_factor": 1}], "timeout_ms": 10000})
    assert out["topics"][0]["error_code"] == 0


def _produce(conn, partition: int, timestamps: list[int], acks: int = 1) -> dict:
    b = BatchBuilder()
    for i, ts in enumerate(timestamps):
        b.append(b"v%d" % i, timestamp_ms=ts)
    out = conn.request(ApiKey.PRODUCE, {"acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": b.build()}]}]})
    return out["responses"][0]["partition_responses"][0]


def _list_offsets(conn, timestamp: int, partitions=(0,)) -> dict[int, tuple[int, int, int]]:
    out = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp,
                                        "max_num_offsets": 1} for p in partitions]}]}, version=7)
    return {p["partition_index"]: (p["error_code"], p["offset"], p["timestamp"])
            for p in out["topics"][0]["partitions"]}


def _latency_while(busy: threading.Event, address) -> float:
    """Seconds an ApiVersions round trip takes on a fresh connection, once ``busy`` is set."""
    assert busy.wait(15), "the slow disk operation never started"
    t0 = time.monotonic()
    with BrokerConnection(*address, timeout=10) as other:
        other.request(ApiKey.API_VERSIONS, {})
    return time.monotonic() - t0


@pytest.fixture
def slow_fsync(monkeypatch):
    """Every segment fsync takes SLOW_S longer; ``started``/``finished`` tell when."""
    real = LogSegment.fsync
    state = {"started": threading.Event(), "finished": []}

    def fsync(self) -> None:
        state["started"].set()
        time.sleep(SLOW_S)
        real(self)
        state["finished"].append(time.monotonic())

    monkeypatch.setattr(LogSegment, "fsync", fsync)
    return state


def test_produce_fsync_off_the_loop_and_acknowledged_only_once_on_disk(broker_factory, slow_fsync):
    broker = broker_factory(0, **{"log.flush.interval.messages": 1})
    with BrokerConnection(*broker.address, timeout=30) as conn:
        _create(conn)
        result = {}

        def produce() -> None:
            result["answer"] = _produce(conn, 0, [1, 2, 3])
            result["at"] = time.monotonic()

        t = threading.Thread(target=produce)
        t.start()
        latency = _latency_while(slow_fsync["started"], broker.address)
        t.join(30)
        assert result["answer"]["error_code"] == 0 and result["answer"]["base_offset"] == 0
        assert latency < SLOW_S / 2, f"another client waited {latency:.2f} s behind an fsync"
        assert slow_fsync["finished"] and slow_fsync["finished"][0] <= result["at"]  # on disk, then acknowledged
        plog = broker.broker.logs.get(TOPIC, 0)
        assert plog.unflushed_messages == 0 and plog.log_end_offset == 3


def test_appends_keep_their_order_while_fsyncs_run(broker_factory, slow_fsync):
    broker = broker_factory(0, **{"log.flush.interval.messages": 1})
    with BrokerConnection(*broker.address, timeout=30) as admin:
        _create(admin)
    conns = [BrokerConnection(*broker.address, timeout=30) for _ in range(3)]
    answers: list[tuple[int, int]] = []
    try:
        def produce(i: int) -> None:
            a = _produce(conns[i], 0, [i] * (i + 1))
            answers.append((i, a["base_offset"]))

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
        for th in threads:
            th.start()
            time.sleep(0.05)  # arrive in this order
        for th in threads:
            th.join(30)
    finally:
        for c in conns:
            c.close()
    # each batch got the offsets following the previous one, in arrival order, none twice
    assert sorted(answers) == [(0, 0), (1, 1), (2, 3)]
    assert broker.broker.logs.get(TOPIC, 0).log_end_offset == 6


def test_list_offsets_by_timestamp_scans_off_the_loop(broker_factory, monkeypatch):
    broker = broker_factory(0)
    with BrokerConnection(*broker.address, timeout=30) as conn:
        _create(conn)
        for i in range(5):
            _produce(conn, 0, [1000 * i, 1000 * i + 500])
        started = threading.Event()
        real = LogSegment.headers

        def headers(self, size):
            started.set()
            time.sleep(SLOW_S)
            return real(self, size)

        monkeypatch.setattr(LogSegment, "headers", headers)
        result = {}
        t = threading.Thread(target=lambda: result.update(answer=_list_offsets(conn, 2100)))
        t.start()
        latency = _latency_while(started, broker.address)
        t.join(30)
        assert result["answer"] == {0: (0, 5, 2500)}  # 2500: the second record of the batch holding 2000
        assert latency < SLOW_S / 2, f"another client waited {latency:.2f} s behind a segment scan"


def test_list_offsets_max_timestamp(broker_factory):
    broker = broker_factory(0)
    with BrokerConnection(*broker.address, timeout=30) as conn:
        _create(conn)
        assert _list_offsets(conn, -3, (0, 1)) == {0: (0, -1, -1), 1: (0, -1, -1)}  # empty: none
        _produce(conn, 0, [100, 200])
        _produce(conn, 0, [700, 900, 300])   # 900 at offset 3
        _produce(conn, 0, [900, 50])         # a tie later: offset 3 stays
        _produce(conn, 1, [5])
        assert _list_offsets(conn, -3, (0, 1)) == {0: (0, 3, 900), 1: (0, 0, 5)}
        assert _list_offsets(conn, -4) == {0: (42, -1, -1)}  # INVALID_REQUEST
