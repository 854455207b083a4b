"""The coordinator inside a broker: election, request handlers, member channels.

Every broker runs a ``CoordinationService``.  Its ``CoordinatorElector`` competes
for ``/consumers/coordinator``; the winner activates its ``Coordinator`` (restoring
groups from ZooKeeper), the others stay inert and answer ``ClusterMetadata`` with
the winner's id, so members find it.  The broker's connection objects become the
coordinator's ``MemberChannel``\\ s: after RegisterConsumer the coordinator pushes
Ping / StopFetcher / StartFetcher down the member's own connection, and the
member's answers come back through ``Connection.send_request`` futures, each to
the callback of the request it answers.  The member's own CommitOffsets requests
arrive on the same connection; each is answered once ZooKeeper has the offsets,
from a task of its own, so the connection keeps reading ping answers meanwhile.

A broker that stops while it is the coordinator commits the offsets it holds
before it gives the role up (``Coordinator.shutdown``).

Topic changes seen by the broker's ZooKeeper view (new topics, more partitions)
are handed to the active coordinator, which rebalances the interested groups.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kazoo.recipe.watchers import DataWatch

from spark_coord.broker.connection import DEFERRED, Connection
from spark_coord.broker.handlers import Handler
from spark_coord.coordinator.channel import ChannelClosed, OnAnswer
from spark_coord.coordinator.clock import LoopTimer, SystemClock
from spark_coord.coordinator.config import CoordinatorConfig
from spark_coord.coordinator.coordinator import Coordinator
from spark_coord.coordinator.elector import CoordinatorElector
from spark_coord.coordinator.kafka_members import KafkaGroups
from spark_coord.coordinator.zk_store import ZkGroupStore
from spark_coord.errors import ErrorCode
from spark_coord.metrics.coordinator import NO_METRICS
from spark_coord.security import coordination as authz
from spark_coord.security.acl import AclOperation, ResourceType
from spark_coord.wire import coordinator as api
from spark_coord.wire.consumer_protocol import ConsumerProtocolError, decode_subscription
from spark_coord.wire.find_coordinator import KEY_TYPE_GROUP
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import paths
from spark_coord.zk.client import to_loop

log = logging.getLogger(__name__)


class BrokerMemberChannel:
    """A registered member's broker connection, as the coordinator's ``MemberChannel``."""

    def __init__(self, conn: Connection, service: "CoordinationService"):
        self.conn = conn
        self.service = service
        self.peer = conn.peer
        #: The close callback that reports this member gone is installed (once per connection).
        self.close_hooked = False

    def send(self, api_key: int, body: dict, on_answer: OnAnswer) -> None:
        if self.conn.closed:
            raise ChannelClosed(f"{self.peer}: connection closed")
        if api_key == api.START_FETCHER and "brokers" in body:  # the endpoints of the member's listener
            body = dict(body, brokers=[{"node_id": i, "host": h, "port": p} for i, h, p in
                                       self.service._live_brokers(self.conn.auth.listener_name)])
        fut = self.conn.send_request(api_key, api.VERSION, body)
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
    """Elector + coordinator + the coordinator API handlers of one broker."""

    def __init__(self, broker):
        self.broker = broker
        self.enabled: bool = broker.config.get("coordinator.enable", True)
        self.coordinator: Coordinator | None = None
        self.elector: CoordinatorElector | None = None
        self.coordinator_id = -1
        self.coordinator_epoch = -1
        self._watch: DataWatch | None = None
        self.kafka_groups: KafkaGroups | None = None
        #: Connection id -> a future done when it closes (JoinGroups waiting on it stop waiting).
        self._conn_closed: dict[int, asyncio.Future] = {}
        #: Connection id -> the member channel made for it at its first RegisterConsumer.
        self._member_channels: dict[int, BrokerMemberChannel] = {}
        self._answers: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ life cycle
    def handlers(self) -> list[Handler]:
        return [
            Handler(api.CLUSTER_METADATA, "ClusterMetadata", self._cluster_metadata,
                    lambda body, code: {"error_code": code}),
            Handler(api.REGISTER_CONSUMER, "RegisterConsumer", self._register,
                    lambda body, code: {"error_code": code}),
            Handler(api.DESCRIBE_GROUPS, "CoordinatorDescribeGroups", self._describe,
                    lambda body, code: {"error_code": code}),
            Handler(api.COMMIT_OFFSETS, "CommitOffsets", self._commit_offsets,
                    lambda body, code: {"error_code": code}),
            *self._kafka_group_handlers(),
        ]

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
            LoopTimer(loop), SystemClock(), self._live_brokers, on_fenced=self._fenced, metrics=observer)
        self.kafka_groups = KafkaGroups(self.coordinator)
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
        if self.kafka_groups is not None:
            self.kafka_groups.reset()

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

    def _live_brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
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
            self.coordinator.on_topics_changed({t: len(a) for t, a in view.topics.items()}, complete=True)

    # ------------------------------------------------------------------ handlers
    async def _cluster_metadata(self, ctx, conn, header, body) -> dict:
        return {"error_code": ErrorCode.NONE, "coordinator_id": self.coordinator_id,
                "coordinator_epoch": self.coordinator_epoch,
                "brokers": [{"node_id": i, "host": h, "port": p}
                            for i, h, p in self._live_brokers(conn.auth.listener_name)]}

    async def _register(self, ctx, conn, header, body) -> dict:
        coordinator = self.coordinator
        if coordinator is None or not coordinator.active:
            return {"error_code": ErrorCode.NOT_COORDINATOR,
                    "error_message": f"broker {self.broker.broker_id} is not the coordinator "
                                     f"(the coordinator is broker {self.coordinator_id})"}
        refused = self._refuse_member(ctx, conn, body.get("group_id"), [t.get("topic") for t in body.get("topics") or []
                                                                        if isinstance(t, dict)])
        if refused:
            return {"error_code": refused, "error_message": "not authorized"}
        channel = self._member_channels.get(conn.id)
        if channel is None:
            channel = self._member_channels[conn.id] = BrokerMemberChannel(conn, self)
            conn.add_close_callback(lambda c: self._member_channels.pop(c.id, None))
        answer = coordinator.register(channel, body)
        if answer.get("error_code") == ErrorCode.NONE:
            self._limit_topics(ctx, conn, body.get("group_id"), body.get("consumer_id"))
            if not channel.close_hooked:
                channel.close_hooked = True
                conn.add_close_callback(lambda _c: self._member_gone(channel))
        return answer

    # ------------------------------------------------------------------ authorization
    @staticmethod
    def _refuse_member(ctx, conn, group: Any, topics) -> int:
        """RegisterConsumer / JoinGroup: Read on the group and on every named topic (NONE when allowed)."""
        if not ctx.authorizer.enabled or not isinstance(group, str):
            return ErrorCode.NONE
        code = authz.authorize_group_member(ctx.authorizer, conn.auth.principal, conn.auth.host, group,
                                            [t for t in topics if isinstance(t, str)])
        if code:
            log.info("%s from %s refused: %s", group, conn.auth.principal, ErrorCode.name_of(code))
        return code

    def _limit_topics(self, ctx, conn, group: Any, member_id: Any) -> None:
        """A member's partitions come only from topics its principal may Read (checked at every
        rebalance, so a wildcard subscription gets the readable topics only)."""
        g = self.coordinator.groups.get(group) if self.coordinator is not None and isinstance(group, str) else None
        member = g.members.get(member_id) if g is not None and isinstance(member_id, str) else None
        if member is not None:
            member.topic_filter = self._topic_filter(ctx, conn)

    @staticmethod
    def _topic_filter(ctx, conn):
        """Whether the connection's principal may Read a topic (None without an authorizer)."""
        if not ctx.authorizer.enabled:
            return None
        authorizer, principal, host = ctx.authorizer, conn.auth.principal, conn.auth.host
        return lambda t: not authz.unreadable_topics(authorizer, principal, host, [t])

    @staticmethod
    def _group_refused(ctx, conn, operation: AclOperation, group: Any) -> int:
        if not ctx.authorizer.enabled:
            return ErrorCode.NONE
        return authz.authorize_group(ctx.authorizer, conn.auth.principal, conn.auth.host, operation,
                                     group if isinstance(group, str) else "")

    @staticmethod
    def _topic_codes(ctx, conn, operation: AclOperation, group: Any, topics) -> dict[str, int]:
        """Per topic NONE / TOPIC_AUTHORIZATION_FAILED (all GROUP_AUTHORIZATION_FAILED if the group is refused)."""
        topics = {t for t in topics if isinstance(t, str)}
        if not ctx.authorizer.enabled:
            return {t: ErrorCode.NONE for t in topics}
        return authz.authorize_offsets(ctx.authorizer, conn.auth.principal, conn.auth.host,
                                       group if isinstance(group, str) else "", topics, operation)

    def _member_gone(self, channel: BrokerMemberChannel) -> None:
        if self.coordinator is not None and self.coordinator.active:
            self.coordinator.on_channel_closed(channel)

    async def _commit_offsets(self, ctx, conn, header, body) -> dict | None:
        """CommitOffsets: answered by a task of its own once the offsets are in ZooKeeper.  Offsets of
        topics the member's principal may not Read are refused (TOPIC_AUTHORIZATION_FAILED), the
        others committed."""
        coordinator = self.coordinator
        channel = self._member_channels.get(conn.id)
        if coordinator is None or not coordinator.active or channel is None:
            return {"error_code": ErrorCode.NOT_COORDINATOR if coordinator is None or not coordinator.active
                    else ErrorCode.UNKNOWN_CONSUMER, "error_message": "no consumer is registered on this connection"}
        offsets = [o for o in body.get("offsets") or [] if isinstance(o, dict)]
        codes = self._topic_codes(ctx, conn, AclOperation.READ, body.get("group_id"), [o.get("topic") for o in offsets])
        refused = {t: c for t, c in codes.items() if c}
        if ErrorCode.GROUP_AUTHORIZATION_FAILED in refused.values():
            return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": "not authorized",
                    "partitions": []}
        if refused:
            body = dict(body, offsets=[o for o in offsets if o.get("topic") not in refused])

        async def answer() -> None:
            try:
                response = await coordinator.handle_commit(channel, body)
                response["partitions"] = list(response.get("partitions") or []) + [
                    {"topic": o.get("topic"), "partition": o.get("partition"), "error_code": refused[o["topic"]]}
                    for o in offsets if o.get("topic") in refused]
            except Exception:
                log.exception("CommitOffsets from %s failed", conn.peer)
                response = {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR}
            await conn.write_response(header, response)

        task = asyncio.get_running_loop().create_task(answer(), name=f"commit-offsets-{conn.id}")
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)
        return DEFERRED

    async def _describe(self, ctx, conn, header, body) -> dict:
        coordinator = self.coordinator
        if coordinator is None or not coordinator.active:
            return {"error_code": ErrorCode.NOT_COORDINATOR, "groups": []}
        wanted = body.get("group_ids") or [g["group_id"] for g in coordinator.describe_groups()]
        if ctx.authorizer.enabled:
            wanted = authz.describable_groups(ctx.authorizer, conn.auth.principal, conn.auth.host, wanted)
        groups = []
        for gid in wanted:
            d = coordinator.describe_group(gid)
            if d is None:
                continue
            owners = {(o["topic"], o["partition"]): o["owner"] for o in d["owners"]}
            offsets = {(o["topic"], o["partition"]): o["offset"] for o in d["offsets"]}
            groups.append({
                "group_id": gid, "state": d["state"], "generation_id": d["generation_id"],
                "members": [{"consumer_id": m["consumer_id"], "host": m["peer"],
                             "assigned": [{"topic": t, "partition": p}
                                          for tps in m["assignment"].values() for t, p in tps]}
                            for m in d["members"]],
                "offsets": [{"topic": t, "partition": p, "committed_offset": offsets.get((t, p), -1),
                             "owner": owners.get((t, p))} for (t, p) in sorted(set(owners) | set(offsets))],
            })
        return {"error_code": ErrorCode.NONE, "groups": groups}

    # ------------------------------------------------------------------ Kafka's group APIs
    def _kafka_group_handlers(self) -> list[Handler]:
        """FindCoordinator and Kafka's group APIs, onto the same coordinator (DESIGN section 11).

        Every broker answers FindCoordinator with the elected one; the group APIs are served
        by the elected broker only (the others answer NOT_COORDINATOR, a broker elected but
        still restoring its groups COORDINATOR_LOAD_IN_PROGRESS), so clients rediscover it."""
        def coordinator_error(code_field: str = "error_code"):
            return lambda body, code: {code_field: code, "throttle_time_ms": 0}

        return [
            Handler(ApiKey.FIND_COORDINATOR, "FindCoordinator", self._find_coordinator, self._find_coordinator_error),
            Handler(ApiKey.JOIN_GROUP, "JoinGroup", self._join_group,
                    lambda body, code: {"error_code": code, "generation_id": -1, "protocol_name": None, "leader": "",
                                        "member_id": body.get("member_id") or "", "members": []}),
            Handler(ApiKey.SYNC_GROUP, "SyncGroup", self._sync_group,
                    lambda body, code: {"error_code": code, "assignment": b""}),
            Handler(ApiKey.HEARTBEAT, "Heartbeat", self._heartbeat, coordinator_error()),
            Handler(ApiKey.LEAVE_GROUP, "LeaveGroup", self._leave_group,
                    lambda body, code: {"error_code": code, "members": []}),
            Handler(ApiKey.OFFSET_COMMIT, "OffsetCommit", self._offset_commit, _offset_commit_error),
            Handler(ApiKey.OFFSET_FETCH, "OffsetFetch", self._offset_fetch, _offset_fetch_error),
            Handler(ApiKey.LIST_GROUPS, "ListGroups", self._list_groups,
                    lambda body, code: {"error_code": code, "groups": []}),
            Handler(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", self._describe_groups,
                    lambda body, code: {"groups": [{"error_code": code, "group_id": g, "group_state": "",
                                                    "protocol_type": "", "protocol_data": "", "members": []}
                                                   for g in body.get("groups") or []]}),
            Handler(ApiKey.DELETE_GROUPS, "DeleteGroups", self._delete_groups,
                    lambda body, code: {"results": [{"group_id": g, "error_code": code}
                                                    for g in body.get("groups_names") or []]}),
        ]

    def _not_serving(self) -> ErrorCode | None:
        """Why this broker cannot serve a group request now (None: it can)."""
        c = self.coordinator
        if c is not None and c.active:
            return None
        if c is not None and self.coordinator_id == self.broker.broker_id:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # elected, restoring the groups
        return ErrorCode.NOT_COORDINATOR

    def _coordinator_endpoint(self, conn) -> tuple[int, str, int] | None:
        broker = self.broker.view.brokers.get(self.coordinator_id) if self.coordinator_id >= 0 else None
        ep = broker.endpoint_for(conn.auth.listener_name) if broker is not None else None
        return None if ep is None else (broker.id, ep.host, ep.port)

    async def _find_coordinator(self, ctx, conn, header, body) -> dict:
        keys = body.get("coordinator_keys") if header.api_version >= 4 else [body.get("key") or ""]
        key_type = body.get("key_type", KEY_TYPE_GROUP)
        found = self._coordinator_endpoint(conn)
        results = []
        for key in keys or []:
            if key_type != KEY_TYPE_GROUP:
                results.append({"key": key, "node_id": -1, "host": "", "port": -1,
                                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                "error_message": "only group coordinators exist here (no transactions)"})
            elif self._group_refused(ctx, conn, AclOperation.DESCRIBE, key):
                results.append({"key": key, "node_id": -1, "host": "", "port": -1,
                                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None})
            elif found is None:
                results.append({"key": key, "node_id": -1, "host": "", "port": -1,
                                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                "error_message": "no coordinator is elected right now"})
            else:
                node, host, port = found
                results.append({"key": key, "node_id": node, "host": host, "port": port,
                                "error_code": ErrorCode.NONE, "error_message": None})
        first = results[0] if results else {"node_id": -1, "host": "", "port": -1,
                                             "error_code": ErrorCode.INVALID_REQUEST, "error_message": "no key"}
        return {"throttle_time_ms": 0, "error_code": first["error_code"], "error_message": first["error_message"],
                "node_id": first["node_id"], "host": first["host"], "port": first["port"], "coordinators": results}

    @staticmethod
    def _find_coordinator_error(body: dict, code: int) -> dict:
        keys = body.get("coordinator_keys") or [body.get("key") or ""]
        return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "node_id": -1, "host": "",
                "port": -1, "coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
                                              "error_message": None} for k in keys]}

    async def _join_group(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1, "protocol_name": None,
                    "leader": "", "member_id": body.get("member_id") or "", "members": []}
        refused = self._refuse_member(ctx, conn, body.get("group_id"), _subscribed_topics(body))
        if refused:
            return {"throttle_time_ms": 0, "error_code": refused, "generation_id": -1, "protocol_name": None,
                    "leader": "", "member_id": body.get("member_id") or "", "members": []}
        return await self.kafka_groups.join_group(body, header.api_version, header.client_id or "", conn.auth.host,
                                                  self._closed_future(conn), self._topic_filter(ctx, conn))

    def _closed_future(self, conn) -> asyncio.Future:
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

    async def _sync_group(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}
        refused = self._group_refused(ctx, conn, AclOperation.READ, body.get("group_id"))
        if refused:
            return {"throttle_time_ms": 0, "error_code": refused, "assignment": b""}
        return self.kafka_groups.sync_group(body)

    async def _heartbeat(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "error_code": code}
        refused = self._group_refused(ctx, conn, AclOperation.READ, body.get("group_id"))
        if refused:
            return {"throttle_time_ms": 0, "error_code": refused}
        return self.kafka_groups.heartbeat(body)

    async def _leave_group(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "error_code": code, "members": []}
        refused = self._group_refused(ctx, conn, AclOperation.READ, body.get("group_id"))
        if refused:
            return {"throttle_time_ms": 0, "error_code": refused, "members": []}
        return self.kafka_groups.leave_group(body, header.api_version)

    async def _offset_commit(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return _offset_commit_error(body, code)
        topics = body.get("topics") or []
        codes = self._topic_codes(ctx, conn, AclOperation.READ, body.get("group_id"), [t.get("name") for t in topics])
        refused = {t: c for t, c in codes.items() if c}
        if not refused:
            return await self.kafka_groups.offset_commit(body, header.api_version)
        allowed = [t for t in topics if t.get("name") not in refused]
        answer = await self.kafka_groups.offset_commit(dict(body, topics=allowed), header.api_version) if allowed \
            else {"throttle_time_ms": 0, "topics": []}
        answer["topics"] = list(answer["topics"]) + _offset_commit_error(
            {"topics": [t for t in topics if t.get("name") in refused]}, 0, refused)["topics"]
        return answer

    async def _offset_fetch(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return _offset_fetch_error(body, code, header.api_version)
        if not ctx.authorizer.enabled:
            return self.kafka_groups.offset_fetch(body, header.api_version)
        return self._offset_fetch_authorized(ctx, conn, body, header.api_version)

    def _offset_fetch_authorized(self, ctx, conn, body: dict, version: int) -> dict:
        """OffsetFetch with Describe on each group (else GROUP_AUTHORIZATION_FAILED) and on each topic:
        asked-for topics it may not describe answer TOPIC_AUTHORIZATION_FAILED, and when all offsets
        are asked for those topics are left out (Kafka's rules)."""
        asked = body.get("groups") if version >= 8 else [{"group_id": body.get("group_id"), "topics": body.get("topics")}]
        out = []
        for g in asked or []:
            gid = g.get("group_id") or ""
            refused = self._group_refused(ctx, conn, AclOperation.DESCRIBE, gid)
            if refused:
                out.append({"group_id": gid, "topics": [], "error_code": refused})
                continue
            one = self.kafka_groups.offset_fetch({"groups": [g]}, 8)["groups"][0]
            codes = self._topic_codes(ctx, conn, AclOperation.DESCRIBE, gid, [t["name"] for t in one["topics"]])
            topics = []
            for t in one["topics"]:
                if not codes.get(t["name"]):
                    topics.append(t)
                elif g.get("topics") is not None:
                    topics.append({"name": t["name"], "partitions": [
                        dict(p, committed_offset=-1, error_code=codes[t["name"]]) for p in t["partitions"]]})
            out.append(dict(one, topics=topics))
        if version >= 8:
            return {"throttle_time_ms": 0, "groups": out}
        first = out[0] if out else {"topics": [], "error_code": 0}
        return {"throttle_time_ms": 0, "topics": first["topics"], "error_code": first["error_code"]}

    async def _list_groups(self, ctx, conn, header, body) -> dict:
        # Admin clients ask every broker and merge the answers: a broker that coordinates
        # no group lists none (an error would fail the whole listing).
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "error_code": code if code != ErrorCode.NOT_COORDINATOR else 0,
                    "groups": []}
        answer = self.kafka_groups.list_groups(body)
        if ctx.authorizer.enabled:
            visible = set(authz.describable_groups(ctx.authorizer, conn.auth.principal, conn.auth.host,
                                                   [g["group_id"] for g in answer["groups"]]))
            answer["groups"] = [g for g in answer["groups"] if g["group_id"] in visible]
        return answer

    async def _describe_groups(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "groups": [
                {"error_code": code, "group_id": g, "group_state": "", "protocol_type": "", "protocol_data": "",
                 "members": []} for g in body.get("groups") or []]}
        answer = self.kafka_groups.describe_groups(body)
        for g in answer["groups"]:
            refused = self._group_refused(ctx, conn, AclOperation.DESCRIBE, g["group_id"])
            if refused:
                g.update(error_code=refused, group_state="", protocol_type="", protocol_data="", members=[])
        return answer

    async def _delete_groups(self, ctx, conn, header, body) -> dict:
        code = self._not_serving()
        if code is not None:
            return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code}
                                                       for g in body.get("groups_names") or []]}
        names = body.get("groups_names") or []
        refused = {g: c for g in names if (c := self._group_refused(ctx, conn, AclOperation.DELETE, g))}
        answer = await self.kafka_groups.delete_groups({"groups_names": [g for g in names if g not in refused]})
        answer["results"] = list(answer["results"]) + [{"group_id": g, "error_code": c} for g, c in refused.items()]
        return answer


