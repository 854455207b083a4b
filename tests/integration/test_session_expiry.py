"""ZooKeeper session expiry of the coordinator's broker (in-process brokers, so the test
reaches the broker's kazoo client): it drops its state, re-elects (handleNewSession),
the members register again with their claims and the group consumes again."""

from __future__ import annotations

import asyncio
import threading

from support import BROKER_OVERRIDES, chroot_connect
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


def test_coordinator_session_expiry_recovers(zookeeper, request, tmp_path):
    from spark_coord.zk.client import close, connect

    connect_string = chroot_connect(zookeeper, request)
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

        # whoever coordinates now does so with a new epoch, and every member is registered with it
        def coordinating():
            c = read_coordinator(zk)
            coord = brokers[c].broker.coordination.coordinator if c is not None else None
            if coord is None or not coord.active or coord.epoch == old_epoch or "g-exp" not in coord.groups:
                return None
            g = coord.groups["g-exp"]
            return (c, coord) if len(g.live_members()) == 2 and g.state.value == "Stable" else None

        new_cid, new = wait_until(coordinating, timeout=30, message="the members registered with a new coordinator")
        gen2, _ = wait_balanced(ms, parts, above=gen - 1, timeout=30)
        assert new.groups["g-exp"].generation_id == gen2
        if new_cid != cid:
            assert not service.coordinator.active and not service.coordinator.groups  # dropped, standing by
        from spark_coord.zk import paths

        # the expired broker registers again (with its new session) before its partitions are served
        wait_until(lambda: all(zk.exists(paths.broker(i)) for i in brokers), timeout=30,
                   message="both brokers registered")
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
