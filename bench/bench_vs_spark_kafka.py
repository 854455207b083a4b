"""Spark reading one topic: Spark's own Kafka source (``format("kafka")``) against
``format("coordkafka")``, on Apache Kafka 4.2 and on our broker, in one run.

Run:  .venv/bin/python bench/bench_vs_spark_kafka.py [--shapes abcd] [--runs 3] [--targets kafka,ours]

For each target (one Apache Kafka node in KRaft mode, run from its jars as
tests/peers/apache_kafka.py starts it; one of our brokers) and each record shape of
bench/bench_spark_source.py (a: 100-byte values, b: JSON values and lz4, c: zstd, d: b with
headers), it fills a four-partition topic, then in one ``local[2]`` SparkSession (Spark's Kafka
connector on ``spark.jars``, resolved from Maven Central by tests/peers/maven.py) reads it
``--runs`` times with each source, interleaved:

- **stream**: ``readStream`` from earliest into the ``noop`` sink with ``Trigger.AvailableNow``;
- **batch**: ``read`` from earliest to latest into the ``noop`` sink.

Both sources get the same options (``subscribe``, ``startingOffsets``, ``includeHeaders`` for
d).  Prints the first (cold) query and the median of the later (warm) ones, in rows per second,
and the ratio coordkafka / Spark's Kafka source from the same run (machines here are shared
and noisy: read the ratios).  Figures go to bench/results/vs_spark_kafka.json.

Spark's Kafka connector is the newest Maven Central serves for the installed pyspark's
version line (``SPARK_COORD_SPARK_KAFKA_VERSION`` overrides; the run prints which).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_spark_source as bss  # noqa: E402
from bench_vs_kafka_broker import create_topic  # noqa: E402

log = logging.getLogger("bench.vs_spark_kafka")
PARTITIONS = 4


def session(jars: list[str], workdir: Path, master: str = "local[2]"):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + paths)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("bench-vs-spark-kafka")
             .config("spark.jars", ",".join(jars))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
             .config("spark.python.daemon.module", "pyspark_coordkafka.daemon")
             .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def reader(spark, source: str, bootstrap: str, topic: str, shape, batch: bool):
    r = spark.read if batch else spark.readStream
    r = (r.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    if batch:
        r = r.option("endingOffsets", "latest")
    if shape.headers:
        r = r.option("includeHeaders", "true")
    return r.load()


def run_target(spark, target: str, bootstrap: str, shapes: str, args) -> list[dict]:
    rows = []
    for letter in shapes:
        shape = bss.SHAPES[letter]
        records = args.records if letter == "a" else args.records_json
        topic = f"vs-{target}-{letter}-{int(time.time())}"
        create_topic(bootstrap, topic, PARTITIONS)
        seconds = bss.produce(bootstrap, topic, shape, records, args.size)
        print(f"{target} {letter}: {records:,} records produced in {seconds:.1f} s", flush=True)
        for mode in ("stream", "batch"):
            rates: dict[str, list[float]] = {"kafka": [], "coordkafka": []}
            for run in range(args.runs):
                order = ["kafka", "coordkafka"] if run % 2 == 0 else ["coordkafka", "kafka"]
                for source in order:
                    df = reader(spark, source, bootstrap, topic, shape, batch=mode == "batch")
                    label = f"{target} {letter} {mode} {source} run {run}"
                    timed = bss.timed_batch if mode == "batch" else bss.timed_query
                    rate, _ = timed(spark, df, label, records)
                    rates[source].append(rate)
                    print(f"  {label}: {rate:,.0f} rows/s", flush=True)
            warm = {s: statistics.median(r[1:] or r) for s, r in rates.items()}
            rows.append({"target": target, "shape": letter, "mode": mode, "records": records,
                         "kafka_cold": rates["kafka"][0], "coordkafka_cold": rates["coordkafka"][0],
                         "kafka_warm": warm["kafka"], "coordkafka_warm": warm["coordkafka"],
                         "ratio": warm["coordkafka"] / warm["kafka"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="abcd")
    p.add_argument("--records", type=int, default=2_000_000, help="records of shape a")
    p.add_argument("--records-json", type=int, default=500_000, help="records of shapes b, c and d")
    p.add_argument("--size", type=int, default=100, help="value bytes of shape a")
    p.add_argument("--runs", type=int, default=3, help="queries per source, shape and mode (the first is cold)")
    p.add_argument("--targets", default="kafka,ours", help="kafka (Apache Kafka 4.2), ours, or both")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars, spark_kafka_jars, spark_kafka_version

    from spark_coord.cluster import LocalCluster

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    jars = [str(j) for j in spark_kafka_jars()]
    import pyspark

    print(f"pyspark {pyspark.__version__}, Spark's Kafka connector {spark_kafka_version()}", flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-spark-kafka-") as tmp:
        tmp = Path(tmp)
        spark = session(jars, tmp)
        try:
            if "kafka" in targets:
                with ApacheKafkaCluster(tmp / "kafka", jars=kafka_jars()) as kafka:
                    rows += run_target(spark, "kafka", kafka.bootstrap, args.shapes, args)
            if "ours" in targets:
                with LocalCluster(1, tmp / "ours") as ours:
                    rows += run_target(spark, "ours", ours.bootstrap, args.shapes, args)
        finally:
            spark.stop()
    print()
    print("| broker | shape | mode | format(\"kafka\") rows/s | format(\"coordkafka\") rows/s | ratio "
          "| cold: kafka / coordkafka |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        broker = "Apache Kafka 4.2" if r["target"] == "kafka" else "ours"
        print(f"| {broker} | {r['shape']} | {r['mode']} | {r['kafka_warm']:,.0f} | {r['coordkafka_warm']:,.0f} | "
              f"{r['ratio']:.2f} | {r['kafka_cold']:,.0f} / {r['coordkafka_cold']:,.0f} |")
    import figures

    figures.write("vs_spark_kafka", {"runs": args.runs, "spark_kafka": spark_kafka_version(), "rows": rows},
                  label=args.targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
