"""Kafka 4's consumer group protocol (KIP-848) as a door into the coordinator
(DESIGN.md "One registry, several doors").

A consumer with ``group.protocol=consumer`` (librdkafka 2.12+, Kafka 4's Java client)
sends only ConsumerGroupHeartbeat: it joins with epoch 0, heartbeats every
``group.consumer.heartbeat.interval.ms`` with the epoch it was given, says what it
owns when that changed, and leaves with epoch -1.  The coordinator computes the
assignment -- which is what the seeds always wanted -- and the member reconciles to
it.  ``ConsumerGroupMember`` is its ``MemberChannel``:

* **Ping** -> its heartbeats: answered when it was heard from within the last third
  of its session timeout (``group.consumer.session.timeout.ms``, set by the
  coordinator), else at its next heartbeat; a member silent for its session timeout
  is failed.
* **StopFetcher** -> its next heartbeat answer carries its assignment without the
  partitions that leave it, and the epoch of the stop.  It revokes them, and the
  first heartbeat whose owned partitions no longer name them answers the
  StopFetcher: only then are they given to someone else (KIP-848's reconciliation).
  A StopFetcher of partitions no heartbeat answer carried to the member since it was
  last seen reconciled, and that it does not say it owns (a StartFetcher queued for it,
  overtaken by a new target before its next heartbeat), is answered at once: the member
  cannot be fetching what it never heard of, and its next answer carries the new target
  only -- as Kafka's coordinator hands a member the target current at its heartbeat,
  never one already replaced.
  A StopFetcher the member was not told yet (no heartbeat answer carried it) can be
  withdrawn (``withdraw_stop``): the rebalancer does so when the group changes while it
  waits, and asks again with the new target at once, as Kafka's coordinator recomputes
  a member's target until the member acknowledged it.  Withdrawing puts back the
  member's assignment and pending epoch as they were before the request, so its next
  answer asks it to give up only what the newest target takes; stops are withdrawn for
  at most a heartbeat interval in a row, then the member is left to answer.
* **StartFetcher** -> its next heartbeat answer carries its complete assignment and
  the new epoch (right away when a joining heartbeat is waiting for it).  It is
  answered at once: the coordinator already counts the partitions as the member's, and
  nothing the member could say at its next heartbeat changes what the next attempt may
  do -- the member reconciles to whatever it is told last, and a later StopFetcher of a
  partition it was not yet told of is answered at once (above) (Kafka's coordinator
  does not wait either: a member's new target is simply what its next heartbeat answer
  carries).  So an attempt that stops nobody waits for no
  heartbeat, and the next attempt starts at once.  ConsumerGroupDescribe says
  ``Reconciling`` while an answer still carries a new assignment to some member.
* A heartbeat that answers a StopFetcher (it no longer owns what it was asked to give up)
  while the group has changed since the rebalance attempt began waits a little (at most
  ``ACK_WAIT_MS``, or its heartbeat interval, until the rebalance task ends) for the next
  attempt's StopFetcher, so that it reaches the member in this answer rather than a
  heartbeat interval later --
  as Kafka's coordinator answers the acknowledging heartbeat with the member's next
  target when the group moved on meanwhile.

Assignments name topics by id.  The group's server-side assignor is the one its
members name (``group.remote.assignor``: ``uniform`` -- the coordinator's sticky
assignor, the default -- or ``range``, sticky per topic); another name is
UNSUPPORTED_ASSIGNOR.  A regular-expression subscription (v1) is matched against
whole topic names and re-evaluated when topics appear.

Static membership (``group.instance.id``, KIP-345 as KIP-848 has it): the member is
known to the registry by its instance id.  A static member that leaves with epoch
-2 keeps its partitions for its session timeout; a new incarnation joining with the
same instance id within it takes them over at the same epoch, and nothing moves.
A second live member with an instance id in use is refused UNRELEASED_INSTANCE_ID.

After a coordinator failover a member heartbeating with the epoch stored for it is
taken back with what it says it owns (its claim), nothing stopped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from spark_coord.coordinator.core.api import CoordinatorApi
from spark_coord.coordinator.core.assignors import SERVER_ASSIGNORS
from spark_coord.coordinator.core.channel import ChannelClosed, MemberDescription, OnAnswer
from spark_coord.coordinator.core.delayed import DelayedJoin
from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry, GroupState, client_name, registry_key
from spark_coord.coordinator.core.lease import HeartbeatLease
from spark_coord.coordinator.core.purgatory import MemberKey, Purgatory
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.doors.common import sent_claim
from spark_coord.errors import ErrorCode
from spark_coord.zk import paths

if TYPE_CHECKING:
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["ConsumerGroupMember", "ConsumerGroups", "consumer_state", "DEFAULT_SERVER_ASSIGNOR"]

log = logging.getLogger(__name__)

#: Epochs a heartbeat carries besides the member's own.
JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
DEFAULT_SERVER_ASSIGNOR = "uniform"
#: How long a joining heartbeat waits for the member's first assignment (at most its heartbeat
#: interval): the first answer usually carries it already.
JOIN_WAIT_MS = 500
#: How long a heartbeat that answered a StopFetcher waits for the next attempt's request to it.
ACK_WAIT_MS = 500
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
#: Regular-expression features RE2/J (Kafka's) lacks: a subscription using them is refused.
_NOT_RE2 = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]")

_STATES = {GroupState.EMPTY: "Empty", GroupState.STABLE: "Stable", GroupState.RESTORING: "Assigning",
           GroupState.PREPARING_REBALANCE: "Assigning", GroupState.STOPPING_FETCHERS: "Reconciling",
           GroupState.STARTING_FETCHERS: "Reconciling", GroupState.DEAD: "Dead"}

TopicPartitions = set[tuple[str, int]]


def consumer_state(state: GroupState) -> str:
    """Kafka's name (KIP-848) of the group state closest to ours, for ConsumerGroupDescribe."""
    return _STATES[state]


