"""Streaming throughput of the exactly-once coordkafka sink against the idempotent sink, in one run.

Run:  .venv/bin/python bench/bench_eos_sink.py [--records 1000000] [--per-batch 200000 20000] [--runs 3]

One broker process of ours with its ZooKeeper (``cluster.LocalCluster``).  Topic A (``--partitions``,
default 2) is filled with ``--records`` records (16-byte keys, 100-byte values) before any clock starts.
A streaming query in this process (``local[2]``) reads A from the earliest offset with Trigger.AvailableNow
and ``maxOffsetsPerTrigger`` ``--per-batch`` and writes a fresh topic (as many partitions) through
``format("coordkafka")``, alternately

- **idempotent**: the sink's default (producer id and sequence numbers in every batch, acks=all);
- **exactly once**: the same with ``kafka.transactional.id.prefix`` (one transaction per micro-batch per
  task: ``--partitions`` tasks a batch, each InitProducerId, OffsetFetch, AddPartitionsToTxn,
  AddOffsetsToTxn, TxnOffsetCommit, and the driver's EndTxn of each);

each ``--runs`` times per batch size, from a fresh checkpoint.  A figure is the input records over the
time from ``start()`` to the query's end; the output is counted (read_uncommitted: the end offsets, every
transaction being committed by then) and must equal the input.  Spark's progress reports give each
batch's ``addBatch`` (the tasks' read and write and the sink's commit) and ``triggerExecution``; their
medians show where the transactional run's extra time goes.  Prints rows/s medians and the median of
the per-run ratios exactly once / idempotent; ``--figures NAME`` records them in bench/results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def make_topic(bootstrap: str, name: str, partitions: int) -> str:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(name, partitions)
        cc.topic(name, refresh=True, wait=30)
    return name


def fill(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    pad = b"x" * 88
    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc, acks=-1, batch_size=262144)
        for i in range(records):
            producer.send(topic, b"%012d" % i + pad, key=b"%016d" % i, partition=i % partitions)
        producer.flush()


def end_offsets(bootstrap: str, topic: str) -> int:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return sum(AdminClient(cc).list_offsets(topic, None, LATEST).values())


def one_run(spark, bootstrap: str, source: str, args, per_batch: int, transactional: bool, work: Path) -> dict:
    """One availableNow query A -> a fresh topic; its rate and the medians of its batches' durations."""
    tag = uuid.uuid4().hex[:8]
    out = make_topic(bootstrap, f"eos-bench-{tag}", args.partitions)
    df = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(per_batch)).load().selectExpr("key", "value"))
    writer = (df.writeStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", out).option("checkpointLocation", str(work / f"checkpoint-{tag}")))
    if transactional:
        writer = writer.option("kafka.transactional.id.prefix", f"eos-bench-{tag}")
    t0 = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.perf_counter() - t0
    progress = [p for p in query.recentProgress if p.numInputRows]
    got = end_offsets(bootstrap, out)
    # the exactly-once run's log also holds a commit marker per transaction (one offset each)
    rows = sum(p.numInputRows for p in progress)
    if rows != args.records or got < args.records:
        raise RuntimeError(f"{out}: {rows} rows read, {got} offsets written, expected {args.records}")
    return {"rows_per_s": args.records / elapsed, "seconds": elapsed, "batches": len(progress),
            "add_batch_ms": statistics.median(p.durationMs.get("addBatch", 0) for p in progress),
            "trigger_ms": statistics.median(p.durationMs.get("triggerExecution", 0) for p in progress),
            "offsets_written": got}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=2, help="of the input and output topics: tasks per batch")
    p.add_argument("--per-batch", type=int, nargs="+", default=[200_000, 20_000], help="maxOffsetsPerTrigger")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--figures", metavar="NAME", help="record the figures as bench/results/NAME.json")
    args = p.parse_args(argv)
    import logging

    from pyspark.sql import SparkSession

    from spark_coord.cluster import LocalCluster

    logging.basicConfig(level=logging.WARNING)
    # the workers import spark_coord, and Spark finds the coordkafka source on their path (as ./spark-submit.sh)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [x for x in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if x and x != str(ROOT)])
    load_start = os.getloadavg()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-eos-sink-") as tmp, LocalCluster(1, Path(tmp) / "cluster") as cl:
        bootstrap = cl.bootstrap
        source = make_topic(bootstrap, f"eos-bench-in-{uuid.uuid4().hex[:6]}", args.partitions)
        fill(bootstrap, source, args.records, args.partitions)
        spark = (SparkSession.builder.master(f"local[{args.partitions}]").appName("bench-eos-sink")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(args.partitions))
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            one_run(spark, bootstrap, source, args, args.per_batch[0], False, Path(tmp))  # warm-up, not counted
            for per_batch in args.per_batch:
                runs: dict[str, list[dict]] = {"idempotent": [], "exactly_once": []}
                for i in range(args.runs):
                    order = [False, True] if i % 2 == 0 else [True, False]
                    for transactional in order:
                        r = one_run(spark, bootstrap, source, args, per_batch, transactional, Path(tmp))
                        runs["exactly_once" if transactional else "idempotent"].append(r)
                        print(f"per batch {per_batch:,}, {'exactly once' if transactional else 'idempotent'}: "
                              f"{r['rows_per_s']:,.0f} rows/s, {r['batches']} batches, addBatch median "
                              f"{r['add_batch_ms']} ms, trigger median {r['trigger_ms']} ms", flush=True)
                ratios = [e["rows_per_s"] / d["rows_per_s"]
                          for e, d in zip(runs["exactly_once"], runs["idempotent"], strict=True)]
                results[str(per_batch)] = {
                    "tasks_per_batch": args.partitions, "rows_per_task_transaction": per_batch // args.partitions,
                    "idempotent_rows_per_s": statistics.median(r["rows_per_s"] for r in runs["idempotent"]),
                    "exactly_once_rows_per_s": statistics.median(r["rows_per_s"] for r in runs["exactly_once"]),
                    "ratio": statistics.median(ratios), "ratios": [round(x, 3) for x in ratios],
                    "idempotent_add_batch_ms": statistics.median(r["add_batch_ms"] for r in runs["idempotent"]),
                    "exactly_once_add_batch_ms": statistics.median(r["add_batch_ms"] for r in runs["exactly_once"]),
                    "idempotent_trigger_ms": statistics.median(r["trigger_ms"] for r in runs["idempotent"]),
                    "exactly_once_trigger_ms": statistics.median(r["trigger_ms"] for r in runs["exactly_once"]),
                    "batches": runs["idempotent"][0]["batches"]}
        finally:
            spark.stop()
    load_end = os.getloadavg()
    print(f"\n{args.records:,} records (16-byte keys, 100-byte values), {args.partitions} partitions = tasks per "
          f"batch, {args.runs} runs alternating; load average {load_start[0]:.2f} -> {load_end[0]:.2f}")
    print("| rows per batch (per task transaction) | batches | idempotent rows/s | exactly once rows/s | ratio "
          "(runs) | addBatch ms median, idempotent / exactly once |")
    print("|---:|---:|---:|---:|---:|---:|")
    for per_batch, r in results.items():
        print(f"| {int(per_batch):,} ({r['rows_per_task_transaction']:,}) | {r['batches']} | "
              f"{r['idempotent_rows_per_s']:,.0f} | {r['exactly_once_rows_per_s']:,.0f} | {r['ratio']:.2f} "
              f"({', '.join(f'{x:.2f}' for x in r['ratios'])}) | {r['idempotent_add_batch_ms']:.0f} / "
              f"{r['exactly_once_add_batch_ms']:.0f} |")
    if args.figures:
        import figures

        figures.write(args.figures, {"records": args.records, "partitions": args.partitions, "runs": args.runs,
                                     "load_average": [round(load_start[0], 2), round(load_end[0], 2)],
                                     "by_rows_per_batch": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
