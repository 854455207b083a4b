"""The job tests/spark/test_spark_standalone.py submits to a Spark standalone cluster.

It reads a topic through ``coordkafka`` as ``--members`` members of ``--group`` and
appends ``partition, offset, value`` to Parquet with Spark's file sink (exactly once:
its ``_spark_metadata`` log lists the files of the committed batches), until the file
``--stop-file`` appears; then it stops the query and Spark. Submit it as docs/spark/clusters.md shows::

    PYSPARK_PYTHON=./env/bin/python ./spark-submit.sh --master spark://HOST:7077 \\
        --archives env.tar.gz#env tests/spark/standalone_job.py --bootstrap ... --out ...
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

log = logging.getLogger("standalone_job")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--members", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--stop-file", required=True, help="stop once this file exists")
    p.add_argument("--max-offsets", type=int, default=200, help="maxOffsetsPerTrigger")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("spark-coord-standalone-test").getOrCreate()
    log.info("master %s", spark.sparkContext.master)
    df = (spark.readStream.format("coordkafka").option("bootstrap.brokers", args.bootstrap)
          .option("subscribe", args.topic).option("group.id", args.group).option("members", args.members)
          .option("session.timeout.ms", 6000).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", args.max_offsets).load())
    query = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").writeStream
             .format("parquet").option("path", args.out).option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="1 second").start())
    while not os.path.exists(args.stop_file):
        if query.awaitTermination(0.5):
            raise SystemExit(f"query ended on its own: {query.exception()}")
    query.stop()
    log.info("query stopped after %d progress report(s)", len(query.recentProgress))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
