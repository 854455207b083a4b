"""Produce-to-``foreachBatch`` latency: Spark's own Kafka source (``format("kafka")``) against
``format("coordkafka")``, on Apache Kafka 4.2 and on our broker, in one run.

Run:  .venv/bin/python bench/bench_vs_spark_kafka_latency.py [--rates 1000,10000] [--runs 3] [--targets kafka,ours]

For each target (one Apache Kafka node in KRaft mode, run from its jars as tests/peers/apache_kafka.py
starts it; one of our brokers) and each rate, a producer process (bench/bench_latency.py's: acks=1,
the records due every millisecond, each record's value its send time) writes a two-partition topic
all along, and one ``local[2]`` SparkSession (Spark's Kafka connector on ``spark.jars``, resolved
from Maven Central by tests/peers/maven.py) runs, alternating, ``--runs`` queries of each source:
``readStream`` from ``latest`` with ``trigger(processingTime="0 seconds")`` into ``foreachBatch``,
which takes for each record the time after its batch's collect minus the time in its value
(bench_latency.measure: p50, p99 and max over the records after ``--warmup`` seconds; and the time
from ``start()`` to the first record).  Both sources get the same options (``subscribe``,
``startingOffsets=latest``; no group, as Spark's Kafka source has none).  Printed: medians over the
runs and the ratio coordkafka / Spark's Kafka source from the same run (machines here are shared
and noisy: read the ratios).  Figures go to bench/results/vs_spark_kafka_latency.json.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_vs_kafka_broker import create_topic  # noqa: E402
from bench_vs_spark_kafka import session  # noqa: E402

log = logging.getLogger("bench.vs_spark_kafka_latency")
PARTITIONS = 2
SOURCES = ("kafka", "coordkafka")


def stream(spark, source: str, bootstrap: str, topic: str):
    return (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "latest").load())


def run_target(spark, target: str, bootstrap: str, args) -> list[dict]:
    from bench.bench_latency import measure, start_producer

    rows = []
    for rate in args.rates:
        topic = f"lat-{target}-{rate}-{int(time.time())}"
        create_topic(bootstrap, topic, PARTITIONS)
        producer = start_producer(bootstrap, topic, rate)
        got: dict[str, list[dict]] = {s: [] for s in SOURCES}
        try:
            for source in SOURCES:  # unmeasured: Spark's JVM, its Python workers, the connector's classes
                measure(spark, stream(spark, source, bootstrap, topic), f"{target} {rate}/s {source} warm-up",
                        5, 3, required=False)
            for run in range(args.runs):
                for source in (SOURCES if run % 2 == 0 else SOURCES[::-1]):
                    label = f"{target} {rate}/s {source} run {run + 1}"
                    got[source].append(measure(spark, stream(spark, source, bootstrap, topic), label,
                                               args.warmup, args.seconds))
                    r = got[source][-1]
                    print(f"  {label}: p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms, first record "
                          f"{r['first_s']:.2f} s, {r['batches']} batches", flush=True)
        finally:
            producer.kill()
            producer.wait()
        row: dict = {"target": target, "rate": rate, "runs": args.runs}
        for key in ("p50", "p99", "max", "first_s"):
            for source in SOURCES:
                row[f"{source}_{key}"] = statistics.median(r[key] for r in got[source])
            row[f"ratio_{key}"] = statistics.median(c[key] / k[key]
                                                    for c, k in zip(got["coordkafka"], got["kafka"], strict=True))
        row["kafka_runs"], row["coordkafka_runs"] = got["kafka"], got["coordkafka"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="1000,10000", help="records per second, comma-separated")
    p.add_argument("--runs", type=int, default=3, help="measured queries per source, target and rate (alternating)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of each query before latencies count")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of each query after the warm-up")
    p.add_argument("--targets", default="kafka,ours", help="kafka (Apache Kafka 4.2), ours, or both")
    args = p.parse_args(argv)
    args.rates = [int(r) for r in args.rates.split(",") if r]
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars, spark_kafka_jars, spark_kafka_version

    from spark_coord.cluster import LocalCluster

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    import pyspark

    print(f"pyspark {pyspark.__version__}, Spark's Kafka connector {spark_kafka_version()}", flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-spark-kafka-latency-") as tmp:
        tmp = Path(tmp)
        spark = session([str(j) for j in spark_kafka_jars()], tmp)
        try:
            if "kafka" in targets:
                with ApacheKafkaCluster(tmp / "kafka", jars=kafka_jars()) as kafka:
                    rows += run_target(spark, "kafka", kafka.bootstrap, args)
            if "ours" in targets:
                with LocalCluster(1, tmp / "ours") as ours:
                    rows += run_target(spark, "ours", ours.bootstrap, args)
        finally:
            spark.stop()
    print(f"\nlocal[2], {PARTITIONS} partitions, trigger processingTime 0, {args.runs} queries per source, "
          f"{args.warmup:.0f} s warm-up + {args.seconds:.0f} s each; medians; ratio = coordkafka / format(\"kafka\")")
    print("| broker | rate | p50 kafka / coordkafka (ms) | ratio | p99 kafka / coordkafka (ms) | ratio "
          "| first record kafka / coordkafka (s) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        broker = "Apache Kafka 4.2" if r["target"] == "kafka" else "ours"
        print(f"| {broker} | {r['rate']:,}/s | {r['kafka_p50']:.0f} / {r['coordkafka_p50']:.0f} | {r['ratio_p50']:.2f} "
              f"| {r['kafka_p99']:.0f} / {r['coordkafka_p99']:.0f} | {r['ratio_p99']:.2f} "
              f"| {r['kafka_first_s']:.2f} / {r['coordkafka_first_s']:.2f} | {r['ratio_first_s']:.2f} |")
    import figures

    figures.write("vs_spark_kafka_latency", {"runs": args.runs, "warmup_s": args.warmup, "seconds": args.seconds,
                                             "spark_kafka": spark_kafka_version(), "rows": rows},
                  label=args.targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
