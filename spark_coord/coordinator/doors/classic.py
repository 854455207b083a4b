"""Kafka's classic group protocol, eager and cooperative, as a door into the coordinator
(DESIGN.md "One registry, several doors"): JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

A Kafka consumer (librdkafka, kafka-python, kafkajs, the Java client) joins one of
our groups with JoinGroup/SyncGroup/Heartbeat.  ``ClassicMember`` is its
``MemberChannel``: the coordinator drives it with Ping, StopFetcher and
StartFetcher like any member, and the adapter translates them into what a Kafka
client understands.  It keeps no member table of its own: the coordinator's
registry holds the member, with the adapter as its channel.

* **Ping** -> its heartbeats.  A ping is answered at once when the member was heard
  from (a heartbeat, a commit, a JoinGroup waiting here) within the last third of
  its session timeout, else at its next request; a member that sends nothing for
  its session timeout is failed, as Kafka's coordinator does.
* **StopFetcher** -> REBALANCE_IN_PROGRESS on its next Heartbeat, and then:
  - an *eager* member (range, roundrobin, kafkajs' RoundRobinAssigner...) revokes
    everything it holds (committing first) and sends JoinGroup: that JoinGroup
    answers the StopFetcher, and waits for the member's StartFetcher;
  - a *cooperative* member (``cooperative-sticky``, KIP-429) keeps fetching and
    sends JoinGroup; it is answered at once, and its SyncGroup hands it its
    assignment without the partitions to stop.  It revokes just those (its
    revocation callback gets exactly them), commits, and joins again: that second
    JoinGroup answers the StopFetcher and waits for its StartFetcher, the second
    round of KIP-429.
* **StartFetcher** -> the answer to the JoinGroup waiting here (or, for a member
  not rejoining, REBALANCE_IN_PROGRESS and then the answer to its JoinGroup), and
  its complete assignment in the SyncGroup answer, encoded in the consumer
  protocol.  The SyncGroup answers the StartFetcher.  A cooperative member keeps
  what it already fetches and its assignment callback gets only what is new.

The coordinator computes every assignment: the JoinGroup answers name no member
as leader, so every client syncs as a follower and runs no assignor, and each
member is answered in a protocol it offered (a cooperative one when it offers
one), so eager and cooperative members, kafkajs next to librdkafka, our members
and Spark queries share one group whatever protocol names they offer.

The first JoinGroups of an empty group wait ``group.initial.rebalance.delay.ms`` before their
members register, extended while more join (Kafka's InitialDelayedJoin, ``initial_join``): the
coordinator's first rebalance then shares the partitions among all of them at once.

JoinGroup waits are ``DelayedJoin`` operations in a purgatory on the coordinator's
timer (Kafka's DelayedJoin): one completes when the member's StartFetcher arrives,
its connection closes, or its rebalance timeout passes (REBALANCE_IN_PROGRESS:
the client joins again).  SyncGroup never waits: a JoinGroup is answered only
once the member's assignment is known.

The offset and admin APIs serve every kind of group, so they are not this door's:
``group_offsets`` (OffsetCommit, OffsetFetch, OffsetDelete; a classic member's commit is
validated here, in the generation it synced: ``validate_commit``) and ``group_admin``
(ListGroups, DescribeGroups, DeleteGroups; a member shows as its channel describes it).

Choices where Kafka and the seeds differ:

* ``group.instance.id`` (static membership, KIP-345): the registry knows a static
  member by its instance id; a new incarnation's JoinGroup (a restart within the
  session timeout, or a second process with the same instance id) takes over what
  the instance holds in the same generation, without a rebalance, and the earlier
  member id is answered FENCED_INSTANCE_ID from then on;
* after a coordinator failover a Kafka member that heartbeats or commits with the
  generation the new coordinator restored for it is taken back with the partitions
  ZooKeeper's owners give it (nothing stopped), like our members' claims.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from spark_coord.coordinator.core.api import CoordinatorApi
from spark_coord.coordinator.core.channel import ChannelClosed, MemberDescription, OnAnswer
from spark_coord.coordinator.core.delayed import DelayedJoin
from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry, client_name, registry_key
from spark_coord.coordinator.core.lease import HeartbeatLease
from spark_coord.coordinator.core.purgatory import MemberKey, Purgatory
from spark_coord.coordinator.doors.common import (
    ConsumerMembers,
    Partitions,
    by_topic,
    encode_partitions,
    not_served,
    restored_consumer_member,
    sent_claim,
)
from spark_coord.coordinator.doors.initial_join import InitialDelays
from spark_coord.errors import ErrorCode
from spark_coord.wire.consumer_protocol import ConsumerProtocolError, decode_subscription, partitions_by_topic
from spark_coord.wire.join_group import CONSUMER_PROTOCOL_TYPE
from spark_coord.zk import paths

if TYPE_CHECKING:
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ClassicGroups", "ClassicMember", "CONSUMER_PROTOCOL_TYPE", "COOPERATIVE_PROTOCOLS", "LEADER",
           "choose_protocol"]

log = logging.getLogger(__name__)

#: Assignment protocols that hand partitions over incrementally (KIP-429).
COOPERATIVE_PROTOCOLS = frozenset({"cooperative-sticky"})
#: The generation of a member that synced none yet, and of a JoinGroup answered with an error.
NO_GENERATION = -1
#: How long a JoinGroup waits for its assignment at most when it names no rebalance timeout.
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
#: Member ids handed out and not used yet, per group: at most this many, kept this long when full.
MAX_PENDING_MEMBER_IDS = 10_000
PENDING_MEMBER_ID_MS = 300_000
#: The leader every JoinGroup answer names: no member, so every client syncs as a follower.
LEADER = "coordinator"


def choose_protocol(offered: Iterable[str]) -> str | None:
    """The protocol a member is answered in: a cooperative one if it offers one (nothing it holds
    stops needlessly), else its first choice."""
    offered = list(offered)
    for name in offered:
        if name in COOPERATIVE_PROTOCOLS:
            return name
    return offered[0] if offered else None


def _member_id_prefix(client_id: str | None) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._]", "_", client_id or "")[:60].strip("_.")
    return cleaned or "consumer"


def _ownership(body: Mapping[str, Any]) -> Partitions:
    """A StartFetcher's partitions by topic."""
    return by_topic({(p["topic"], p["partition"]) for thread in body.get("ownership") or []
                     for p in thread.get("partitions") or []})


