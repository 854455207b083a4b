"""Spark reads a compacted topic: a batch read and a stream of a log with gaps (compaction removed the
older records of each key) see each live key once with its last value, offsets increasing with gaps, and
no false data-loss failure (failOnDataLoss stays true)."""

from __future__ import annotations

import uuid

import pytest
from helpers import local_cluster, wait_until

KEYS, ROUNDS, TOMBSTONED, PADS = 50, 20, 5, 40


@pytest.fixture(scope="module")
def compacting_cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("compacting"), 1, "s-compacted",
                       {"log.cleaner.backoff.ms": 100, "zookeeper.session.timeout.ms": 6000}) as c:
        yield c


def _records(cluster, topic: str) -> list:
    """Every record of partition 0 from the log start, by our fetcher (moving on after each batch)."""
    from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import iter_batches, iter_records

    out = []
    with ClusterClient(cluster.bootstrap) as c:
        admin = AdminClient(c)
        pos, end = admin.list_offsets(topic, [0], EARLIEST)[0], admin.list_offsets(topic, [0], LATEST)[0]
        while pos < end:
            data = fetch(c.connection(c.leader(topic, 0)), {(topic, 0): pos}, max_wait_ms=100)[0]
            batches = [h for h, _ in iter_batches(data.records)]
            out.extend(iter_records(data.records, pos))
            pos = batches[-1].next_offset
    return out


def test_batch_and_stream_reads_of_a_compacted_topic_see_each_live_key_once(spark, compacting_cluster, tmp_path):
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    cluster = compacting_cluster
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(topic, 1, configs={"cleanup.policy": "compact", "segment.bytes": "4096",
                                                       "min.cleanable.dirty.ratio": "0.01",
                                                       "delete.retention.ms": "0"})
        p = Producer(c, batch_size=512)
        for r in range(ROUNDS):
            for k in range(KEYS):
                p.send(topic, f"v{r}".encode(), key=f"k{k}".encode(), partition=0)
        for k in range(TOMBSTONED):
            p.send(topic, None, key=f"k{k}".encode(), partition=0)
        for i in range(PADS):  # later records, so every write of the keys above is in a closed segment
            p.send(topic, b"x" * 400, key=f"pad{i}".encode(), partition=0)
        p.flush()
    live = {f"k{k}": f"v{ROUNDS - 1}" for k in range(TOMBSTONED, KEYS)}

    def cleaned() -> bool:
        keys = [r.key.decode() for r in _records(cluster, topic) if r.key.startswith(b"k")]
        return sorted(keys) == sorted(live)
    wait_until(cleaned, timeout=60, interval=0.5, message="the cleaner to compact the topic")

    df = (spark.read.format("coordkafka").option("kafka.bootstrap.servers", cluster.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    rows = [(r.offset, bytes(r.key).decode(), None if r.value is None else bytes(r.value).decode())
            for r in df.orderBy("offset").collect()]
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(set(offsets))
    assert max(b - a for a, b in zip(offsets, offsets[1:], strict=False)) > 1  # gaps
    assert {k: v for _, k, v in rows if k.startswith("k")} == live
    assert [k for _, k, _ in rows if k.startswith("k")] == sorted(live, key=lambda k: int(k[1:]))  # each once
    assert sum(1 for _, k, _ in rows if k.startswith("pad")) == PADS  # the active segment's records, uncleaned

    # a stream over the same log (failOnDataLoss true): the same rows, no data-loss failure on the gaps
    (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", cluster.bootstrap)
     .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 300).load()
     .writeStream.format("memory").queryName("compacted_stream").option("checkpointLocation", str(tmp_path / "c"))
     .trigger(availableNow=True).start().awaitTermination(120))
    streamed = [(r.offset, bytes(r.key).decode()) for r in spark.sql("SELECT * FROM compacted_stream ORDER BY offset")
                .collect()]
    assert streamed == [(o, k) for o, k, _ in rows]
