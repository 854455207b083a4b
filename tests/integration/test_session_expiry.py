"""ZooKeeper trouble at the coordinator's broker (in-process brokers, so the test reaches the
broker's kazoo client and coordinator; members are processes).

* Session expiry: the coordinator drops its state, re-elects (handleNewSession), the members
  register again with their claims and are taken back into their generation under the new
  epoch, and the group consumes again.
* A cut of the broker's ZooKeeper connection shorter than the session timeout changes
  nothing: same coordinator, same epoch, same generation; offsets committed meanwhile land
  once the connection is back.  A cut longer than the session timeout hands the role to
  the other broker, which takes the members back into their generation, and the group
  consumes again under it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

from helpers import wait_until
from support import (
    BROKER_OVERRIDES,
    BROKER_ZK_SESSION_MS,
    balanced,
    create_topic,
    leaders,
    log_end,
    topic_partitions,
    wait_balanced,
    wait_caught_up,
)

from spark_coord.coordinator.core.group import GroupState
from spark_coord.zk import paths
from spark_coord.zk.testing import CuttableProxy, expire_session
from testkit.member import MemberProcess
from testkit.zk_history import read_coordinator

_NOT_STANDING = SimpleNamespace(active=False, epoch=None, groups={}, suspended=False, check=None)


class InProcessBroker:
    """A ``Broker`` on its own event-loop thread; ``resigned`` records when its elector resigned."""

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
        self.resigned: list[float] = []
        # shard 0 (these brokers run one shard) resigned: its election was lost
        self.broker.coordination.resigned = lambda role: self.resigned.append(time.monotonic())

    @property
    def coordinator(self):
        """The coordinator of shard 0 here (an inactive stand-in while this broker does not stand for it)."""
        return self.broker.coordination.coordinator or _NOT_STANDING

    @property
    def elector(self):
        return self.broker.coordination.elector or _NOT_STANDING

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def _coordinating(zk, brokers, group: str, members: int, old_epoch: int):
    """(broker id, coordinator) once a coordinator of another epoch than ``old_epoch`` has every
    member of ``group`` registered and the group stable; else None."""
    c = read_coordinator(zk)
    coord = brokers[c].coordinator if c is not None else None
    if coord is None or not coord.active or coord.epoch == old_epoch or group not in coord.groups:
        return None
    g = coord.groups[group]
    return (c, coord) if len(g.live_members()) == members and g.state.value == "Stable" else None


def _produce(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc)
        for p in range(partitions):
            for _ in range(n):
                producer.send(topic, b"x", partition=p)
        producer.flush()


def _all_led(brokers, topic: str, partitions: int) -> bool:
    from spark_coord.errors import KafkaError

    try:
        return all(sorted(p for p, b in leaders(f"127.0.0.1:{br.broker.bound_port}", topic).items() if b >= 0)
                   == list(range(partitions)) for br in brokers.values())
    except (KafkaError, OSError):
        return False


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
        old = brokers[cid].coordinator
        old_epoch = old.epoch
        assert old.active and old.groups

        expire_session(brokers[cid].broker.zk)

        # whoever coordinates now does so with a new epoch, and every member is registered with it
        new_cid, new = wait_until(lambda: _coordinating(zk, brokers, "g-exp", 2, old_epoch), timeout=30,
                                  message="the members registered with a coordinator of a new epoch")
        gen2, _ = wait_balanced(ms, parts, above=gen - 1, timeout=30)
        assert new.groups["g-exp"].generation_id == gen2
        # the expired broker resigned (dropping its state) whether or not it won the role back
        assert len(brokers[cid].resigned) == 1
        assert old.active == (new_cid == cid)
        if new_cid != cid:
            assert not old.groups and old.epoch is None
        # the expired broker registers again (with its new session) before its partitions are served
        wait_until(lambda: all(zk.exists(paths.broker(i)) for i in brokers), timeout=30,
                   message="both brokers registered")
        # ... and every broker's view has caught up with that: each names a leader for every partition
        wait_until(lambda: _all_led(brokers, "exp", 4), timeout=30, message="every partition led, in every view")
        _produce(bootstrap, "exp", 4, 20)
        wait_caught_up(zk, "g-exp", log_end(bootstrap, "exp"))
    finally:
        for m in ms:
            m.stop(timeout=15) if m.alive() else None
        close(zk)
        for b in brokers.values():
            b.stop()


def test_coordinator_rides_through_a_short_zookeeper_cut_and_hands_over_after_a_long_one(zk_connect, tmp_path):
    from spark_coord.zk.client import close, connect, split_chroot

    connect_string = zk_connect
    hosts, chroot = split_chroot(connect_string)
    proxy = CuttableProxy.to(hosts)
    # broker 0 (through the proxy) starts first, so it is the coordinator
    brokers = {0: InProcessBroker(f"{proxy.address}{chroot}", tmp_path / "b0", 0)}
    brokers[1] = InProcessBroker(connect_string, tmp_path / "b1", 1)
    zk = connect(connect_string, session_timeout_ms=10000, connection_timeout_ms=10000)
    ms: list[MemberProcess] = []
    session_s = BROKER_ZK_SESSION_MS / 1000
    try:
        b0 = brokers[0]
        # elected at start; the coordinator activates once it has read its groups back
        wait_until(lambda: read_coordinator(zk) == 0 and b0.coordinator.active, message="broker 0 coordinates")
        epoch = b0.coordinator.epoch
        bootstrap = ",".join(f"127.0.0.1:{b.broker.bound_port}" for b in brokers.values())
        create_topic(bootstrap, "cut", 4)
        parts = topic_partitions("cut", 4)
        # members' sessions outlast the broker's ZooKeeper session: while ZooKeeper cannot confirm the
        # election the coordinator stops renewing leases (LeadershipLease), and a short cut must not
        # cost a member its lease
        ms = [MemberProcess(f"c{i}", tmp_path, bootstrap, "g-cut", topics=["cut"],
                            session_timeout_ms=BROKER_ZK_SESSION_MS + 4000) for i in range(2)]
        wait_balanced(ms, parts)

        def settled():  # no rebalance pending: the members' generation is the coordinator's last word
            g, b = b0.coordinator.groups.get("g-cut"), balanced(ms, parts)
            return (g is not None and b is not None and g.generation_id == b[0] and g.state is GroupState.STABLE
                    and (g.rebalance_task is None or g.rebalance_task.done()) and (b[0],))

        (gen,) = wait_until(settled, 20, message="group g-cut settled in its generation")
        assigns = [len(m.events("assign")) for m in ms]

        # -- a cut shorter than the session: nothing changes, offsets land afterwards
        proxy.cut()
        wait_until(lambda: b0.elector.suspended, 5, message="broker 0 to see its ZooKeeper connection drop")
        _produce(bootstrap, "cut", 4, 10)  # the data path does not need ZooKeeper
        time.sleep(session_s / 2)  # the cut lasts half a session (nothing to wait for: nothing must happen)
        assert b0.coordinator.active and b0.coordinator.epoch == epoch
        proxy.restore()
        wait_caught_up(zk, "g-cut", log_end(bootstrap, "cut"))
        assert not b0.resigned and not b0.elector.suspended
        assert b0.coordinator.epoch == epoch and read_coordinator(zk) == 0
        assert b0.coordinator.groups["g-cut"].generation_id == gen
        assert [len(m.events("assign")) for m in ms] == assigns  # no rebalance reached the members
        assert not brokers[1].coordinator.active

        # -- a cut longer than the session: broker 1 takes over, the group consumes under it
        t_cut = time.monotonic()
        proxy.cut()
        wait_until(lambda: brokers[1].coordinator.active, session_s + 10, message="broker 1 to take over")
        wait_until(lambda: b0.resigned, session_s + 5, message="broker 0 to resign")
        assert b0.resigned[0] - t_cut >= session_s * 0.9  # it served on through the first part of the cut
        wait_until(lambda: _coordinating(zk, brokers, "g-cut", 2, epoch), timeout=30,
                   message="the members registered with broker 1")
        gen2, _ = wait_balanced(ms, parts, above=gen - 1, timeout=30)
        assert brokers[1].coordinator.epoch > epoch and read_coordinator(zk) == 1
        proxy.restore()
        _produce(bootstrap, "cut", 4, 10)
        wait_caught_up(zk, "g-cut", log_end(bootstrap, "cut"))
        assert len(b0.resigned) == 1 and not b0.coordinator.active
        assert brokers[1].coordinator.groups["g-cut"].generation_id == gen2
    finally:
        for m in ms:
            m.stop(timeout=15) if m.alive() else None
        close(zk)
        for b in brokers.values():
            b.stop()
        proxy.close()
