"""The tests' local[2] SparkSession, for tests/spark/conftest.py's session fixture and for modules
elsewhere that need one (``getOrCreate``: the same session when it is up already).

Spark's Python workers run ``PYSPARK_PYTHON``; ``spark_env()`` sets it to this interpreter and puts
the project root on ``PYTHONPATH`` BEFORE the session (and its JVM) starts, so the workers import
the same ``spark_coord`` and find ``pyspark_coordkafka`` (Spark's data-source lookup scans
``sys.path`` for ``pyspark_*`` modules).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spark_env() -> None:
    """Point Spark's Python workers at this interpreter and this checkout."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + paths)


def shared_session(tmp_path_factory):
    """The local[2] session the tests share (warehouse and Derby home in fresh temporary directories)."""
    spark_env()
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("spark-coord-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .config("spark.python.daemon.module", "pyspark_coordkafka.daemon")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + str(tmp_path_factory.mktemp("derby")))
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    return session
