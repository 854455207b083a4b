"""Broker test fixtures: an in-process broker on its own event-loop thread, and a
3-broker LocalCluster of real processes (module-scoped: it is the slow part)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from helpers import local_cluster


class BrokerThread:
    """A ``Broker`` running on an event loop in a background thread (so tests can reach
    its kazoo client and internals while talking to it over real sockets)."""

    def __init__(self, zk_connect: str, log_dir, broker_id: int = 0, **overrides):
        from spark_coord import config
        from spark_coord.broker.broker import Broker

        settings = {"broker.id": broker_id, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir),
                    "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": 4000}
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


@pytest.fixture
def broker_factory(zk_connect, tmp_path):
    """``make(broker_id=0, **overrides)`` -> a started ``BrokerThread`` on the test's chroot."""
    made: list[BrokerThread] = []

    def make(broker_id: int = 0, start: bool = True, **overrides) -> BrokerThread:
        b = BrokerThread(zk_connect, tmp_path / f"broker-{broker_id}-{len(made)}", broker_id, **overrides)
        made.append(b)
        return b.start() if start else b

    yield make
    for b in reversed(made):
        try:
            b.stop()
        except Exception:
            pass


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
