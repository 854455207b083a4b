"""Integration fixtures: a fresh 3-broker cluster of real processes per test (faults
hit it), member subprocesses, a background producer and ZooKeeper helpers.

Timeouts are short so faults resolve fast: brokers hold 3 s ZooKeeper sessions,
members 2 s coordinator sessions, offsets are committed every 200 ms.
"""

from __future__ import annotations

import logging

import pytest
from support import BROKER_OVERRIDES, MEMBER_SESSION_MS

log = logging.getLogger(__name__)


@pytest.fixture
def cluster(zk_connect, tmp_path, request):
    """Three broker processes on the test's own chroot of the session's ZooKeeper."""
    from spark_coord.cluster import LocalCluster

    overrides = dict(BROKER_OVERRIDES)
    overrides.update(getattr(request, "param", None) or {})
    c = LocalCluster(3, tmp_path / "cluster", zk_connect=zk_connect, overrides=overrides)
    c.start()
    try:
        yield c
    finally:
        for proc in c.procs.values():  # a SIGSTOPped broker would ignore SIGTERM
            if proc.poll() is None:
                try:
                    proc.send_signal(18)  # SIGCONT
                except OSError:
                    pass
        c.stop()


@pytest.fixture
def czk(cluster):
    """A kazoo client on the cluster's chroot."""
    from spark_coord.zk.client import close, connect

    client = connect(cluster.zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        yield client
    finally:
        close(client)


@pytest.fixture
def members(tmp_path, cluster):
    """``spawn(name, group, topics=..., pattern=...)`` -> a started ``MemberProcess``; all are
    stopped (SIGTERM, clean close) at the end if still running."""
    from testkit.member import MemberProcess

    started: list[MemberProcess] = []
    workdir = tmp_path / "members"
    workdir.mkdir()

    def spawn(name: str, group: str, **kwargs) -> MemberProcess:
        kwargs.setdefault("session_timeout_ms", MEMBER_SESSION_MS)
        m = MemberProcess(name, workdir, cluster.bootstrap, group, **kwargs)
        started.append(m)
        return m

    yield spawn
    for m in started:
        if m.alive():
            m.stop(timeout=15)
        else:
            m._log.close()


@pytest.fixture
def producer_factory(cluster):
    from support import BackgroundProducer

    made: list = []

    def make(topic: str, partitions: int, **kwargs):
        p = BackgroundProducer(cluster.bootstrap, topic, partitions, **kwargs)
        made.append(p)
        p.start()
        return p

    yield make
    for p in made:
        if p.is_alive():
            p.stop()


@pytest.fixture
def create(cluster):
    """``create(topic, partitions)`` on the cluster."""
    from support import create_topic

    return lambda topic, partitions: create_topic(cluster.bootstrap, topic, partitions)
