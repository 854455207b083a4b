"""A streaming table fed by a coordkafka topic, and a materialized view over it.

``clicks_raw`` appends every record of the topic, once: each run of the pipeline reads
what arrived since the last one (its streaming checkpoint, in the pipeline's storage,
holds the offsets it got to). ``clicks_per_key`` is recomputed from ``clicks_raw`` on
every run: how many records each key has.

Where to read, first found wins -- a Spark setting (``--conf`` before the command of
``./spark-pipelines.sh``, or the spec's ``configuration``), an environment variable, a
default:

=================================  ================  ================
Spark setting                      environment       default
=================================  ================  ================
spark.coordkafka.clicks.bootstrap  CLICKS_BOOTSTRAP  127.0.0.1:9092
spark.coordkafka.clicks.topic      CLICKS_TOPIC      clicks
spark.coordkafka.clicks.group      CLICKS_GROUP      (none: no group)
=================================  ================  ================

With a group, the table's reads join that consumer group and commit its offsets; the
group's committed offsets then decide where a table rebuilt by a full refresh starts
(docs/spark/pipelines.md).
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# `spark` is the pipeline's session, put in this module's namespace by spark-pipelines


def setting(name: str, default: str | None) -> str | None:
    return spark.conf.get(f"spark.coordkafka.clicks.{name}", None) or os.environ.get(  # noqa: F821
        f"CLICKS_{name.upper()}", default)


BOOTSTRAP = setting("bootstrap", "127.0.0.1:9092")
TOPIC = setting("topic", "clicks")
GROUP = setting("group", None)


@dp.table(comment=f"every record of the coordkafka topic {TOPIC}")
def clicks_raw() -> DataFrame:
    reader = (spark.readStream.format("coordkafka")  # noqa: F821
              .option("kafka.bootstrap.servers", BOOTSTRAP)
              .option("subscribe", TOPIC)
              .option("startingOffsets", "earliest"))
    if GROUP:
        reader = reader.option("group.id", GROUP)
    return reader.load().select(F.col("key").cast("string").alias("key"),
                                F.col("value").cast("string").alias("value"),
                                "topic", "partition", "offset", "timestamp")


@dp.materialized_view(comment="records per key in clicks_raw")
def clicks_per_key() -> DataFrame:
    return spark.read.table("clicks_raw").groupBy("key").count()  # noqa: F821
