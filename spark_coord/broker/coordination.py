"""The coordinator inside a broker: coordinator shards, member channels, and the front door's handlers.

Every broker runs a ``CoordinationService``.  The groups are spread over
``coordinator.shards`` shards (``coordinator.shards``: a group's shard is Kafka's
``__consumer_offsets`` partition of it), each elected and fenced on its own in
ZooKeeper (``/coordinators/shards/<n>/leader``, ``/coordinators/shards/<n>``).  A
broker with ``coordinator.enable`` registers as a live coordinator
(``/coordinators/ids/<id>``) and every live coordinator computes the same placement
of the shards over the live coordinators (``shards.place``: sticky, balanced within
one shard).  For each shard it is given it holds a ``ShardRole``: an elector, a
``Coordinator`` whose store loads and writes only that shard's groups (fenced by that
shard's election), and its Kafka doors.  A shard it holds that the placement gives
to another live coordinator is handed over: its offsets are committed, its election
node deleted and its members' channels closed; members rediscover and are taken
back by the new holder with their claims (the failover path).

The service is the router of the front door (``handlers.door.FrontDoor``):
``for_group(group_id)`` is the role serving the group here, or the error to answer
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).  ClusterMetadata and
FindCoordinator name the holder of the group's shard, as the shards' election
nodes say (every broker watches them, coordinator or not).

The broker's connection objects become the coordinators' ``MemberChannel``\\ s:
after RegisterConsumer the group's coordinator pushes Ping / StopFetcher /
StartFetcher down the member's own connection, and the member's answers come back
through ``Connection.send_request`` futures, each to the callback of the request it
answers.

A broker that stops commits the offsets each of its shards holds before it gives
them up (``Coordinator.shutdown``).  Topic changes seen by the broker's ZooKeeper
view and changes of topic ACLs are handed to every active shard.

Migration: while ``/consumers/coordinator`` exists (an older version's single
coordinator serves every group) no shard is elected: each shard election's multi
creates and deletes that node, and bumps ``/consumers``, which fences such a
coordinator at its next write.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from typing import Any, Awaitable, Callable

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from spark_coord.broker.connection import DEFERRED, Connection
from spark_coord.broker.handlers.base import Handler
from spark_coord.broker.txn_markers import MarkerChannel, TxnRoutes, pending_partitions
from spark_coord.coordinator.core.channel import ChannelClosed, OnAnswer
from spark_coord.coordinator.core.clock import LoopTimer, SystemClock
from spark_coord.coordinator.core.config import CoordinatorConfig
from spark_coord.coordinator.core.coordinator import Coordinator
from spark_coord.coordinator.core.elector import CoordinatorElector
from spark_coord.coordinator.core.metrics import NO_METRICS
from spark_coord.coordinator.core.shards import place, shard_of
from spark_coord.coordinator.doors.classic import ClassicGroups
from spark_coord.coordinator.doors.consumer_group import ConsumerGroups
from spark_coord.coordinator.doors.group_admin import GroupAdmin
from spark_coord.coordinator.doors.group_offsets import GroupOffsets
from spark_coord.coordinator.doors.share_group import ShareGroups
from spark_coord.coordinator.handlers import group_apis
from spark_coord.coordinator.storage.store import StoreError
from spark_coord.coordinator.storage.zk_store import ZkGroupStore, read_committed_offsets
from spark_coord.coordinator.txn.coordinator import TxnCoordinator, TxnSettings
from spark_coord.coordinator.txn.store import TxnStore
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import ResourceType
from spark_coord.wire import coordinator as api
from spark_coord.zk import model, paths
from spark_coord.zk.client import to_loop

log = logging.getLogger(__name__)

#: A shard free for this long is taken by any live coordinator, not only by its target.
FREE_SHARD_GRACE_S = 10.0
#: First and longest wait before loading an elected shard again after its load failed (seconds).
ACTIVATE_RETRY_S = (0.2, 5.0)
#: How long OffsetFetch for a group this process does not serve waits on ZooKeeper for its offsets.
STORED_OFFSETS_TIMEOUT_S = 3.0


class BrokerMemberChannel:
    """A registered member's broker connection, as the coordinator's ``MemberChannel``."""

    def __init__(self, conn: Connection, service: "CoordinationService", role: "ShardRole"):
        self.conn = conn
        self.service = service
        self.role = role  # the shard of the member's group
        self.peer = conn.peer

    def send(self, api_key: int, body: dict, on_answer: OnAnswer, version: int = 0) -> None:
        if self.conn.closed:
            raise ChannelClosed(f"{self.peer}: connection closed")
        if api_key == api.START_FETCHER and "brokers" in body:  # the endpoints of the member's listener
            body = dict(body, brokers=[{"node_id": i, "host": h, "port": p} for i, h, p in
                                       self.service.live_brokers(self.conn.auth.listener_name)])
        fut = self.conn.send_request(api_key, version, body)
        fut.add_done_callback(lambda f: self._answered(f, on_answer))

    def _answered(self, fut: asyncio.Future, on_answer: OnAnswer) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return  # a closed connection is reported through on_channel_closed
        if self.role.coordinator.active:
            on_answer(fut.result())

    def close(self) -> None:
        if not self.conn.closed:
            asyncio.get_running_loop().create_task(self.conn.close())

    def describe(self) -> None:
        return None  # a member of our own protocol: its registry entry describes it

    def __repr__(self) -> str:
        return f"MemberChannel({self.peer})"


class ShardRole:
    """One shard as this process stands for or holds it: elector, coordinator, Kafka doors."""

    def __init__(self, service: "CoordinationService", shard: int):
        self.service = service
        self.shard = shard
        loop = asyncio.get_running_loop()
        broker = service.broker
        count = service.shard_count
        self.elector = CoordinatorElector(broker.zk, broker.broker_id, loop, self._elected, self._lost_election,
                                          node=paths.shard_leader(shard), fence=paths.shard(shard),
                                          guard_legacy=True, label=f"coordinator of shard {shard}")
        observer = service.observer
        store = service._make_store(self.elector.current_check, lambda g: shard_of(g, count) == shard)
        self.coordinator = Coordinator(
            CoordinatorConfig.from_broker_config(broker.config), observer.timed(store), LoopTimer(loop),
            SystemClock(), service.live_brokers, on_fenced=self._fenced, metrics=observer)
        self.coordinator.on_committed = service.on_committed
        self.consumer = ConsumerGroups(self.coordinator)
        self.classic = ClassicGroups(self.coordinator, self.consumer)
        self.offsets = GroupOffsets(self.coordinator, self.classic, self.consumer)
        self.admin = GroupAdmin(self.coordinator, self.classic.initial)
        self.share = ShareGroups(self.coordinator, service.share_timeouts)
        #: The transaction coordinator of the transactional ids that hash to this shard (None in a
        #: process without producer ids to hand out: a standalone coordinator).
        self.txn: TxnCoordinator | None = None
        if service.txn_settings is not None:
            self.txn = TxnCoordinator(
                TxnStore(broker.zk, self.elector.current_check, lambda t: shard_of(t, count) == shard),
                broker.ctx.producers.ids.next_id, service.txn_routes.leader_of, service.markers.send,
                self._coordinator_epoch, service.txn_settings, label=f"transactions of shard {shard}",
                group_partition=service.txn_routes.group_partition)

    def _coordinator_epoch(self) -> int:
        """The epoch the markers of this shard carry: the data version of the shard's fencing node as this
        election left it (every election of the shard bumps it, and it fits Kafka's int32, where the
        election node's czxid does not)."""
        check = self.elector.current_check()
        return check.consumers_version if check is not None else -1

    def txn_not_serving(self) -> ErrorCode | None:
        """Why this shard's transactional ids are not served here now (None: they are)."""
        if self.txn is not None and self.txn.active and self.coordinator.active:
            return None
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.elected else ErrorCode.NOT_COORDINATOR

    @property
    def elected(self) -> bool:
        return self.elector.check is not None

    def not_serving(self) -> ErrorCode | None:
        if self.coordinator.active:
            return None
        if self.elected:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # elected, restoring the groups
        return ErrorCode.NOT_COORDINATOR

    async def start(self) -> None:
        await self.elector.start()

    async def stop(self, commit: bool = True) -> None:
        """Give the shard up: commit what it holds while still elected, delete the election node."""
        if commit:
            await self.coordinator.shutdown()
        await self.elector.stop()
        await self._resigned()

    async def _elected(self, epoch: int) -> None:
        log.info("%d coordinates shard %d (epoch %d)", self.service.broker.broker_id, self.shard, epoch)
        delay = ACTIVATE_RETRY_S[0]
        while True:
            try:
                if self.txn is not None:  # first: a shard serving its groups serves its transactional ids
                    await self.txn.activate()
                await self.offsets.load_pending()  # before the groups are served: require_stable sees them
                await self.coordinator.activate(epoch)
                break
            except StoreError as e:
                # ZooKeeper out of reach while loading (ConnectionLoss): the election may still be ours
                # (the session resumes), and a shard elected but never loaded would answer its groups
                # COORDINATOR_LOAD_IN_PROGRESS for ever -- load it again while that election is held
                if self.elector.epoch != epoch:
                    return
                log.warning("%d could not load shard %d (epoch %d): %s; trying again in %.1f s",
                            self.service.broker.broker_id, self.shard, epoch, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, ACTIVATE_RETRY_S[1])
                if self.elector.epoch != epoch:
                    return
        self.service._topics_changed_in(self, self.service.broker.view)
        # placement may have given the shard to another coordinator while the election ran (its
        # node's watch fired before it was won): look again now that it is held
        self.service._place()

    async def _lost_election(self) -> None:
        self.service.resigned(self)
        await self._resigned()

    async def _resigned(self) -> None:
        if self.txn is not None:
            await self.txn.deactivate()
        await self.coordinator.deactivate()
        self.offsets.reset_pending()
        self.classic.reset()
        self.consumer.reset()
        self.share.reset()

    def _fenced(self) -> None:
        # The coordinator drops its state itself; the elector sees the election node change
        # hands (its data watch) and resigns, then stands again on its own session.
        log.warning("%d was fenced as coordinator of shard %d by a newer election", self.service.broker.broker_id,
                    self.shard)


class CoordinationService:
    """Coordinator shards + the front door of one broker (a ``handlers.door.FrontDoor``)."""

    deferred = DEFERRED
    #: Brokers register in /coordinators/ids themselves; a standalone coordinator's process does.
    register_self = True

    def __init__(self, broker):
        self.broker = broker
        #: Where a transaction's markers go, and the markers of groups' offsets taken here.
        self.txn_routes = TxnRoutes(self)
        self.enabled: bool = broker.config.get("coordinator.enable", True)
        self.configured_shards: int = broker.config.get("coordinator.shards", 50)
        #: The cluster's shard count, from /coordinators/shards (None until known).
        self.shard_count: int | None = None
        #: The shards this process stands for or holds.
        self.shards: dict[int, ShardRole] = {}
        #: Each shard's holder and epoch, as its election node says.
        self.holders: dict[int, tuple[int, int]] = {}
        #: Live coordinators (/coordinators/ids): id -> registration (endpoints).
        self.coordinators: dict[int, model.BrokerInfo] = {}
        self.legacy_held = False
        self.observer = NO_METRICS
        self.on_committed: Callable[[str, dict], None] | None = None
        ctx = getattr(broker, "ctx", None)
        if ctx is not None:  # WriteTxnMarkers hands the markers of __consumer_offsets partitions here
            ctx.group_marker = self.txn_routes.group_marker
        self._free_since: dict[int, float] = {}
        self._leaving: set[int] = set()
        #: Shards this process handed over and the new holder has not won yet: shard -> (the coordinator
        #: it went to, the epoch of the election node given up, when).  Until ZooKeeper shows a new
        #: election (or the new holder leaves, or FREE_SHARD_GRACE_S passes) placement counts the shard
        #: as that coordinator's, so this process does not stand for it again on a stale view of its
        #: own deleted node and win it back before the new holder could.
        self._handed: dict[int, tuple[int, int | None, float]] = {}
        self._recheck: asyncio.TimerHandle | None = None
        self._running = False
        self._registration = None
        self._watches: list[Any] = []
        #: Connection id -> a future done when it closes (JoinGroups waiting on it stop waiting).
        self._conn_closed: dict[int, asyncio.Future] = {}
        #: Connection id -> the member channel made for it at its first RegisterConsumer.
        self._member_channels: dict[int, BrokerMemberChannel] = {}
        self._answers: set[asyncio.Task] = set()
        self._tasks: set[asyncio.Task] = set()
        #: The transaction coordinators' settings; None where there is no producer id block to hand ids
        #: from (a standalone coordinator: transactional ids are refused there).
        self.txn_settings: TxnSettings | None = None
        ctx = getattr(broker, "ctx", None)
        if getattr(ctx, "producers", None) is not None:
            self.txn_settings = TxnSettings(
                max_timeout_ms=broker.config.get("transaction.max.timeout.ms", 900000),
                abort_interval_s=broker.config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                                                   10000) / 1000,
                id_expiration_ms=broker.config.get("transactional.id.expiration.ms", 604800000))
            ctx.transactions = self  # InitProducerId with a transactional id is answered through for_transaction
        #: WriteTxnMarkers to the partitions' leaders, for this process's transaction coordinators.
        self.markers = MarkerChannel(broker)

    # ------------------------------------------------------------------ compatibility views
    def share_timeouts(self, group_id: str) -> tuple[int, int] | None:
        """A share group's own session timeout and heartbeat interval (its group configs
        share.session.timeout.ms, share.heartbeat.interval.ms), None where the broker has no group configs."""
        configs = getattr(getattr(self.broker, "ctx", None), "group_configs", None)
        if configs is None:
            return None
        c = configs.get(group_id)
        return c.share_session_timeout_ms, c.share_heartbeat_interval_ms

    @property
    def coordinator(self) -> Coordinator | None:
        """The coordinator of shard 0 when this process holds it (None otherwise)."""
        role = self.shards.get(0)
        return role.coordinator if role is not None else None

    @property
    def elector(self) -> CoordinatorElector | None:
        """The elector of shard 0 when this process stands for it (None otherwise)."""
        role = self.shards.get(0)
        return role.elector if role is not None else None

    def resigned(self, role: ShardRole) -> None:
        """``role``'s election was lost (fenced, session expired, stopped): a hook for observers."""

    @property
    def coordinator_id(self) -> int:
        """The holder of shard 0 (-1: none right now)."""
        return self.holders.get(0, (-1, -1))[0]

    @property
    def coordinator_epoch(self) -> int:
        return self.holders.get(0, (-1, -1))[1]

    def active_roles(self) -> list[ShardRole]:
        """The shards this process serves now, in shard order."""
        return [r for _, r in sorted(self.shards.items()) if r.coordinator.active]

    def coordinators_active(self) -> list[Coordinator]:
        return [r.coordinator for r in self.active_roles()]

    # ------------------------------------------------------------------ life cycle
    def handlers(self) -> list[Handler]:
        """The front door's APIs as this broker's request handlers."""
        return [Handler(a.api_key, a.name, functools.partial(a.handle, self), a.error_response)
                for a in group_apis()]

    async def start(self) -> None:
        """Watch the shards' holders; if enabled, register as a coordinator and take a share of the shards."""
        loop = asyncio.get_running_loop()
        zk = self.broker.zk
        self._running = True
        self.observer = getattr(getattr(self.broker, "metrics", None), "coordinator", None) or NO_METRICS  # metrics
        await loop.run_in_executor(None, zk.ensure_path, paths.COORDINATOR_IDS)
        if self.enabled:
            await loop.run_in_executor(None, self._ensure_shard_count)
            self.broker.view.add_listener(self._topics_changed)
            authorizer = self.broker.ctx.authorizer
            if getattr(authorizer, "enabled", False) and hasattr(authorizer, "add_change_callback"):
                authorizer.add_change_callback(lambda pattern: loop.call_soon_threadsafe(self._acls_changed, pattern))
            if self.register_self:
                from spark_coord.broker.registration import BrokerRegistration

                host, port = self.broker.advertised
                self._registration = BrokerRegistration(
                    zk, loop, self.broker.broker_id, host, port,
                    stale_wait=self.broker.config["zookeeper.session.timeout.ms"] / 1000 * 2 + 5,
                    endpoints=self.broker.advertised_endpoints(), path=paths.coordinator(self.broker.broker_id))
                await self._registration.start()
        self._watches.append(DataWatch(zk, paths.COORDINATOR, to_loop(loop, self._on_legacy_node)))
        self._watches.append(DataWatch(zk, paths.SHARDS, to_loop(loop, self._on_shards_node)))
        self._watches.append(ChildrenWatch(
            zk, paths.COORDINATOR_IDS,
            lambda children: self._running and loop.call_soon_threadsafe(self._set_coordinators,
                                                                         self._read_coordinators(children))))
        if self.enabled:
            await self._first_placement(self.broker.config.get("zookeeper.connection.timeout.ms", 10000) / 1000)

    async def _first_placement(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until this coordinator serves the free shards placed on it, so
        that a broker started alone coordinates from its first request on."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._serving_its_share():
            if loop.time() >= deadline:
                log.info("%d does not serve all the shards placed on it yet; going on", self.broker.broker_id)
                return
            await asyncio.sleep(0.02)

    def _serving_its_share(self) -> bool:
        me = self.broker.broker_id
        if self.legacy_held:
            return True  # nothing to serve while an older coordinator serves every group
        if self.shard_count is None or me not in self.coordinators:
            return False
        holders = {s: h[0] for s, h in self.holders.items()}
        for s, t in place(self.shard_count, set(self.coordinators), holders).items():
            if t != me or holders.get(s, me) != me:
                continue  # another's, or held by another until it hands it over
            role = self.shards.get(s)
            if role is None or not role.coordinator.active:
                return False
        return True

    def _ensure_shard_count(self) -> None:
        """Blocking: the first coordinator writes the cluster's shard count; the others read it."""
        zk = self.broker.zk
        zk.ensure_path(paths.COORDINATORS)
        data = json.dumps({"version": 1, "count": self.configured_shards}, separators=(",", ":")).encode()
        try:
            zk.create(paths.SHARDS, data)
            log.info("the cluster has %d coordinator shards (%s)", self.configured_shards, paths.SHARDS)
        except NodeExistsError:
            pass
        count = self._read_shard_count()
        if count is not None and count != self.configured_shards:
            log.warning("coordinator.shards=%d, but the cluster has %d coordinator shards (%s): using %d",
                        self.configured_shards, count, paths.SHARDS, count)

    def _read_shard_count(self) -> int | None:
        try:
            data, _ = self.broker.zk.get(paths.SHARDS)
        except NoNodeError:
            return None
        return parse_shard_count(data)

    async def stop(self) -> None:
        self._running = False
        if self._recheck is not None:
            self._recheck.cancel()
        roles = list(self.shards.values())
        self.shards.clear()
        await asyncio.gather(*(r.stop(commit=True) for r in roles), return_exceptions=True)
        if self._registration is not None:
            await self._registration.stop()
            self._registration = None
        for task in list(self._answers) + list(self._tasks):
            task.cancel()
        self._watches.clear()
        self.markers.close()

    # ------------------------------------------------------------------ ZooKeeper views (loop thread)
    def _on_legacy_node(self, data: bytes | None, stat: Any) -> None:
        held = stat is not None
        if held != self.legacy_held:
            self.legacy_held = held
            if held:
                log.warning("%s exists: a coordinator of an older version serves every group; no shard is "
                            "elected until it is gone", paths.COORDINATOR)
            else:
                for role in self.shards.values():  # their elections failed on the legacy node: again
                    if not role.elected:
                        self._spawn(role.elector.elect(), f"elect shard {role.shard}")
            self._place()

    def _on_shards_node(self, data: bytes | None, stat: Any) -> None:
        if data is None or self.shard_count is not None:
            return
        count = parse_shard_count(data)
        if count is None:
            log.warning("%s holds %r, not a shard count", paths.SHARDS, data[:60])
            return
        self.shard_count = count
        loop = asyncio.get_running_loop()
        for n in range(count):
            self._watches.append(DataWatch(self.broker.zk, paths.shard_leader(n),
                                           to_loop(loop, functools.partial(self._on_leader_node, n))))
        self._place()

    def _on_leader_node(self, shard: int, data: bytes | None, stat: Any) -> None:
        if not self._running:
            return
        if data is None or stat is None:
            self.holders.pop(shard, None)
        else:
            try:
                self.holders[shard] = (int(data.decode().strip()), stat.czxid)
            except ValueError:
                log.warning("%s holds %r, not a coordinator id", paths.shard_leader(shard), data[:40])
                self.holders.pop(shard, None)
        self._place()

    def _read_coordinators(self, children) -> dict[int, model.BrokerInfo]:
        """The registrations of ``/coordinators/ids`` (kazoo's thread: blocking reads are fine here)."""
        found: dict[int, model.BrokerInfo] = {}
        for child in children or []:
            try:
                cid = paths.parse_int_node("coordinator id", child)
                data, _ = self.broker.zk.get(paths.coordinator(cid))
                found[cid] = model.parse_broker(cid, data)
            except (KazooException, ValueError) as e:  # gone meanwhile, or not ours
                log.debug("coordinator registration %s: %s", child, e)
        return found

    def _set_coordinators(self, found: dict[int, model.BrokerInfo]) -> None:
        self.coordinators = found
        self._place()

    # ------------------------------------------------------------------ placement (loop thread)
    def _place(self) -> None:
        """Stand for the shards the placement gives this process; hand over those it gives to another."""
        if not self._running or not self.enabled or self.shard_count is None:
            return
        me = self.broker.broker_id
        live = set(self.coordinators)
        holders = {s: h[0] for s, h in self.holders.items()}
        now = time.monotonic()
        next_check: float | None = None
        for s, (to, given_up, since) in list(self._handed.items()):
            current = self.holders.get(s)
            if (current is not None and current[1] != given_up) or to not in live \
                    or now - since >= FREE_SHARD_GRACE_S:
                del self._handed[s]  # a new election happened, or the handover will not complete
                continue
            holders[s] = to
            wait = since + FREE_SHARD_GRACE_S - now
            next_check = wait if next_check is None else min(next_check, wait)
        target = place(self.shard_count, live, holders)
        for s in range(self.shard_count):
            holder = holders.get(s)
            if holder is None:
                self._free_since.setdefault(s, now)
            else:
                self._free_since.pop(s, None)
            if s in self._leaving:
                continue
            role = self.shards.get(s)
            mine = target[s] == me
            overdue = holder is None and now - self._free_since[s] >= FREE_SHARD_GRACE_S
            if holder is None and not mine and not overdue and me in live:
                wait = self._free_since[s] + FREE_SHARD_GRACE_S - now
                next_check = wait if next_check is None else min(next_check, wait)
            if role is None:
                if self.legacy_held or me not in live:
                    continue
                if mine or holder == me or overdue:
                    self._stand(s)
            elif role.elected:
                if not mine and target[s] in live and holder == me:
                    self._hand_over(s, role, target[s])
            elif not mine and not overdue and holder != me:
                self._drop(s, role)
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        if next_check is not None:
            self._recheck = asyncio.get_running_loop().call_later(max(0.05, next_check), self._place)

    def _spawn(self, coro: Awaitable[Any], what: str) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", what)

        task = asyncio.get_running_loop().create_task(guarded(), name=what)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _stand(self, shard: int) -> None:
        role = self.shards[shard] = ShardRole(self, shard)
        self._spawn(role.start(), f"stand for shard {shard}")

    def _drop(self, shard: int, role: ShardRole) -> None:
        """Stop standing for a shard placed elsewhere (not elected: nothing to hand over)."""
        self.shards.pop(shard, None)
        self._leave(shard, role.stop(commit=False), f"stop standing for shard {shard}")

    def _hand_over(self, shard: int, role: ShardRole, to: int) -> None:
        log.info("%d hands shard %d over to coordinator %d", self.broker.broker_id, shard, to)
        self._handed[shard] = (to, self.holders.get(shard, (None, None))[1], time.monotonic())
        self.shards.pop(shard, None)
        self._leave(shard, role.stop(commit=True), f"hand over shard {shard}")

    def _leave(self, shard: int, stopping: Awaitable[None], what: str) -> None:
        self._leaving.add(shard)

        async def leave() -> None:
            try:
                await stopping
            finally:
                self._leaving.discard(shard)
                self._place()

        self._spawn(leave(), what)

    # ------------------------------------------------------------------ the shards' events
    def _make_store(self, epoch_check, owns):
        """A shard's group store: Kafka's consumer layout in this broker's ZooKeeper."""
        return ZkGroupStore(self.broker.zk, epoch_check, owns)

    def _acls_changed(self, pattern) -> None:
        """Topic ACLs changed: groups whose members' partitions depend on them get a new assignment."""
        if pattern.resource_type != ResourceType.TOPIC:
            return
        for c in self.coordinators_active():
            for group in list(c.groups.values()):
                if any(m.topic_filter is not None for m in group.members.values()):
                    c.request_rebalance(group, f"ACLs of {pattern.name} changed")

    def _topics_changed(self, view) -> None:
        for role in self.active_roles():
            self._topics_changed_in(role, view)

    def _topics_changed_in(self, role: ShardRole, view) -> None:
        if role.coordinator.active:
            ids = getattr(view, "topic_ids", None)  # Kafka 4's consumers name topics by id
            role.coordinator.on_topics_changed({t: len(a) for t, a in view.topics.items()}, complete=True,
                                               ids=dict(ids) if ids else None)
            role.share.on_topics_changed()

    # ------------------------------------------------------------------ the front door
    def shard_of(self, group_id: Any) -> int | None:
        """The shard of a group (None while the shard count is not known)."""
        if self.shard_count is None:
            return None
        return shard_of(group_id if isinstance(group_id, str) else "", self.shard_count)

    def for_group(self, group_id: Any) -> tuple[ShardRole | None, ErrorCode | None]:
        """The role serving ``group_id`` here, or why none does (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS)."""
        s = self.shard_of(group_id)
        role = self.shards.get(s) if s is not None else None
        if role is None:
            return None, ErrorCode.NOT_COORDINATOR
        code = role.not_serving()
        return (role, None) if code is None else (None, code)

    def for_transaction(self, transactional_id: str) -> tuple[TxnCoordinator | None, ErrorCode | None]:
        """The transaction coordinator serving ``transactional_id`` here (the holder of the shard it hashes
        to, as a group id), or why none does (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        s = self.shard_of(transactional_id)
        role = self.shards.get(s) if s is not None else None
        if role is None or role.txn is None:
            return None, ErrorCode.NOT_COORDINATOR
        code = role.txn_not_serving()
        return (role.txn, None) if code is None else (None, code)

    def holder_of(self, group_id: Any) -> tuple[int, int]:
        """(coordinator id, epoch) holding ``group_id``'s shard (None: shard 0's), (-1, -1) if none."""
        s = 0 if group_id is None else self.shard_of(group_id)
        return self.holders.get(s, (-1, -1)) if s is not None else (-1, -1)

    def live_brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """Live brokers at their endpoint of ``listener`` (the one a member connected on: a client is
        sent where it can speak the same protocol, as Kafka's Metadata does); None: their first one."""
        out = []
        for b in sorted(self.broker.view.brokers.values(), key=lambda b: b.id):
            ep = b.endpoint_for(listener) if listener is not None else None
            if listener is None:
                out.append((b.id, b.host, b.port))
            elif ep is not None:
                out.append((b.id, ep.host, ep.port))
        return out

    def coordinator_nodes(self, listener: str | None) -> list[tuple[int, str, int]]:
        return self.live_brokers(listener)

    async def stored_offsets(self, group_id: str) -> dict[tuple[str, int], int] | None:
        """The group's offsets under ``/consumers/<group>/offsets`` (pipelined reads, at most
        ``STORED_OFFSETS_TIMEOUT_S``); None when ZooKeeper does not answer in time."""
        zk = getattr(self.broker, "zk", None)
        if zk is None:  # a standalone coordinator not connected yet
            return None

        try:
            return await asyncio.wait_for(read_committed_offsets(zk, group_id), STORED_OFFSETS_TIMEOUT_S)
        except (asyncio.TimeoutError, KazooException) as e:
            log.info("offsets of group %s not read from ZooKeeper: %s", group_id, e.__class__.__name__)
            return None

    async def stored_pending(self, group_id: str) -> set[tuple[str, int]] | None:
        """The group's partitions under ``/consumers/<group>/pending/*`` (offsets in open transactions);
        None when ZooKeeper does not answer in time."""
        zk = getattr(self.broker, "zk", None)
        if zk is None:
            return None
        try:
            return await asyncio.wait_for(pending_partitions(zk, group_id), STORED_OFFSETS_TIMEOUT_S)
        except (asyncio.TimeoutError, KazooException, ValueError) as e:
            log.info("pending offsets of group %s not read from ZooKeeper: %s", group_id, e.__class__.__name__)
            return None

    async def log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Log ends of ``partitions`` (DescribeShareGroupOffsets' lag): this broker's own logs, the
        others' leaders by ListOffsets on the inter-broker listener with the broker's credentials for
        it (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, as the metrics endpoint reads them), on a
        worker thread."""
        if not partitions:
            return {}
        from spark_coord.metrics.lag import LogEnds

        local, local_id, local_only, security, leaders, endpoints = self._log_end_sources()

        def read() -> dict[tuple[str, int], int]:
            ends = LogEnds(local=local, local_id=local_id, local_only=local_only,
                           client_id="spark-coord-coordinator", security=security)
            try:
                return ends.read(partitions, leaders, endpoints)
            finally:
                ends.close()

        return await asyncio.get_running_loop().run_in_executor(None, read)

    def _log_end_sources(self) -> tuple[Any, int | None, str | None, Any, dict, dict]:
        """(local log end function, local broker id, why other brokers are not asked (None: they
        are), their client security, leader per partition, address per broker) -- on the loop."""
        from spark_coord.metrics.lag import inter_broker_security

        broker = self.broker
        view = broker.view
        listener = broker.security.listener_config.inter_broker
        endpoints = {}
        for b in view.brokers.values():
            ep = b.endpoint_for(listener)
            if ep is not None:
                endpoints[b.id] = (ep.host, ep.port)
        leaders = {(t, p): replicas[0] for t, assignment in view.topics.items()
                   for p, replicas in assignment.items() if replicas}

        def local(tp: tuple[str, int]) -> int | None:
            plog = broker.logs.get(*tp) if broker.logs is not None else None
            return plog.log_end_offset if plog is not None else None

        security, local_only = inter_broker_security(broker)
        return local, broker.broker_id, local_only, security, leaders, endpoints

    def not_serving(self) -> ErrorCode | None:
        """Why this process serves no group now (None: it serves some shard)."""
        if self.active_roles():
            return None
        if any(r.elected for r in self.shards.values()):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def node_endpoint(self, node_id: int, listener: str | None) -> tuple[int, str, int] | None:
        """Coordinator ``node_id``'s endpoint on ``listener`` (its /coordinators/ids registration, else
        its broker registration)."""
        info = self.coordinators.get(node_id) or self.broker.view.brokers.get(node_id)
        ep = info.endpoint_for(listener) if info is not None else None
        return None if ep is None else (node_id, ep.host, ep.port)

    def coordinator_endpoint(self, conn, group_id: Any = None) -> tuple[int, str, int] | None:
        """The endpoint of the coordinator of ``group_id``'s shard on ``conn``'s listener."""
        node, _ = self.holder_of(group_id)
        return self.node_endpoint(node, conn.auth.listener_name) if node >= 0 else None

    def member_channel(self, conn, role: ShardRole) -> BrokerMemberChannel:
        """The member channel of ``conn`` (made at its first RegisterConsumer; when the connection
        closes the coordinator of the member's shard hears that its member is gone)."""
        channel = self._member_channels.get(conn.id)
        if channel is None:
            channel = self._member_channels[conn.id] = BrokerMemberChannel(conn, self, role)

            def closed(c) -> None:
                self._member_channels.pop(c.id, None)
                if channel.role.coordinator.active:
                    channel.role.coordinator.on_channel_closed(channel)

            conn.add_close_callback(closed)
        channel.role = role
        return channel

    def closed_future(self, conn) -> asyncio.Future:
        """A future done when ``conn`` closes (one per connection)."""
        fut = self._conn_closed.get(conn.id)
        if fut is None:
            fut = self._conn_closed[conn.id] = asyncio.get_running_loop().create_future()

            def closed(c) -> None:
                done = self._conn_closed.pop(c.id, None)
                if done is not None and not done.done():
                    done.set_result(None)

            conn.add_close_callback(closed)
        return fut

    def answer_later(self, conn, header, answer: Awaitable[dict]) -> Any:
        async def write() -> None:
            await conn.write_response(header, await answer)

        task = asyncio.get_running_loop().create_task(write(), name=f"answer-{conn.id}-{header.correlation_id}")
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)
        return DEFERRED


def parse_shard_count(data: bytes | None) -> int | None:
    """The count in ``/coordinators/shards``' JSON (None if it holds none)."""
    try:
        count = json.loads(data or b"")["count"]
    except (ValueError, KeyError, TypeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None
