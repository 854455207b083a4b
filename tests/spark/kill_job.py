"""A streaming query that tests/spark/test_spark_kill.py runs as its own process and kills.

It reads one topic through ``coordkafka`` (optionally as a member of ``--group``, or of the
share group ``--share-group``; rows then carry ``deliveryCount`` and the number of the task that read
them, written as a fourth and fifth field)
with a checkpoint, slows every row down with a Python UDF (so a batch lasts long
enough to be caught in the middle), and writes into an idempotent sink:

- ``--sink parquet``: Spark's file sink; its ``_spark_metadata`` log makes it
  exactly-once (files of a batch that never committed are not part of the table).
- ``--sink files``: ``foreachBatch`` writing ``<out>/<batch id>.json`` through a
  temporary file and a rename, so a replayed batch replaces its own file.  With
  ``--hold-after-batch N`` it touches ``<marker-dir>/written-N`` once batch N's file
  is in place and then never returns, so the test can kill the query after the
  sink has the batch and before Spark's commit log does.

The UDF touches ``<marker-dir>/reached-<partition>-<offset>`` when it evaluates the
row at ``--mark partition:offset``: a file that exists only while (or after) a
task of the batch holding that record runs -- the "inside a batch" signal the
test waits for before SIGKILL.  The query runs until it is killed.

Run it with the project's environment (PYSPARK_PYTHON and PYTHONPATH as
``spark-submit.sh`` sets them), e.g.::

    python tests/spark/kill_job.py --bootstrap 127.0.0.1:9092 --topic t --checkpoint /tmp/c \
        --sink files --out /tmp/out
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time

log = logging.getLogger("kill_job")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--sink", choices=("parquet", "files"), required=True)
    p.add_argument("--out", required=True, help="the sink's directory")
    p.add_argument("--group", help="group.id: read as a member of this consumer group")
    p.add_argument("--session-timeout-ms", type=int, default=3000)
    p.add_argument("--max-offsets", type=int, default=100, help="maxOffsetsPerTrigger")
    p.add_argument("--row-delay-ms", type=float, default=0.0, help="UDF sleep per row")
    p.add_argument("--mark", help="partition:offset whose evaluation touches a marker file")
    p.add_argument("--marker-dir", help="where the marker file goes")
    p.add_argument("--hold-after-batch", type=int, help="files sink: block after writing this batch")
    p.add_argument("--trigger-ms", type=int, default=300)
    p.add_argument("--share-group", help="kafka.share.group.id: read as a member of this share group")
    p.add_argument("--parallelism", type=int, help="kafka.share.parallelism")
    p.add_argument("--master", default="local[2]")
    return p.parse_args(argv)


def slow_udf(delay_s: float, mark: tuple[int, int] | None, marker_dir: str | None):
    """A UDF returning ``offset`` unchanged after sleeping ``delay_s``; touches the marker at ``mark``."""
    from pyspark.sql.functions import udf

    def slow(partition: int, offset: int) -> int:
        if mark is not None and (partition, offset) == mark:
            with open(os.path.join(marker_dir, f"reached-{partition}-{offset}"), "w") as f:
                f.write(str(os.getpid()))
        if delay_s:
            time.sleep(delay_s)
        return offset

    return udf(slow, "long")


def write_batch_file(out: str, hold_after: int | None = None, marker_dir: str | None = None):
    """foreachBatch target: the batch's rows as JSON in ``<out>/<batch_id>.json`` (replace = idempotent);
    blocks for good after writing batch ``hold_after``."""

    def write(df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        # a share group's rows: their delivery count and the task (input partition) that read them
        extra = [F.col("deliveryCount"), F.spark_partition_id().alias("task")] if "deliveryCount" in df.columns else []
        rows = [[r[0], r[1], bytes(r[2]).decode(), *r[3:]] for r in
                df.select("partition", "offset", "value", *extra).collect()]
        tmp = os.path.join(out, f".{batch_id}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(out, f"{batch_id}.json"))
        log.info("batch %d: %d row(s) written", batch_id, len(rows))
        if batch_id == hold_after:
            with open(os.path.join(marker_dir, f"written-{batch_id}"), "w") as f:
                f.write(str(len(rows)))
            log.info("batch %d: holding until killed", batch_id)
            threading.Event().wait()

    return write


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col

    spark = (SparkSession.builder.master(args.master).appName("spark-coord-kill-job")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", args.bootstrap)
              .option("subscribe", args.topic).option("maxOffsetsPerTrigger", args.max_offsets))
    if args.share_group:
        reader = reader.option("kafka.share.group.id", args.share_group)
        if args.parallelism:
            reader = reader.option("kafka.share.parallelism", args.parallelism)
    else:
        reader = reader.option("startingOffsets", "earliest")
    if args.group:
        reader = reader.option("group.id", args.group).option("session.timeout.ms", args.session_timeout_ms)
    mark = tuple(int(x) for x in args.mark.split(":")) if args.mark else None
    slow = slow_udf(args.row_delay_ms / 1000, mark, args.marker_dir)
    df = reader.load().withColumn("offset", slow(col("partition"), col("offset")))
    writer = df.writeStream.option("checkpointLocation", args.checkpoint).trigger(
        processingTime=f"{args.trigger_ms} milliseconds")
    os.makedirs(args.out, exist_ok=True)
    if args.sink == "parquet":
        writer = writer.format("parquet").option("path", args.out)
    else:
        writer = writer.foreachBatch(write_batch_file(args.out, args.hold_after_batch, args.marker_dir))
    query = writer.start()
    log.info("query %s running (sink %s, group %s)", query.id, args.sink, args.group)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
