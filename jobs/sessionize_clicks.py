"""Sessionize click events into Parquet: one row per user session (gap 30 s), with a watermark.

Reads the click topic through ``coordkafka``, groups each user's clicks into
session windows (a session ends after ``--gap`` of inactivity), and appends each
finished session -- user, start, end, clicks, pages visited -- to Parquet once
the watermark has passed it.  Without ``--bootstrap`` it starts a local cluster
and a sample click producer, and runs for ``--seconds``.

    ./spark-submit.sh jobs/sessionize_clicks.py --out sessions-out
    ./spark-submit.sh jobs/sessionize_clicks.py --bootstrap 127.0.0.1:9092 --topic clicks --out sessions/
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clicks import ClickProducer, cluster_or, ensure_topic, parsed_clicks  # noqa: E402

log = logging.getLogger("jobs.sessionize_clicks")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", help="brokers of a running cluster (default: start a local one with a producer)")
    p.add_argument("--topic", default="clicks")
    p.add_argument("--out", default="sessions", help="Parquet output directory (default: %(default)s)")
    p.add_argument("--checkpoint", default=None, help="checkpoint directory (default: <out>/_checkpoint)")
    p.add_argument("--gap", default="30 seconds", help="inactivity that ends a session")
    p.add_argument("--watermark", default="10 seconds", help="how late a click may arrive")
    p.add_argument("--seconds", type=float, default=120.0, help="run this long (0 = until Ctrl-C)")
    p.add_argument("--rate", type=float, default=100.0, help="clicks per second of the sample producer")
    return p.parse_args(argv)


def sessions(clicks, gap: str, watermark: str):
    from pyspark.sql import functions as F

    return (clicks.withWatermark("ts", watermark)
            .groupBy("user", F.session_window("ts", gap).alias("session"))
            .agg(F.count("*").alias("clicks"), F.collect_set("page").alias("pages"))
            .select("user", F.col("session.start").alias("start"), F.col("session.end").alias("end"),
                    "clicks", "pages"))


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    producer = None
    with cluster_or(args.bootstrap) as bootstrap:
        if not args.bootstrap:
            ensure_topic(bootstrap, args.topic)
            producer = ClickProducer(bootstrap, args.topic, rate=args.rate)
            producer.start()
        spark = SparkSession.builder.appName("coordkafka-sessionize").getOrCreate()
        out = os.path.abspath(args.out)
        checkpoint = args.checkpoint or os.path.join(out, "_checkpoint")
        query = (sessions(parsed_clicks(spark, bootstrap, args.topic, startingOffsets="earliest"), args.gap,
                          args.watermark)
                 .writeStream.format("parquet").outputMode("append").option("path", out)
                 .option("checkpointLocation", checkpoint).trigger(processingTime="5 seconds").start())
        log.info("writing sessions to %s", out)
        try:
            if args.seconds > 0:
                query.awaitTermination(args.seconds)
            else:
                query.awaitTermination()
        except KeyboardInterrupt:
            pass
        finally:
            query.stop()
            if producer is not None:
                producer.stop()
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        written = spark.read.parquet(out) if any(f.endswith(".parquet") for f in os.listdir(out)) else None
        count = written.count() if written is not None else 0
        print(f"{count} finished session(s) in {out}")
        if written is not None:
            written.orderBy("start").show(10, truncate=False)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