def _minus(held: Partitions, gone: Iterable[dict]) -> Partitions:
    drop = {(e["topic"], p) for e in gone for p in e["partitions"]}
    out = {t: [p for p in ps if (t, p) not in drop] for t, ps in held.items()}
    return {t: ps for t, ps in out.items() if ps}


def _pairs(partitions: Partitions) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in partitions.items() for p in ps}


class ClassicMember(HeartbeatLease):
    """A Kafka classic-protocol member as the coordinator's ``MemberChannel`` (its liveness:
    ``HeartbeatLease``, from its own requests)."""

    #: The protocol its channel speaks, as ``groups describe`` and the metrics name it.
    PROTOCOL = "classic"

    def __init__(self, door: "ClassicGroups", group_id: str, member_id: str, *, client_id: str, client_host: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]] | None,
                 group_instance_id: str | None = None, cooperative: bool | None = None, key: str | None = None):
        self.door = door
        self.group_id = group_id
        self.member_id = member_id
        #: The registry's name for it: its member id, or its instance id when static (KIP-345).
        self.key = key or member_id
        self.client_id = client_id
        self.client_host = client_host
        self.peer = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.group_instance_id = group_instance_id
        #: (name, subscription bytes) in the member's order of preference; None: not known (taken
        #: back after a failover, before it joined again).
        self.protocols = protocols
        self.protocol = choose_protocol(n for n, _ in protocols or [])
        self.cooperative = self.protocol in COOPERATIVE_PROTOCOLS if cooperative is None else cooperative
        self.closed = False
        #: A StopFetcher waiting for the member to give the partitions up, with the partitions (None: all).
        self._stop: tuple[dict, OnAnswer, list[dict] | None] | None = None
        #: Cooperative: the generation in which its assignment without the stopped partitions was handed
        #: to it (its next JoinGroup, after it synced that one, answers the StopFetcher).
        self._stop_handed: int | None = None
        #: The StartFetcher it has not synced yet.
        self._start: tuple[dict, OnAnswer] | None = None
        #: A JoinGroup waiting here.
        self.join: DelayedJoin | None = None
        #: A JoinGroup answered with (generation, partitions, the StartFetcher's answer callback or None);
        #: its SyncGroup for that generation takes it.
        self._offered: tuple[int, Partitions, OnAnswer | None] | None = None
        #: The generation it synced last, and the assignment it got then.
        self.generation = NO_GENERATION
        self.partitions: Partitions = {}
        self._start_lease()

    # ------------------------------------------------------------ MemberChannel
    def send(self, api_key: int, body: dict, on_answer: OnAnswer, version: int = 0) -> None:
        if self.closed:
            raise ChannelClosed(f"Kafka member {self.member_id} left")
        if api_key == CoordinatorApi.PING:
            self._ping(body, on_answer)
        elif api_key == CoordinatorApi.STOP_FETCHER:
            self._on_stop(body, on_answer)
        elif api_key == CoordinatorApi.START_FETCHER:
            self._on_start(body, on_answer)
        else:
            raise ChannelClosed(f"Kafka member {self.member_id}: no mapping for coordinator api {api_key}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._end_lease()
        self._stop = self._start = self._offered = None
        self._wake_join(None)

    def _on_stop(self, body: dict, on_answer: OnAnswer) -> None:
        asked = body.get("partitions") if self.cooperative else None
        if self._start is not None and self._offered is None and self.join is None:
            self._start = None  # a start it never heard of is void: this stop replaces it
        if asked is None and (self.join is not None or (self._offered is not None and self._offered[2] is not None)):
            # eager, and between JoinGroup and SyncGroup: it revoked everything before joining
            self._void_offer()
            on_answer(self._answer(body))
            return
        self._stop, self._stop_handed = (body, on_answer, asked), None
        if asked is not None and self.join is not None:
            self._hand_reduced()

    def _on_start(self, body: dict, on_answer: OnAnswer) -> None:
        self._start = (body, on_answer)
        if self.join is not None and self._stop is None:
            self._offer_start()

    def _void_offer(self) -> None:
        """A JoinGroup answer it has not synced yet is no longer what it gets."""
        if self._offered is not None:
            self._offered = None

    # ------------------------------------------------------------ state
    def _waiting_here(self) -> bool:
        """Is its JoinGroup waiting here (it is alive while it waits)?"""
        return self.join is not None and not self.join.is_completed


    @property
    def rebalancing(self) -> bool:
        """Must the member (re)join: a stop or start waits for it, or it has not synced a JoinGroup answer?"""
        return self._stop is not None or self._start is not None or self._offered is not None

    @property
    def offered_generation(self) -> int | None:
        """The generation of the JoinGroup answer it has not synced yet, if any."""
        return self._offered[0] if self._offered is not None else None

    def resume(self, generation: int, held: Iterable[tuple[str, int]]) -> None:
        """Taken back after a failover, or over by a static member's new incarnation: it synced
        ``generation`` with ``held``, the partitions the registry counts for it."""
        self.generation, self.partitions = generation, by_topic(held)

    def check_session_in(self, delay_ms: int) -> None:
        """Look at its session again in ``delay_ms`` instead of failing it now."""
        self._arm(delay_ms)

    # ------------------------------------------------------------ joining
    def _hand_reduced(self) -> None:
        """Cooperative: answer its JoinGroup with its assignment without the partitions to stop."""
        assert self._stop is not None
        body, _, asked = self._stop
        generation = body.get("generation_id", self.generation)
        self._stop_handed = generation
        self._offer(generation, _minus(self.partitions, asked or []), None)

    def _offer_start(self) -> None:
        assert self._start is not None
        body, on_answer = self._start
        self._offer(body["generation_id"], _ownership(body), on_answer)

    def offer(self, generation: int, partitions: Partitions) -> None:
        """Answer its JoinGroup with ``partitions`` in ``generation``, no StartFetcher waiting on its
        SyncGroup (it keeps what it has, or takes over what it is counted for)."""
        self._offer(generation, partitions, None)

    def _offer(self, generation: int, partitions: Partitions, on_answer: OnAnswer | None) -> None:
        self._offered = (generation, partitions, on_answer)
        self._wake_join(generation)

    def _wake_join(self, generation: int | None) -> None:
        """Answer the JoinGroup waiting here with ``generation`` (None: the member is gone)."""
        join = self.join
        if join is not None and not join.is_completed:
            if generation is None:
                join.gone = True
            else:
                join.generation = generation
            self.door.purgatory.check_and_complete(MemberKey(self.group_id, self.member_id))

    def joined(self, owned: set[tuple[str, int]] | None) -> str:
        """Its JoinGroup arrived (``owned``: what its subscription says it owns, if it says).  Settles
        what the JoinGroup means for a StopFetcher waiting here.  Returns ``"ready"`` when it can be
        answered at once, ``"wait"`` when its StartFetcher is on the way, ``"unasked"`` when nothing
        waits for it: it joined again on its own."""
        if self._stop is not None:
            body, on_answer, asked = self._stop
            asked_pairs = {(e["topic"], p) for e in asked or [] for p in e["partitions"]}
            if asked is None or (self._stop_handed is not None and self.generation == self._stop_handed) \
                    or (owned is not None and not owned & asked_pairs):
                # eager: it revoked everything; cooperative: it gave the partitions up and joined again
                self._stop, self._stop_handed = None, None
                self.partitions = {} if asked is None else _minus(self.partitions, asked)
                self._void_offer()
                on_answer(self._answer(body))
                if self._start is not None:
                    self._offer_start()
                    return "ready"
                return "wait"  # the coordinator starts it next
            self._hand_reduced()
            return "ready"
        if self._offered is not None:
            return "ready"
        if self._start is not None:
            self._offer_start()
            return "ready"
        return "unasked"

    def sync(self, generation: int) -> bytes | None:
        """The assignment of ``generation`` (answering its StartFetcher); None if it is not this one's."""
        offered = self._offered
        if offered is not None and offered[0] == generation:
            self._offered = None
            _, partitions, on_answer = offered
            self.generation, self.partitions = generation, partitions
            if on_answer is not None and self._start is not None and self._start[1] is on_answer:
                self._start = None
                on_answer({"error_code": ErrorCode.NONE, "consumer_id": self.key, "generation_id": generation})
            return encode_partitions(partitions)
        if offered is None and generation == self.generation and not self.rebalancing:
            return encode_partitions(self.partitions)
        return None

    def heartbeat_code(self, generation: Any) -> ErrorCode:
        if self.rebalancing:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE if generation == self.generation else ErrorCode.ILLEGAL_GENERATION

    def join_answer(self, generation: int) -> dict:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NONE), "generation_id": generation,
                "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": self.protocol, "leader": LEADER,
                "skip_assignment": False, "member_id": self.member_id, "members": []}

    def protocol_names(self) -> list[str] | None:
        return None if self.protocols is None else [n for n, _ in self.protocols]

    def metadata(self) -> bytes:
        for n, meta in self.protocols or []:
            if n == self.protocol:
                return meta
        return b""

    def describe(self) -> MemberDescription:
        return MemberDescription(self.PROTOCOL, self.member_id, self.group_instance_id, self.client_id,
                                 self.client_host, assignment_protocol=self.protocol, subscription=self.metadata(),
                                 assignment=self.partitions)


