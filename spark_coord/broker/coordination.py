"""The coordinator inside a broker: election, member channels, and the front door's handlers.

Every broker runs a ``CoordinationService``.  Its ``CoordinatorElector`` competes
for ``/consumers/coordinator``; the winner activates its ``Coordinator`` (restoring
groups from ZooKeeper), the others stay inert and answer ``ClusterMetadata`` and
``FindCoordinator`` with the winner, so members find it.  The broker's connection
objects become the coordinator's ``MemberChannel``\\ s: after RegisterConsumer the
coordinator pushes Ping / StopFetcher / StartFetcher down the member's own
connection, and the member's answers come back through ``Connection.send_request``
futures, each to the callback of the request it answers.

The APIs themselves -- the seeds' and Kafka's group APIs -- live in
``coordinator.handlers``, one module per API; this service is the ``FrontDoor``
they are served through.

A broker that stops while it is the coordinator commits the offsets it holds
before it gives the role up (``Coordinator.shutdown``).  Topic changes seen by the
broker's ZooKeeper view (new topics, more partitions) and changes of topic ACLs
are handed to the active coordinator, which rebalances the interested groups.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Awaitable

from kazoo.recipe.watchers import DataWatch

from spark_coord.broker.connection import DEFERRED, Connection
from spark_coord.broker.handlers import Handler
from spark_coord.coordinator.channel import ChannelClosed, OnAnswer
from spark_coord.coordinator.classic import ClassicGroups
from spark_coord.coordinator.consumer_group import ConsumerGroups
from spark_coord.coordinator.clock import LoopTimer, SystemClock
from spark_coord.coordinator.config import CoordinatorConfig
from spark_coord.coordinator.coordinator import Coordinator
from spark_coord.coordinator.elector import CoordinatorElector
from spark_coord.coordinator.handlers import group_apis
from spark_coord.coordinator.metrics import NO_METRICS
from spark_coord.coordinator.zk_store import ZkGroupStore
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import ResourceType
from spark_coord.wire import coordinator as api
from spark_coord.zk import paths
from spark_coord.zk.client import to_loop

log = logging.getLogger(__name__)


class BrokerMemberChannel:
    """A registered member's broker connection, as the coordinator's ``MemberChannel``."""

    def __init__(self, conn: Connection, service: "CoordinationService"):
        self.conn = conn
        self.service = service
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
        coordinator = self.service.coordinator
        if coordinator is not None and coordinator.active:
            on_answer(fut.result())

    def close(self) -> None:
        if not self.conn.closed:
            asyncio.get_running_loop().create_task(self.conn.close())

    def __repr__(self) -> str:
        return f"MemberChannel({self.peer})"


class CoordinationService:
    """Elector + coordinator + the front door of one broker (a ``handlers.door.FrontDoor``)."""

    deferred = DEFERRED

    def __init__(self, broker):
        self.broker = broker
        self.enabled: bool = broker.config.get("coordinator.enable", True)
        self.coordinator: Coordinator | None = None
        self.classic: ClassicGroups | None = None
        self.consumer: ConsumerGroups | None = None
        self.elector: CoordinatorElector | None = None
        self.coordinator_id = -1
        self.coordinator_epoch = -1
        self._watch: DataWatch | None = None
        #: Connection id -> a future done when it closes (JoinGroups waiting on it stop waiting).
        self._conn_closed: dict[int, asyncio.Future] = {}
        #: Connection id -> the member channel made for it at its first RegisterConsumer.
        self._member_channels: dict[int, BrokerMemberChannel] = {}
        self._answers: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ life cycle
    def handlers(self) -> list[Handler]:
        """The front door's APIs as this broker's request handlers."""
        return [Handler(a.api_key, a.name, functools.partial(a.handle, self), a.error_response)
                for a in group_apis()]

    async def start(self) -> None:
        """Watch who coordinates; if enabled, stand for election (after the broker is serving)."""
        loop = asyncio.get_running_loop()
        zk = self.broker.zk
        self._watch = DataWatch(zk, paths.COORDINATOR, to_loop(loop, self._on_coordinator_node))
        if not self.enabled:
            return
        observer = getattr(getattr(self.broker, "metrics", None), "coordinator", None) or NO_METRICS  # metrics
        self.coordinator = Coordinator(
            CoordinatorConfig.from_broker_config(self.broker.config), observer.timed(self._make_store()),
            LoopTimer(loop), SystemClock(), self.live_brokers, on_fenced=self._fenced, metrics=observer)
        self.consumer = ConsumerGroups(self.coordinator)
        self.classic = ClassicGroups(self.coordinator, self.consumer)
        self.broker.view.add_listener(self._topics_changed)
        authorizer = self.broker.ctx.authorizer
        if getattr(authorizer, "enabled", False) and hasattr(authorizer, "add_change_callback"):
            authorizer.add_change_callback(lambda pattern: loop.call_soon_threadsafe(self._acls_changed, pattern))
        self.elector = CoordinatorElector(zk, self.broker.broker_id, loop, self._elected, self._resigned)
        await self.elector.start()

    def _make_store(self):
        """The group store: Kafka's consumer layout in this broker's ZooKeeper."""
        return ZkGroupStore(self.broker.zk, self._epoch_check)

    async def stop(self) -> None:
        if self.coordinator is not None:
            await self.coordinator.shutdown()  # commit what it holds while still elected
        if self.elector is not None:
            await self.elector.stop()
        if self.coordinator is not None:
            await self.coordinator.deactivate()
        for task in list(self._answers):
            task.cancel()
        self._watch = None

    def _epoch_check(self):
        return self.elector.current_check() if self.elector is not None else None

    async def _elected(self, epoch: int) -> None:
        log.info("broker %d is the coordinator (epoch %d)", self.broker.broker_id, epoch)
        await self.coordinator.activate(epoch)
        self._topics_changed(self.broker.view)

    async def _resigned(self) -> None:
        log.info("broker %d is no longer the coordinator", self.broker.broker_id)
        await self.coordinator.deactivate()
        if self.classic is not None:
            self.classic.reset()
        if self.consumer is not None:
            self.consumer.reset()

    def _fenced(self) -> None:
        # The coordinator drops its state itself; the elector sees the election node change
        # hands (its data watch) and resigns, then stands again on its own session.
        log.warning("broker %d was fenced as coordinator by a newer election", self.broker.broker_id)

    def _on_coordinator_node(self, data: bytes | None, stat: Any) -> None:
        if data is None or stat is None:
            self.coordinator_id, self.coordinator_epoch = -1, -1
            return
        try:
            self.coordinator_id = int(data.decode().strip())
        except ValueError:
            log.warning("%s holds %r, not a broker id", paths.COORDINATOR, data[:40])
            self.coordinator_id = -1
        self.coordinator_epoch = stat.czxid

    def _acls_changed(self, pattern) -> None:
        """Topic ACLs changed: groups whose members' partitions depend on them get a new assignment."""
        c = self.coordinator
        if c is None or not c.active or pattern.resource_type != ResourceType.TOPIC:
            return
        for group in list(c.groups.values()):
            if any(m.topic_filter is not None for m in group.members.values()):
                c.request_rebalance(group, f"ACLs of {pattern.name} changed")

    def _topics_changed(self, view) -> None:
        if self.coordinator is not None and self.coordinator.active:
            ids = getattr(view, "topic_ids", None)  # Kafka 4's consumers name topics by id
            self.coordinator.on_topics_changed({t: len(a) for t, a in view.topics.items()}, complete=True,
                                               ids=dict(ids) if ids else None)

    # ------------------------------------------------------------------ the front door
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

    def not_serving(self) -> ErrorCode | None:
        """Why this broker cannot serve a group request now (None: it can)."""
        c = self.coordinator
        if c is not None and c.active:
            return None
        if c is not None and self.coordinator_id == self.broker.broker_id:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # elected, restoring the groups
        return ErrorCode.NOT_COORDINATOR

    def coordinator_endpoint(self, conn) -> tuple[int, str, int] | None:
        broker = self.broker.view.brokers.get(self.coordinator_id) if self.coordinator_id >= 0 else None
        ep = broker.endpoint_for(conn.auth.listener_name) if broker is not None else None
        return None if ep is None else (broker.id, ep.host, ep.port)

    def member_channel(self, conn) -> BrokerMemberChannel:
        """The member channel of ``conn`` (made at its first RegisterConsumer; when the connection
        closes the coordinator hears that its member is gone)."""
        channel = self._member_channels.get(conn.id)
        if channel is None:
            channel = self._member_channels[conn.id] = BrokerMemberChannel(conn, self)

            def closed(c) -> None:
                self._member_channels.pop(c.id, None)
                if self.coordinator is not None and self.coordinator.active:
                    self.coordinator.on_channel_closed(channel)

            conn.add_close_callback(closed)
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
