"""The Arrow sink: Spark hands ``DataSourceArrowWriter``s Arrow batches; the rows land in the
partitions a Kafka producer would choose (explicit column, murmur2 of the key, sticky for
keyless rows), with their keys, values and headers, and bad input is refused by name."""

from __future__ import annotations

import pytest
from spark_data import new_topic


def _read_back(cluster, topic: str, partitions: int) -> list[tuple]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import iter_records

    got = []
    with ClusterClient(cluster.bootstrap) as cc:
        ends = AdminClient(cc).list_offsets(topic, list(range(partitions)), LATEST)
        for p in range(partitions):
            conn = cc.connection(cc.leader(topic, p))
            offset = 0
            while offset < ends[p]:
                part = fetch(conn, {(topic, p): offset}, max_bytes=1 << 22, partition_max_bytes=1 << 22)[0]
                assert part.error == 0
                for rec in iter_records(part.records, min_offset=offset):
                    got.append((rec.key, rec.value, p, list(rec.headers)))
                    offset = rec.offset + 1
    return got


def test_small_arrow_batches_are_gathered_in_order():
    """Spark's Arrow batches (10,000 rows by default) are joined before record batches are built,
    so these fill batch.size; rows keep their order and empty batches are skipped."""
    import pyarrow as pa

    from spark_coord.spark.sink import _gathered

    batches = [pa.record_batch([pa.array([f"{i}-{j}".encode() * 10 for j in range(n)], pa.binary())], ["value"])
               for i, n in enumerate([100, 0, 100, 100, 3, 100, 100])]
    assert all(4000 < rb.nbytes < 5000 for rb in batches if rb.num_rows == 100)
    out = list(_gathered(iter(batches), 8000))
    assert [rb.num_rows for rb in out] == [200, 203, 100]
    assert all(rb.nbytes >= 8000 for rb in out[:-1])
    assert pa.Table.from_batches(out).column("value").to_pylist() == \
        pa.Table.from_batches(batches).column("value").to_pylist()


def test_keyless_rows_stay_on_a_partition_for_batch_size_bytes():
    """Kafka's sticky partitioner (KIP-794): keyless rows go to one partition until batch.size
    bytes went there, then to the next, carried from one Arrow batch to the next."""
    import numpy as np
    import pyarrow as pa

    from spark_coord.records.builder import ArrowColumns
    from spark_coord.spark.sink import _sticky_partitions

    columns = ArrowColumns(None, pa.array([b"v" * 100] * 50, pa.binary()))
    sticky = {"t": (2, 0)}
    whole = _sticky_partitions(columns, np.arange(50), 3, 1000, sticky, "t")
    assert whole.tolist() == [2] * 10 + [0] * 10 + [1] * 10 + [2] * 10 + [0] * 10
    assert sticky["t"] == (1, 0)
    sticky = {"t": (2, 0)}
    halves = np.concatenate([_sticky_partitions(columns, np.arange(25), 3, 1000, sticky, "t"),
                             _sticky_partitions(columns, np.arange(25, 50), 3, 1000, sticky, "t")])
    assert halves.tolist() == whole.tolist()
    started = {}
    _sticky_partitions(columns, np.arange(5), 3, 1000, started, "t")
    assert started["t"][1] == 500 and 0 <= started["t"][0] < 3