class ClassicGroups:
    """Kafka's classic group APIs on one ``Coordinator`` (answers are version-agnostic response dicts)."""

    def __init__(self, coordinator: "GroupCoordinator", consumer: ConsumerMembers | None = None):
        self.c = coordinator
        #: Kafka 4's consumer group protocol door: a restored member of it is told to heartbeat first.
        self.consumer = consumer
        self.purgatory = Purgatory(coordinator.timer, "join")
        #: Member ids handed out with MEMBER_ID_REQUIRED, not joined yet (KIP-394), and when.
        self._pending_ids: dict[str, dict[str, int]] = {}
        #: (group, member id) -> registry name of static members (KIP-345: their instance id).
        self._static: dict[tuple[str, str], str] = {}
        #: (group, member id) -> instance id, of static members a newer incarnation replaced: their
        #: requests are answered FENCED_INSTANCE_ID (bounded: the oldest are forgotten).
        self._fenced: dict[tuple[str, str], str] = {}
        #: Empty groups whose first JoinGroups wait for the initial rebalance delay.
        self.initial = InitialDelays(coordinator, self.purgatory, self._fence)

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
        self._static.clear()
        self._fenced.clear()
        self.initial.reset()
        self.purgatory.cancel_all()

    def session_expired(self, km: ClassicMember) -> None:
        """No request from ``km`` for its session timeout: fail it, as Kafka's coordinator does."""
        group, member = self._registry(km.group_id, km.member_id)
        if km.closed or group is None or member is None or member.channel is not km:
            return
        if not self.c.leadership.fresh():  # maybe deposed while paused: look again once confirmed
            km.check_session_in(self.c.leadership.recheck_ms())
            return
        km.close()
        self.c.handle_consumer_failure(group, member, f"no heartbeat within its session timeout "
                                                      f"({km.session_timeout_ms} ms)")

    def _registry(self, group_id: str, member_id: str) -> tuple[GroupRegistry | None, ConsumerRegistry | None]:
        group = self.c.groups.get(group_id)
        if group is None:
            return None, None
        member = group.members.get(self._static.get((group_id, member_id), member_id))
        if member is None and member_id:  # a static member restored after a failover: known by its member id
            member = next((m for m in group.members.values()
                           if m.external_id == member_id and m.kind == "classic"), None)
            if member is not None:
                self._static[(group_id, member_id)] = member.consumer_id
        return group, member

    def _fence(self, group_id: str, member_id: str, instance: str) -> None:
        """A newer incarnation of static member ``instance`` replaced ``member_id``: its requests are
        answered FENCED_INSTANCE_ID from now on (the oldest fenced ids are forgotten past a bound)."""
        self._fenced[(group_id, member_id)] = instance
        while len(self._fenced) > MAX_PENDING_MEMBER_IDS:
            del self._fenced[next(iter(self._fenced))]

    def _unknown(self, group_id: str, member_id: str) -> ErrorCode:
        """UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID for a static member a newer incarnation replaced."""
        return ErrorCode.FENCED_INSTANCE_ID if (group_id, member_id) in self._fenced else ErrorCode.UNKNOWN_MEMBER_ID

    def _live(self, group_id: str, member_id: str) -> ClassicMember | None:
        """The member's adapter, if it is a live classic member of the group."""
        _, member = self._registry(group_id, member_id)
        channel = member.channel if member is not None else None
        if isinstance(channel, ClassicMember) and not channel.closed:
            return channel
        return None

    # ------------------------------------------------------------ JoinGroup
    async def join_group(self, body: Mapping[str, Any], version: int, client_id: str, client_host: str,
                         gone: "asyncio.Future[Any] | None" = None,
                         topic_filter: "Callable[[str], bool] | None" = None) -> dict:
        """Answer a JoinGroup (waits for the member's assignment; ``gone`` completes when the
        request's connection closes: a member that disconnected while waiting is no longer alive)."""
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""

        def answer(code: ErrorCode, **fields: Any) -> dict:
            out = {"throttle_time_ms": 0, "error_code": int(code), "generation_id": NO_GENERATION,
                   "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False,
                   "member_id": member_id, "members": []}
            out.update(fields)
            return out

        if (refused := not_served(self.c, group_id)) is not None:
            return answer(refused)
        if self.c.group_type(group_id) == "share":
            log.info("JoinGroup %s from %s: a share group's id", group_id, client_host)
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if body.get("protocol_type") != CONSUMER_PROTOCOL_TYPE:
            log.info("JoinGroup %s from %s: protocol type %r refused (only %r)", group_id, client_host,
                     body.get("protocol_type"), CONSUMER_PROTOCOL_TYPE)
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        protocols = [(p.get("name"), bytes(p.get("metadata") or b"")) for p in body.get("protocols") or []
                     if isinstance(p.get("name"), str)]
        if not protocols:
            log.info("JoinGroup %s from %s: no assignment protocol offered", group_id, client_host)
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        chosen = choose_protocol(n for n, _ in protocols)
        try:
            subscription = decode_subscription(dict(protocols)[chosen])
        except ConsumerProtocolError as e:
            log.info("JoinGroup %s from %s: %s", group_id, client_host, e)
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        topics = sorted(set(subscription["topics"]))
        owned = {(t, p) for t, ps in partitions_by_topic(subscription.get("owned_partitions")).items() for p in ps} \
            if subscription.get("version", 0) >= 1 else None
        session = body.get("session_timeout_ms")
        rebalance = body.get("rebalance_timeout_ms", -1)
        rebalance = rebalance if isinstance(rebalance, int) and rebalance > 0 else (
            session if isinstance(session, int) and session > 0 else DEFAULT_REBALANCE_TIMEOUT_MS)

        instance = body.get("group_instance_id") if version >= 5 else None
        if instance:
            try:
                paths.validate_consumer_id(registry_key(instance))
            except ValueError as e:
                log.info("JoinGroup %s from %s: %s", group_id, client_host, e)
                return answer(ErrorCode.INVALID_REQUEST)
            if (group_id, member_id) in self._fenced:
                return answer(ErrorCode.FENCED_INSTANCE_ID)
            if not member_id:  # a static member gets its id at once (KIP-345)
                member_id = f"{_member_id_prefix(client_id)}-{uuid.uuid4()}"
            taken = await self._static_join(group_id, member_id, instance, protocols, chosen, topics, session,
                                            rebalance, client_id, client_host, topic_filter, gone)
            if taken is not None:
                return taken
        elif not member_id:
            member_id = f"{_member_id_prefix(client_id)}-{uuid.uuid4()}"
            self._hand_out(group_id, member_id)
            if version >= 4:  # KIP-394: the client joins again with this id
                return answer(ErrorCode.MEMBER_ID_REQUIRED)

        km = self._live(group_id, member_id)
        if km is not None and (km.protocols is not None and sorted(
                set(decode_subscription(km.metadata())["topics"])) != topics):
            group, member = self._registry(group_id, member_id)
            log.info("group %s: Kafka member %s changed its subscription to %s", group_id, member_id, topics)
            km.close()
            if group is not None and member is not None:
                self.c.member_left(group, member)
            self._hand_out(group_id, member_id)  # it joins again as new
            km = None
        if km is None:
            held = await self.initial.hold(group_id, member_id, instance, rebalance, gone)
            if held is not None:
                return answer(held)
            group, member = self._registry(group_id, member_id)
            pending = self._pending_ids.get(group_id, {})
            if not instance and member_id not in pending and (member is None or member.channel is not None):
                return answer(self._unknown(group_id, member_id))
            pending.pop(member_id, None)
            km = ClassicMember(self, group_id, member_id, client_id=client_id, client_host=client_host,
                               session_timeout_ms=session if isinstance(session, int) else 0,
                               rebalance_timeout_ms=rebalance, protocols=protocols, group_instance_id=instance,
                               key=registry_key(instance) if instance else None)
            code = self._register(km, topics, topic_filter)
            if code != ErrorCode.NONE:
                return answer(code)
            if instance:
                self._static[(group_id, member_id)] = km.key
        else:
            km.protocols, km.protocol = protocols, chosen
            km.session_timeout_ms = session if isinstance(session, int) and session > 0 else km.session_timeout_ms
            km.rebalance_timeout_ms = rebalance
            km.contact()
            if km.cooperative != (chosen in COOPERATIVE_PROTOCOLS):
                log.info("group %s: Kafka member %s now joins with %s", group_id, member_id, chosen)
            if km.joined(owned if km.cooperative else None) == "unasked":
                self._rejoined_on_its_own(km, owned)
        return await self._wait_join(km, gone)

    def _rejoined_on_its_own(self, km: ClassicMember, owned: set[tuple[str, int]] | None) -> None:
        """A JoinGroup nobody asked for: an eager member revoked everything before it; a cooperative
        one may have dropped some (its subscription says what it still owns)."""
        group, member = self._registry(km.group_id, km.member_id)
        if group is None or member is None:
            return
        held = _pairs(km.partitions)
        if not km.cooperative:
            km.partitions = {}
            self.c.released(group, member, None, f"Kafka member {km.member_id} joined again")
        elif owned is not None and held - owned:
            km.partitions = {t: [p for p in ps if (t, p) in owned] for t, ps in km.partitions.items()}
            self.c.released(group, member, held - owned, f"Kafka member {km.member_id} no longer owns "
                                                          f"{len(held - owned)} partition(s)")
        else:  # nothing changed for it: the same assignment again, at once
            km.offer(km.generation if km.generation != NO_GENERATION else max(0, member.epoch or 0),
                     dict(km.partitions))

    async def _wait_join(self, km: ClassicMember, gone: "asyncio.Future[Any] | None") -> dict:
        """The JoinGroup answer once the member's offer is ready (a ``DelayedJoin``)."""
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        if km.join is not None and not km.join.is_completed:
            km.join.force_complete()  # a JoinGroup it gave up on (a new one came): answered as superseded
        join = km.join = DelayedJoin(km.group_id, km.member_id, km.rebalance_timeout_ms, future,
                                     on_done=lambda: setattr(km, "last_contact_ms", self.c.clock.now_ms()))
        if km.offered_generation is not None:
            join.generation = km.offered_generation
        if gone is not None:
            gone.add_done_callback(lambda _f: self._gone(km, join))
        self.purgatory.try_complete_else_watch(join, [MemberKey(km.group_id, km.member_id)])
        generation = await future
        if km.join is join:
            km.join = None
        if not km.closed and not (gone is not None and gone.done()):
            km.contact()  # it waited here until now: alive
        if generation is None:
            if km.closed or not self.c.active:
                code = ErrorCode.NOT_COORDINATOR if not self.c.active else ErrorCode.UNKNOWN_MEMBER_ID
            else:
                code = ErrorCode.REBALANCE_IN_PROGRESS
            return {"throttle_time_ms": 0, "error_code": int(code), "generation_id": NO_GENERATION,
                    "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False,
                    "member_id": km.member_id, "members": []}
        return km.join_answer(generation)

    def _gone(self, km: ClassicMember, join: DelayedJoin) -> None:
        if not join.is_completed:
            join.gone = True
            self.purgatory.check_and_complete(MemberKey(km.group_id, km.member_id))

    def _registration(self, km: ClassicMember, topics: Iterable[str], external_id: str | None,
                      pattern: str | None = None, claim: Mapping[str, Any] | None = None) -> dict:
        """Register ``km`` with the coordinator (``claim``: ``sent_claim`` of the registry entry it
        takes back or over); the coordinator's answer."""
        return self.c.register(km, {"group_id": km.group_id, "consumer_id": km.key,
                                    "topics": [{"topic": t, "streams": 1} for t in topics], "pattern": pattern,
                                    "auto_commit": False, "session_timeout_ms": km.session_timeout_ms, **(claim or {})},
                               incremental=km.cooperative, kind="classic", external_id=external_id)

    def _register(self, km: ClassicMember, topics: list[str],
                  topic_filter: "Callable[[str], bool] | None" = None) -> ErrorCode:
        answer = self._registration(km, topics, km.member_id if km.key != km.member_id else None)
        code = answer.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        if code != ErrorCode.NONE:
            km.close()
            log.info("group %s: Kafka member %s refused: %s %s", km.group_id, km.member_id,
                     ErrorCode.name_of(code), answer.get("error_message") or "")
            return {ErrorCode.SESSION_TIMEOUT_TOO_SMALL: ErrorCode.INVALID_SESSION_TIMEOUT,
                    ErrorCode.INVALID_SUBSCRIPTION: ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    ErrorCode.INVALID_GROUP_ID: ErrorCode.INVALID_GROUP_ID,
                    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR}.get(code, ErrorCode.INVALID_REQUEST)
        self.c.set_topic_filter(km.group_id, km.key, topic_filter)
        return ErrorCode.NONE

    async def _static_join(self, group_id: str, member_id: str, instance: str, protocols: list[tuple[str, bytes]],
                           chosen: str, topics: list[str], session: Any, rebalance: int, client_id: str,
                           client_host: str, topic_filter: "Callable[[str], bool] | None",
                           gone: "asyncio.Future[Any] | None") -> dict | None:
        """A static member's JoinGroup (KIP-345).  When its instance id is held by an earlier
        incarnation (alive still, or absent), this one takes its place: the earlier member id is
        fenced (FENCED_INSTANCE_ID), and what the instance holds is handed over in the same
        generation -- no rebalance, nobody else told anything.  None: an ordinary join follows."""
        key = registry_key(instance)
        group = self.c.groups.get(group_id)
        existing = group.members.get(key) if group is not None else None
        if existing is None or existing.kind != "classic":
            return None
        old = existing.channel if isinstance(existing.channel, ClassicMember) else None
        old_id = old.member_id if old is not None else existing.external_id
        if old_id == member_id:
            return None  # the same incarnation joining again
        same_topics = sorted(existing.topic_count.static_topics()) == topics
        if old is not None and not old.closed:
            old.close()  # a JoinGroup of it waiting here is answered: it is gone
            self.c.on_channel_closed(old)  # absent: its partitions wait for the new incarnation
        if old_id:
            self._static.pop((group_id, old_id), None)
            self._fence(group_id, old_id, instance)
        log.info("group %s: static member %s (instance %s) replaces %s", group_id, member_id, instance, old_id)
        if not same_topics or not existing.holds_assignment:
            return None  # it joins as the instance with a new subscription: an ordinary rebalance
        generation = existing.sent_epoch
        km = ClassicMember(self, group_id, member_id, client_id=client_id, client_host=client_host,
                           session_timeout_ms=session if isinstance(session, int) and session > 0
                           else existing.session_timeout_ms, rebalance_timeout_ms=rebalance, protocols=protocols,
                           group_instance_id=instance, key=key)
        answer = self._registration(km, topics, member_id, claim=sent_claim(existing))
        if answer.get("error_code") != ErrorCode.NONE or answer.get("generation_id") != generation:
            km.close()
            return None
        self._static[(group_id, member_id)] = key
        self.c.set_topic_filter(group_id, key, topic_filter)
        held = self.c.groups[group_id].members[key].owned()
        km.resume(generation, held)
        km.offer(generation, dict(km.partitions))
        log.info("group %s: static member %s (instance %s) took over %d partition(s) in generation %d", group_id,
                 member_id, instance, len(held), generation)
        return await self._wait_join(km, gone)

    # ------------------------------------------------------------ SyncGroup / Heartbeat / LeaveGroup
    def _member_for(self, group_id: str, member_id: str, generation: int | None) -> ClassicMember | ErrorCode:
        if not self.c.active:
            return ErrorCode.NOT_COORDINATOR
        if restored_consumer_member(self.consumer, group_id, member_id):
            # a KIP-848 member restored after a failover or handover, heard from here before its
            # heartbeat: only the heartbeat takes it back, in its own protocol; this is retried
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        km = self._live(group_id, member_id)
        if km is None and generation is not None:
            km = self._take_back(group_id, member_id, generation)
        if km is None:
            return self._unknown(group_id, member_id)
        km.contact()
        return km

    def validate_commit(self, group_id: str, member_id: str, generation: int) \
            -> tuple[GroupRegistry | None, ConsumerRegistry | None, ErrorCode] | ErrorCode:
        """OffsetCommit of a classic member in ``generation`` (``group_offsets.ClassicMembers``): it is
        heard from now (taken back after a failover); its group and registry entry, and what a commit
        out of its generation is answered (REBALANCE_IN_PROGRESS while it rebalances, else
        ILLEGAL_GENERATION); or why it cannot commit."""
        km = self._member_for(group_id, member_id, generation)
        if isinstance(km, ErrorCode):
            return km
        group, member = self._registry(group_id, member_id)
        return group, member, ErrorCode.REBALANCE_IN_PROGRESS if km.rebalancing else ErrorCode.ILLEGAL_GENERATION

    def _take_back(self, group_id: str, member_id: str, generation: int) -> ClassicMember | None:
        """A member restored from ZooKeeper after a failover (or whose adapter is gone), heard from in
        an epoch it can have: back with the partitions it is counted for (its claim), nothing stopped."""
        group, member = self._registry(group_id, member_id)
        if group is None or member is None or member.channel is not None or not member.holds_assignment \
                or not isinstance(generation, int) or generation != member.sent_epoch:
            return None
        km = ClassicMember(self, group_id, member_id, client_id="", client_host="(taken back)",
                           session_timeout_ms=member.session_timeout_ms,
                           rebalance_timeout_ms=member.session_timeout_ms, protocols=None,
                           cooperative=member.incremental, key=member.consumer_id,
                           group_instance_id=client_name(member.consumer_id) if member.external_id else None)
        answer = self._registration(km, member.topic_count.static_topics(), member.external_id,
                                    member.topic_count.pattern, sent_claim(member))
        if answer.get("error_code") != ErrorCode.NONE or answer.get("generation_id") != generation:
            km.close()
            return None
        km.resume(generation, member.owned())
        log.info("group %s: Kafka member %s taken back in generation %d", group_id, member_id, generation)
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
        return answer(ErrorCode.NONE, assignment, body.get("protocol_name") or km.protocol)

    def heartbeat(self, body: Mapping[str, Any]) -> dict:
        generation = body.get("generation_id")
        km = self._member_for(body.get("group_id") or "", body.get("member_id") or "", generation)
        code = km if isinstance(km, ErrorCode) else km.heartbeat_code(generation)
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
            if instance and not member_id:  # by instance id (an admin removing a static member)
                group = self.c.groups.get(group_id)
                member = group.members.get(registry_key(instance)) if group is not None else None
                km = member.channel if member is not None and isinstance(member.channel, ClassicMember) else None
                member_id = km.member_id if km is not None else ""
            else:
                km = self._live(group_id, member_id)
                group, member = self._registry(group_id, member_id)
            held = self.initial.held(group_id, member_id) if km is None and member_id else None
            if held is not None and self.initial.leave(group_id, held[0], held[1].future):
                log.info("group %s: Kafka member %s leaves during the initial rebalance delay", group_id, member_id)
                results.append({"member_id": member_id, "group_instance_id": instance, "error_code": 0})
                continue
            if km is None or group is None or member is None or (instance and km.group_instance_id != instance):
                code = ErrorCode.FENCED_INSTANCE_ID if instance and km is not None else self._unknown(group_id,
                                                                                                      member_id)
                results.append({"member_id": member_id, "group_instance_id": instance, "error_code": int(code)})
                continue
            log.info("group %s: Kafka member %s leaves", group_id, member_id)
            km.close()
            self.c.member_left(group, member)
            self._static.pop((group_id, member_id), None)
            results.append({"member_id": member_id, "group_instance_id": instance, "error_code": 0})
        top = results[0]["error_code"] if version < 3 and results else 0
        return {"throttle_time_ms": 0, "error_code": top, "members": results}
