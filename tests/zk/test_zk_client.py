"""spark_coord.zk.client and .testing against the real ZooKeeper: connect, chroot,
session expiry, and kazoo events handed into asyncio."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from helpers import free_port, wait_until
from kazoo.client import KazooState
from kazoo.exceptions import NoNodeError, SessionExpiredError

from spark_coord.zk import client as zkclient
from spark_coord.zk import paths
from spark_coord.zk.testing import expire_session


def test_split_chroot():
    assert zkclient.split_chroot("h:1") == ("h:1", None)
    assert zkclient.split_chroot("h:1,g:2/a/b") == ("h:1,g:2", "/a/b")
    assert zkclient.split_chroot("h:1/a/") == ("h:1", "/a")
    for bad in ("", "   ", "/a", "h:1,,g:2", "h:1/a//b"):
        with pytest.raises(ValueError):
            zkclient.split_chroot(bad)


def test_chroot_isolates_and_exists(zk, zk_connect, zookeeper):
    zk.ensure_path(paths.BROKER_IDS)
    zk.create(paths.broker(1), b"x", ephemeral=True)
    _, chroot = zkclient.split_chroot(zk_connect)
    root = zkclient.connect(zookeeper.connect_string, connection_timeout_ms=10000)
    try:
        assert root.exists(chroot + paths.broker(1)) is not None
        assert root.exists(paths.broker(1)) is None  # nothing leaks outside the chroot
    finally:
        zkclient.close(root)


def test_connect_create_chroot(zookeeper, zk_connect):
    connect = zk_connect + "/deeper/still"
    c = zkclient.connect(connect, connection_timeout_ms=10000, create_chroot=True)
    try:
        assert c.exists("/") is not None
        c.create("/x", b"1")
    finally:
        zkclient.close(c)


def test_connect_to_nothing_fails_fast_with_clear_error():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(zkclient.ZooKeeperUnavailable, match=f"127.0.0.1:{port}"):
        zkclient.connect(f"127.0.0.1:{port}", connection_timeout_ms=500)
    assert time.monotonic() - t0 < 5


def test_command_retry_does_not_hide_session_expiry(zk):
    def boom():
        raise SessionExpiredError()
    with pytest.raises(SessionExpiredError):
        zk.retry(boom)


def test_expire_session_removes_ephemeral_nodes(zk, zk_connect):
    zk.create("/mine", b"ephemeral", ephemeral=True)
    zk.create("/kept", b"persistent")
    observer = zkclient.connect(zk_connect, connection_timeout_ms=10000)
    try:
        assert observer.exists("/mine") is not None
        old_session = zk.client_id[0]
        states: list[str] = []
        zk.add_listener(states.append)
        new_session = expire_session(zk, timeout=20)
        assert new_session is not None and new_session != old_session
        assert KazooState.LOST in states
        # the server itself dropped the node: another session no longer sees it
        wait_until(lambda: observer.exists("/mine") is None, 10, message="ephemeral node of the expired session to go")
        assert zk.connected and zk.exists("/mine") is None
        assert observer.get("/kept")[0] == b"persistent"
        zk.create("/mine", b"again", ephemeral=True)  # the new session works
    finally:
        zkclient.close(observer)


def test_expire_session_requires_a_connected_client(zk_connect):
    c = zkclient.connect(zk_connect, connection_timeout_ms=10000)
    zkclient.close(c)
    with pytest.raises(RuntimeError):
        expire_session(c)


def test_to_loop_runs_watch_callbacks_on_the_loop_thread(zk):
    zk.create("/w", b"0")

    async def main() -> list[tuple[bytes | None, int]]:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        seen: list[tuple[bytes | None, int]] = []
        got_two = asyncio.Event()

        def on_data(data, _stat):  # must run on the loop thread
            assert threading.get_ident() == loop_thread
            seen.append((data, threading.get_ident()))
            if len(seen) >= 2:
                got_two.set()

        zk.DataWatch("/w", zkclient.to_loop(loop, on_data))
        await loop.run_in_executor(None, zk.set, "/w", b"1")  # blocking ZK calls off the loop
        await asyncio.wait_for(got_two.wait(), 10)
        return seen

    seen = asyncio.run(main())
    assert [d for d, _ in seen[:2]] == [b"0", b"1"]


def test_to_loop_after_loop_closed_is_dropped_quietly(caplog):
    loop = asyncio.new_event_loop()
    loop.close()
    calls: list[int] = []

    def late_event() -> None:
        calls.append(1)

    with caplog.at_level(logging.DEBUG, logger="spark_coord.zk.client"):
        assert zkclient.to_loop(loop, late_event)() is None  # no exception in the caller's (kazoo's) thread
    assert calls == []
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "late_event" in caplog.text and "event loop is closed" in caplog.text


def test_state_hooks_report_lost_and_new_session(zk):
    async def main() -> list[tuple[str, object]]:
        loop = asyncio.get_running_loop()
        events: list[tuple[str, object]] = []
        reconnected = asyncio.Event()

        def on_connected(new_session: bool) -> None:
            events.append(("connected", new_session))
            reconnected.set()

        remove = zkclient.add_state_hooks(zk, loop, on_suspended=lambda: events.append(("suspended", None)),
                                          on_lost=lambda: events.append(("lost", None)), on_connected=on_connected)
        await loop.run_in_executor(None, expire_session, zk, 20)
        await asyncio.wait_for(reconnected.wait(), 10)
        remove()
        return events

    events = asyncio.run(main())
    assert ("lost", None) in events
    assert events[-1] == ("connected", True)
    assert events.index(("lost", None)) < events.index(("connected", True))


@pytest.mark.filterwarnings("ignore:No chroot path exists")
def test_missing_chroot_without_create_fails_on_use(zookeeper):
    c = zkclient.connect(f"{zookeeper.connect_string}/never-created-{time.time_ns()}", connection_timeout_ms=10000)
    try:
        with pytest.raises(NoNodeError):
            c.create("/x", b"")
    finally:
        zkclient.close(c)


def test_state_hooks_report_a_cut_connection_and_the_same_session_back(zk_connect):
    from spark_coord.zk.testing import CuttableProxy

    hosts, chroot = zkclient.split_chroot(zk_connect)
    with CuttableProxy.to(hosts) as proxy:
        client = zkclient.connect(f"{proxy.address}{chroot}", session_timeout_ms=4000, connection_timeout_ms=10000)
        session = client.client_id[0]
        client.create("/mine", b"", ephemeral=True)
        try:
            async def main() -> list[tuple[str, object]]:
                loop = asyncio.get_running_loop()
                events: list[tuple[str, object]] = []
                back = asyncio.Event()

                def on_connected(new_session: bool) -> None:
                    events.append(("connected", new_session))
                    back.set()

                remove = zkclient.add_state_hooks(client, loop, on_suspended=lambda: events.append(("suspended", None)),
                                                  on_lost=lambda: events.append(("lost", None)),
                                                  on_connected=on_connected)
                proxy.cut()
                await asyncio.sleep(1.0)  # a quarter of the session: kazoo keeps trying meanwhile
                proxy.restore()
                await asyncio.wait_for(back.wait(), 10)
                remove()
                return events

            assert asyncio.run(main()) == [("suspended", None), ("connected", False)]
            assert client.client_id[0] == session and client.exists("/mine") is not None  # ephemeral kept
        finally:
            zkclient.close(client)


def test_children_watch_rides_through_session_expiry_without_a_traceback(zk, zk_connect, caplog):
    """A child event that kazoo re-reads while the session expires raised SessionExpiredError in
    kazoo's callback thread (logged there with a traceback); the watch must stay quiet and keep
    delivering once the new session is up."""
    other = zkclient.connect(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
    other.ensure_path("/kids")
    seen: list[list[str]] = []
    zkclient.ChildrenWatch(zk, "/kids", lambda children: seen.append(sorted(children)))
    try:
        with caplog.at_level(logging.INFO):
            for round_ in range(6):
                stop = threading.Event()

                def churn(r: int = round_, stop: threading.Event = stop) -> None:
                    n = 0
                    while not stop.is_set():
                        other.create(f"/kids/r{r}-{n}")
                        n += 1
                        time.sleep(0.005)

                t = threading.Thread(target=churn)
                t.start()
                try:
                    expire_session(zk, 20)
                finally:
                    stop.set()
                    t.join()
            other.create("/kids/last")
            wait_until(lambda: seen and "last" in seen[-1], 10, message="the watch to see a child made afterwards")
        tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
        assert not tracebacks, [r.getMessage() for r in tracebacks]
    finally:
        zkclient.close(other)