def subscription(names: Iterable[str] | None, regex: str | None) -> TopicCount:
    """The member's subscription (ValueError naming what is wrong; ``re.error`` for a bad regex)."""
    if regex is not None:
        if _NOT_RE2.search(regex):
            raise re.error(f"{regex!r} uses lookaround or backreferences, which RE2 does not have")
        re.compile(regex)  # re.error: the client is told INVALID_REGULAR_EXPRESSION
        return TopicCount.wildcard(regex, 1)
    return TopicCount.static({t: 1 for t in names or ()})


class ConsumerGroupMember(HeartbeatLease):
    """A member of Kafka's consumer group protocol, as the coordinator's ``MemberChannel`` (its
    liveness: ``HeartbeatLease``, from its own heartbeats)."""

    #: The protocol its channel speaks, as ``groups describe`` and the metrics name it.
    PROTOCOL = "consumer"

    def __init__(self, door: "ConsumerGroups", group_id: str, key: str, member_id: str, *, client_id: str,
                 client_host: str, instance_id: str | None, rack_id: str | None, rebalance_timeout_ms: int,
                 names: list[str] | None, regex: str | None, assignor: str | None):
        self.door = door
        self.group_id = group_id
        #: The registry's name for it: its member id, or its instance id when static.
        self.key = key
        self.member_id = member_id
        self.client_id = client_id
        self.client_host = client_host
        self.peer = client_host
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.names = names
        self.regex = regex
        self.assignor = assignor
        self.session_timeout_ms = door.c.config.consumer_session_timeout_ms
        self.closed = False
        self.left_for_now = False
        #: The epoch it was last told, and the one before (a heartbeat may carry either).
        self.epoch = 0
        self.previous_epoch = -1
        #: The partitions it may use, as it was (or is about to be) told.
        self.partitions: TopicPartitions = set()
        #: Its assignment changed since its last heartbeat answer: the next one carries it, with this epoch.
        self._pending_epoch: int | None = None
        #: A StopFetcher waiting for the member to no longer own the partitions, and whether it was told.
        self._stop: tuple[dict, OnAnswer, TopicPartitions] | None = None
        self._stop_told = False
        #: What an untold StopFetcher's withdrawal restores: the partitions and pending epoch before it.
        self._before_stop: tuple[TopicPartitions, int | None] = (set(), None)
        #: When its untold StopFetchers began to be withdrawn (None: not now); bounds how long.
        self._withdrawn_since: int | None = None
        #: Every partition an answer to it carried (or a takeover gave it) since it was last seen fully
        #: reconciled: all it can own, now or once a reconciliation in progress completes.
        self.told: TopicPartitions = set()
        #: The assignment and epoch the last answer that carried one told it.
        self._last_told: tuple[TopicPartitions, int] = (set(), -1)
        #: What it said it owns, last time it said.
        self.reported: TopicPartitions | None = None
        self.join: DelayedJoin | None = None
        self._start_lease()

    # ------------------------------------------------------------ MemberChannel
    def send(self, api_key: int, body: dict, on_answer: OnAnswer, version: int = 0) -> None:
        if self.closed:
            raise ChannelClosed(f"consumer group member {self.member_id} left")
        if api_key == CoordinatorApi.PING:
            self._ping(body, on_answer)
        elif api_key == CoordinatorApi.STOP_FETCHER:
            named = body.get("partitions")
            asked = set(self.partitions) if named is None else \
                {(e["topic"], p) for e in named for p in e["partitions"]} & self.partitions
            if named is not None and not asked & (self.told | (self.reported or set())):
                # never told of any of them, so it fetches none: nothing to wait for
                self.partitions -= asked
                self._pending_epoch = body["generation_id"]
                self._wake_join()
                on_answer(self._answer(dict(body)))
                return
            self._before_stop = (set(self.partitions), self._pending_epoch)
            self.partitions -= asked
            self._pending_epoch = body["generation_id"] if named is not None else self.epoch
            self._stop, self._stop_told = (body, on_answer, asked), False
            self._wake_join()
        elif api_key == CoordinatorApi.START_FETCHER:
            self.partitions = {(p["topic"], p["partition"]) for t in body.get("ownership") or []
                               for p in t.get("partitions") or []}
            self._pending_epoch = body["generation_id"]
            self._wake_join()
            # answered now: its next heartbeat answer carries it (see the module docstring)
            on_answer({"error_code": ErrorCode.NONE, "consumer_id": self.key,
                       "generation_id": body["generation_id"]})
        else:
            raise ChannelClosed(f"consumer group member {self.member_id}: no mapping for coordinator api {api_key}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._end_lease()
        self._stop = None
        join = self.join
        if join is not None and not join.is_completed:
            join.gone = True
            self.door.purgatory.check_and_complete(MemberKey(self.group_id, self.member_id))

    def describe(self) -> MemberDescription:
        return MemberDescription(self.PROTOCOL, self.member_id, self.instance_id, self.client_id, self.client_host,
                                 rack_id=self.rack_id)

    @property
    def reconciling(self) -> bool:
        """Its next heartbeat answer has a new assignment to carry."""
        return self._pending_epoch is not None

    def stop_withdrawable(self) -> bool:
        """Its StopFetcher can still be taken back: no heartbeat answer told it yet, and its stops
        have not been withdrawn for longer than a heartbeat interval (so a group that keeps
        changing cannot keep a member from ever being told)."""
        if self.closed or self._stop is None or self._stop_told:
            return False
        since = self._withdrawn_since
        return since is None or \
            self.door.c.clock.now_ms() - since <= self.door.c.config.consumer_heartbeat_interval_ms

    def withdraw_stop(self) -> bool:
        """Take back its untold StopFetcher (never answered): the partitions and the pending epoch
        are what they were before it.  False when it cannot be (``stop_withdrawable``)."""
        if not self.stop_withdrawable():
            return False
        if self._withdrawn_since is None:
            self._withdrawn_since = self.door.c.clock.now_ms()
        self.partitions, self._pending_epoch = self._before_stop
        self._stop = None
        return True

    # ------------------------------------------------------------ heartbeats
    def _wake_join(self) -> None:
        join = self.join
        if join is not None and not join.is_completed:
            join.generation = self._pending_epoch
            self.door.purgatory.check_and_complete(MemberKey(self.group_id, self.member_id))

    def owns(self, owned: TopicPartitions | None, epoch: int | None = None) -> bool:
        """A heartbeat (in ``epoch``) said what the member owns (None: unchanged): a StopFetcher it was
        told of is answered once none of the partitions to stop is among them.  When it owns exactly
        what the last answer told it, in that answer's epoch, it has reconciled to it (a consumer
        reconciles one assignment after the other, the newest last): it can own no other partition
        it was told of before.  True when it answered a StopFetcher."""
        if owned is not None:
            self.reported = owned
            if (owned, epoch) == self._last_told:
                self.told = set(owned)
        if self._stop is not None and self._stop_told and self.reported is not None:
            body, on_answer, asked = self._stop
            if not self.reported & asked:
                self._stop = None
                on_answer(self._answer(dict(body)))
                return True
        return False

    def answer(self, with_assignment: bool = False) -> dict:
        """The heartbeat answer; it carries the assignment when it changed (or when asked)."""
        out = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": self.member_id,
               "member_epoch": self.epoch, "heartbeat_interval_ms": self.door.c.config.consumer_heartbeat_interval_ms,
               "assignment": None}
        if self._pending_epoch is not None or with_assignment:
            if self._pending_epoch is not None and self._pending_epoch != self.epoch:
                self.previous_epoch, self.epoch = self.epoch, self._pending_epoch
            self._pending_epoch = None
            out["member_epoch"] = self.epoch
            out["assignment"] = {"topic_partitions": self.door.by_topic_id(self.partitions)}
            self.told |= self.partitions
            self._last_told = (set(self.partitions), self.epoch)
            if self._stop is not None:
                self._stop_told = True
                self._withdrawn_since = None
        return out

    def subscribed_topics(self) -> list[str]:
        if self.regex is not None:
            return self.door.c_topics_matching(self.regex)
        return list(self.names or [])


