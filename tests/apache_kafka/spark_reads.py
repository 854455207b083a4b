"""A Spark driver in a process of its own, with Spark's Kafka connector on ``spark.jars``, for tests
that compare coordkafka with Spark's own Kafka source (``format("kafka")``) record for record.

``spark.jars`` can only be set when a JVM starts, and the test session's SparkSession may already be
up without them: so the driver is this file run as a script, and ``SparkReads.read(...)`` sends it
one read as a JSON line and gets the rows back as one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = "topic, partition, offset, CAST(key AS STRING) AS key, CAST(value AS STRING) AS value"


class SparkReads:
    """A local[2] Spark driver in a process of its own, with Spark's Kafka connector on ``spark.jars``:
    ``read(...)`` sends it one read (a JSON line), and returns its rows (topic, partition, offset, key,
    value; a null value stays None), sorted by partition and offset."""

    def __init__(self, jars: list[str], workdir: Path) -> None:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")]
                                            + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._log = open(workdir / "spark.log", "wb")
        self.proc = subprocess.Popen([sys.executable, __file__, ",".join(jars), str(workdir)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self.workdir = workdir
        self._answer({"ready": True})

    def _answer(self, request: dict) -> dict:
        if "ready" not in request:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the Spark process ended (status {self.proc.wait(30)}); see "
                                 f"{self.workdir / 'spark.log'}: {self._tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"{request}: {answer['error']}")
        return answer

    def _tail(self) -> str:
        self._log.flush()
        return (self.workdir / "spark.log").read_text(errors="replace")[-3000:]

    def read(self, source: str, topic: str, bootstrap: str, isolation: str, mode: str,
             checkpoint: str | None = None, options: dict[str, str] | None = None) -> list[tuple]:
        """One read of ``topic`` from the earliest offsets: ``mode`` batch (to the latest offsets) or
        stream (``Trigger.AvailableNow`` from the checkpoint ``checkpoint``), with ``source``'s option
        ``kafka.isolation.level`` = ``isolation`` and any more ``options``."""
        answer = self._answer({"source": source, "topic": topic, "bootstrap": bootstrap, "isolation": isolation,
                               "mode": mode, "checkpoint": checkpoint, "options": options or {}})
        return sorted((tuple(r) for r in answer["rows"]), key=lambda r: (r[0], r[1], r[2]))

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def _spark_main(jars: str, workdir: str) -> None:
    """The Spark process: one JSON line of rows per read asked on stdin."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spark-reads")
             .config("spark.jars", jars)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.python.daemon.module", "pyspark_coordkafka.daemon")
             .config("spark.sql.warehouse.dir", os.path.join(workdir, "warehouse"))
             .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + os.path.join(workdir, "derby"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        ask = json.loads(line)
        try:
            reader = spark.read if ask["mode"] == "batch" else spark.readStream
            reader = (reader.format(ask["source"]).option("kafka.bootstrap.servers", ask["bootstrap"])
                      .option("subscribe", ask["topic"]).option("startingOffsets", "earliest")
                      .option("kafka.isolation.level", ask["isolation"]))
            for key, value in ask.get("options", {}).items():
                reader = reader.option(key, value)
            if ask["mode"] == "batch":
                rows = reader.option("endingOffsets", "latest").load().selectExpr(*COLUMNS.split(", ")).collect()
            else:
                rows = []
                query = (reader.load().selectExpr(*COLUMNS.split(", ")).writeStream
                         .foreachBatch(lambda df, _id, into=rows: into.extend(df.collect()))
                         .option("checkpointLocation", ask["checkpoint"]).trigger(availableNow=True).start())
                if not query.awaitTermination(120):
                    query.stop()
                    raise TimeoutError("the AvailableNow query did not end within 120 s")
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
            out.write(json.dumps({"rows": [list(r) for r in rows]}) + "\n")
        except Exception as e:  # noqa: BLE001 -- handed to the test, which fails with it
            out.write(json.dumps({"error": f"{type(e).__name__}: {e}"[:4000]}) + "\n")
        out.flush()
    spark.stop()


if __name__ == "__main__":
    _spark_main(sys.argv[1], sys.argv[2])
