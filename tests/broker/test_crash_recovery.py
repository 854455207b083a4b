"""kill -9 of a broker process while a producer streams (acks=1, an fsync per message):
after the restart every acknowledged record is at its offset with its bytes, the log
is a gap-free prefix of what was sent, and the broker accepts produce again."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from helpers import local_cluster, wait_until

from spark_coord.client.admin import LATEST, AdminClient
from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.reader import iter_records
from spark_coord.wire.registry import ApiKey

TOPIC = "crash"
PARTITIONS = 2
ACKED_BEFORE_KILL = 150


@pytest.fixture(scope="module")
def crash_cluster(zookeeper, tmp_path_factory):
    """One broker process that fsyncs after every message (log.flush.interval.messages=1)."""
    with local_cluster(zookeeper, tmp_path_factory.mktemp("crash"), 1, "crash",
                       {"log.flush.interval.messages": 1, "zookeeper.session.timeout.ms": 6000}) as c:
        yield c


class StreamingProducer(threading.Thread):
    """Produces small batches (acks=1) round-robin over the partitions until the connection breaks,
    recording what was sent and which (partition, offset) each acknowledged value got."""

    def __init__(self, address: tuple[str, int]):
        super().__init__(name="streaming-producer", daemon=True)
        self.address = address
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        self.acked_count = 0
        self.error: BaseException | None = None
        self.unexpected: list[str] = []

    def run(self) -> None:
        conn = BrokerConnection(*self.address, timeout=10.0)
        i = 0
        try:
            while True:
                p = i % PARTITIONS
                values = [f"rec-{i}-{j}-".encode() + bytes([i % 251]) * (i % 40) for j in range(1 + i % 3)]
                b = BatchBuilder()
                for v in values:
                    b.append(v, key=str(i).encode(), timestamp_ms=1_700_000_000_000 + i)
                self.sent[p].extend(values)
                resp = conn.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                                     "topic_data": [{"name": TOPIC, "partition_data": [
                                                         {"index": p, "records": b.build()}]}]})
                part = resp["responses"][0]["partition_responses"][0]
                if part["error_code"] != 0:
                    self.unexpected.append(f"batch {i} to partition {p}: error {part['error_code']}")
                    return
                for k, v in enumerate(values):
                    self.acked[p][part["base_offset"] + k] = v
                self.acked_count += len(values)
                i += 1
        except (BrokerConnectionError, OSError) as e:
            self.error = e  # the kill: expected
        finally:
            conn.close()


def _read_partition(cluster: ClusterClient, partition: int) -> list[tuple[int, bytes]]:
    end = AdminClient(cluster).list_offsets(TOPIC, [partition], LATEST)[partition]
    out: list[tuple[int, bytes]] = []
    pos = 0
    deadline = time.monotonic() + 30
    while pos < end:
        assert time.monotonic() < deadline, f"partition {partition}: stuck reading at offset {pos} of {end}"
        data = fetch(cluster.connection(cluster.leader(TOPIC, partition)), {(TOPIC, partition): pos},
                     max_wait_ms=100)[0]
        assert data.error == 0, f"fetch error {data.error}"
        for r in iter_records(data.records or b"", min_offset=pos):
            out.append((r.offset, r.value))
            pos = r.offset + 1
    return out


def test_sigkill_during_produce_loses_no_acknowledged_record(crash_cluster):
    with ClusterClient(crash_cluster.bootstrap) as c:
        AdminClient(c).create_topic(TOPIC, PARTITIONS)
    producer = StreamingProducer(crash_cluster.brokers[0])
    producer.start()
    wait_until(lambda: producer.acked_count >= ACKED_BEFORE_KILL or not producer.is_alive(), 60,
               message=lambda: f"{ACKED_BEFORE_KILL} acknowledged records (have {producer.acked_count})")
    assert producer.is_alive(), f"producer stopped early: {producer.unexpected} {producer.error!r}"
    assert crash_cluster.kill_broker(0, signal.SIGKILL) == -signal.SIGKILL
    producer.join(30)
    assert not producer.is_alive()
    assert not producer.unexpected, producer.unexpected
    assert isinstance(producer.error, (BrokerConnectionError, OSError))

    crash_cluster.start_broker(0)
    with ClusterClient(crash_cluster.bootstrap) as c:
        c.topic(TOPIC, wait=10.0)
        for p in range(PARTITIONS):
            stored = _read_partition(c, p)
            offsets = [off for off, _ in stored]
            assert offsets == list(range(len(stored))), f"partition {p}: offsets are not contiguous from 0"
            values = [v for _, v in stored]
            # everything acknowledged survived, at its offset, with its bytes...
            for off, v in producer.acked[p].items():
                assert off < len(stored), f"partition {p}: acknowledged offset {off} lost (log ends at {len(stored)})"
                assert values[off] == v, f"partition {p} offset {off}: {values[off]!r} != acknowledged {v!r}"
            # ...and the log holds nothing but a prefix of what was sent (the unacknowledged tail may be lost)
            assert values == producer.sent[p][:len(values)], f"partition {p}: log is not a prefix of what was sent"

        # the restarted broker keeps accepting produce, at the end of the recovered log
        ends = AdminClient(c).list_offsets(TOPIC, None, LATEST)
        b = BatchBuilder()
        b.append(b"after-restart")
        resp = c.connection(0).request(ApiKey.PRODUCE, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                                        "topic_data": [{"name": TOPIC, "partition_data": [
                                                            {"index": 0, "records": b.build()}]}]})
        part = resp["responses"][0]["partition_responses"][0]
        assert (part["error_code"], part["base_offset"]) == (0, ends[0])
        assert _read_partition(c, 0)[-1] == (ends[0], b"after-restart")
