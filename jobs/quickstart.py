"""Quickstart: clicks per page per 10-second window, streamed through ``coordkafka``.

Starts the embedded ZooKeeper and a broker in a temporary directory (unless
``--bootstrap`` points at a running cluster), produces a sample click stream from
a background thread, and runs a streaming aggregation with a processing-time
trigger, printing each batch's windows as they arrive.  The query reads as a
member of the consumer group ``--group``: the coordinator assigns it the topic's
partitions and its micro-batches' offsets are committed to ZooKeeper as Spark
confirms them.  After ``--batches`` non-empty batches (or ``--seconds``) it ends
cleanly: the producer stops, the query reads what is left and goes idle (no batch
is interrupted), the group's committed offsets reach the log end, the query stops
(its members leave the group), and the group is printed with lag 0.

    ./spark-submit.sh jobs/quickstart.py
    ./spark-submit.sh jobs/quickstart.py --bootstrap 127.0.0.1:9092 --topic clicks --seconds 60
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clicks import ClickProducer, cluster_or, ensure_topic, parsed_clicks, partition_offsets  # noqa: E402

log = logging.getLogger("jobs.quickstart")


def group_lag(bootstrap: str, group: str) -> int | None:
    """The group's total lag (None while some partition has no committed offset yet)."""
    from spark_coord.consumer.cli import describe_groups

    lags = [o.get("lag") for g in describe_groups(bootstrap, [group], with_lag=True) for o in g["offsets"]]
    return None if not lags or None in lags else sum(lags)


def drain(query, bootstrap: str, group: str, timeout: float = 60.0) -> bool:
    """After the producer stopped: wait until the query has committed everything (lag 0) and
    no batch runs, so that stopping it interrupts nothing.  False if that did not happen in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and query.isActive:
        if group_lag(bootstrap, group) == 0 and not query.status["isTriggerActive"]:
            return True
        time.sleep(0.5)
    return False


def show_group(bootstrap: str, group: str) -> None:
    """The group as the coordinator sees it: members, committed offsets, log end and lag."""
    from spark_coord.consumer.cli import describe_groups, format_group

    for g in describe_groups(bootstrap, [group], with_lag=True):
        print(format_group(g))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", help="brokers of a running cluster (default: start a local one)")
    p.add_argument("--topic", default="clicks")
    p.add_argument("--group", default="quickstart", help="consumer group of the query (default: %(default)s)")
    p.add_argument("--rate", type=float, default=200.0, help="clicks per second to produce (default: %(default)s)")
    p.add_argument("--batches", type=int, default=5, help="stop after this many non-empty batches")
    p.add_argument("--seconds", type=float, default=90.0, help="...or after this long")
    p.add_argument("--trigger", default="3 seconds", help="processing-time trigger interval")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    with cluster_or(args.bootstrap) as bootstrap:
        ensure_topic(bootstrap, args.topic)
        producer = ClickProducer(bootstrap, args.topic, rate=args.rate)
        producer.start()
        spark = SparkSession.builder.appName("coordkafka-quickstart").getOrCreate()
        seen = []

        def show(batch, batch_id: int) -> None:
            rows = batch.orderBy("window", "page").collect()
            if not rows:
                return
            seen.append(batch_id)
            print(f"--- batch {batch_id}: {len(rows)} updated window(s)")
            for r in rows:
                print(f"  {r.window.start:%H:%M:%S}-{r.window.end:%H:%M:%S}  {r.page:<9} {r.clicks:>5}")

        counts = (parsed_clicks(spark, bootstrap, args.topic, startingOffsets="earliest", **{"group.id": args.group})
                  .withWatermark("ts", "10 seconds")
                  .groupBy(F.window("ts", "10 seconds"), "page")
                  .agg(F.count("*").alias("clicks")))
        with tempfile.TemporaryDirectory(prefix="quickstart-ckpt-") as ckpt:
            query = (counts.writeStream.outputMode("update").foreachBatch(show)
                     .option("checkpointLocation", ckpt).trigger(processingTime=args.trigger).start())
            deadline = time.monotonic() + args.seconds
            try:
                while len(seen) < args.batches and time.monotonic() < deadline and query.isActive:
                    query.awaitTermination(1)
                producer.stop()  # no new clicks: the query reads what is left, then goes idle
                log.info("producer stopped after %d clicks; waiting for the query to commit the rest", producer.sent)
                if not drain(query, bootstrap, args.group):
                    log.warning("the query did not reach lag 0 in time; stopping it anyway")
            finally:
                producer.stop()
                query.stop()  # between batches: its members leave the group with their final offsets
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            progress = query.lastProgress
            if progress:
                print("last batch's source end offsets:", progress["sources"][0]["endOffset"])
            print(f"produced {producer.sent} clicks; partition offsets of {args.topic!r}:")
            for row in partition_offsets(bootstrap, args.topic):
                print(f"  partition {row['partition']}: earliest {row['earliest']}, latest {row['latest']}")
            show_group(bootstrap, args.group)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
