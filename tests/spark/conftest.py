"""Spark test fixtures: one local[2] SparkSession for the whole test session (``spark_session``),
and a one-broker LocalCluster per test module on its own ZooKeeper chroot."""

from __future__ import annotations

import pytest
from helpers import local_cluster
from spark_session import shared_session


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    session = shared_session(tmp_path_factory)
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
