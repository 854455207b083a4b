"""ZooKeeper session expiry of the coordinator's broker (in-process brokers, so the test
reaches the broker's kazoo client): it drops its state, re-elects (handleNewSession),
and the group consumes again."""

from __future__ import annotations

import asyncio
import threading

from support import BROKER_OVERRIDES
from helpers import wait_until
from support import create_topic, log_end, topic_partitions, wait_balanced, wait_caught_up

from spark_coord.testing.member import MemberProcess
from spark_coord.testing.zk_history import read_coordinator
from spark_coord.zk.testing import expire_session


class InProcessBroker:
    """A ``Broker`` on its own event-loop thread."""

    def __init__(self, zk_connect: str, log_dir, broker_id: int):
        from spark_coord import config
        from spark_coord.broker.broker import Broker

        settings = {"broker.id": broker_id, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir),
                    "zookeeper.connect": zk_connect, **BROKER_OVERRIDES}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=f"broker-{broker_id}")
        self.thread.start()
        self.broker = Broker(config.load(config.BROKER, None, settings))
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(60)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def test_coordinator_session_expiry_recovers(zk_connect, tmp_path):
    from spark_coord.zk.client import close, connect

    connect_string = zk_connect
    brokers = {i: InProcessBroker(connect_string, tmp_path / f"b{i}", i) for i in range(2)}
    zk = connect(connect_string, session_timeout_ms=10000, connection_timeout_ms=10000)
    ms: list[MemberProcess] = []
    try:
        bootstrap = ",".join(f"127.0.0.1:{b.broker.bound_port}" for b in brokers.values())
        create_topic(bootstrap, "exp", 4)
        parts = topic_partitions("exp", 4)
        ms = [MemberProcess(f"e{i}", tmp_path, bootstrap, "g-exp", topics=["exp"], session_timeout_ms=2000)
              for i in range(2)]
        gen, _ = wait_balanced(ms, parts)
        cid = wait_until(lambda: (c := read_coordinator(zk)) is not None and (c,), message="a coordinator")[0]
        service = brokers[cid].broker.coordination
        old_epoch = service.coordinator.epoch
        assert service.coordinator.active and service.coordinator.groups

        expire_session(brokers[cid].broker.zk)

        # whoever coordinates now does so with a new epoch, and the group got a new generation
        gen2, _ = wait_balanced(ms, parts, above=gen, timeout=30)
        new_cid = read_coordinator(zk)
        new = brokers[new_cid].broker.coordination.coordinator
        assert new.active and new.epoch != old_epoch
        if new_cid != cid:
            assert not service.coordinator.active and not service.coordinator.groups  # dropped, standing by
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.client.producer import Producer

        with ClusterClient(bootstrap) as cc:
            producer = Producer(cc)
            for p in range(4):
                for i in range(20):
                    producer.send("exp", b"x", partition=p)
            producer.flush()
        wait_caught_up(zk, "g-exp", log_end(bootstrap, "exp"))
    finally:
        for m in ms:
            m.stop(timeout=15) if m.alive() else None
        close(zk)
        for b in brokers.values():
            b.stop()