class ConsumerGroups:
    """Kafka's consumer group protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe) on one ``Coordinator``."""

    def __init__(self, coordinator: "GroupCoordinator"):
        self.c = coordinator
        self.purgatory = Purgatory(coordinator.timer, "consumer-join")
        #: Member id -> registry name of static members (whose registry name is their instance id).
        self._static: dict[tuple[str, str], str] = {}

    def reset(self) -> None:
        self._static.clear()
        self.purgatory.cancel_all()

    def c_topics_matching(self, regex: str) -> list[str]:
        try:
            pattern = re.compile(regex)
        except re.error:
            return []
        return sorted(t for t in self.c.topics if pattern.fullmatch(t))

    def by_topic_id(self, partitions: TopicPartitions) -> list[dict]:
        """``[{topic_id, partitions}]`` (topics without a known id are left out, and logged)."""
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        out = []
        for t, ps in sorted(by_topic.items()):
            tid = self.c.topic_ids.get(t)
            if tid is None:
                log.warning("topic %s has no topic id: its partitions cannot be named to consumer-protocol members", t)
                continue
            out.append({"topic_id": tid, "partitions": sorted(ps)})
        return out

    def _named(self, entries: Any) -> TopicPartitions | None:
        """Owned partitions of a heartbeat (topics by id) by name; ids of no topic are dropped."""
        if entries is None:
            return None
        out: TopicPartitions = set()
        for e in entries:
            topic = self.c.topic_of(bytes(e.get("topic_id") or b""))
            if topic is not None:
                out.update((topic, p) for p in e.get("partitions") or [] if isinstance(p, int) and p >= 0)
        return out

    def session_expired(self, m: ConsumerGroupMember) -> None:
        group = self.c.groups.get(m.group_id)
        member = group.members.get(m.key) if group is not None else None
        if m.closed or member is None or member.channel is not m:
            return
        m.close()
        self.c.handle_consumer_failure(group, member, f"no heartbeat within its session timeout "
                                                      f"({m.session_timeout_ms} ms)")

    def _key(self, group_id: str, member_id: str) -> str:
        return self._static.get((group_id, member_id), registry_key(member_id))

    def find(self, group_id: str, member_id: str) -> tuple[GroupRegistry | None, ConsumerRegistry | None]:
        group = self.c.groups.get(group_id)
        if group is None:
            return None, None
        member = group.members.get(self._key(group_id, member_id))
        if member is None:  # a static member restored after a failover: known by its stored member id
            member = next((m for m in group.members.values() if m.external_id == member_id), None)
            if member is not None:
                self._static[(group_id, member_id)] = member.consumer_id
        return group, member

    def live(self, group_id: str, member_id: str) -> ConsumerGroupMember | None:
        _, member = self.find(group_id, member_id)
        ch = member.channel if member is not None else None
        return ch if isinstance(ch, ConsumerGroupMember) and not ch.closed and ch.member_id == member_id else None

    # ------------------------------------------------------------ ConsumerGroupHeartbeat
    async def heartbeat(self, body: Mapping[str, Any], version: int, client_id: str, client_host: str,
                        topic_filter: Callable[[str], bool] | None = None) -> dict:
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""
        epoch = body.get("member_epoch")

        def error(code: ErrorCode, message: str | None = None) -> dict:
            if code not in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                log.info("ConsumerGroupHeartbeat %s/%s epoch %r from %s: %s %s", group_id, member_id, epoch,
                         client_host, ErrorCode.name_of(code), message or "")
            return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
                    "member_id": member_id or None, "member_epoch": -1, "heartbeat_interval_ms": 0,
                    "assignment": None}

        if not self.c.active:
            return error(ErrorCode.NOT_COORDINATOR)
        try:
            paths.validate_group(group_id)
        except ValueError as e:
            return error(ErrorCode.INVALID_GROUP_ID, str(e))
        if not isinstance(epoch, int) or epoch < STATIC_LEAVE:
            return error(ErrorCode.INVALID_REQUEST, f"member epoch {epoch!r}")
        if self.c.group_type(group_id) == "share":
            return error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        assignor = body.get("server_assignor")
        if assignor is not None and assignor not in SERVER_ASSIGNORS:
            return error(ErrorCode.UNSUPPORTED_ASSIGNOR,
                         f"server assignor {assignor!r} (known: {', '.join(SERVER_ASSIGNORS)})")
        names, regex = body.get("subscribed_topic_names"), body.get("subscribed_topic_regex")
        if epoch in (LEAVE, STATIC_LEAVE):  # matching Java's: only a joining heartbeat's subscription is checked
            names = regex = None  # Kafka 4.2's consumer leaves with an empty list of topic names
        if regex == "":  # as Kafka reads it: no regular expression (librdkafka sends "" beside topic names)
            regex = None
            names = [] if names is None else names
        try:
            sub = subscription(names, regex) if names is not None or regex is not None else None
        except re.error as e:
            return error(ErrorCode.INVALID_REGULAR_EXPRESSION if version >= 1 else ErrorCode.INVALID_REQUEST,
                         f"subscribed topic regex: {e}")
        except ValueError as e:
            return error(ErrorCode.INVALID_REQUEST, f"subscription: {e}")
        owned = self._named(body.get("topic_partitions"))

        if epoch == JOIN:
            if sub is None:
                return error(ErrorCode.INVALID_REQUEST, "a joining member must name its subscription")
            if not member_id:
                if version >= 1:
                    return error(ErrorCode.INVALID_REQUEST, "MemberId can't be empty")
                member_id = str(uuid.uuid4())
            return await self._join(body, group_id, member_id, sub, regex, client_id, client_host, topic_filter)
        m = self.live(group_id, member_id)
        if epoch == LEAVE or epoch == STATIC_LEAVE:
            return self._leave(group_id, member_id, m, epoch)
        if m is None:
            m = self._take_back(group_id, member_id, epoch, owned, body, client_id, client_host)
            if m is None:
                _, member = self.find(group_id, member_id)
                return error(ErrorCode.FENCED_MEMBER_EPOCH if member is not None else ErrorCode.UNKNOWN_MEMBER_ID)
        elif epoch not in (m.epoch, m.previous_epoch):
            return error(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {epoch}, the member is at {m.epoch}")
        m.contact()
        self._update(m, body, sub, regex)
        acked = m.owns(owned, epoch)
        group = self.c.groups.get(group_id)
        if acked and group is not None and self.c.rebalancer.another_attempt_due(group):
            await self._wait_for_stop(m, group, min(ACK_WAIT_MS, self.c.config.consumer_heartbeat_interval_ms))
            if m.closed or not self.c.active:
                return error(ErrorCode.UNKNOWN_MEMBER_ID if self.c.active else ErrorCode.NOT_COORDINATOR)
        full = body.get("topic_partitions") is not None and owned != m.partitions and m._stop is None
        return m.answer(with_assignment=full)

    def _update(self, m: ConsumerGroupMember, body: Mapping[str, Any], sub: TopicCount | None,
                regex: str | None) -> None:
        if body.get("rebalance_timeout_ms", -1) > 0:
            m.rebalance_timeout_ms = body["rebalance_timeout_ms"]
        if body.get("server_assignor") is not None and body["server_assignor"] != m.assignor:
            m.assignor = body["server_assignor"]
            group = self.c.groups.get(m.group_id)
            if group is not None:
                self.c.request_rebalance(group, f"member {m.member_id} asks for the {m.assignor} assignor")
        if sub is not None:
            m.names, m.regex = (None, regex) if regex is not None else (list(body.get("subscribed_topic_names") or []),
                                                                       None)
            self.c.resubscribe(m.group_id, m.key, sub)

    async def _join(self, body: Mapping[str, Any], group_id: str, member_id: str, sub: TopicCount,
                    regex: str | None, client_id: str, client_host: str,
                    topic_filter: Callable[[str], bool] | None) -> dict:
        instance = body.get("instance_id")
        key = registry_key(instance if instance else member_id)
        try:
            paths.validate_consumer_id(key)
        except ValueError as e:
            return self._error(member_id, ErrorCode.INVALID_REQUEST, str(e))
        rebalance = body.get("rebalance_timeout_ms", -1)
        group = self.c.groups.get(group_id)
        existing = group.members.get(key) if group is not None else None
        old = existing.channel if existing is not None else None
        if isinstance(old, ConsumerGroupMember) and not old.closed:
            if instance and old.member_id != member_id:
                return self._error(member_id, ErrorCode.UNRELEASED_INSTANCE_ID,
                                   f"instance {instance} is in use by member {old.member_id}")
            # epoch 0 again: it lost everything it had (fenced, or restarted with the same id)
            old.close()
            self.c.released(group, existing, None, f"member {member_id} joined again with epoch 0")
            existing = group.members.get(key)
        m = ConsumerGroupMember(self, group_id, key, member_id, client_id=client_id, client_host=client_host,
                                instance_id=instance, rack_id=body.get("rack_id"),
                                rebalance_timeout_ms=rebalance if isinstance(rebalance, int) and rebalance > 0
                                else DEFAULT_REBALANCE_TIMEOUT_MS, names=body.get("subscribed_topic_names"),
                                regex=regex, assignor=body.get("server_assignor"))
        claim: dict[str, Any] = {}
        if instance and existing is not None and existing.channel is None and existing.holds_assignment:
            # a static member's new incarnation: it takes over what the instance held, in its epoch
            claim = sent_claim(existing)
        answer = self.c.register(m, {"group_id": group_id, "consumer_id": key, "topics": [
            {"topic": t, "streams": 1} for t in sub.static_topics()], "pattern": sub.pattern,
            "pattern_streams": 1, "auto_commit": False, "session_timeout_ms": m.session_timeout_ms, **claim},
            incremental=True, kind="consumer", external_id=member_id if instance else None)
        code = answer.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        if code != ErrorCode.NONE:
            m.close()
            return self._error(member_id, {ErrorCode.INVALID_SUBSCRIPTION: ErrorCode.INVALID_REQUEST}.get(
                code, ErrorCode.NOT_COORDINATOR if code == ErrorCode.NOT_COORDINATOR else ErrorCode.INVALID_REQUEST),
                answer.get("error_message"))
        if instance:
            self._static[(group_id, member_id)] = key
        self.c.set_topic_filter(group_id, key, topic_filter)
        if claim and answer.get("generation_id") == claim["generation_id"]:
            held = self.c.groups[group_id].members[key]
            m.partitions = set(held.owned())
            m.epoch = held.epoch if held.epoch is not None else 0
            log.info("group %s: static member %s (instance %s) took over %d partition(s) in epoch %d", group_id,
                     member_id, instance, len(m.partitions), m.epoch)
            return m.answer(with_assignment=True)
        log.info("group %s: consumer-protocol member %s joined from %s (%s)", group_id, member_id, client_host,
                 sub.describe())
        return await self._wait_for_assignment(m)

    async def _wait_for_next(self, m: ConsumerGroupMember, wait_ms: int) -> None:
        """Wait up to ``wait_ms`` for a new assignment for ``m`` (or until it is gone)."""
        if m._pending_epoch is None and m.join is None:
            future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
            join = m.join = DelayedJoin(m.group_id, m.member_id, wait_ms, future)
            self.purgatory.try_complete_else_watch(join, [MemberKey(m.group_id, m.member_id)])
            await future
            if m.join is join:
                m.join = None

    async def _wait_for_stop(self, m: ConsumerGroupMember, group: GroupRegistry, wait_ms: int) -> None:
        """Wait up to ``wait_ms`` until a StopFetcher is queued for ``m`` or the group's rebalance task
        ends (a StartFetcher of the attempt still running does not end the wait: the next attempt's
        request is what this answer should carry)."""
        deadline = self.c.clock.now_ms() + wait_ms
        while m._stop is None and not m.closed and m.join is None and group.rebalance_task is not None:
            left = deadline - self.c.clock.now_ms()
            if left <= 0:
                return
            future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
            join = m.join = DelayedJoin(m.group_id, m.member_id, left, future)
            self.purgatory.try_complete_else_watch(join, [MemberKey(m.group_id, m.member_id)])
            woken = await future
            if m.join is join:
                m.join = None
            if woken is None:  # its time is up, or it is gone
                return

    async def _wait_for_assignment(self, m: ConsumerGroupMember) -> dict:
        """A joining heartbeat waits a little for the member's first assignment, so its first answer
        usually carries it (else its next heartbeat will)."""
        await self._wait_for_next(m, min(JOIN_WAIT_MS, self.c.config.consumer_heartbeat_interval_ms))
        if m.closed or not self.c.active:
            return self._error(m.member_id, ErrorCode.UNKNOWN_MEMBER_ID if self.c.active else ErrorCode.NOT_COORDINATOR)
        if m._pending_epoch is None and m.epoch == JOIN:
            # nothing for it yet (its partitions are still being given up by others): it is a member
            # all the same, in the group's epoch with an empty assignment, and hears of more later
            group = self.c.groups.get(m.group_id)
            m.epoch = max(1, group.generation_id if group is not None else 1)
            return m.answer(with_assignment=True)
        return m.answer()

    def _leave(self, group_id: str, member_id: str, m: ConsumerGroupMember | None, epoch: int) -> dict:
        group, member = self.find(group_id, member_id)
        if m is None or group is None or member is None:
            return self._error(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
        if epoch == STATIC_LEAVE:
            if m.instance_id is None:
                return self._error(member_id, ErrorCode.INVALID_REQUEST, "epoch -2 is for static members")
            log.info("group %s: static member %s (instance %s) leaves for now; its partitions wait %d ms for it",
                     group_id, member_id, m.instance_id, m.session_timeout_ms)
            m.left_for_now = True
            m.contact()
            m.close()
            self.c.on_channel_closed(m)  # absent: it may come back within its session timeout
        else:
            log.info("group %s: consumer-protocol member %s leaves", group_id, member_id)
            m.close()
            self.c.member_left(group, member)
            self._static.pop((group_id, member_id), None)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                "member_epoch": epoch, "heartbeat_interval_ms": 0, "assignment": None}

    def _take_back(self, group_id: str, member_id: str, epoch: int, owned: TopicPartitions | None,
                   body: Mapping[str, Any], client_id: str, client_host: str) -> ConsumerGroupMember | None:
        """A member the registry knows but has no live channel for (restored after a failover, or
        its channel closed), heartbeating in an epoch the coordinator sent it: back with everything
        the registry counts for it, in the newest epoch sent to it.  Its epoch may be older when the
        answer that carried the newest one never reached it (the coordinator died first): that
        answer -- its complete assignment -- is what this heartbeat's answer carries now (Kafka
        accepts a member's previous epoch for the same reason)."""
        group, member = self.find(group_id, member_id)
        if group is None or member is None or member.channel is not None or member.kind != "consumer":
            return None
        newest = max(member.sent_epoch, member.epoch if member.epoch is not None else -1)
        if epoch < 1 or epoch > newest:
            return None
        held = member.threads()
        by_thread: dict[str, list[dict]] = {}
        for (t, p), th in sorted(held.items()):
            by_thread.setdefault(th, []).append({"topic": t, "partition": p, "offset": -1})
        m = ConsumerGroupMember(self, group_id, member.consumer_id, member_id, client_id=client_id,
                                client_host=client_host, instance_id=body.get("instance_id") or (
                                    client_name(member.consumer_id) if member.external_id else None),
                                rack_id=body.get("rack_id"), rebalance_timeout_ms=DEFAULT_REBALANCE_TIMEOUT_MS,
                                names=member.topic_count.static_topics() or None, regex=member.topic_count.pattern,
                                assignor=body.get("server_assignor"))
        answer = self.c.register(m, {"group_id": group_id, "consumer_id": member.consumer_id, "topics": [
            {"topic": t, "streams": 1} for t in member.topic_count.static_topics()],
            "pattern": member.topic_count.pattern, "auto_commit": False, "session_timeout_ms": m.session_timeout_ms,
            "generation_id": newest,
            "owned": [{"consumer_thread_id": th, "partitions": ps} for th, ps in sorted(by_thread.items())]},
            incremental=True, kind="consumer", external_id=member.external_id)
        if answer.get("error_code") != ErrorCode.NONE or answer.get("generation_id") != newest:
            m.close()
            return None
        m.epoch, m.partitions = epoch, set(held)
        m.told = set(held)  # it may own any of them
        if epoch != newest or (owned is not None and owned != m.partitions):
            m._pending_epoch = newest  # this heartbeat's answer carries its assignment
        log.info("group %s: consumer-protocol member %s taken back in epoch %d with %d partition(s)%s", group_id,
                 member_id, newest, len(held), f" (it was told up to epoch {epoch})" if epoch != newest else "")
        return m

    @staticmethod
    def _error(member_id: str, code: ErrorCode, message: str | None = None) -> dict:
        return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
                "member_id": member_id or None, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}

    # ------------------------------------------------------------ ConsumerGroupDescribe
    def describe(self, group_ids: list[str]) -> dict:
        out = []
        for gid in group_ids:
            if not self.c.active:
                out.append({"error_code": int(ErrorCode.NOT_COORDINATOR), "group_id": gid, "group_state": "",
                            "members": []})
                continue
            group = self.c.groups.get(gid)
            if group is None:
                out.append({"error_code": int(ErrorCode.GROUP_ID_NOT_FOUND), "error_message": f"no group {gid}",
                            "group_id": gid, "group_state": "Dead", "members": []})
                continue
            target = self.c.rebalancer.target(group) if group.members else {}
            state = consumer_state(group.state)
            if state == "Stable" and any(isinstance(m.channel, ConsumerGroupMember) and m.channel.reconciling
                                         for m in group.members.values()):
                state = "Reconciling"  # a member has yet to hear of its assignment (Kafka's state too)
            out.append({"error_code": 0, "group_id": gid, "group_state": state,
                        "group_epoch": group.generation_id, "assignment_epoch": group.generation_id,
                        "assignor_name": self._assignor_name(group),
                        "members": [self._describe_member(m, target) for _, m in sorted(group.members.items())]})
        return {"throttle_time_ms": 0, "groups": out}

    def _assignor_name(self, group: GroupRegistry) -> str:
        names = [m.channel.assignor for m in group.members.values()
                 if isinstance(m.channel, ConsumerGroupMember) and m.channel.assignor]
        return names[-1] if names else (DEFAULT_SERVER_ASSIGNOR if self.c.config.assignment_strategy == "sticky"
                                        else self.c.config.assignment_strategy)

    def _assignment(self, partitions: Iterable[tuple[str, int]]) -> dict:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        return {"topic_partitions": [{"topic_id": self.c.topic_ids.get(t, bytes(16)), "topic_name": t,
                                      "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]}

    def _describe_member(self, m: ConsumerRegistry, target: Mapping[tuple[str, int], str]) -> dict:
        from spark_coord.coordinator.core.assignors import thread_owner

        who = m.channel.describe() if m.channel is not None else None
        protocol = who.protocol if who is not None else m.kind
        mine = [tp for tp, th in target.items() if thread_owner(th) == m.consumer_id]
        out = {"member_id": m.external_id or client_name(m.consumer_id),
               "instance_id": client_name(m.consumer_id) if m.external_id else None,
               "rack_id": None, "member_epoch": m.epoch if m.epoch is not None else 0, "client_id": "coordkafka",
               "client_host": m.peer, "subscribed_topic_names": m.topic_count.static_topics() or
               m.topic_count.topics_in(self.c.topics), "subscribed_topic_regex": m.topic_count.pattern,
               "assignment": self._assignment(m.owned()), "target_assignment": self._assignment(mine),
               "member_type": -1}
        if protocol in ("classic", "consumer"):
            out.update(member_type=0 if protocol == "classic" else 1)
        if who is not None and who.protocol == "consumer":
            out.update(member_id=who.member_id, rack_id=who.rack_id)
        if who is not None:
            out.update(client_id=who.client_id, client_host=who.client_host, instance_id=who.instance_id)
        return out