def test_uncompressed_batches_reuse_memory_and_round_trip_across_gathered_batches(cluster):
    """Several 4 MiB gathered batches: each one's record batches are built in memory the one before
    used (``BatchArena``, reset once its Produce requests are answered); every row still lands
    intact and in order in its key's partition."""
    import pyarrow as pa

    from spark_coord.records.partitioner import partition_for_key
    from spark_coord.spark.options import parse_sink_options
    from spark_coord.spark.sink import SinkColumns, produce_arrow

    topic = new_topic(cluster, partitions=3)
    rows = 120_000  # 3 Arrow batches of 40,000 rows, about 5 MiB each
    keys = [f"k{i % 997}".encode() for i in range(rows)]
    values = [f"{i:09d}".encode() + bytes([65 + i % 26]) * (90 + i % 50) for i in range(rows)]
    batches = [pa.record_batch([pa.array(keys[i:i + 40_000], pa.binary()), pa.array(values[i:i + 40_000], pa.binary())],
                               ["key", "value"]) for i in range(0, rows, 40_000)]
    opts = parse_sink_options({"bootstrap.brokers": cluster.bootstrap, "topic": topic})
    message = produce_arrow(iter(batches), opts, SinkColumns(value=1, key=0))
    assert message.records == rows
    got = _read_back(cluster, topic, 3)
    assert sorted(v for _, v, _, _ in got) == sorted(values)
    for p in range(3):
        assert [v for _, v, q, _ in got if q == p] == [values[i] for i in range(rows)
                                                        if partition_for_key(keys[i], 3) == p]


def test_the_writers_spark_gets_are_arrow_writers():
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter

    from spark_coord.spark.sink import CoordKafkaStreamWriter, CoordKafkaWriter

    assert issubclass(CoordKafkaWriter, DataSourceArrowWriter)
    assert issubclass(CoordKafkaStreamWriter, DataSourceStreamArrowWriter)


def test_keys_go_where_kafka_puts_them_and_everything_round_trips(spark, cluster):
    from spark_coord.records.partitioner import partition_for_key

    topic = new_topic(cluster, partitions=3)
    data = [(None if i % 5 == 0 else f"key-{i}".encode(),
             None if i % 11 == 3 and i % 5 else f"value {i}.".encode() * (1 + i % 9),
             [("h", f"{i}".encode()), ("n", None)] if i % 2 else None) for i in range(3000)]
    df = spark.createDataFrame(data, "key binary, value binary, headers array<struct<key: string, value: binary>>")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")  # several Arrow batches per task
    try:
        (df.repartition(2).write.format("coordkafka").mode("append").option("bootstrap.brokers", cluster.bootstrap)
         .option("topic", topic).option("batch.size", "4096").option("compression", "lz4").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    got = _read_back(cluster, topic, 3)
    by_value = {(k, v): (p, h) for k, v, p, h in got}
    assert len(got) == len(data)
    keyless = set()
    for k, v, h in data:
        p, headers = by_value[(k, v)]
        assert headers == (h or [])
        if k is not None:
            assert p == partition_for_key(k, 3)
        else:
            keyless.add(p)
    assert len(keyless) >= 2  # keyless rows move on to the next partition after batch.size bytes


def test_partition_and_topic_columns(spark, cluster):
    a, b = new_topic(cluster, partitions=2), new_topic(cluster, partitions=2)
    data = [(a if i % 3 else b, f"v{i}", i % 2) for i in range(200)]
    df = spark.createDataFrame(data, "topic string, value string, partition int")
    df.write.format("coordkafka").mode("append").option("bootstrap.brokers", cluster.bootstrap).save()
    for topic in (a, b):
        got = sorted((v.decode(), p) for _, v, p, _ in _read_back(cluster, topic, 2))
        assert got == sorted((v, p) for t, v, p in data if t == topic)


@pytest.mark.parametrize("rows, schema, match", [
    ([("v", 7)], "value string, partition int", "partition: 7 is not a partition"),
    ([("v", None)], "value string, topic string", "null topic"),
])
def test_bad_rows_are_refused_by_name(spark, cluster, rows, schema, match):
    topic = new_topic(cluster, partitions=2)
    df = spark.createDataFrame(rows, schema)
    writer = df.write.format("coordkafka").mode("append").option("bootstrap.brokers", cluster.bootstrap)
    if "topic" not in schema:
        writer = writer.option("topic", topic)
    with pytest.raises(Exception, match=match):
        writer.save()
