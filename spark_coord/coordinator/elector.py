"""``CoordinatorElector``: one coordinator among the brokers, elected in ZooKeeper (seeds 003 sections 5, 10).

Every broker tries to create the ephemeral ``/consumers/coordinator`` holding
its broker id.  The creation is one multi-op that also bumps the data version
of ``/consumers``: that version is this election's fencing token
(``zk_store.EpochCheck``), and the election node's czxid is the *epoch*
stamped on every coordinator request (monotonic across elections).

Losers keep one ``DataWatch`` on the election node (one node: no herd of
watchers on children) and try again when it is deleted.  On SUSPENDED or LOST
the coordinator resigns at once (``on_resigned``), since its node may be gone;
once connected again it re-elects (handleNewSession) -- after a SUSPENDED in
which the session survived, it first deletes its own old node, so that the
new term gets a new epoch and a new fencing token.

All callbacks (``on_elected(epoch)`` coroutine or function, ``on_resigned()``)
run on the event loop; blocking ZooKeeper calls run in the default executor.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError, RolledBackError, ZookeeperError
from kazoo.protocol.states import ZnodeStat

from spark_coord.coordinator.zk_store import EpochCheck
from spark_coord.zk import client as zkclient
from spark_coord.zk import paths

log = logging.getLogger(__name__)


class CoordinatorElector:
    """Elects this broker as coordinator whenever the role is free."""

    def __init__(self, client: KazooClient, broker_id: int, loop: asyncio.AbstractEventLoop,
                 on_elected: Callable[[int], Any], on_resigned: Callable[[], Any]):
        self.client = client
        self.broker_id = paths.validate_broker_id(broker_id)
        self.loop = loop
        self.on_elected = on_elected
        self.on_resigned = on_resigned
        self.check: EpochCheck | None = None
        self._running = False
        self._electing = False
        self._again = False
        self._remove_hooks: Callable[[], None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def is_coordinator(self) -> bool:
        return self.check is not None

    @property
    def epoch(self) -> int | None:
        return self.check.epoch if self.check else None

    def current_check(self) -> EpochCheck | None:
        """The fencing token for ``ZkGroupStore`` (None while not coordinator)."""
        return self.check

    # ------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Try to become coordinator now, and whenever the role becomes free."""
        self._running = True
        await self._run(self.client.ensure_path, paths.CONSUMERS)
        self._remove_hooks = zkclient.add_state_hooks(self.client, self.loop, on_suspended=self._lost,
                                                      on_lost=self._lost, on_connected=self._connected)
        self.client.DataWatch(paths.COORDINATOR, zkclient.to_loop(self.loop, self._on_node))
        await self.elect()

    async def stop(self) -> None:
        """Resign and give the role up (delete our election node)."""
        self._running = False
        if self._remove_hooks:
            self._remove_hooks()
            self._remove_hooks = None
        held = self.check
        if held is not None:
            self._resign("stopping")
            try:
                await self._run(self._delete_own)
            except ZookeeperError as e:
                log.debug("could not delete the election node on stop: %s", e)
        for t in list(self._tasks):
            t.cancel()

    # ------------------------------------------------------------ events (loop thread)

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_node(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if not self._running:
            return
        if stat is None:
            log.info("coordinator election node is gone; broker %d tries to take over", self.broker_id)
            self._spawn(self.elect())
        elif self.check is not None and stat.czxid != self.check.epoch:
            self._resign(f"election node now belongs to epoch {stat.czxid}")

    def _lost(self) -> None:
        self._resign("ZooKeeper connection suspended or session lost")

    def _connected(self, new_session: bool) -> None:
        if self._running and self.check is None:
            self._spawn(self.elect())

    def _resign(self, why: str) -> None:
        if self.check is None:
            return
        log.warning("broker %d resigns as coordinator (epoch %d): %s", self.broker_id, self.check.epoch, why)
        self.check = None
        self._call(self.on_resigned)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            result = fn(*args)
            if inspect.isawaitable(result):
                self._spawn(result)
        except Exception:
            log.exception("election callback %s failed", getattr(fn, "__name__", fn))

    # ------------------------------------------------------------ election

    async def elect(self) -> bool:
        """One election attempt; True when this broker is (now) coordinator."""
        if not self._running or self.check is not None:
            return self.check is not None
        if self._electing:
            self._again = True
            return False
        self._electing = True
        try:
            while True:
                self._again = False
                try:
                    check = await self._run(self._try_create)
                except ZookeeperError as e:
                    log.info("election attempt of broker %d failed: %s", self.broker_id, e.__class__.__name__)
                    check = None
                if check is not None:
                    if not self._running:  # stopped meanwhile
                        await self._run(self._delete_own)
                        return False
                    self.check = check
                    log.info("broker %d is the coordinator (epoch %d)", self.broker_id, check.epoch)
                    self._call(self.on_elected, check.epoch)
                    return True
                if not self._again:
                    return False
        finally:
            self._electing = False

    def _try_create(self) -> EpochCheck | None:
        """Blocking: create our election node + bump /consumers, atomically; None if someone holds it."""
        stat = self.client.exists(paths.COORDINATOR)
        session = self.client.client_id[0] if self.client.client_id else None
        if stat is not None:
            if stat.ephemeralOwner != session:
                return None
            # our own node from before a SUSPENDED: start a new term with a new epoch
            try:
                self.client.delete(paths.COORDINATOR, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
        txn = self.client.transaction()
        txn.create(paths.COORDINATOR, str(self.broker_id).encode(), ephemeral=True)
        txn.set_data(paths.CONSUMERS, b"")
        results = txn.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            return None
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r
        node = self.client.exists(paths.COORDINATOR)
        consumers = results[1]
        if node is None or node.ephemeralOwner != session:
            return None  # lost it again already (session trouble)
        return EpochCheck(epoch=node.czxid, coordinator_version=node.version, consumers_version=consumers.version)

    def _delete_own(self) -> None:
        stat = self.client.exists(paths.COORDINATOR)
        session = self.client.client_id[0] if self.client.client_id else None
        if stat is not None and stat.ephemeralOwner == session:
            try:
                self.client.delete(paths.COORDINATOR, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(None, functools.partial(fn, *args))
