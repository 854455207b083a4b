"""Kafka's group protocol as a second way into the coordinator (DESIGN section 11).

A Kafka consumer (librdkafka, kafka-python, kafkajs, the Java client) joins one
of our groups with JoinGroup/SyncGroup/Heartbeat; this module makes it a member
like any other of the coordinator's one registry.  Each Kafka member gets a
``KafkaMember``: the ``MemberChannel`` the coordinator drives, translated into
what a Kafka client understands:

* **Ping** -> its heartbeats.  A ping is answered at once when the member was
  heard from (a heartbeat, a commit, a JoinGroup waiting here) within the last
  third of its session timeout, else at its next request; a member that stops
  sending expires its pings and is failed as any other.
* **StopFetcher** -> REBALANCE_IN_PROGRESS on its next Heartbeat or SyncGroup.
  The member revokes its partitions (eager protocols: it commits and stops
  fetching first) and sends JoinGroup: that JoinGroup answers the StopFetcher.
* **StartFetcher** -> the answer to the JoinGroup waiting here (the new
  generation), and the assignment in the SyncGroup answer, encoded in the
  consumer protocol.  The SyncGroup answers the StartFetcher.  Whatever a
  client leader computes and sends in SyncGroup is ignored: the coordinator
  assigns.

OffsetCommit goes through the coordinator's own checks (generation, ownership,
never backwards) into the same ZooKeeper znodes as pings' offsets; OffsetFetch,
ListGroups, DescribeGroups and DeleteGroups read and change the same registry,
so Kafka tools see every group, Spark queries' groups included.

Choices where Kafka and the seeds differ:

* incremental (cooperative) protocols are refused with INCONSISTENT_GROUP_PROTOCOL:
  a cooperative member keeps fetching while it rejoins, which StopFetcher forbids;
  clients offering an eager protocol too (Java's default "range, cooperative-sticky")
  get the eager one;
* an offset below the one already committed in the same generation is answered
  NONE but not taken (offsets never move backwards, DESIGN invariant 3); commits
  with generation -1 (tools resetting a group) are taken only while the group has no
  live member, as Kafka does, and may move offsets anywhere;
* ``group.instance.id`` (static membership) is accepted and shown, but a restarted
  static member joins as a new member (a rebalance), as without it;
* after a coordinator failover a Kafka member that heartbeats or commits with the
  generation the new coordinator restored is taken back into it with the partitions
  ZooKeeper's owners give it (nothing stopped), like our members' claims.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from spark_coord.coordinator.api import CoordinatorApi
from spark_coord.coordinator.channel import ChannelClosed, OnAnswer
from spark_coord.coordinator.group import ConsumerRegistry, GroupRegistry, GroupState
from spark_coord.coordinator.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.wire.consumer_protocol import (ConsumerProtocolError, decode_subscription, encode_assignment,
                                                encode_subscription, topic_partitions)
from spark_coord.zk import paths

if TYPE_CHECKING:
    from spark_coord.coordinator.coordinator import Coordinator

__all__ = ["KafkaGroups", "KafkaMember", "CONSUMER_PROTOCOL_TYPE", "kafka_state"]

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
#: Assignment protocols that revoke incrementally (KIP-429): refused.
COOPERATIVE_PROTOCOLS = frozenset({"cooperative-sticky"})
#: Generation of commits from outside any generation (tools, assign()-only consumers).
NO_GENERATION = -1
#: How long a JoinGroup waits for its assignment at most when it names no rebalance timeout.
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
#: Member ids handed out and not used yet, per group: at most this many, kept this long when full.
MAX_PENDING_MEMBER_IDS = 10_000
PENDING_MEMBER_ID_MS = 300_000

_STATES = {GroupState.EMPTY: "Empty", GroupState.STABLE: "Stable", GroupState.RESTORING: "PreparingRebalance",
           GroupState.PREPARING_REBALANCE: "PreparingRebalance", GroupState.STOPPING_FETCHERS: "PreparingRebalance",
           GroupState.STARTING_FETCHERS: "CompletingRebalance", GroupState.DEAD: "Dead"}


def kafka_state(state: GroupState) -> str:
    """Kafka's name of the group state closest to ours (for ListGroups/DescribeGroups)."""
    return _STATES[state]


def _member_id_prefix(client_id: str | None) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._]", "_", client_id or "")[:60].strip("_.")
    return cleaned or "consumer"


