"""coordkafka from a Spark Connect client, as docs/spark/connect.md says: a server started with
``./spark-connect.sh start --port PORT`` (pyspark's SparkConnectServer with the project's
environment), and a client session ``sc://127.0.0.1:PORT`` that reads a topic as a stream
into the memory sink (``Trigger.AvailableNow``, as a member of a consumer group), reads it
as a batch, writes another topic through the coordkafka sink and reads it back, and gets a
bad option back as an error naming it.

The client runs in its own Python process (``CLIENT``): a Connect session beside the classic
session other Spark tests of this process use would share pyspark's module state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_port, group_offsets
from spark_data import new_topic, produce

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "spark-connect.sh"

pytestmark = pytest.mark.timeout(420)


def _connect_jar() -> Path | None:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return next(iter(sorted(jars.glob("spark-connect_*.jar"))), None)


# The client: one JSON line on stdout with what it saw.
CLIENT = r"""
import json, sys
from pyspark.sql import SparkSession, functions as F

url, bootstrap, topic, out_topic, group = sys.argv[1:6]
spark = SparkSession.builder.remote(url).getOrCreate()
result = {}

stream = (spark.readStream.format("coordkafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("group.id", group).option("startingOffsets", "earliest").load())
query = (stream.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
         .writeStream.format("memory").queryName("clicks_mem").trigger(availableNow=True).start())
query.awaitTermination(180)
result["stream_finished"] = not query.isActive
result["stream"] = [list(r) for r in spark.sql("SELECT value, partition, offset FROM clicks_mem").collect()]

batch = spark.read.format("coordkafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
result["batch"] = sorted(r.value for r in batch.selectExpr("CAST(value AS STRING) AS value").collect())

rows = spark.range(5).select(F.concat(F.lit("written-"), F.col("id").cast("string")).alias("value"),
                             F.col("id").cast("string").alias("key"))
rows.write.format("coordkafka").mode("append").option("kafka.bootstrap.servers", bootstrap) \
    .option("topic", out_topic).save()
back = spark.read.format("coordkafka").option("kafka.bootstrap.servers", bootstrap) \
    .option("subscribe", out_topic).load()
result["written"] = sorted([r.key, r.value] for r in back.selectExpr("CAST(key AS STRING) AS key",
                                                                       "CAST(value AS STRING) AS value").collect())

try:
    spark.read.format("coordkafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .option("startingOffset", "earliest").load().collect()
    result["bad_option"] = None
except Exception as e:
    result["bad_option"] = f"{type(e).__name__}: {e}"
spark.stop()
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    if _connect_jar() is None:
        pytest.skip("pyspark ships no spark-connect jar (pyspark/jars/spark-connect_*.jar): no Connect server")
    port = free_port()
    state = tmp_path_factory.mktemp("spark-connect")
    args = ["--port", str(port), "--dir", str(state)]
    start = subprocess.run([str(SCRIPT), "start", *args, "--timeout", "240"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=300)
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        assert f"sc://127.0.0.1:{port}" in start.stdout
        status = subprocess.run([str(SCRIPT), "status", *args], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "running" in status.stdout, status.stdout + status.stderr
        again = subprocess.run([str(SCRIPT), "start", *args], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "already running" in again.stderr
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop = subprocess.run([str(SCRIPT), "stop", *args], capture_output=True, text=True, timeout=120)
        log = state / f"connect-{port}.log"
        assert stop.returncode == 0, stop.stdout + stop.stderr + (log.read_text()[-3000:] if log.exists() else "")
    status = subprocess.run([str(SCRIPT), "status", *args], capture_output=True, text=True, timeout=60)
    assert status.returncode == 3, status.stdout


def test_connect_client_reads_streams_writes_and_sees_errors(cluster, connect_url):
    topic, out_topic = new_topic(cluster), new_topic(cluster)
    rows = produce(cluster, topic, 40)
    group = f"connect-{topic}"

    proc = subprocess.run([sys.executable, "-c", CLIENT, connect_url, cluster.bootstrap, topic, out_topic, group],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    expected = sorted([r[1].decode(), r[3], r[4]] for r in rows)
    assert result["stream_finished"]
    assert sorted(result["stream"]) == expected
    # the stream's reader joined the group: its offsets are at the log end (20 records in each partition)
    assert group_offsets(cluster.zk_connect, group, topic) == {0: 20, 1: 20}
    assert result["batch"] == sorted(r[1].decode() for r in rows)
    assert result["written"] == sorted([str(i), f"written-{i}"] for i in range(5))
    # the data source's ValueError reaches the client, naming the option
    assert result["bad_option"] is not None and "startingOffset" in result["bad_option"]
    assert "unknown coordkafka source option" in result["bad_option"]
