"""The coordinator election across ZooKeeper connection trouble, on the real server.

Broker a reaches ZooKeeper through a ``CuttableProxy``, broker b directly.  A cut
shorter than the session timeout (SUSPENDED, then the same session back) leaves a
coordinating with the same epoch, and a write made during the cut lands after it.
A cut longer than the session timeout makes a resign and b take over, and a's
write made during the cut is refused (fenced), changing nothing.  A broker
restarted after a crash replaces its previous run's election node at once.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from spark_coord.coordinator.core.elector import CoordinatorElector
from spark_coord.coordinator.storage.store import Fenced
from spark_coord.coordinator.storage.zk_store import ZkGroupStore, parse_state
from spark_coord.zk import client as zkclient
from spark_coord.zk import paths
from spark_coord.zk.testing import CuttableProxy

SESSION_MS = 4000


async def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class Pair:
    """Electors a (through the proxy) and b (direct), with their events."""

    def __init__(self, zk_connect: str):
        hosts, chroot = zkclient.split_chroot(zk_connect)
        self.proxy = CuttableProxy.to(hosts)
        self.a = zkclient.connect(f"{self.proxy.address}{chroot}", session_timeout_ms=SESSION_MS,
                                  connection_timeout_ms=10000)
        self.b = zkclient.connect(zk_connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=10000)
        self.events: list[tuple[str, int | None]] = []

    async def start(self) -> tuple[CoordinatorElector, CoordinatorElector]:
        loop = asyncio.get_running_loop()
        ea = CoordinatorElector(self.a, 1, loop, lambda e: self.events.append(("a-elected", e)),
                                lambda: self.events.append(("a-resigned", None)))
        eb = CoordinatorElector(self.b, 2, loop, lambda e: self.events.append(("b-elected", e)),
                                lambda: self.events.append(("b-resigned", None)))
        await ea.start()
        await eb.start()
        assert ea.is_coordinator and not eb.is_coordinator
        return ea, eb

    def close(self) -> None:
        for c in (self.a, self.b):
            zkclient.close(c)
        self.proxy.close()


@pytest.fixture
def pair(zk_connect):
    p = Pair(zk_connect)
    try:
        yield p
    finally:
        p.close()


def _generation(client) -> int:
    return parse_state(client.get(paths.group_state("g"))[0], "g")


def test_a_cut_shorter_than_the_session_changes_nothing(pair):
    async def main():
        ea, eb = await pair.start()
        epoch, check = ea.epoch, ea.current_check()
        store = ZkGroupStore(pair.a, ea.current_check)
        await store.save_generation("g", 1)

        pair.proxy.cut()
        await _wait_for(lambda: ea.suspended, 5, "a to see its connection drop")
        write = asyncio.ensure_future(store.save_generation("g", 2))  # waits for the connection
        await asyncio.sleep(SESSION_MS / 1000 / 2)
        assert ea.is_coordinator and ea.current_check() == check  # still serving, same term
        assert not write.done() and _generation(pair.b) == 1
        pair.proxy.restore()

        await asyncio.wait_for(write, 10)  # the write made during the cut lands, fenced as ever
        assert not ea.suspended and ea.epoch == epoch and ea.current_check() == check
        assert _generation(pair.b) == 2
        assert not eb.is_coordinator and pair.b.get(paths.COORDINATOR)[0] == b"1"
        assert pair.events == [("a-elected", epoch)]  # never resigned
        await ea.stop()
        await eb.stop()

    asyncio.run(main())


def test_a_cut_longer_than_the_session_resigns_and_the_other_takes_over(pair):
    async def main():
        ea, eb = await pair.start()
        first = ea.epoch
        store = ZkGroupStore(pair.a, ea.current_check)
        await store.save_generation("g", 1)
        t_cut = time.monotonic()
        pair.proxy.cut()
        await _wait_for(lambda: ea.suspended, 5, "a to see its connection drop")
        write = asyncio.ensure_future(store.save_generation("g", 2))
        await _wait_for(lambda: eb.is_coordinator, SESSION_MS / 1000 + 10, "b to take over")
        await _wait_for(lambda: not ea.is_coordinator, SESSION_MS / 1000 + 5, "a to resign")
        resigned_after = time.monotonic() - t_cut
        assert resigned_after >= SESSION_MS / 1000 * 0.9  # not at the first blip
        assert eb.epoch > first and pair.b.get(paths.COORDINATOR)[0] == b"2"

        pair.proxy.restore()
        with pytest.raises(Fenced):  # a's write from the cut: its session expired, nothing lands
            await asyncio.wait_for(write, 15)
        assert _generation(pair.b) == 1
        await _wait_for(lambda: pair.a.state == "CONNECTED" and not ea.suspended, 15, "a back with a new session")
        await asyncio.sleep(0.3)
        assert not ea.is_coordinator and eb.is_coordinator  # a stood again and found b in place
        await eb.stop()
        await ea.stop()

    asyncio.run(main())
    kinds = [k for k, _ in pair.events]
    assert kinds[0] == "a-elected" and sorted(kinds[1:3]) == ["a-resigned", "b-elected"]
    assert kinds.count("a-resigned") == 1


_PREVIOUS_RUN = """
import asyncio, json, sys
from spark_coord.coordinator.core.elector import CoordinatorElector
from spark_coord.zk import client as zkclient

