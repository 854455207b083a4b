"""Small helpers shared by the tests (import with ``from helpers import wait_until``)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from typing import Callable, TypeVar

from spark_coord.net import free_port  # noqa: F401  (the one free-port helper of the tests)

T = TypeVar("T")

#: Broker settings of every test cluster (``LocalCluster``, ``BrokerThread``) unless a test sets them,
#: as Kafka's own test configurations do: no initial rebalance delay, which would hold each new
#: classic group's first JoinGroups for 3 s (a test of the delay sets it).
TEST_BROKER_DEFAULTS = {"group.initial.rebalance.delay.ms": 0}


def _test_cluster_defaults() -> None:
    from spark_coord import cluster

    cluster.DEFAULT_OVERRIDES.update(TEST_BROKER_DEFAULTS)


_test_cluster_defaults()


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               message: str | Callable[[], str] = "condition") -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Fails the test with ``AssertionError`` naming ``message`` (a string or a callable
    producing one, for state that is only known at the time of failure) when
    ``timeout`` seconds pass first.  Exceptions from ``predicate`` propagate.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout} s waiting for: {text}")
        time.sleep(interval)


def fresh_chroot(zookeeper, name: str) -> str:
    """A connect string ``host:port/<name>-<random>`` on the session's ZooKeeper whose chroot
    exists and is empty, so tests and modules sharing that ZooKeeper never see each other's
    znodes.  ``name`` (a test or module name) is made znode-safe and shortened."""
    from spark_coord.zk.client import ensure_chroot

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[-60:]
    connect = f"{zookeeper.connect_string}/{safe}-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, connection_timeout_ms=10000)
    return connect


def local_cluster(zookeeper, data_dir, n_brokers: int, name: str, overrides: dict | None = None):
    """A ``LocalCluster`` of ``n_brokers`` broker processes on a fresh chroot of the session's
    ZooKeeper (``fresh_chroot``); use it as a context manager, or ``start()``/``stop()``."""
    from spark_coord.cluster import LocalCluster

    return LocalCluster(n_brokers, data_dir, zk_connect=fresh_chroot(zookeeper, name), overrides=overrides)


def group_offsets(zk_connect: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` in ZooKeeper (Kafka's 0.8 layout), by partition."""
    from spark_coord.zk import paths
    from spark_coord.zk.client import close, connect

    zk = connect(zk_connect)
    try:
        base = paths.topic_offsets(group, topic)
        return {int(p): int(zk.get(f"{base}/{p}")[0]) for p in (zk.get_children(base) if zk.exists(base) else [])}
    finally:
        close(zk)


def group_owners(zk_connect: str, group: str, topic: str) -> dict[int, str]:
    """The group's partition owners of ``topic`` in ZooKeeper (consumer thread ids), by partition."""
    from spark_coord.zk import paths
    from spark_coord.zk.client import close, connect

    zk = connect(zk_connect)
    try:
        base = paths.topic_owners(group, topic)
        return {int(p): zk.get(f"{base}/{p}")[0].decode() for p in (zk.get_children(base) if zk.exists(base) else [])}
    finally:
        close(zk)


def owners_by_member(owners: dict[int, str]) -> dict[str, set[int]]:
    """``{partition: thread}`` as ``{consumer id: partitions}``."""
    from spark_coord.coordinator.core.assignors import thread_owner

    out: dict[str, set[int]] = {}
    for p, thread in owners.items():
        out.setdefault(thread_owner(thread), set()).add(p)
    return out


def read_exactly(conn, n: int) -> bytes:
    """``n`` bytes from a blocking socket (for in-test fake servers); EOFError if it closes first."""
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


class BrokerThread:
    """A ``Broker`` running on an event loop in a background thread (so tests can reach
    its kazoo client and internals while talking to it over real sockets)."""

    def __init__(self, zk_connect: str, log_dir, broker_id: int = 0, **overrides):
        from spark_coord import config
        from spark_coord.broker.broker import Broker

        settings = {"broker.id": broker_id, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir),
                    "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": 4000, **TEST_BROKER_DEFAULTS}
        settings.update(overrides)
        self.config = config.load(config.BROKER, None, settings)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"broker-{broker_id}-loop", daemon=True)
        self.thread.start()
        self.broker = Broker(self.config)

    def call(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> "BrokerThread":
        self.call(self.broker.start())
        return self

    @property
    def port(self) -> int:
        return self.broker.bound_port

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.call(self.broker.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()
