"""Throughput of the coordkafka Spark source against a confluent-kafka consumer on the same data.

Produces ``--records`` records of ``--size`` bytes (default 5,000,000 x 100 B) into a
fresh topic of a local one-broker cluster (kcat when it is on PATH, else our
Producer), then in the same run:

1. Spark: ``readStream.format("coordkafka")`` from earliest into the ``noop`` sink
   with ``Trigger.AvailableNow`` -- rows per second of the whole query;
2. confluent-kafka: a ``Consumer`` assigned the same partitions from offset 0,
   building one pyarrow table (key, value, partition, offset, timestamp) per
   partition as it consumes -- rows per second until every record is in.

Prints both rates and their ratio.  Run it with the project's environment:

    ./spark-submit.sh bench/bench_spark_source.py
    ./spark-submit.sh bench/bench_spark_source.py --records 1000000 --partitions 4
    .venv/bin/python bench/bench_spark_source.py --bootstrap 127.0.0.1:9092   # a running cluster
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "jobs"))

log = logging.getLogger("bench.spark_source")


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Fill ``topic``; returns seconds taken."""
    t0 = time.perf_counter()
    kcat = shutil.which("kcat")
    value = b"x" * (size - 1) + b"\n"
    if kcat:
        proc = subprocess.Popen([kcat, "-P", "-b", bootstrap, "-t", topic, "-z", "none", "-X", "linger.ms=50",
                                 "-X", "batch.size=1000000"], stdin=subprocess.PIPE)
        chunk = value * 10000
        for _ in range(records // 10000):
            proc.stdin.write(chunk)
        proc.stdin.write(value * (records % 10000))
        proc.stdin.close()
        if proc.wait() != 0:
            raise RuntimeError("kcat failed")
    else:
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.client.producer import Producer

        with ClusterClient(bootstrap) as cc:
            producer = Producer(cc, acks=1, batch_size=512 * 1024)
            body = value[:-1]
            for i in range(records):
                producer.send(topic, body, partition=i % partitions)
            producer.flush()
    return time.perf_counter() - t0


def spark_rate(bootstrap: str, topic: str, records: int) -> float:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("bench-coordkafka").getOrCreate()
    ckpt = tempfile.mkdtemp(prefix="bench-ckpt-")
    try:
        df = (spark.readStream.format("coordkafka").option("bootstrap.brokers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
        t0 = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if rows != records:
            raise RuntimeError(f"Spark read {rows} rows, expected {records}")
        return rows / elapsed
    finally:
        spark.stop()
        shutil.rmtree(ckpt, ignore_errors=True)


def confluent_rate(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 8388608, "queued.max.messages.kbytes": 262144})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    cols = {p: ([], [], [], []) for p in range(partitions)}
    tables = []
    seen = 0
    t0 = time.perf_counter()
    try:
        while seen < records:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error():
                    continue
                keys, values, offsets, stamps = cols[msg.partition()]
                keys.append(msg.key())
                values.append(msg.value())
                offsets.append(msg.offset())
                stamps.append(msg.timestamp()[1])
                seen += 1
                if len(values) >= 65536:
                    tables.append(_table(pa, msg.partition(), cols[msg.partition()]))
                    cols[msg.partition()] = ([], [], [], [])
        for p, c in cols.items():
            if c[1]:
                tables.append(_table(pa, p, c))
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
    assert sum(t.num_rows for t in tables) == records
    return records / elapsed


def _table(pa, partition: int, cols):
    keys, values, offsets, stamps = cols
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                     "partition": pa.repeat(pa.scalar(partition, pa.int32()), len(values)),
                     "offset": pa.array(offsets, pa.int64()),
                     "timestamp": pa.array(stamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=5_000_000)
    p.add_argument("--size", type=int, default=100, help="value bytes per record")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--bootstrap", help="a running cluster (default: start a local one)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from clicks import cluster_or

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with cluster_or(args.bootstrap, partitions=args.partitions) as bootstrap:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        with ClusterClient(bootstrap) as cc:
            AdminClient(cc).create_topic(topic, args.partitions)
        secs = produce(bootstrap, topic, args.records, args.size, args.partitions)
        log.info("produced %d x %d B in %.1f s (%s)", args.records, args.size, secs,
                 "kcat" if shutil.which("kcat") else "spark_coord Producer")
        spark = spark_rate(bootstrap, topic, args.records)
        confluent = confluent_rate(bootstrap, topic, args.records, args.partitions)
    print(f"coordkafka -> Spark noop (AvailableNow): {spark:,.0f} rows/s")
    print(f"confluent-kafka Consumer -> pyarrow:     {confluent:,.0f} rows/s")
    print(f"ratio coordkafka / confluent-kafka:       {spark / confluent:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
