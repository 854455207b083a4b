"""Spark test fixtures: one local[2] SparkSession for the whole test session, and a
one-broker LocalCluster per test module on its own ZooKeeper chroot.

Spark's Python workers run ``PYSPARK_PYTHON``; it is set to this interpreter, and
the project root is put on ``PYTHONPATH``, BEFORE the session (and its JVM) starts,
so the workers import the same ``spark_coord`` and find ``pyspark_coordkafka``
(Spark's data-source lookup scans ``sys.path`` for ``pyspark_*`` modules).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import local_cluster

ROOT = Path(__file__).resolve().parents[2]


def spark_env() -> None:
    """Point Spark's Python workers at this interpreter and this checkout."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + paths)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
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
    try:
        yield session
    finally:
        session.stop()


def _cluster(zookeeper, tmp_path_factory, request, overrides: dict):
    settings = {"zookeeper.session.timeout.ms": 6000, "num.partitions": 2}
    settings.update(overrides)
    return local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 1, "s-" + request.module.__name__, settings)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, request):
    """One broker process (2 partitions per topic by default)."""
    with _cluster(zookeeper, tmp_path_factory, request, {}) as c:
        yield c


@pytest.fixture(scope="module")
def small_retention_cluster(zookeeper, tmp_path_factory, request):
    """One broker that rolls 1 KiB segments and keeps about 2 KiB per partition, checked often."""
    overrides = {"log.segment.bytes": 1024, "log.retention.bytes": 2048, "log.retention.check.interval.ms": 100}
    with _cluster(zookeeper, tmp_path_factory, request, overrides) as c:
        yield c
