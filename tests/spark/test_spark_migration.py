"""A Spark job written for ``format("kafka")`` runs on coordkafka with only the format name changed.

The job (``kafka_job``) uses what such jobs use: ``kafka.bootstrap.servers``, ``subscribe``,
``startingOffsetsByTimestamp``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``,
``includeHeaders``, and a sink given more columns than it writes plus ``kafka.linger.ms``.
Spark's Kafka connector is not part of pyspark (it is a Maven package), so its results are
written down here from Spark's documentation of each option: the first offset whose timestamp
is at or after the partition's timestamp (Kafka's ``offsetsForTimes``), at most
``maxOffsetsPerTrigger`` rows per micro-batch split over partitions by their lag, the headers
column, key/value/headers written and other columns left out, keys partitioned by murmur2.
The timestamp options' edge cases (no record that recent, endingTimestamp) follow.
"""

from __future__ import annotations

import json
import uuid

import pytest
from spark_data import BASE_TS_MS, new_topic, produce

FORMAT = "coordkafka"  # the one word a job written for format("kafka") changes


def kafka_job(spark, fmt: str, bootstrap: str, source: str, target: str, starts: dict[int, int], checkpoint: str):
    """The job as it would be written for Spark's Kafka source and sink, format name aside."""
    events = (spark.readStream.format(fmt)
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsetsByTimestamp", json.dumps({source: {str(p): ts for p, ts in starts.items()}}))
              .option("maxOffsetsPerTrigger", 7)
              .option("failOnDataLoss", "false")
              .option("includeHeaders", "true")
              .load())
    enriched = events.selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers",
                                 "offset AS source_offset", "timestamp AS source_time")  # more than the sink writes
    return (enriched.writeStream.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", target)
            .option("kafka.linger.ms", "5")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start())


def _read_all(cluster, topic: str, partitions: int) -> list[tuple]:
    """(partition, key, value, headers) of every record of ``topic``."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import iter_records

    out = []
    with ClusterClient(cluster.bootstrap) as cc:
        ends = AdminClient(cc).list_offsets(topic, list(range(partitions)), LATEST)
        for p in range(partitions):
            offset = 0
            while offset < ends[p]:
                part = fetch(cc.connection(cc.leader(topic, p)), {(topic, p): offset})[0]
                for rec in iter_records(part.records, min_offset=offset):
                    out.append((p, rec.key, rec.value, [(k, v) for k, v in rec.headers]))
                    offset = rec.offset + 1
    return out


def test_a_spark_kafka_job_runs_with_only_the_format_name_changed(spark, cluster, tmp_path):
    from spark_coord.records.partitioner import partition_for_key

    source, target = new_topic(cluster, partitions=2), new_topic(cluster, partitions=3)
    produced = produce(cluster, source, 60)  # record i: partition i % 2, timestamp BASE_TS_MS + i
    starts = {0: BASE_TS_MS + 19, 1: BASE_TS_MS + 31}  # partition 0 from record 20 (offset 10), 1 from 31 (15)
    query = kafka_job(spark, FORMAT, cluster.bootstrap, source, target, starts, str(tmp_path / "ckpt"))
    assert query.awaitTermination(180), "the AvailableNow run did not end"
    assert query.exception() is None

    # Spark's results, from its documentation of each option
    read = [r for r in produced if r[5].timestamp() * 1000 >= starts[r[3]]]
    assert len(read) == 35 and min(r[4] for r in read if r[3] == 0) == 10 and min(r[4] for r in read if r[3] == 1) == 15
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [7, 7, 7, 7, 7]  # maxOffsetsPerTrigger, split over the partitions by lag
    first = next(p for p in query.recentProgress if p["numInputRows"])["sources"][0]
    # from offsetsForTimes of the timestamps (10 and 15), 7 records split by lag (20 and 15): 4 and 3
    assert json.loads(first["endOffset"]) == {source: {"0": 14, "1": 18}}
    expected = sorted(((None if key is None else bytes(key), value.decode().upper().encode(),
                        [(k, None if v is None else bytes(v)) for k, v in headers])
                       for key, value, _t, _p, _o, _ts, _tt, headers in read), key=repr)
    written = _read_all(cluster, target, 3)
    assert sorted(((k, v, h) for _, k, v, h in written), key=repr) == expected  # other columns are not written
    for p, key, _, _ in written:
        if key is not None:
            assert p == partition_for_key(key, 3)  # where Kafka's default partitioner puts a key


def test_batch_write_needs_append_mode_as_python_data_sources_do(spark, cluster):
    """PySpark's Python data sources take only append and overwrite: a batch write that relied on
    Spark's default mode (ErrorIfExists) says so, and works with mode("append")."""
    target = new_topic(cluster)
    df = spark.createDataFrame([("k", "v", 1)], "key string, value string, extra int")
    writer = df.write.format(FORMAT).option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", target)
    with pytest.raises(Exception, match="(?i)append|overwrite|ErrorIfExists|error"):
        writer.save()
    writer.mode("append").save()
    assert [(k, v) for _, k, v, _ in _read_all(cluster, target, 2)] == [(b"k", b"v")]


