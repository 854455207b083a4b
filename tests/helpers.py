"""Small helpers shared by the tests (import with ``from helpers import wait_until``)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


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


def local_cluster(zookeeper, data_dir, n_brokers: int, name: str, overrides: dict | None = None):
    """A ``LocalCluster`` of ``n_brokers`` broker processes on a fresh chroot of the session's
    ZooKeeper, so modules sharing that ZooKeeper never see each other's topics or groups."""
    import uuid

    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.client import ensure_chroot

    connect = f"{zookeeper.connect_string}/{name}-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, connection_timeout_ms=10000)
    return LocalCluster(n_brokers, data_dir, zk_connect=connect, overrides=overrides)


def read_exactly(conn, n: int) -> bytes:
    """``n`` bytes from a blocking socket (for in-test fake servers); EOFError if it closes first."""
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf
