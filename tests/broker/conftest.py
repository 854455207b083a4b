"""Broker test fixtures: an in-process broker with small limits (``broker_factory`` is in the
root conftest), and a 3-broker LocalCluster of real processes (module-scoped: it is the slow part)."""

from __future__ import annotations

import pytest
from helpers import local_cluster


@pytest.fixture
def broker(broker_factory):
    """One in-process broker with small limits, so bad-input tests are cheap."""
    return broker_factory(0, **{"socket.request.max.bytes": 1024 * 1024, "message.max.bytes": 64 * 1024,
                                "num.partitions": 2})


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, request):
    """Three broker processes on their own chroot of the session's ZooKeeper."""
    with local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 3, "c-" + request.module.__name__,
                       {"zookeeper.session.timeout.ms": 6000, "num.partitions": 3}) as c:
        yield c
