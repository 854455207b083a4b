"""The anchor a Python source cannot join today: Spark's Real-Time Mode (``trigger(realTime=...)``,
JVM sources and sinks only) with Spark's own Kafka source and sink, against the same pipeline in
micro-batches, on one Apache Kafka 4.2 node, in one run.

Run:  .venv/bin/python bench/bench_rtm_anchor.py [--rate 1000] [--runs 2] [--seconds 20]

A producer process (bench/bench_latency.py's: acks=1, the records due every millisecond, each
record's value its send time) writes topic ``in`` (two partitions) at ``--rate`` records/s all
along.  One ``local[4]`` SparkSession (Spark's Kafka connector on ``spark.jars``) runs,
alternating, ``--runs`` queries of each mode copying ``in`` to ``out`` with
``format("kafka")`` on both ends, from ``latest``:

- **real-time**: ``trigger(realTime="5 seconds")``, output mode update;
- **micro-batch**: ``trigger(processingTime="0 seconds")``.

A confluent-kafka consumer reads ``out`` and takes, for each record, the time it got it minus
the send time in its value: p50, p99 and max over the records after ``--warmup`` seconds.
Printed: medians over the runs and the ratio real-time / micro-batch from the same run.
Figures go to bench/results/rtm_anchor.json.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_vs_kafka_broker import create_topic  # noqa: E402
from bench_vs_spark_kafka import session  # noqa: E402

log = logging.getLogger("bench.rtm_anchor")
PARTITIONS = 2
MODES = ("real-time", "micro-batch")


def measure(spark, bootstrap: str, src: str, mode: str, warmup: float, seconds: float, label: str) -> dict:
    from confluent_kafka import Consumer

    dst = f"{src}-out-{mode}-{int(time.time() * 1000)}"
    create_topic(bootstrap, dst, PARTITIONS)
    lat: list[float] = []
    first: list[float] = []
    stop = threading.Event()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": dst, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 5})
    c.subscribe([dst])
    t0 = time.time()

    def read() -> None:
        while not stop.is_set():
            for m in c.consume(1000, 0.05):
                if m.error() is None:
                    now = time.time()
                    if not first:
                        first.append(now - t0)
                    if now - t0 >= warmup:
                        lat.append(now - float(m.value()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ckpt = tempfile.mkdtemp(prefix="bench-rtm-ckpt-")
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
          .option("startingOffsets", "latest").load().selectExpr("value"))
    w = (df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("checkpointLocation", ckpt))
    if mode == "real-time":
        w = w.trigger(realTime="5 seconds").outputMode("update")
    else:
        w = w.trigger(processingTime="0 seconds")
    query = w.start()
    try:
        deadline = t0 + warmup + seconds
        while time.time() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"{label}: {query.exception()}")
            time.sleep(0.2)
    finally:
        query.stop()
        stop.set()
        reader.join(5)
        c.close()
    ms = sorted(x * 1000 for x in lat)
    if not ms:
        raise RuntimeError(f"{label}: no records after the warm-up")
    pick = lambda q: ms[min(len(ms) - 1, int(len(ms) * q / 100))]  # noqa: E731
    out = {"p50": pick(50), "p99": pick(99), "max": ms[-1], "records": len(ms),
           "first_s": first[0] if first else float("nan")}
    print(f"  {label}: p50 {out['p50']:.0f} ms, p99 {out['p99']:.0f} ms, max {out['max']:.0f} ms over "
          f"{out['records']:,} records; first record {out['first_s']:.2f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=1000, help="records per second")
    p.add_argument("--runs", type=int, default=2, help="measured queries per mode (alternating)")
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import pyspark
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars, spark_kafka_jars, spark_kafka_version

    from bench.bench_latency import start_producer

    print(f"pyspark {pyspark.__version__}, Spark's Kafka connector {spark_kafka_version()}", flush=True)
    got: dict[str, list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-rtm-") as tmp:
        tmp = Path(tmp)
        spark = session([str(j) for j in spark_kafka_jars()], tmp, master="local[4]")
        try:
            with ApacheKafkaCluster(tmp / "kafka", jars=kafka_jars()) as kafka:
                src = f"rtm-in-{int(time.time())}"
                create_topic(kafka.bootstrap, src, PARTITIONS)
                producer = start_producer(kafka.bootstrap, src, args.rate)
                try:
                    for run in range(args.runs):
                        for mode in (MODES if run % 2 == 0 else MODES[::-1]):
                            got[mode].append(measure(spark, kafka.bootstrap, src, mode, args.warmup, args.seconds,
                                                     f"{args.rate}/s {mode} run {run + 1}"))
                finally:
                    producer.kill()
                    producer.wait()
        finally:
            spark.stop()
    row: dict = {"rate": args.rate, "runs": args.runs}
    for key in ("p50", "p99", "max", "first_s"):
        for mode in MODES:
            row[f"{mode}_{key}"] = statistics.median(r[key] for r in got[mode])
        row[f"ratio_{key}"] = statistics.median(a[key] / b[key]
                                                for a, b in zip(got["real-time"], got["micro-batch"], strict=True))
    print(f"\nApache Kafka 4.2, {PARTITIONS} partitions, {args.rate:,} records/s, "
          f"format(\"kafka\") to format(\"kafka\"), local[4]; medians of {args.runs}; ratio = real-time / micro-batch")
    print("| mode | p50 (ms) | p99 (ms) | first record (s) |")
    print("|---|---:|---:|---:|")
    for mode in MODES:
        print(f"| {mode} | {row[f'{mode}_p50']:.0f} | {row[f'{mode}_p99']:.0f} | {row[f'{mode}_first_s']:.2f} |")
    print(f"| ratio | {row['ratio_p50']:.2f} | {row['ratio_p99']:.2f} | {row['ratio_first_s']:.2f} |")
    import figures

    figures.write("rtm_anchor", {"spark_kafka": spark_kafka_version(), "row": row, "real_time_runs": got["real-time"],
                                 "micro_batch_runs": got["micro-batch"]}, label=f"{args.rate}/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
