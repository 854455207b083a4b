"""Throughput of the coordkafka Spark source against a confluent-kafka consumer on the same data.

Produces ``--records`` records of ``--size`` bytes (default 5,000,000 x 100 B) into a
fresh topic of a local one-broker cluster (kcat when it is on PATH, else our
Producer), then in the same run:

1. Spark: ``readStream.format("coordkafka")`` from earliest into the ``noop`` sink
   with ``Trigger.AvailableNow`` -- rows per second of the whole query (start to
   termination), ``--runs`` times on fresh checkpoints in one SparkSession.  The
   first run pays for a cold JVM (class loading, JIT) and for starting Spark's
   Python workers; later runs show the source's steady rate.  Both are printed,
   with the CPU seconds of the JVM and of Spark's Python workers (Linux) so a slow
   figure can be told apart from a busy machine;
2. confluent-kafka: a ``Consumer`` assigned the same partitions from offset 0,
   building one pyarrow table (key, value, partition, offset, timestamp) per
   partition as it consumes -- rows per second until every record is in.

Prints the rates and their ratios.  Run it with the project's environment:

    ./spark-submit.sh bench/bench_spark_source.py
    ./spark-submit.sh bench/bench_spark_source.py --records 1000000 --partitions 4
    ./spark-submit.sh bench/bench_spark_source.py --option minPartitions=8   # 2 tasks per core
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


def spark_rates(bootstrap: str, topic: str, records: int, runs: int, options: dict[str, str]
                ) -> list[tuple[float, dict[str, float]]]:
    """(rows/s, CPU seconds by process kind) of each of ``runs`` AvailableNow queries over the topic,
    with extra source ``options`` (e.g. minPartitions)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("bench-coordkafka").getOrCreate()
    out = []
    try:
        for run in range(runs):
            ckpt = tempfile.mkdtemp(prefix="bench-ckpt-")
            try:
                reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", bootstrap)
                          .option("subscribe", topic).option("startingOffsets", "earliest"))
                for key, value in options.items():
                    reader = reader.option(key, value)
                df = reader.load()
                cpu0 = tree_cpu()
                t0 = time.perf_counter()
                query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                         .trigger(availableNow=True).start())
                query.awaitTermination()
                elapsed = time.perf_counter() - t0
                cpu1 = tree_cpu()
                rows = sum(p["numInputRows"] for p in query.recentProgress)
                if rows != records:
                    raise RuntimeError(f"Spark read {rows} rows, expected {records}")
                cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
                log.info("Spark run %d: %d rows in %.1f s; CPU s %s; batches %s", run + 1, rows, elapsed,
                         {k: round(v, 1) for k, v in cpu.items()},
                         [p["durationMs"] for p in query.recentProgress if p["numInputRows"]])
                out.append((rows / elapsed, cpu))
            finally:
                shutil.rmtree(ckpt, ignore_errors=True)
        return out
    finally:
        spark.stop()


def tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system) so far of the processes under this one's parent, by kind: the
    JVM that spark-submit started (this driver's parent), Spark's Python workers, the rest.  Empty
    where there is no /proc."""
    if not os.path.isdir("/proc"):
        return {}
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[list[str], str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        stats[int(name)] = (fields, cmd)
        children.setdefault(int(fields[1]), []).append(int(name))
    tick = os.sysconf("SC_CLK_TCK")
    todo, out = [os.getppid()], {}
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if pid not in stats:
            continue
        fields, cmd = stats[pid]
        kind = ("jvm" if "java" in cmd.split(" ", 1)[0] else "python workers" if "pyspark" in cmd
                else "driver" if pid == os.getpid() else "cluster" if "spark_coord" in cmd else "other")
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


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
    p.add_argument("--runs", type=int, default=2, help="Spark queries in one session (the first one is cold)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra coordkafka source option, e.g. minPartitions=8 (repeatable)")
    args = p.parse_args(argv)
    options = dict(o.split("=", 1) for o in args.option if "=" in o)
    if len(options) != len(args.option):
        p.error("--option takes KEY=VALUE")
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
        spark = spark_rates(bootstrap, topic, args.records, max(1, args.runs), options)
        confluent = confluent_rate(bootstrap, topic, args.records, args.partitions)
    cold, warm = spark[0][0], max(r for r, _ in spark[1:]) if len(spark) > 1 else None
    print(f"records: {args.records:,} x {args.size} B in {args.partitions} partitions; source options {options}")
    print(f"coordkafka -> Spark noop (AvailableNow), first query: {cold:,.0f} rows/s")
    if warm is not None:
        print(f"coordkafka -> Spark noop (AvailableNow), warm (best of {len(spark) - 1}): {warm:,.0f} rows/s")
    print(f"confluent-kafka Consumer -> pyarrow:                 {confluent:,.0f} rows/s")
    print(f"ratio coordkafka / confluent-kafka, first query:     {cold / confluent:.2f}")
    if warm is not None:
        print(f"ratio coordkafka / confluent-kafka, warm:            {warm / confluent:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
