"""Streaming reads through ``readStream.format("coordkafka")`` against a real broker."""

from __future__ import annotations

import json
import threading

from chispa import assert_df_equality
from helpers import wait_until
from spark_data import expected_df, new_topic, produce, reader


class BatchLog:
    """foreachBatch target: the rows of every batch id, as plain tuples (driver side)."""

    def __init__(self, on_batch=None) -> None:
        self.batches: dict[int, list[tuple]] = {}
        self.lock = threading.Lock()
        self.on_batch = on_batch

    def __call__(self, df, batch_id: int) -> None:
        rows = [tuple(r) for r in df.select("topic", "partition", "offset", "value").collect()]
        with self.lock:
            self.batches[batch_id] = rows
        if self.on_batch is not None:
            self.on_batch(batch_id)

    def rows(self) -> list[tuple]:
        with self.lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]


def test_stream_into_memory_sink_equals_produced(spark, cluster):
    topic = new_topic(cluster)
    rows = produce(cluster, topic, 60)
    df = reader(spark, cluster, topic, streaming=True, startingOffsets="earliest", includeHeaders="true")
    query = df.writeStream.format("memory").queryName("mem_stream").trigger(processingTime="200 milliseconds").start()
    try:
        rows += produce(cluster, topic, 40, start=60)
        wait_until(lambda: spark.table("mem_stream").count() >= 100, timeout=60, message="100 rows in memory sink")
        query.processAllAvailable()
        assert_df_equality(spark.table("mem_stream"), expected_df(spark, rows, True), ignore_row_order=True,
                           ignore_nullable=True)
        progress = query.lastProgress["sources"][0]
        assert json.loads(progress["latestOffset"]) == {topic: {"0": 50, "1": 50}}
        assert json.loads(progress["endOffset"]) == {topic: {"0": 50, "1": 50}}
    finally:
        query.stop()


def test_stream_into_parquet_sink_equals_produced(spark, cluster, tmp_path):
    topic = new_topic(cluster)
    rows = produce(cluster, topic, 80)
    df = reader(spark, cluster, topic, streaming=True, startingOffsets="earliest")
    query = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    got = spark.read.schema(df.schema).parquet(str(tmp_path / "out"))
    assert_df_equality(got, expected_df(spark, rows, False), ignore_row_order=True, ignore_nullable=True)


def test_max_offsets_per_trigger_caps_every_batch(spark, cluster, tmp_path):
    topic = new_topic(cluster)
    produce(cluster, topic, 95)
    log = BatchLog()
    df = reader(spark, cluster, topic, streaming=True, startingOffsets="earliest", maxOffsetsPerTrigger=20)
    query = (df.writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    sizes = [len(log.batches[b]) for b in sorted(log.batches) if log.batches[b]]
    assert sizes == [20, 20, 20, 20, 15]
    assert sorted((p, o) for _, p, o, _ in log.rows()) == sorted((i % 2, i // 2) for i in range(95))


def test_available_now_stops_at_offsets_present_at_start(spark, cluster, tmp_path):
    topic = new_topic(cluster)
    produce(cluster, topic, 50)

    def produce_more(batch_id: int) -> None:
        if batch_id == 0:
            produce(cluster, topic, 30, start=50)

    log = BatchLog(produce_more)
    df = reader(spark, cluster, topic, streaming=True, startingOffsets="earliest", maxOffsetsPerTrigger=10)
    query = (df.writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    values = sorted(v for *_, v in log.rows())
    assert len(values) == 50
    assert values == sorted(f"value-{i}".encode() for i in range(50))


def test_restart_from_checkpoint_replays_nothing_twice(spark, cluster, tmp_path):
    topic = new_topic(cluster)
    produce(cluster, topic, 100)
    ckpt = tmp_path / "ckpt"
    log = BatchLog()

    def run() -> None:
        df = reader(spark, cluster, topic, streaming=True, startingOffsets="earliest", maxOffsetsPerTrigger=30)
        q = (df.writeStream.foreachBatch(log).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120)

    run()
    first = dict(log.batches)
    assert sum(len(b) for b in first.values()) == 100
    produce(cluster, topic, 50, start=100)
    run()
    # every record exactly once over both runs
    offsets = [(p, o) for _, p, o, _ in log.rows()]
    assert len(offsets) == 150
    assert sorted(offsets) == sorted((i % 2, i // 2) for i in range(150))

    # Forget that the last batch was committed: the restarted query must replay it exactly.
    last = max(log.batches)
    replayed_rows = sorted(log.batches[last])
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
    del log.batches[last]
    run()
    assert sorted(log.batches[last]) == replayed_rows
    assert len(log.rows()) == 150


def test_new_partitions_of_a_pattern_are_picked_up(spark, cluster, tmp_path):
    a = new_topic(cluster, prefix="grow-a")
    produce(cluster, a, 10)
    log = BatchLog()
    df = (spark.readStream.format("coordkafka").option("bootstrap.brokers", cluster.bootstrap)
          .option("subscribePattern", "grow-.*").option("startingOffsets", "earliest").load())
    query = (df.writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(log.rows()) >= 10, timeout=60, message="first topic read")
        b = new_topic(cluster, prefix="grow-b")
        produce(cluster, b, 12)
        wait_until(lambda: len(log.rows()) >= 22, timeout=60, message="new topic read from its start")
        query.processAllAvailable()
        assert sorted((t, p, o) for t, p, o, _ in log.rows()) == sorted(
            [(a, i % 2, i // 2) for i in range(10)] + [(b, i % 2, i // 2) for i in range(12)])
    finally:
        query.stop()


def test_stream_sink_copies_a_topic(spark, cluster, tmp_path):
    src, dst = new_topic(cluster), new_topic(cluster)
    produce(cluster, src, 40)
    df = reader(spark, cluster, src, streaming=True, startingOffsets="earliest")
    query = (df.select("key", "value").writeStream.format("coordkafka")
             .option("bootstrap.brokers", cluster.bootstrap).option("topic", dst)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    copied = reader(spark, cluster, dst).select("key", "value")
    assert_df_equality(copied, reader(spark, cluster, src).select("key", "value"), ignore_row_order=True,
                       ignore_nullable=True)
