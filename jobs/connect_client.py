"""A Spark Connect client reading a coordkafka topic: nothing of this project is needed here,
only pyspark's Connect client (``pyspark-client`` or pyspark) -- the server has coordkafka.

    ./spark-connect.sh start
    .venv/bin/python jobs/connect_client.py --topic pageviews --group pageview-counts
    ./spark-connect.sh stop

It reads the topic as a batch, then as a stream into the memory sink
(``Trigger.AvailableNow``) as a member of the consumer group, so the group's committed
offsets reach the log end, and prints what each read saw per partition.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--remote", default="sc://127.0.0.1:15002", help="the Connect server (default: %(default)s)")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="brokers, as the server reaches them")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True, help="the consumer group the stream's reader joins")
    args = p.parse_args(argv)

    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    try:
        batch = (spark.read.format("coordkafka").option("kafka.bootstrap.servers", args.bootstrap)
                 .option("subscribe", args.topic).load())
        per_partition = sorted((r.partition, r["count"]) for r in batch.groupBy("partition").count().collect())
        print(f"batch read of {args.topic}: {sum(n for _, n in per_partition)} records "
              f"({', '.join(f'partition {p}: {n}' for p, n in per_partition)})")

        stream = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", args.bootstrap)
                  .option("subscribe", args.topic).option("group.id", args.group)
                  .option("startingOffsets", "earliest").load())
        query = (stream.select("partition", "offset").writeStream.format("memory")
                 .queryName("connect_client_rows").trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            print(f"the stream failed: {query.exception()}", file=sys.stderr)
            return 1
        ends = sorted((r.partition, r.end) for r in spark.sql(
            "SELECT partition, max(offset) + 1 AS end FROM connect_client_rows GROUP BY partition").collect())
        print(f"stream of {args.topic} as group {args.group}: read up to "
              f"{', '.join(f'partition {p}: offset {e}' for p, e in ends)}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
