"""Spark reading a share group against the same query reading the topic as a consumer group, same run.

Run:  .venv/bin/python bench/bench_spark_share.py [--records 400000] [--partitions 2] [--runs 3]
                                                  [--locks 2000,10000,200000] [--parallelism N] [--master local[2]]

Set-up: an embedded ZooKeeper and one broker on loopback per ``--locks`` value (the broker's
``group.share.partition.max.record.locks``: Kafka's default 2000 -- its range is 100 to 10,000 --
bounds how many records of a partition a share group has in flight, so it bounds a micro-batch);
one topic of ``--partitions`` partitions holding ``--records`` records of ``--size`` bytes,
produced before anything is measured.  One local SparkSession (``--master``) runs, ``--runs``
times and interleaved, two queries into the ``noop`` sink with ``trigger(processingTime="0 seconds")``,
each until it has read every record:

* **consumer group**: ``format("coordkafka")`` with ``group.id`` (a fresh group each run) and
  ``startingOffsets=earliest``;
* **share group**: the same with ``kafka.share.group.id`` (a fresh share group each run, its
  ``share.auto.offset.reset`` set to earliest), and ``kafka.share.parallelism=--parallelism`` when given
  (by default one task per partition, as the consumer group query has).

Figures: rows/s = records / (the sum of ``triggerExecution`` of the micro-batches that read rows),
so the query's start (Spark's planning, the group join) is left out of both; "wall" is records /
(query start to the last row), start included.  Medians over the runs; the ratio is taken within
each run, share over consumer group.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

log = logging.getLogger("bench_spark_share")
TOPIC = "bench-share-spark"


def produce(bootstrap: str, n: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000})
    value = b"x" * size
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, value=value, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def set_earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answers are in
    for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        f.result(timeout=30)


def timed(spark, df, label: str, records: int, timeout: float = 600) -> dict:
    ckpt = tempfile.mkdtemp(prefix="bench-share-ckpt-")
    t0 = time.perf_counter()
    query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
             .trigger(processingTime="0 seconds").start())
    try:
        rows = 0
        while rows < records:
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{label}: {rows} of {records} rows after {timeout} s")
            if query.exception() is not None:
                raise RuntimeError(f"{label}: {query.exception()}")
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    if rows != records:
        raise RuntimeError(f"{label}: read {rows} rows, expected {records}")
    busy = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    steps = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in progress[0]["durationMs"]}
    out = {"rows_per_s": records / busy, "wall_rows_per_s": records / wall, "batches": len(progress),
           "rows_per_batch": records / len(progress), "batch_ms": steps}
    log.info("%s: %d rows in %d batches, %.2f s busy, %.2f s wall; median ms per batch %s", label, records,
             len(progress), busy, wall, steps)
    return out


def run_locks(spark, args, locks: int, tmp: Path) -> list[dict]:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.embedded import EmbeddedZooKeeper

    zk = EmbeddedZooKeeper(data_dir=tmp / f"zk-{locks}")
    zk.start(timeout=60)
    try:
        with LocalCluster(1, tmp / f"cluster-{locks}", zk_connect=zk.connect_string,
                          overrides={"group.share.partition.max.record.locks": locks}) as cluster:
            bootstrap = cluster.bootstrap
            with ClusterClient(bootstrap) as c:
                deadline = time.time() + 30
                while True:
                    try:
                        AdminClient(c).create_topic(TOPIC, args.partitions)
                        break
                    except Exception:  # noqa: BLE001 -- a new cluster may not list its broker yet
                        if time.time() > deadline:
                            raise
                        time.sleep(0.3)
            produce(bootstrap, args.records, args.size, args.partitions)
            runs = []
            for i in range(args.runs):
                group = f"bench-g-{uuid.uuid4().hex[:6]}"
                share = f"bench-s-{uuid.uuid4().hex[:6]}"
                set_earliest(bootstrap, share)
                def base():  # a fresh reader each time: DataStreamReader.option changes the reader it is called on
                    return (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
                            .option("subscribe", TOPIC))
                g = timed(spark, base().option("group.id", group).option("startingOffsets", "earliest").load(),
                          f"locks {locks} run {i}: consumer group", args.records)
                reader = base().option("kafka.share.group.id", share)
                if args.parallelism:
                    reader = reader.option("kafka.share.parallelism", args.parallelism)
                s = timed(spark, reader.load(),
                          f"locks {locks} run {i}: share group", args.records)
                runs.append({"locks": locks, "group": g, "share": s,
                             "ratio": s["rows_per_s"] / g["rows_per_s"],
                             "wall_ratio": s["wall_rows_per_s"] / g["wall_rows_per_s"]})
            return runs
    finally:
        zk.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--size", type=int, default=100, help="value bytes per record")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--locks", default="2000,10000,200000",
                   help="group.share.partition.max.record.locks values, one cluster each (comma-separated)")
    p.add_argument("--parallelism", type=int, help="kafka.share.parallelism (default: not set, one task per "
                                                    "partition, as the consumer group query has)")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    root = Path(__file__).resolve().parents[1]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root)] + [x for x in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if x])
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("bench-coordkafka-share")
             .config("spark.ui.enabled", "false")
             # every micro-batch's progress is kept (Spark keeps 100): the figures sum them all
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="spark-coord-bench-spark-share-") as tmp:
            for locks in [int(x) for x in args.locks.split(",")]:
                results.extend(run_locks(spark, args, locks, Path(tmp)))
    finally:
        spark.stop()
    load = os.getloadavg()[0]
    print(f"\n{args.records:,} records of {args.size} B on {args.partitions} partitions, {args.master}, "
          f"kafka.share.parallelism {args.parallelism or 'not set'}, {args.runs} runs per locks value (medians); "
          f"load average {load:.2f} at the end")
    print(f"{'max.record.locks':>17}{'group rows/s':>14}{'share rows/s':>14}{'share/group':>13}"
          f"{'rows/batch g':>14}{'rows/batch s':>14}{'wall s/g':>10}")
    summary = []
    for locks in sorted({r["locks"] for r in results}):
        rs = [r for r in results if r["locks"] == locks]

        def med(f, rs=rs):
            return statistics.median(f(r) for r in rs)
        row = {"locks": locks, "group": med(lambda r: r["group"]["rows_per_s"]),
               "share": med(lambda r: r["share"]["rows_per_s"]), "ratio": med(lambda r: r["ratio"]),
               "group_batch": med(lambda r: r["group"]["rows_per_batch"]),
               "share_batch": med(lambda r: r["share"]["rows_per_batch"]), "wall_ratio": med(lambda r: r["wall_ratio"]),
               "ratios": [round(r["ratio"], 2) for r in rs]}
        summary.append(row)
        print(f"{locks:>17,}{row['group']:>14,.0f}{row['share']:>14,.0f}{row['ratio']:>13.2f}"
              f"{row['group_batch']:>14,.0f}{row['share_batch']:>14,.0f}{row['wall_ratio']:>10.2f}")
    for row in summary:
        print(f"  locks {row['locks']:,}: share/group per run {row['ratios']}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import figures

    figures.write("spark_share", {"rows": summary, "records": args.records, "partitions": args.partitions,
                                  "parallelism": args.parallelism, "master": args.master},
                  label=f"{args.records} records, {args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