async def main():
    zk = zkclient.connect(sys.argv[1], session_timeout_ms=30000, connection_timeout_ms=10000)
    e = CoordinatorElector(zk, 1, asyncio.get_running_loop(), lambda epoch: None, lambda: None)
    await e.start()
    c = e.current_check()
    print(json.dumps([c.epoch, c.coordinator_version, c.consumers_version]), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_a_restarted_broker_replaces_its_previous_runs_election_node_at_once(zk_connect):
    import json
    import signal
    import subprocess
    import sys

    from spark_coord.coordinator.storage.fencing import EpochCheck

    previous = subprocess.Popen([sys.executable, "-c", _PREVIOUS_RUN, zk_connect], stdout=subprocess.PIPE, text=True)
    try:
        stale = EpochCheck(*json.loads(previous.stdout.readline()))
    finally:
        previous.send_signal(signal.SIGKILL)  # dies without a word: its session (30 s) and node live on
        previous.wait(10)
    other = zkclient.connect(zk_connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=10000)
    new = zkclient.connect(zk_connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=10000)
    events: list[str] = []

    async def main():
        loop = asyncio.get_running_loop()
        assert new.get(paths.COORDINATOR)[0] == b"1"
        rival = CoordinatorElector(other, 2, loop, lambda e: events.append("rival-elected"), lambda: None)
        await rival.start()
        assert not rival.is_coordinator  # another broker's node: only its session expiry frees it

        t0 = time.monotonic()
        restarted = CoordinatorElector(new, 1, loop, lambda e: events.append("restarted-elected"), lambda: None)
        await restarted.start()
        assert restarted.is_coordinator and time.monotonic() - t0 < 2.0  # not 30 s
        assert restarted.epoch > stale.epoch and new.exists(paths.COORDINATOR).ephemeralOwner == new.client_id[0]
        with pytest.raises(Fenced):  # the dead run's token no longer opens the store
            await ZkGroupStore(other, lambda: stale).save_generation("g", 1)
        assert new.exists(paths.group_state("g")) is None
        await asyncio.sleep(0.3)
        assert not rival.is_coordinator
        await restarted.stop()
        await _wait_for(lambda: rival.is_coordinator, 5, "the rival to take over once the restarted one stopped")
        await rival.stop()

    try:
        asyncio.run(main())
    finally:
        for c in (other, new):
            zkclient.close(c)
    assert events == ["restarted-elected", "rival-elected"]


def test_standing_again_on_the_same_session_starts_a_new_term(pair):
    """After resigning while suspended (its timer ran out) a broker may find its session was kept
    (an ensemble without quorum expires nobody): its old node is replaced, with a new epoch and token."""
    async def main():
        ea, eb = await pair.start()
        old = ea.current_check()
        ea._resign("the session timeout passed while suspended")
        assert await ea.elect()
        new = ea.current_check()
        assert new.epoch > old.epoch and new.consumers_version > old.consumers_version
        assert pair.a.exists(paths.COORDINATOR).ephemeralOwner == pair.a.client_id[0]
        with pytest.raises(Fenced):  # the earlier term's token is dead
            await ZkGroupStore(pair.a, lambda: old).save_generation("g", 1)
        await ZkGroupStore(pair.a, ea.current_check).save_generation("g", 1)
        assert not eb.is_coordinator
        await ea.stop()
        await eb.stop()

    asyncio.run(main())


def test_an_election_started_while_zookeeper_is_out_of_reach_leaves_the_event_loop_free(zk_connect):
    """Seen from outside (the Burrow test of a topic a leader learns late, its broker's ZooKeeper link
    held): the broker answered no request while the link was held, its event loop stuck in the
    elector's start, where the election node's DataWatch read ZooKeeper on the loop. The link is cut
    right after the elector's first writes, for 3 s (less than the session): the loop sees the cut at
    once, and the elector is coordinator once the link is back (an attempt made during the cut fails;
    the election node's watch brings the next)."""
    import threading

    hosts, chroot = zkclient.split_chroot(zk_connect)
    proxy = CuttableProxy.to(hosts)
    client = zkclient.connect(f"{proxy.address}{chroot}", session_timeout_ms=SESSION_MS, connection_timeout_ms=10000)
    ensure_path = client.ensure_path
    restore = threading.Timer(3.0, proxy.restore)
    cut_at: list[float] = []

    def ensure_then_cut(path):
        out = ensure_path(path)
        if path == paths.CONSUMERS:  # the elector's last write before its watch
            proxy.cut()
            cut_at.append(time.monotonic())
            restore.start()
        return out

    client.ensure_path = ensure_then_cut

    async def scenario() -> tuple[float, bool]:
        loop = asyncio.get_running_loop()
        elector = CoordinatorElector(client, 1, loop, lambda e: None, lambda: None)
        started = asyncio.create_task(elector.start())
        await _wait_for(lambda: cut_at, 30, "the link cut")
        seen = time.monotonic() - cut_at[0]  # how long the loop was held after the cut
        await asyncio.wait_for(started, 30)
        # an attempt made while the link was cut fails; the election node's watch brings the next one
        await _wait_for(lambda: elector.is_coordinator, 30, "the election once the link is back")
        elected = elector.is_coordinator
        await elector.stop()
        return seen, elected

    try:
        seen, elected = asyncio.run(scenario())
    finally:
        restore.cancel()
        zkclient.close(client)
        proxy.close()
    assert seen < 1.5, f"the event loop was held {seen:.2f} s after the link was cut, until it came back"
    assert elected
