"""The fetchers and their leader finder against a scripted cluster: no partition is ever left
unfetched, a dead leader is retried with backoff, and nothing is
fetched or delivered after the member's lease ran out."""

from __future__ import annotations

import logging
import threading
import time

from helpers import wait_until

from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.metadata import PartitionInfo, TopicInfo
from spark_coord.consumer.buffer import PartitionBuffer
from spark_coord.consumer.fetcher import FetcherManager, FetchSettings

A, B = ("t", 0), ("t", 1)


class ScriptedConnection:
    """A leader's connection: each Fetch fails while ``failures`` > 0, then answers nothing new."""

    def __init__(self, failures: int = 0):
        self.timeout = 1.0
        self.failures = failures
        self.fetched: list[tuple[float, set]] = []   # (when, partitions) of every Fetch that got through
        self.attempts = 0
        self.closed = False

    def request(self, api_key, body, timeout=None, version=None):
        self.attempts += 1
        if self.failures > 0:
            self.failures -= 1
            raise BrokerConnectionError("Connection refused (scripted)")
        parts = {(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]}
        self.fetched.append((time.monotonic(), parts))
        time.sleep(0.02)  # a long poll that found nothing
        return {"error_code": 0, "responses": []}

    def send(self, api_key, body, timeout=None, into=None):
        """The pipelined form: the answer (or the failure) comes with ``result()``."""
        class Pending:
            def result(pending):
                return self.request(api_key, body, timeout)

        return Pending()


class ScriptedCluster:
    """``ClusterClient`` as the fetchers use it: partition p is led by broker p."""

    def __init__(self, conns: dict[int, ScriptedConnection]):
        self.conns = conns
        self.topics = {"t": TopicInfo("t", 0, {p: PartitionInfo("t", p, p, [p]) for p in conns})}

    def refresh(self, topics=None):
        return self.topics

    def connection(self, leader: int):
        return self.conns[leader]

    def drop_connection(self, leader: int) -> None:
        pass


def _manager(cluster, cls=FetcherManager) -> tuple[FetcherManager, PartitionBuffer]:
    buffer = PartitionBuffer()
    return cls(cluster, buffer, FetchSettings(auto_offset_reset="smallest", retry_backoff_ms=200)), buffer


def test_a_partition_handed_back_while_still_being_placed_is_fetched_again():
    """The fetcher started for A fails at once (its pooled connection to a just-restarted broker
    is stale) and hands A back while the finder is still placing B; A must not be lost."""
    handed_back = threading.Event()

    class Racing(FetcherManager):
        def orphan(self, partitions, backoff=False, run=None):
            super().orphan(partitions, backoff, run)
            if A in partitions:
                handed_back.set()

        def reset_offset(self, tp):
            assert handed_back.wait(5), "the fetcher of A did not fail first"
            return 0  # B (start offset -1) is placed only after A came back

    conns = {0: ScriptedConnection(failures=1), 1: ScriptedConnection()}
    manager, buffer = _manager(ScriptedCluster(conns), Racing)
    manager.start({A: 5, B: -1}, buffer.assign({A: 5, B: -1}))
    try:
        wait_until(lambda: any(A in parts for _, parts in conns[0].fetched), 5,
                   message="A to be fetched again after its fetcher failed")
        assert conns[1].fetched
    finally:
        manager.stop()


def test_assigned_partition_held_by_nobody_is_placed_again():
    conns = {0: ScriptedConnection(), 1: ScriptedConnection()}
    manager, buffer = _manager(ScriptedCluster(conns))
    manager.start({A: 0, B: 0}, buffer.assign({A: 0, B: 0}))
    try:
        wait_until(lambda: conns[0].fetched and conns[1].fetched, 5)
        fetcher = manager._fetchers[0]
        assert fetcher.take_all() == {A: 0}  # A silently vanishes from its fetcher (a bug elsewhere)
        lost_at = time.monotonic()
        wait_until(lambda: any(A in parts and t > lost_at for t, parts in conns[0].fetched), 5,
                   message="the audit to place A again")
    finally:
        manager.stop()