# ----------------------------------------------------------- the timestamp options' edge cases

def _batch(spark, cluster, topic: str, **options):
    r = spark.read.format(FORMAT).option("kafka.bootstrap.servers", cluster.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return sorted((row.partition, row.offset) for row in r.load().select("partition", "offset").collect())


def test_timestamp_options_of_a_batch_read(spark, cluster):
    topic = new_topic(cluster, prefix=f"ts-{uuid.uuid4().hex[:4]}")
    produce(cluster, topic, 40)  # partition p: offsets 0..19, timestamps BASE + 2 * offset + p
    every = [(p, o) for p in (0, 1) for o in range(20)]
    assert _batch(spark, cluster, topic, startingTimestamp=str(BASE_TS_MS + 30)) == \
        [(p, o) for p, o in every if 2 * o + p >= 30]
    assert _batch(spark, cluster, topic, endingTimestamp=str(BASE_TS_MS + 10)) == \
        [(p, o) for p, o in every if 2 * o + p < 10]
    by_partition = json.dumps({topic: {"0": BASE_TS_MS + 4, "1": -2}})
    ends = json.dumps({topic: {"0": BASE_TS_MS + 8, "1": -1}})
    assert _batch(spark, cluster, topic, startingOffsetsByTimestamp=by_partition, endingOffsetsByTimestamp=ends) == \
        [(0, 2), (0, 3)] + [(1, o) for o in range(20)]
    # startingTimestamp takes precedence over startingOffsets, as in Spark
    assert _batch(spark, cluster, topic, startingTimestamp=str(BASE_TS_MS + 38), startingOffsets="earliest") == \
        [(0, 19), (1, 19)]
    late = str(BASE_TS_MS + 10_000)
    with pytest.raises(Exception, match=rf"startingTimestamp: {topic}-[01] has no record with a timestamp at or after"):
        _batch(spark, cluster, topic, startingTimestamp=late)
    assert _batch(spark, cluster, topic, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match=rf"startingOffsetsByTimestamp: no timestamp for {topic}-1"):
        _batch(spark, cluster, topic, startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_TS_MS}}))


def test_max_records_per_partition_splits_input_partitions(spark, cluster):
    topic = new_topic(cluster)
    produce(cluster, topic, 50)
    df = (spark.read.format(FORMAT).option("kafka.bootstrap.servers", cluster.bootstrap).option("subscribe", topic)
          .option("maxRecordsPerPartition", 10).load())
    assert df.rdd.getNumPartitions() == 6  # 25 records per topic partition: 3 pieces of at most 10 each
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(p, o) for p in (0, 1) for o in range(25)]