class KafkaMember:
    """A Kafka-protocol member as the coordinator's ``MemberChannel``."""

    #: Our requests never reach the client: its lease runs from its own last request (``contact``),
    #: which is when Kafka's session timeout starts too.
    renews_lease = False

    def __init__(self, groups: "KafkaGroups", group_id: str, member_id: str, *, client_id: str, client_host: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]] | None,
                 group_instance_id: str | None = None):
        self.groups = groups
        self.group_id = group_id
        self.member_id = member_id
        self.client_id = client_id
        self.client_host = client_host
        self.peer = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        #: (name, subscription bytes) in the member's order of preference; None: not known (taken
        #: back after a failover): any protocol suits it.
        self.protocols = protocols
        self.group_instance_id = group_instance_id
        self.closed = False
        self.last_contact_ms = groups.c.clock.now_ms()
        self._held_ping: tuple[dict, OnAnswer] | None = None
        #: A StopFetcher waiting for the member's JoinGroup.
        self._stop: tuple[dict, OnAnswer] | None = None
        #: The StartFetcher the member has not synced yet, and the JoinGroup waiting for one.
        self._start: tuple[dict, OnAnswer] | None = None
        self._join: asyncio.Future[dict | None] | None = None
        self._join_since_ms = 0
        #: The generation whose assignment the member received in SyncGroup, and that assignment.
        self.synced_generation = NO_GENERATION
        self.assignment_bytes = b""
        #: Fails the member when no request came for its session timeout (Kafka's rule, to the ms).
        self._expiry = None
        self._arm()

    # ------------------------------------------------------------ MemberChannel
    def send(self, api_key: int, body: dict, on_answer: OnAnswer) -> None:
        if self.closed:
            raise ChannelClosed(f"Kafka member {self.member_id} left")
        if api_key == CoordinatorApi.PING:
            if self._alive_lately():
                on_answer(self._answer(body))
            elif self.groups.c.clock.now_ms() - self.last_contact_ms > self.session_timeout_ms:
                self.groups.c.post(self.groups.session_expired, self)  # Kafka's rule: no heartbeat for a session
            else:
                self._held_ping = (body, on_answer)
        elif api_key == CoordinatorApi.STOP_FETCHER:
            self._start = None  # a start it did not sync is void: it learns of the new round
            if self._join is not None:  # it is rejoining: it holds nothing
                on_answer(self._answer(body))
            else:
                self._stop = (body, on_answer)
        elif api_key == CoordinatorApi.START_FETCHER:
            self._start = (body, on_answer)
            if self._join is not None and not self._join.done():
                self._join.set_result(body)
        else:
            raise ChannelClosed(f"Kafka member {self.member_id}: no mapping for coordinator api {api_key}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._held_ping = self._stop = self._start = None
        if self._join is not None and not self._join.done():
            self._join.set_result(None)
        self.groups.forget(self)

    # ------------------------------------------------------------ state
    def _joining(self, now: int) -> bool:
        """Is its JoinGroup waiting here, within its rebalance timeout?"""
        return self._join is not None and now - self._join_since_ms <= self.rebalance_timeout_ms

    def _alive_lately(self) -> bool:
        now = self.groups.c.clock.now_ms()
        if self._joining(now):
            return True
        return now - self.last_contact_ms <= max(1, self.session_timeout_ms // 3)

    def _answer(self, body: Mapping[str, Any]) -> dict:
        """A ping's or StopFetcher's answer: no offsets (a Kafka member commits them itself)."""
        return {"error_code": ErrorCode.NONE, "consumer_id": self.member_id,
                "generation_id": body.get("generation_id", NO_GENERATION), "offsets": []}

    def _arm(self, delay_ms: int | None = None) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        c = self.groups.c
        self._expiry = None if self.closed else c.timer.call_later(
            self.session_timeout_ms if delay_ms is None else delay_ms, lambda: c.post(self._check_expiry))

    def _check_expiry(self) -> None:
        self._expiry = None
        if self.closed:
            return
        now = self.groups.c.clock.now_ms()
        if self._joining(now):
            self._arm(max(1, self._join_since_ms + self.rebalance_timeout_ms - now + 1))  # waiting here: alive
            return
        left = self.last_contact_ms + self.session_timeout_ms - now
        if left > 0:
            self._arm(left)
        else:
            self.groups.session_expired(self)

    def contact(self) -> None:
        """The member sent a request: it is alive (answers a held ping), and may fetch for its
        session timeout from now."""
        self.last_contact_ms = self.groups.c.clock.now_ms()
        if self._expiry is None:  # an armed timer finds the new contact when it fires, and waits on
            self._arm()
        group = self.groups.c.groups.get(self.group_id)
        member = group.members.get(self.member_id) if group is not None else None
        if member is not None and member.channel is self:
            member.last_sent_ms = self.last_contact_ms
        held, self._held_ping = self._held_ping, None
        if held is not None:
            held[1](self._answer(held[0]))

    @property
    def rebalancing(self) -> bool:
        """Must the member rejoin (a StopFetcher waits, or a StartFetcher it has not joined for)?"""
        return self._stop is not None or (self._join is None and self.pending_start() is not None)

    def stopped_by_join(self) -> bool:
        """Its JoinGroup arrived: it stopped fetching (eager protocols revoke before rejoining).
        True if that answered a StopFetcher."""
        stop, self._stop = self._stop, None
        if stop is not None:
            stop[1](self._answer(stop[0]))
        return stop is not None

    def pending_start(self) -> dict | None:
        """A StartFetcher it has not synced (its JoinGroup can be answered at once)."""
        if self._start is not None and self._start[0].get("generation_id") != self.synced_generation:
            return self._start[0]
        return None

    async def wait_for_start(self, timeout_ms: int, gone: "asyncio.Future[Any] | None" = None) -> dict | None:
        """Wait for the StartFetcher of the next generation (None: closed, timed out, or ``gone``
        -- the connection the JoinGroup came on -- completed first)."""
        ready = self.pending_start()
        if ready is not None:
            return ready
        loop = asyncio.get_running_loop()
        join = self._join = loop.create_future()
        self._join_since_ms = self.groups.c.clock.now_ms()
        waiting = {join} if gone is None else {join, gone}
        try:
            await asyncio.wait(waiting, timeout=timeout_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
            return join.result() if join.done() else None
        finally:
            if self._join is join:
                self._join = None
            if not self.closed and not (gone is not None and gone.done()):
                self.contact()  # it waited here until now: alive

    def sync(self, generation: int) -> bytes | None:
        """The assignment of ``generation`` (answering its StartFetcher); None if it is not this one's."""
        start = self._start
        if start is not None and start[0].get("generation_id") == generation:
            self._start = None
            body, on_answer = start
            partitions: dict[str, list[int]] = {}
            for thread in body.get("ownership") or []:
                for p in thread.get("partitions") or []:
                    partitions.setdefault(p["topic"], []).append(p["partition"])
            self.assignment_bytes = encode_assignment(
                {"assigned_partitions": topic_partitions({t: sorted(ps) for t, ps in sorted(partitions.items())}),
                 "user_data": None}, 0)
            self.synced_generation = generation
            on_answer({"error_code": ErrorCode.NONE, "consumer_id": self.member_id, "generation_id": generation})
            return self.assignment_bytes
        if generation == self.synced_generation and start is None:
            return self.assignment_bytes
        return None

    def protocol_names(self) -> list[str] | None:
        return None if self.protocols is None else [n for n, _ in self.protocols]

    def metadata_for(self, name: str | None) -> bytes:
        for n, meta in self.protocols or []:
            if n == name:
                return meta
        return b""


class KafkaGroups:
    """Kafka's group APIs on one ``Coordinator`` (answers are version-agnostic response dicts)."""

    def __init__(self, coordinator: "Coordinator"):
        self.c = coordinator
        self.members: dict[tuple[str, str], KafkaMember] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED, not joined yet (KIP-394), and when.
        self._pending_ids: dict[str, dict[str, int]] = {}

    def _hand_out(self, group_id: str, member_id: str) -> None:
        """Remember a member id given to a client for its next JoinGroup, for a while (bounded)."""
        now = self.c.clock.now_ms()
        pending = self._pending_ids.setdefault(group_id, {})
        if len(pending) >= MAX_PENDING_MEMBER_IDS:
            for mid, since in list(pending.items()):
                if now - since > PENDING_MEMBER_ID_MS:
                    del pending[mid]
            while len(pending) >= MAX_PENDING_MEMBER_IDS:
                del pending[next(iter(pending))]
        pending[member_id] = now

    def reset(self) -> None:
        """The coordinator resigned: its members' channels are closed; forget handed-out ids."""
        self._pending_ids.clear()
        for km in list(self.members.values()):
            km.close()

    def session_expired(self, km: KafkaMember) -> None:
        """No request from ``km`` for its session timeout: fail it, as Kafka's coordinator does."""
        group, member = self._registry(km.group_id, km.member_id)
        if km.closed or group is None or member is None or member.channel is not km:
            return
        km.close()
        self.c.handle_consumer_failure(group, member, f"no heartbeat within its session timeout "
                                                      f"({km.session_timeout_ms} ms)")

    def forget(self, member: KafkaMember) -> None:
        key = (member.group_id, member.member_id)
        if self.members.get(key) is member:
            del self.members[key]

    def _registry(self, group_id: str, member_id: str) -> tuple[GroupRegistry | None, ConsumerRegistry | None]:
        group = self.c.groups.get(group_id)
        return group, (group.members.get(member_id) if group is not None else None)

    def _live(self, group_id: str, member_id: str) -> KafkaMember | None:
        km = self.members.get((group_id, member_id))
        if km is None or km.closed:
            return None
        group, member = self._registry(group_id, member_id)
        if member is None or member.channel is not km:
            km.close()
            return None
        return km

    def _not_served(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR while this coordinator is not active, INVALID_GROUP_ID for a name no
        znode can carry, else None."""
        if not self.c.active:
            return ErrorCode.NOT_COORDINATOR
        try:
            paths.validate_group(group_id)
        except ValueError:
            return ErrorCode.INVALID_GROUP_ID
        return None

    def _kafka_members(self, group_id: str) -> list[KafkaMember]:
        return [km for (g, _), km in sorted(self.members.items()) if g == group_id and not km.closed]

    # ------------------------------------------------------------ JoinGroup
    async def join_group(self, body: Mapping[str, Any], version: int, client_id: str, client_host: str,
                         gone: "asyncio.Future[Any] | None" = None,
                         topic_filter: "Callable[[str], bool] | None" = None) -> dict:
        """Answer a JoinGroup (waits for the member's assignment round; ``gone`` completes when the
        request's connection closes: a member that disconnected while waiting is no longer alive)."""
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""

        def answer(code: ErrorCode, **fields: Any) -> dict:
            out = {"throttle_time_ms": 0, "error_code": int(code), "generation_id": NO_GENERATION,
                   "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False,
                   "member_id": member_id, "members": []}
            out.update(fields)
            return out

        if (refused := self._not_served(group_id)) is not None:
            return answer(refused)
        if body.get("protocol_type") != CONSUMER_PROTOCOL_TYPE:
            log.info("JoinGroup %s from %s: protocol type %r refused (only %r)", group_id, client_host,
                     body.get("protocol_type"), CONSUMER_PROTOCOL_TYPE)
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        protocols = [(p.get("name"), bytes(p.get("metadata") or b"")) for p in body.get("protocols") or []
                     if isinstance(p.get("name"), str) and p.get("name") not in COOPERATIVE_PROTOCOLS]
        if not protocols:
            log.info("JoinGroup %s from %s: no eager assignment protocol offered (%s); cooperative rebalancing is "
                     "not supported", group_id, client_host, [p.get("name") for p in body.get("protocols") or []])
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        try:
            topics = sorted(set(decode_subscription(protocols[0][1])["topics"]))
        except ConsumerProtocolError as e:
            log.info("JoinGroup %s from %s: %s", group_id, client_host, e)
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        names = {n for n, _ in protocols}
        for other in self._kafka_members(group_id):
            theirs = other.protocol_names()
            if other.member_id != member_id and theirs is not None and not names & set(theirs):
                log.info("JoinGroup %s from %s: protocols %s share none with member %s's %s", group_id, client_host,
                         sorted(names), other.member_id, theirs)
                return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        session = body.get("session_timeout_ms")
        rebalance = body.get("rebalance_timeout_ms", -1)
        rebalance = rebalance if isinstance(rebalance, int) and rebalance > 0 else (
            session if isinstance(session, int) and session > 0 else DEFAULT_REBALANCE_TIMEOUT_MS)

        if not member_id:
            member_id = f"{_member_id_prefix(client_id)}-{uuid.uuid4()}"
            self._hand_out(group_id, member_id)
            if version >= 4:  # KIP-394: the client joins again with this id
                return answer(ErrorCode.MEMBER_ID_REQUIRED)

        km = self._live(group_id, member_id)
        if km is not None and km.protocols is not None and sorted(
                set(decode_subscription(km.protocols[0][1])["topics"])) != topics:
            group, member = self._registry(group_id, member_id)
            log.info("group %s: Kafka member %s changed its subscription to %s", group_id, member_id, topics)
            km.close()
            if group is not None and member is not None:
                self.c.member_left(group, member)
            self._hand_out(group_id, member_id)  # it joins again as new
            km = None
        if km is None:
            group, member = self._registry(group_id, member_id)
            pending = self._pending_ids.get(group_id, {})
            if member_id not in pending and (member is None or member.channel is not None) \
                    and (group_id, member_id) not in self.members:
                return answer(ErrorCode.UNKNOWN_MEMBER_ID)
            pending.pop(member_id, None)
            km = KafkaMember(self, group_id, member_id, client_id=client_id, client_host=client_host,
                             session_timeout_ms=session if isinstance(session, int) else 0,
                             rebalance_timeout_ms=rebalance, protocols=protocols,
                             group_instance_id=body.get("group_instance_id"))
            code = self._register(km, topics, topic_filter)
            if code != ErrorCode.NONE:
                return answer(code)
        else:
            km.protocols = protocols
            km.session_timeout_ms = session if isinstance(session, int) and session > 0 else km.session_timeout_ms
            km.rebalance_timeout_ms = rebalance
            km.contact()
            was_stopping = km.stopped_by_join()
            group, member = self._registry(group_id, member_id)
            if km.pending_start() is None and group is not None and member is not None:
                member.assignment = None  # eager: it revoked everything before this JoinGroup
                if not was_stopping and group.rebalance_task is None:
                    self.c.request_rebalance(group, f"Kafka member {member_id} joined again")

        start = await km.wait_for_start(rebalance, gone)
        if start is None:
            if km.closed or not self.c.active:
                return answer(ErrorCode.NOT_COORDINATOR if not self.c.active else ErrorCode.UNKNOWN_MEMBER_ID)
            return answer(ErrorCode.REBALANCE_IN_PROGRESS)
        kafka = self._kafka_members(group_id)
        protocol = self._choose_protocol(km, kafka)
        leader = kafka[0].member_id if kafka else member_id
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(protocol) or encode_subscription({"topics": topics}, 0)}
                   for m in kafka] if leader == member_id else []
        return answer(ErrorCode.NONE, generation_id=start["generation_id"], protocol_type=CONSUMER_PROTOCOL_TYPE,
                      protocol_name=protocol, leader=leader, members=members)

    def _register(self, km: KafkaMember, topics: list[str],
                  topic_filter: "Callable[[str], bool] | None" = None) -> ErrorCode:
        answer = self.c.register(km, {"group_id": km.group_id, "consumer_id": km.member_id,
                                      "topics": [{"topic": t, "streams": 1} for t in topics], "pattern": None,
                                      "auto_commit": False, "session_timeout_ms": km.session_timeout_ms})
        code = answer.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        if code != ErrorCode.NONE:
            log.info("group %s: Kafka member %s refused: %s %s", km.group_id, km.member_id,
                     ErrorCode.name_of(code), answer.get("error_message") or "")
            return {ErrorCode.SESSION_TIMEOUT_TOO_SMALL: ErrorCode.INVALID_SESSION_TIMEOUT,
                    ErrorCode.INVALID_SUBSCRIPTION: ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    ErrorCode.INVALID_GROUP_ID: ErrorCode.INVALID_GROUP_ID,
                    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR}.get(code, ErrorCode.INVALID_REQUEST)
        self.members[(km.group_id, km.member_id)] = km
        _, member = self._registry(km.group_id, km.member_id)
        if member is not None:
            member.topic_filter = topic_filter
        return ErrorCode.NONE

    @staticmethod
    def _choose_protocol(km: KafkaMember, kafka: list[KafkaMember]) -> str | None:
        known = [m.protocol_names() for m in kafka if m.protocol_names() is not None]
        for name in km.protocol_names() or []:
            if all(name in names for names in known):
                return name
        return (km.protocol_names() or [None])[0]

    # ------------------------------------------------------------ SyncGroup / Heartbeat / LeaveGroup
    def _member_for(self, group_id: str, member_id: str, generation: int | None) -> KafkaMember | ErrorCode:
        if not self.c.active:
            return ErrorCode.NOT_COORDINATOR
        km = self._live(group_id, member_id)
        if km is None and generation is not None:
            km = self._take_back(group_id, member_id, generation)
        if km is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        km.contact()
        return km

    def _take_back(self, group_id: str, member_id: str, generation: int) -> KafkaMember | None:
        """A member restored from ZooKeeper after a failover, heard from in the restored generation:
        back into it with the partitions the owners give it (its claim), nothing stopped."""
        group, member = self._registry(group_id, member_id)
        if group is None or member is None or member.channel is not None or generation != group.generation_id \
                or member.assignment is None:
            return None
        owned = [{"consumer_thread_id": thread, "partitions": [{"topic": t, "partition": p, "offset": -1}
                                                               for t, p in tps]}
                 for thread, tps in sorted(member.assignment.items())]
        km = KafkaMember(self, group_id, member_id, client_id="", client_host="(taken back)",
                         session_timeout_ms=member.session_timeout_ms,
                         rebalance_timeout_ms=member.session_timeout_ms, protocols=None)
        answer = self.c.register(km, {"group_id": group_id, "consumer_id": member_id,
                                      "topics": [{"topic": t, "streams": 1} for t in member.topic_count.static_topics()],
                                      "pattern": member.topic_count.pattern, "auto_commit": False,
                                      "session_timeout_ms": member.session_timeout_ms,
                                      "generation_id": generation, "owned": owned})
        if answer.get("error_code") != ErrorCode.NONE or answer.get("generation_id") != generation:
            km.closed = True
            return None
        km.synced_generation = generation
        km.assignment_bytes = encode_assignment({"assigned_partitions": topic_partitions(
            {t: sorted(p for tt, p in (tp for tps in member.assignment.values() for tp in tps) if tt == t)
             for t in sorted({t for tps in member.assignment.values() for t, _ in tps})}), "user_data": None}, 0)
        self.members[(group_id, member_id)] = km
        log.info("group %s: Kafka member %s taken back into generation %d", group_id, member_id, generation)
        return km

    def sync_group(self, body: Mapping[str, Any]) -> dict:
        def answer(code: ErrorCode, assignment: bytes = b"", protocol: str | None = None) -> dict:
            return {"throttle_time_ms": 0, "error_code": int(code), "protocol_type": CONSUMER_PROTOCOL_TYPE,
                    "protocol_name": protocol, "assignment": assignment}

        generation = body.get("generation_id")
        km = self._member_for(body.get("group_id") or "", body.get("member_id") or "", None)
        if isinstance(km, ErrorCode):
            return answer(km)
        assignment = km.sync(generation)
        if assignment is None:
            return answer(ErrorCode.REBALANCE_IN_PROGRESS if km.rebalancing else ErrorCode.ILLEGAL_GENERATION)
        return answer(ErrorCode.NONE, assignment, body.get("protocol_name"))

    def heartbeat(self, body: Mapping[str, Any]) -> dict:
        generation = body.get("generation_id")
        km = self._member_for(body.get("group_id") or "", body.get("member_id") or "", generation)
        if isinstance(km, ErrorCode):
            code = km
        elif km.rebalancing:
            code = ErrorCode.REBALANCE_IN_PROGRESS
        elif generation != km.synced_generation:
            code = ErrorCode.ILLEGAL_GENERATION
        else:
            code = ErrorCode.NONE
        return {"throttle_time_ms": 0, "error_code": int(code)}

    def leave_group(self, body: Mapping[str, Any], version: int) -> dict:
        group_id = body.get("group_id") or ""
        if version >= 3:
            leaving = [(m.get("member_id") or "", m.get("group_instance_id")) for m in body.get("members") or []]
        else:
            leaving = [(body.get("member_id") or "", None)]
        if not self.c.active:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR), "members": []}
        results = []
        for member_id, instance in leaving:
            km = self._live(group_id, member_id)
            group, member = self._registry(group_id, member_id)
            if km is None or group is None or member is None:
                results.append({"member_id": member_id, "group_instance_id": instance,
                                "error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)})
                continue
            log.info("group %s: Kafka member %s leaves", group_id, member_id)
            km.close()
            self.c.member_left(group, member)
            results.append({"member_id": member_id, "group_instance_id": instance, "error_code": 0})
        top = results[0]["error_code"] if version < 3 and results else 0
        return {"throttle_time_ms": 0, "error_code": top, "members": results}

    # ------------------------------------------------------------ offsets
    async def offset_commit(self, body: Mapping[str, Any], version: int) -> dict:
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""
        generation = body.get("generation_id_or_member_epoch", NO_GENERATION) if version >= 1 else NO_GENERATION
        wanted = [(t.get("name"), p.get("partition_index"), p.get("committed_offset"))
                  for t in body.get("topics") or [] for p in t.get("partitions") or []]

        def answer(codes: Mapping[tuple[str, int], int] | int) -> dict:
            topics: dict[str, list[dict]] = {}
            for t, p, _ in wanted:
                code = codes if isinstance(codes, int) else codes.get((t, p), ErrorCode.NONE)
                topics.setdefault(t, []).append({"partition_index": p, "error_code": int(code)})
            return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        if (refused := self._not_served(group_id)) is not None:
            return answer(refused)
        offsets = [{"topic": t, "partition": p, "offset": o} for t, p, o in wanted]
        if generation == NO_GENERATION and not member_id:
            return await self._standalone_commit(group_id, wanted, answer)
        km = self._member_for(group_id, member_id, generation)
        if isinstance(km, ErrorCode):
            return answer(km)
        group, member = self._registry(group_id, member_id)
        assert group is not None and member is not None
        code, codes = self.c.offsets.accept(group, member, offsets, generation)
        if code == ErrorCode.STALE_GENERATION:
            return answer(ErrorCode.REBALANCE_IN_PROGRESS if km.rebalancing else ErrorCode.ILLEGAL_GENERATION)
        if code != ErrorCode.NONE:
            return answer(ErrorCode.INVALID_REQUEST)
        kafka_codes = {tp: {ErrorCode.NONE: ErrorCode.NONE, ErrorCode.OFFSET_BACKWARDS: ErrorCode.NONE,
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            ErrorCode.PARTITION_NOT_OWNED: ErrorCode.ILLEGAL_GENERATION}.get(e, ErrorCode.INVALID_REQUEST)
                       for tp, e in codes.items()}
        if any(e == ErrorCode.NONE for e in codes.values()):
            failure = await self._write(group)
            if failure is not None:
                kafka_codes = {tp: (failure if e == ErrorCode.NONE else e) for tp, e in kafka_codes.items()}
        return answer(kafka_codes)

    async def _standalone_commit(self, group_id: str, wanted: list, answer) -> dict:
        group = self.c.groups.get(group_id)
        if group is not None and group.live_members():
            return answer(ErrorCode.UNKNOWN_MEMBER_ID)  # Kafka: only an empty group takes them
        if group is None:
            group = self.c.groups[group_id] = GroupRegistry(group_id)
        codes: dict[tuple[str, int], int] = {}
        for t, p, o in wanted:
            if not isinstance(t, str) or not isinstance(p, int) or not isinstance(o, int) or o < 0:
                codes[(t, p)] = ErrorCode.INVALID_REQUEST
            elif not 0 <= p < self.c.topics.get(t, 0):
                codes[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                group.offsets[(t, p)] = o
                group.offset_generation[(t, p)] = NO_GENERATION  # outside any generation: may go anywhere
                group.dirty.add((t, p))
                codes[(t, p)] = ErrorCode.NONE
        if any(e == ErrorCode.NONE for e in codes.values()):
            failure = await self._write(group)
            if failure is not None:
                codes = {tp: (failure if e == ErrorCode.NONE else e) for tp, e in codes.items()}
        log.info("group %s: %d offsets set from outside any generation", group_id,
                 sum(1 for e in codes.values() if e == ErrorCode.NONE))
        return answer(codes)

    async def _write(self, group: GroupRegistry) -> ErrorCode | None:
        try:
            written = await self.c.offsets.commit_group(group)
        except Fenced:
            return ErrorCode.NOT_COORDINATOR
        return None if written else ErrorCode.COORDINATOR_NOT_AVAILABLE

    def offset_fetch(self, body: Mapping[str, Any], version: int) -> dict:
        if version >= 8:
            groups = [self._fetch_group(g.get("group_id") or "", g.get("topics")) for g in body.get("groups") or []]
            return {"throttle_time_ms": 0, "groups": groups}
        one = self._fetch_group(body.get("group_id") or "", body.get("topics"))
        code = one["error_code"]
        topics = one["topics"]
        if code != ErrorCode.NONE and version < 2:  # no group-level error code before v2
            topics = [{"name": t.get("name"), "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                for p in t.get("partition_indexes") or []]} for t in body.get("topics") or []]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": code}

    def _fetch_group(self, group_id: str, wanted: Iterable[Mapping[str, Any]] | None) -> dict:
        if not self.c.active:
            return {"group_id": group_id, "topics": [], "error_code": int(ErrorCode.NOT_COORDINATOR)}
        group = self.c.groups.get(group_id)
        offsets = dict(group.offsets) if group is not None else {}
        if wanted is None:
            pairs = sorted(offsets)
        else:
            pairs = [(t.get("name"), p) for t in wanted for p in t.get("partition_indexes") or []]
        topics: dict[str, list[dict]] = {}
        for t, p in pairs:
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offsets.get((t, p), -1),
                                             "committed_leader_epoch": -1, "metadata": "", "error_code": 0})
        return {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "error_code": 0}

    # ------------------------------------------------------------ admin
    def list_groups(self, body: Mapping[str, Any]) -> dict:
        if not self.c.active:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR), "groups": []}
        states = {s.lower() for s in body.get("states_filter") or []}
        types = {s.lower() for s in body.get("types_filter") or []}
        groups = []
        for gid, group in sorted(self.c.groups.items()):
            state = kafka_state(group.state)
            if (states and state.lower() not in states) or (types and "classic" not in types):
                continue
            groups.append({"group_id": gid, "protocol_type": CONSUMER_PROTOCOL_TYPE, "group_state": state,
                           "group_type": "classic"})
        return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}

    def describe_groups(self, body: Mapping[str, Any]) -> dict:
        out = []
        for gid in body.get("groups") or []:
            if not self.c.active:
                out.append({"error_code": int(ErrorCode.NOT_COORDINATOR), "group_id": gid, "group_state": "",
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            group = self.c.groups.get(gid)
            if group is None:
                out.append({"error_code": 0, "group_id": gid, "group_state": "Dead", "protocol_type": "",
                            "protocol_data": "", "members": []})
                continue
            kafka = self._kafka_members(gid)
            protocol = self._choose_protocol(kafka[0], kafka) if kafka else self.c.config.assignment_strategy
            members = []
            for cid, m in sorted(group.members.items()):
                km = self.members.get((gid, cid))
                if km is not None and not km.closed and m.channel is km:
                    members.append({"member_id": cid, "group_instance_id": km.group_instance_id,
                                    "client_id": km.client_id, "client_host": km.client_host,
                                    "member_metadata": km.metadata_for(protocol)
                                    or encode_subscription({"topics": m.topic_count.static_topics()}, 0),
                                    "member_assignment": km.assignment_bytes})
                else:
                    members.append({"member_id": cid, "group_instance_id": None, "client_id": "coordkafka",
                                    "client_host": m.peer,
                                    "member_metadata": encode_subscription(
                                        {"topics": m.topic_count.topics_in(self.c.topics)
                                         if m.topic_count.is_wildcard else m.topic_count.static_topics()}, 0),
                                    "member_assignment": _assignment_bytes(m)})
            out.append({"error_code": 0, "group_id": gid, "group_state": kafka_state(group.state),
                        "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_data": protocol or "",
                        "members": members})
        return {"throttle_time_ms": 0, "groups": out}

    async def delete_groups(self, body: Mapping[str, Any]) -> dict:
        results = []
        for gid in body.get("groups_names") or []:
            results.append({"group_id": gid, "error_code": int(await self._delete_group(gid))})
        return {"throttle_time_ms": 0, "results": results}

    async def _delete_group(self, group_id: str) -> ErrorCode:
        if (refused := self._not_served(group_id)) is not None:
            return refused
        group = self.c.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members or group.rebalance_task is not None:
            return ErrorCode.NON_EMPTY_GROUP
        try:
            async with group.store_lock:
                await self.c.store.delete_group(group_id)
        except Fenced:
            return ErrorCode.NOT_COORDINATOR
        except StoreError as e:
            log.warning("could not delete group %s: %s", group_id, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.c.groups.get(group_id) is group and not group.members:
            del self.c.groups[group_id]
            log.info("group %s deleted", group_id)
            return ErrorCode.NONE
        return ErrorCode.NON_EMPTY_GROUP


def _assignment_bytes(member: ConsumerRegistry) -> bytes:
    parts: dict[str, list[int]] = {}
    for tps in (member.assignment or {}).values():
        for t, p in tps:
            parts.setdefault(t, []).append(p)
    return encode_assignment({"assigned_partitions": topic_partitions({t: sorted(ps) for t, ps in sorted(parts.items())}),
                              "user_data": None}, 0)