def _offset_commit_error(body: dict, code: int, per_topic: dict[str, int] | None = None) -> dict:
    """``code`` (or ``per_topic[name]``) for every partition of the request."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.get("name"), "partitions": [{"partition_index": p.get("partition_index"),
                                                "error_code": (per_topic or {}).get(t.get("name"), code)}
                                               for p in t.get("partitions") or []]}
        for t in body.get("topics") or []]}


def _subscribed_topics(body: dict) -> list[str]:
    """The topics of a JoinGroup's first consumer-protocol subscription (none if it cannot be read:
    the group API answers that itself)."""
    for p in body.get("protocols") or []:
        try:
            return list(decode_subscription(p.get("metadata") or b"")["topics"])
        except ConsumerProtocolError:
            return []
    return []


def _offset_fetch_error(body: dict, code: int, version: int = 8) -> dict:
    """One error everywhere the OffsetFetch answer has an error code (partitions before v2)."""
    def partitions(topics) -> list[dict]:
        return [{"name": t.get("name"), "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
            for p in t.get("partition_indexes") or []]} for t in topics or []]

    return {"throttle_time_ms": 0, "error_code": code, "topics": partitions(body.get("topics")),
            "groups": [{"group_id": g.get("group_id"), "topics": partitions(g.get("topics")), "error_code": code}
                       for g in body.get("groups") or []]}