def test_dead_leader_is_retried_with_backoff_and_one_warning(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_coord.consumer.fetcher")
    conns = {0: ScriptedConnection(failures=10_000)}
    manager, buffer = _manager(ScriptedCluster(conns))
    manager.start({A: 0}, buffer.assign({A: 0}))
    try:
        time.sleep(2.0)
    finally:
        manager.stop()
    assert 2 <= conns[0].attempts <= 8, conns[0].attempts  # 200 ms doubling: not a busy loop
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "broker 0" in warnings[0].getMessage()


def test_nothing_is_fetched_or_delivered_after_the_lease_ran_out():
    conns = {0: ScriptedConnection()}
    manager, buffer = _manager(ScriptedCluster(conns))
    from spark_coord.consumer.buffer import Item

    token = buffer.assign({A: 0})
    buffer.put(Item(token, "t", 0, batch=None, next_offset=3, incarnation=buffer.incarnations()[A]),
               threading.Event())
    ended = time.monotonic() - 0.001
    buffer.set_lease(ended)
    manager.set_lease(ended)
    manager.start({A: 0}, token)
    try:
        time.sleep(0.5)
        assert conns[0].fetched == []
        assert buffer.take(0.1) is None  # a batch is waiting, but no coordinator confirms the assignment
        manager.set_lease(time.monotonic() + 10)
        buffer.set_lease(time.monotonic() + 10)
        assert buffer.take(1.0).next_offset == 3
        wait_until(lambda: conns[0].fetched, 5)
    finally:
        manager.stop()


class OffsetRecordingConnection(ScriptedConnection):
    """A ScriptedConnection that also keeps the offset each Fetch asked for, per partition."""

    def __init__(self):
        super().__init__()
        self.offsets: list[tuple[tuple[str, int], int]] = []

    def request(self, api_key, body, timeout=None, version=None):
        for t in body["topics"]:
            for p in t["partitions"]:
                self.offsets.append(((t["topic"], p["partition"]), p["fetch_offset"]))
        return super().request(api_key, body, timeout, version)


class GatedReset(FetcherManager):
    """auto.offset.reset of A (-> 0) waits for ``gate``; ``resolving`` tells that it was asked."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.resolving = threading.Event()
        self.gate = threading.Event()
        self.resets: list[tuple[str, int]] = []

    def reset_offset(self, tp):
        self.resets.append(tp)
        if tp == A:
            self.resolving.set()
            assert self.gate.wait(5), "the test did not release the reset"
        return 0


def _resolving_a():
    """A manager given A (no committed offset) and B, its finder held while resolving A's reset."""
    conns = {0: OffsetRecordingConnection(), 1: OffsetRecordingConnection()}
    manager, buffer = _manager(ScriptedCluster(conns), GatedReset)
    manager.start({A: -1, B: 0}, buffer.assign({A: -1, B: 0}))
    if not manager.resolving.wait(5):
        manager.stop()
        raise AssertionError("the finder did not resolve A's start offset")
    return conns, manager, buffer


def test_a_partition_taken_away_and_given_back_while_its_reset_runs_starts_where_it_was_given():
    """Incremental hand-over: the member got A with no committed offset (-1) and lost it again
    before the leader finder had resolved auto.offset.reset; later A comes back at 171, where
    its previous holder stopped.  The reset still under way for the first holding must neither
    move the consumed position (reported to the coordinator, which would commit 0) nor make
    the fetcher read A from 0 again."""
    conns, manager, buffer = _resolving_a()
    try:
        # StopFetcher v1 naming A (as Consumer.stop_fetchers does it), then StartFetcher v1 giving it back
        manager.remove({A})
        buffer.revoke({A})
        manager.add({A: 171}, buffer.add({A: 171}))
        manager.gate.set()
        wait_until(lambda: any(tp == A for tp, _ in conns[0].offsets), 5, message="A to be fetched")
        time.sleep(0.3)  # the finder's next rounds
        assert buffer.positions()[A] == 171
        assert {o for tp, o in conns[0].offsets if tp == A} == {171}
    finally:
        manager.stop()


def test_a_partition_taken_away_while_its_reset_runs_is_not_resolved_again():
    """A partition removed while the finder resolved its start offset is forgotten: the finder
    does not keep it (with its stale start offset) and resolve it again and again."""
    conns, manager, buffer = _resolving_a()
    try:
        manager.remove({A})
        buffer.revoke({A})
        manager.gate.set()
        time.sleep(1.0)  # several rounds of the finder (200 ms backoff)
        assert manager.resets.count(A) == 1, manager.resets
        assert A not in manager._orphans
        assert not any(tp == A for tp, _ in conns[0].offsets)
        assert A not in buffer.positions()
    finally:
        manager.stop()


def test_a_stop_that_races_a_start_waits_for_it_and_stops_its_threads(monkeypatch):
    """Closing a consumer while a StartFetcher is being served: ``stop()`` ran between ``start()``
    creating the leader finder and starting it, and failed with "cannot join thread before it is
    started" (seen in a clean-clone run); it must wait for the start and then stop what it began."""
    import spark_coord.consumer.fetcher as fetcher_module

    creating, go = threading.Event(), threading.Event()

    class SlowToStart(threading.Thread):
        def start(self):
            if self.name == "leader-finder":
                creating.set()
                assert go.wait(10), "the test never let the finder start"
            super().start()

    monkeypatch.setattr(fetcher_module.threading, "Thread", SlowToStart)
    manager, buffer = _manager(ScriptedCluster({0: ScriptedConnection(), 1: ScriptedConnection()}))
    starting = threading.Thread(target=manager.start, args=({A: 0, B: 0}, buffer.assign({A: 0, B: 0})))
    starting.start()
    assert creating.wait(10), "start() never created its leader finder"
    errors: list[BaseException] = []

    def stop():
        try:
            manager.stop()
        except BaseException as e:  # noqa: BLE001 - the failure is what the test reports
            errors.append(e)

    stopping = threading.Thread(target=stop)
    stopping.start()
    stopping.join(2.0)  # the stop that does not wait for the start fails at once
    go.set()
    starting.join(10)
    stopping.join(10)
    assert not stopping.is_alive() and errors == []
    assert not manager.running
    wait_until(lambda: not any(t.is_alive() for t in threading.enumerate()
                               if t.name == "leader-finder" or t.name.startswith("fetcher")),
               timeout=10, message="the finder and fetchers the start began to stop")


def test_a_manager_closed_starts_nothing_more():
    """A StartFetcher answered after the consumer closed must not start threads nobody stops."""
    manager, buffer = _manager(ScriptedCluster({0: ScriptedConnection()}))
    manager.close()
    manager.start({A: 0}, buffer.assign({A: 0}))
    assert not manager.running
