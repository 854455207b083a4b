"""Batch reads and writes through ``format("coordkafka")`` against a real broker."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from spark_data import expected_df, new_topic, produce, reader


def test_batch_read_equals_what_was_produced(spark, cluster):
    topic = new_topic(cluster)
    rows = produce(cluster, topic, 200)
    df = reader(spark, cluster, topic, includeHeaders="true")
    assert_df_equality(df, expected_df(spark, rows, True), ignore_row_order=True, ignore_nullable=True)
    plain = reader(spark, cluster, topic)
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert_df_equality(plain, expected_df(spark, rows, False), ignore_row_order=True, ignore_nullable=True)


def test_batch_read_offset_ranges_and_min_partitions(spark, cluster):
    topic = new_topic(cluster)
    rows = produce(cluster, topic, 100)
    starting = f'{{"{topic}": {{"0": 10, "1": -2}}}}'
    ending = f'{{"{topic}": {{"0": 40, "1": -1}}}}'
    df = reader(spark, cluster, topic, startingOffsets=starting, endingOffsets=ending, minPartitions=7)
    want = [r[:7] for r in rows if (r[3] == 0 and 10 <= r[4] < 40) or r[3] == 1]
    assert df.rdd.getNumPartitions() >= 7
    assert_df_equality(df, expected_df(spark, want, False), ignore_row_order=True, ignore_nullable=True)


def test_assign_reads_only_the_assigned_partitions(spark, cluster):
    topic = new_topic(cluster)
    rows = produce(cluster, topic, 40)
    df = (spark.read.format("coordkafka").option("bootstrap.brokers", cluster.bootstrap)
          .option("assign", f'{{"{topic}": [1]}}').load())
    assert_df_equality(df, expected_df(spark, [r for r in rows if r[3] == 1], False), ignore_row_order=True,
                       ignore_nullable=True)


def test_subscribe_pattern_reads_matching_topics(spark, cluster):
    a, b = new_topic(cluster, prefix="pat-a"), new_topic(cluster, prefix="pat-b")
    rows = produce(cluster, a, 10) + produce(cluster, b, 10)
    df = (spark.read.format("coordkafka").option("bootstrap.brokers", cluster.bootstrap)
          .option("subscribePattern", f"({a}|{b})").load())
    assert_df_equality(df, expected_df(spark, rows, False), ignore_row_order=True, ignore_nullable=True)


def test_sink_writes_rows_a_plain_fetch_reads_back(spark, cluster):
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import iter_records

    topic = new_topic(cluster)
    data = [(f"k{i}".encode() if i % 3 else None, f"v{i}", i % 2, [("h", f"{i}".encode())] if i % 2 else [])
            for i in range(50)]
    df = spark.createDataFrame(data, "key binary, value string, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    (df.write.format("coordkafka").mode("append").option("bootstrap.brokers", cluster.bootstrap)
     .option("topic", topic).save())

    got = []
    with ClusterClient(cluster.bootstrap) as cc:
        ends = AdminClient(cc).list_offsets(topic, [0, 1], LATEST)
        assert sum(ends.values()) == 50
        for p in (0, 1):
            conn = cc.connection(cc.leader(topic, p))
            part = fetch(conn, {(topic, p): 0}, max_bytes=1 << 20)[0]
            assert part.error == 0
            for rec in iter_records(part.records):
                got.append((rec.key, rec.value.decode(), p, [(k, v) for k, v in rec.headers]))
    want = [(k, v, p, h) for k, v, p, h in data]
    assert sorted(got, key=lambda r: r[1]) == sorted(want, key=lambda r: r[1])


def test_sink_needs_a_topic(spark, cluster):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("coordkafka").mode("append").option("bootstrap.brokers", cluster.bootstrap).save()
