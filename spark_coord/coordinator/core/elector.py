"""``CoordinatorElector``: one coordinator among the brokers, elected in ZooKeeper (seeds 003 sections 5, 10).

Every broker tries to create the ephemeral ``/consumers/coordinator`` holding
its broker id.  The creation is one multi-op that also bumps the data version
of ``/consumers``: that version is this election's fencing token
(``zk_store.EpochCheck``), and the election node's czxid is the *epoch*
stamped on every coordinator request (monotonic across elections).

Losers keep one watch on the election node (one node: no herd of watchers on
children) and try again when it is deleted.  The watch is set asynchronously
(``exists_async``): the event loop never waits on ZooKeeper.

Connection states (``zk.client``).  The role is fenced -- every store write is a
multi that checks the election node and the ``/consumers`` version -- so a lost
*connection* is not a lost role:

* SUSPENDED: the coordinator keeps serving its members; its ZooKeeper writes
  wait in kazoo's queue and go out, still fenced, once the connection is back.
  If it is not back within the session timeout, the servers have expired the
  session by then: the coordinator resigns without waiting to hear it.
* CONNECTED with the same session: nothing changed (same epoch, same token).
* LOST (session expired): resign at once -- the node is gone and another broker
  may coordinate already -- and stand again once connected with a new session
  (handleNewSession).  Standing again on the same session (after resigning
  while suspended) first deletes our own old node, so that the new term gets a
  new epoch and a new fencing token.

A broker restarted after a crash finds its previous run's node still there
(held by a session that has not expired yet) holding its own broker id.  A
broker id belongs to one live broker (``BrokerRegistration`` refuses to start
beside a live holder), so the holder is dead: the node is replaced at once, in
the same multi as the election, guarded by the ``/consumers`` version read
before the node, so that it can never remove a node of a later election.
The previous run's writes stay fenced (the election bumps ``/consumers``).

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
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    ZookeeperError,
)
from kazoo.protocol.states import ZnodeStat

from spark_coord.coordinator.storage.fencing import EpochCheck
from spark_coord.zk import client as zkclient
from spark_coord.zk import paths

log = logging.getLogger(__name__)

#: Attempts of one ``elect()`` while the election node or /consumers change under it.
MAX_ATTEMPTS = 5
#: How long ``stop()`` waits for ZooKeeper to delete the election node.
STOP_TIMEOUT_S = 5.0
_LOOK_AGAIN = object()


class CoordinatorElector:
    """Elects this broker as coordinator whenever the role is free."""

    def __init__(self, client: KazooClient, broker_id: int, loop: asyncio.AbstractEventLoop,
                 on_elected: Callable[[int], Any], on_resigned: Callable[[], Any], *,
                 session_timeout_ms: int | None = None, replace_stale_node: bool = True,
                 node: str = paths.COORDINATOR, fence: str = paths.CONSUMERS, guard_legacy: bool = False,
                 label: str = "coordinator"):
        """``session_timeout_ms``: how long a suspended coordinator keeps the role (default:
        the client's session timeout).  ``replace_stale_node``: replace an election node that
        holds this broker id under another session (only correct where broker ids are unique
        among live processes, as broker registration ensures).

        ``node`` / ``fence``: the election node and the node whose version each election bumps
        (a shard's ``/coordinators/shards/<n>/leader`` and ``/coordinators/shards/<n>``).
        ``guard_legacy``: the election fails while an older version's single coordinator holds
        ``/consumers/coordinator`` (created and deleted inside the election's multi), and also
        bumps ``/consumers``, so that such a coordinator is fenced at its next write."""
        self.client = client
        self.broker_id = paths.validate_broker_id(broker_id)
        self.loop = loop
        self.on_elected = on_elected
        self.on_resigned = on_resigned
        self.session_timeout_ms = session_timeout_ms or zkclient.session_timeout_ms(client)
        self.replace_stale_node = replace_stale_node
        self.node = node
        self.fence = fence
        self.guard_legacy = guard_legacy
        self.label = label
        #: True after an attempt found the legacy node held (an older coordinator serves every group).
        self.legacy_held = False
        self.check: EpochCheck | None = None
        self.suspended = False
        self._running = False
        self._electing = False
        self._again = False
        self._remove_hooks: Callable[[], None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
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
        if self.fence != paths.CONSUMERS:
            await self._run(self.client.ensure_path, self.fence)
        self._remove_hooks = zkclient.add_state_hooks(self.client, self.loop, on_suspended=self._suspended,
                                                      on_lost=self._lost, on_connected=self._connected)
        self._watch_node()
        await self.elect()

    async def stop(self) -> None:
        """Resign and give the role up (delete our election node, waiting at most ``STOP_TIMEOUT_S``:
        without a connection the node goes with the session)."""
        self._running = False
        self._cancel_expiry()
        if self._remove_hooks:
            self._remove_hooks()
            self._remove_hooks = None
        held = self.check
        if held is not None:
            self._resign("stopping")
            try:
                if not self.client.connected:
                    raise ConnectionLoss("not connected")
                await asyncio.wait_for(self._run(self._delete_own), STOP_TIMEOUT_S)
            except (ZookeeperError, asyncio.TimeoutError) as e:
                log.info("broker %d could not delete its election node while stopping (%s); it goes with the "
                         "ZooKeeper session", self.broker_id, e.__class__.__name__)
        for t in list(self._tasks):
            t.cancel()

    # ------------------------------------------------------------ events (loop thread)

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _watch_node(self) -> None:
        """Ask for the election node's stat with a watch set: the answer reaches ``_on_node`` on the
        loop, and the watch's event asks again.  Asynchronous, through kazoo's queue: nothing waits
        while ZooKeeper is out of reach (kazoo's ``DataWatch`` reads at once, in the caller's thread,
        and held the event loop for as long as the link was cut).  An answer that fails (connection
        lost) is asked again by ``_connected``; kazoo keeps one watcher per function and node, so
        asking twice never doubles the events."""
        if not self._running:
            return
        try:
            answer = self.client.exists_async(self.node, watch=self._node_changed)
        except ZookeeperError as e:  # session lost or client closed: _connected asks again
            log.debug("broker %d cannot watch %s yet: %s", self.broker_id, self.node, e.__class__.__name__)
            return
        answer.rawlink(self._node_answered)

    def _node_changed(self, event: Any) -> None:  # kazoo's event thread
        zkclient.to_loop(self.loop, self._watch_node)()

    def _node_answered(self, answer: Any) -> None:  # kazoo's thread
        if not answer.successful():
            log.debug("broker %d: watching %s failed (%s); asked again once connected", self.broker_id, self.node,
                      answer.exception.__class__.__name__)
            return
        zkclient.to_loop(self.loop, self._on_node)(answer.value)

    def _on_node(self, stat: ZnodeStat | None) -> None:
        if not self._running:
            return
        if stat is None:
            log.info("coordinator election node is gone; broker %d tries to take over", self.broker_id)
            self._spawn(self.elect())
        elif self.check is not None and stat.czxid > self.check.epoch:
            # a later election's node (an answer about an older node can arrive after our election:
            # watch answers come through kazoo's callback thread, our election's through the executor)
            self._resign(f"election node now belongs to epoch {stat.czxid}")

    def _suspended(self) -> None:
        self.suspended = True
        if self.check is None or self._expiry is not None:
            return
        log.warning("broker %d lost its ZooKeeper connection; it keeps coordinating (epoch %d) with its "
                    "ZooKeeper writes on hold, and resigns unless the session resumes within %d ms",
                    self.broker_id, self.check.epoch, self.session_timeout_ms)
        self._expiry = self.loop.call_later(self.session_timeout_ms / 1000, self._suspended_too_long)

    def _suspended_too_long(self) -> None:
        self._expiry = None
        if self.suspended:
            self._resign(f"no ZooKeeper connection for the session timeout ({self.session_timeout_ms} ms): "
                         "the session has expired on the servers")

    def _cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _lost(self) -> None:
        self.suspended = False
        self._cancel_expiry()
        self._resign("ZooKeeper session expired")

    def _connected(self, new_session: bool) -> None:
        self.suspended = False
        self._cancel_expiry()
        self._watch_node()  # a watch asked for while disconnected may have failed; a new session has none
        if new_session:
            self._resign("ZooKeeper session replaced")
        elif self.check is not None:
            log.info("broker %d: ZooKeeper connection resumed with the same session; still the coordinator "
                     "(epoch %d)", self.broker_id, self.check.epoch)
        if self._running and self.check is None:
            self._spawn(self.elect())

    def _resign(self, why: str) -> None:
        if self.check is None:
            return
        log.warning("%d resigns as %s (epoch %d): %s", self.broker_id, self.label, self.check.epoch, why)
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
            for _ in range(MAX_ATTEMPTS):
                self._again = False
                try:
                    check = await self._run(self._try_create)
                except ZookeeperError as e:
                    log.info("election attempt of broker %d failed: %s", self.broker_id, e.__class__.__name__)
                    check = None
                if check is _LOOK_AGAIN:
                    continue
                if isinstance(check, EpochCheck):
                    if not self._running:  # stopped meanwhile
                        await self._run(self._delete_own)
                        return False
                    self.check = check
                    log.info("%d is the %s (epoch %d)", self.broker_id, self.label, check.epoch)
                    self._call(self.on_elected, check.epoch)
                    return True
                if not self._again:
                    return False
            return False  # the node keeps changing: its data watch brings us back
        finally:
            self._electing = False

    def _try_create(self) -> EpochCheck | object | None:
        """Blocking: create our election node + bump /consumers, atomically; None if someone holds it.

        The /consumers version is read BEFORE the node and the multi sets /consumers at
        exactly that version: if any election happened after the read, the multi fails as a
        whole, so the node we replace (our own from an earlier term, or this broker's
        previous run's) is the node we looked at, never a newer election's.
        """
        consumers = self.client.exists(self.fence)
        if consumers is None:
            raise NoNodeError(self.fence)
        session = self.client.client_id[0] if self.client.client_id else None
        try:
            data, stat = self.client.get(self.node)
        except NoNodeError:
            data, stat = None, None
        txn = self.client.transaction()
        if self.guard_legacy:  # fails as a whole while an older version's coordinator holds it
            txn.create(paths.COORDINATOR, b"")
            txn.delete(paths.COORDINATOR)
        if stat is not None:
            if stat.ephemeralOwner == session:
                log.info("broker %d replaces its own election node of an earlier term", self.broker_id)
            elif self.replace_stale_node and data is not None and data.strip() == str(self.broker_id).encode():
                log.info("broker %d replaces the election node of its previous run (session 0x%x)",
                         self.broker_id, stat.ephemeralOwner)
            else:
                return None
            txn.delete(self.node, version=stat.version)
        txn.create(self.node, str(self.broker_id).encode(), ephemeral=True)
        txn.set_data(self.fence, b"", version=consumers.version)
        bump_at = len(txn.operations) - 1
        if self.guard_legacy:
            txn.set_data(paths.CONSUMERS, b"")
        results = txn.commit()
        if self.guard_legacy and isinstance(results[0], NodeExistsError):
            if not self.legacy_held:
                log.warning("%s is held by a coordinator of an older version: %d does not stand for %s until "
                            "it is gone", paths.COORDINATOR, self.broker_id, self.label)
            self.legacy_held = True
            return None
        self.legacy_held = False
        if any(isinstance(r, (NodeExistsError, NoNodeError, BadVersionError)) for r in results):
            return _LOOK_AGAIN  # the election moved on while we looked
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r
        node = self.client.exists(self.node)
        bumped = results[bump_at]
        if node is None or node.ephemeralOwner != session:
            return None  # lost it again already (session trouble)
        return EpochCheck(epoch=node.czxid, coordinator_version=node.version, consumers_version=bumped.version,
                          leader_path=self.node, fence_path=self.fence)

    def _delete_own(self) -> None:
        stat = self.client.exists(self.node)
        session = self.client.client_id[0] if self.client.client_id else None
        if stat is not None and stat.ephemeralOwner == session:
            try:
                self.client.delete(self.node, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(None, functools.partial(fn, *args))
