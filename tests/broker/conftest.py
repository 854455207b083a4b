"""Broker test fixtures: an in-process broker with small limits (``broker_factory`` is in the
root conftest), and a 3-broker LocalCluster of real processes (module-scoped: it is the slow part)."""

from __future__ import annotations

import re
import uuid

import pytest


@pytest.fixture
def broker(broker_factory):
    """One in-process broker with small limits, so bad-input tests are cheap."""
    return broker_factory(0, **{"socket.request.max.bytes": 1024 * 1024, "message.max.bytes": 64 * 1024,
                                "num.partitions": 2})


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, request):
    """Three broker processes on their own chroot of the session's ZooKeeper."""
    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.client import ensure_chroot

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.module.__name__)[-40:]
    connect = f"{zookeeper.connect_string}/c-{name}-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, connection_timeout_ms=10000)
    with LocalCluster(3, tmp_path_factory.mktemp("cluster"), zk_connect=connect,
                      overrides={"zookeeper.session.timeout.ms": 6000, "num.partitions": 3}) as c:
        yield c
