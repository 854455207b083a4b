"""A group's state machine and registries (seeds 003 section 12.1: GroupRegistry, ConsumerRegistry).

Ownership rule: everything here is changed only on the event loop thread, by
the coordinator's parts (``Coordinator``, ``PingScheduler``, ``OffsetCommitter``)
or by the group's own rebalance task; timer callbacks post work instead of
changing it.  A group has at most one rebalance task at a time
(``GroupRegistry.rebalance_task``), so it is never rebalanced twice at once.

Members and their leases (DESIGN.md "One holder at a time (invariant 1)").  A member holds an assignment
(``ConsumerRegistry.assignment``) from the StartFetcher it answered until it
answers StopFetcher, leaves, or the coordinator has provably outlived its lease.
A connected member's lease is renewed by every request the coordinator sends it;
a member that lost its coordinator keeps fetching until its own session timeout
has passed since it last heard from a coordinator, then stops.  So when a member
holding an assignment is *absent* -- its connection closed or was closed, or it
was restored from ZooKeeper by a newly elected coordinator -- the coordinator
keeps its partitions away from everyone else until ``absent_until_ms``: its
session timeout plus ``LEASE_MARGIN_MS`` after the last request sent to it (after
the election, for a restored member; every request of the old coordinator was
sent before that).  Until then the member may come back with a claim
(RegisterConsumer v1: the generation and partitions it still holds); a claim
that matches what the coordinator knows puts it back into its generation with
nothing stopped.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_coord.common import TopicPartition
from spark_coord.coordinator.core.assignors import thread_owner
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.storage.store import StoredMember

#: A subscription no topic matches (a member whose principal may read none of its topics).
NOTHING = TopicCount.wildcard("(?!)", 1)

if TYPE_CHECKING:
    from typing import Callable, Iterable, Mapping

    from spark_coord.coordinator.core.channel import MemberChannel
    from spark_coord.coordinator.core.clock import TimerHandle
    from spark_coord.coordinator.core.delayed import DelayedFetcherRound, DelayedPing

log = logging.getLogger(__name__)

#: ``{thread_id: [(topic, partition)]}``
Assignment = dict[str, list[TopicPartition]]

#: Added to a member's session timeout before an absent member's partitions may go to
#: someone else: covers the transit of the last request and the member's own lateness
#: in noticing its lease ended (its fetch loop and delivery check the lease directly).
LEASE_MARGIN_MS = 500


class IllegalStateTransition(RuntimeError):
    """A group was asked to move to a state it cannot reach from where it is."""


class GroupState(enum.Enum):
    """Where a group is in its life; each state says what it accepts."""

    EMPTY = "Empty"
    """No members.  RegisterConsumer -> PREPARING_REBALANCE."""

    RESTORING = "Restoring"
    """Restored from ZooKeeper by a newly elected coordinator; waiting for the
    restored members to re-register.  RegisterConsumer is accepted (a restored id
    takes its place back, into its generation when its claim matches the restored
    owners); pings and offsets of members back in the generation are accepted;
    rebalances wait.  When every restored member is back, or the absent ones'
    leases ran out (they are dropped) -> PREPARING_REBALANCE, which confirms the
    assignment without a round when nothing changed, or EMPTY when nobody came
    back."""

    STABLE = "Stable"
    """Every member runs the current generation's assignment.  Ping answers and
    CommitOffsets are accepted; RegisterConsumer, a member failure or a topic
    change -> PREPARING_REBALANCE.  A member that lost its connection stays (absent)
    until it re-registers or its lease runs out."""

    PREPARING_REBALANCE = "PreparingRebalance"
    """A rebalance is wanted and the group's rebalance task works on it (computing,
    waiting for absent members, backing off).  Everything is accepted; the task
    moves on to STOPPING_FETCHERS (or STABLE when nothing changed, EMPTY when no
    member is left)."""

    STOPPING_FETCHERS = "StoppingFetchers"
    """A StopFetcher round is out.  StopFetcher answers (with offsets) complete
    it; RegisterConsumer, a member failure or a topic change fail it ->
    PREPARING_REBALANCE."""

    STARTING_FETCHERS = "StartingFetchers"
    """The generation was bumped and a StartFetcher round is out.  StartFetcher
    answers complete it -> STABLE; RegisterConsumer, a member failure or a topic
    change fail it -> PREPARING_REBALANCE."""

    DEAD = "Dead"
    """The coordinator resigned; the registry is being dropped.  Accepts nothing."""


#: For each state, the states a group may come from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.RESTORING}),
    GroupState.RESTORING: frozenset(),  # only ever an initial state
    GroupState.PREPARING_REBALANCE: frozenset({
        GroupState.EMPTY, GroupState.RESTORING, GroupState.STABLE,
        GroupState.STOPPING_FETCHERS, GroupState.STARTING_FETCHERS}),
    GroupState.STOPPING_FETCHERS: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STARTING_FETCHERS: frozenset({GroupState.STOPPING_FETCHERS, GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.STARTING_FETCHERS, GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(set(GroupState) - {GroupState.DEAD}),
}

#: States in which a StopFetcher/StartFetcher round may be in flight.
ROUND_STATES = frozenset({GroupState.STOPPING_FETCHERS, GroupState.STARTING_FETCHERS})


def registry_key(name: str) -> str:
    """The registry's (and ZooKeeper's) name for a member id or instance id a client chose:
    Kafka clients' member ids (librdkafka's are standard base64), whose '/' cannot be in a znode name
    ('%' and '/' are escaped, so two ids never share a key)."""
    return name.replace("%", "%25").replace("/", "%2F")


def client_name(key: str) -> str:
    """The member id or instance id ``registry_key`` made ``key`` of."""
    return key.replace("%2F", "/").replace("%25", "%")


#: Consumer ids of the Spark source's members start with this (``spark_coord.spark.group``).
SPARK_MEMBER_PREFIX = "coordkafka-"


@dataclass
class ConsumerRegistry:
    """One member: what it registered with, its channel, and the coordinator's bookkeeping.

    Epochs (DESIGN.md "Epochs"): ``epoch`` is the member's own, from the group's counter
    (``GroupRegistry.generation_id``); a member gets a new one with each StopFetcher v1
    and StartFetcher it answers, and keeps it while others are rebalanced.  ``acquired``
    says in which epoch the member was given each partition it holds: offsets for a
    partition are taken from its holder, stamped with an epoch from that one up to the
    newest sent to it (``sent_epoch``), so a report from an earlier holding of the same
    partition never counts."""

    group_id: str
    consumer_id: str
    topic_count: TopicCount
    auto_commit: bool = True
    auto_offset_reset: str = "largest"
    session_timeout_ms: int = 10000
    #: The live connection; None while the member is absent (restored, or its connection closed).
    channel: "MemberChannel | None" = None
    #: Hands partitions over incrementally (StopFetcher/StartFetcher v1, Kafka's cooperative
    #: protocol); else every change of its assignment stops all it holds first.
    incremental: bool = False
    #: The door it came in by: None (the seeds' channel), "classic" or "consumer" (Kafka's protocols).
    kind: str | None = None
    #: Its Kafka member id when the registry knows it by another name (a static member: its instance id).
    external_id: str | None = None
    #: The ping awaiting its answer, if any.
    ping: "DelayedPing | None" = None
    #: Consecutive pings that expired unanswered.
    failed_pings: int = 0
    #: Consecutive rebalance rounds this member made fail (timed out or answered an error).
    failed_rounds: int = 0
    #: The scheduler's next ping for this member.
    ping_handle: "TimerHandle | None" = None
    #: The member's epoch: of the last StopFetcher v1 / StartFetcher it answered, or of its accepted
    #: claim; None until its first StartFetcher.
    epoch: int | None = None
    #: The newest epoch sent to it (>= ``epoch``; greater while a request carrying it is unanswered).
    sent_epoch: int = -1
    #: It answered a StopFetcher and was not sent a StartFetcher since (an attempt failed between):
    #: the next attempt sends it one, even if nothing else changes for it.
    needs_start: bool = False
    #: ``{thread_id: [(topic, partition)]}`` it holds: it may be fetching these (a StartFetcher sent
    #: counts at once, before its answer).  None: holds nothing and was never started since it
    #: (re)joined, so it needs a StartFetcher.
    assignment: Assignment | None = None
    #: Epoch in which it was given each partition it holds.
    acquired: dict[TopicPartition, int] = field(default_factory=dict)
    #: The offsets the member reported last, per partition.
    last_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    #: When the coordinator last sent this member a request (its clock, ms): the member's lease
    #: runs from when it received one.
    last_sent_ms: int = 0
    #: While absent with an assignment: until when (coordinator clock, ms) the member may still be
    #: fetching it; its partitions go to nobody else before.
    absent_until_ms: int | None = None
    #: Fails the absent member when its lease has run out.
    absent_handle: "TimerHandle | None" = None
    #: With an authorizer: whether the member's principal may Read a topic (its partitions come only
    #: from such topics; checked at every rebalance).  None: every subscribed topic.
    topic_filter: "Callable[[str], bool] | None" = None

    def assignable(self, topics: "Mapping[str, int]") -> "TopicCount":
        """The subscription the assignor sees: the topics of ``topics`` it covers that the
        ``topic_filter`` lets through (a subscription to nothing when there are none)."""
        if self.topic_filter is None:
            return self.topic_count
        allowed = {t: self.topic_count.streams_for(t) for t in self.topic_count.topics_in(topics)
                   if self.topic_filter(t)}
        return TopicCount.static(allowed) if allowed else NOTHING

    @property
    def protocol(self) -> str:
        """The protocol it speaks, as ``groups describe`` and the metrics name it: ``classic`` or
        ``consumer`` (Kafka's), ``spark`` (a Spark query's member) or ``coordinator`` (the seeds')."""
        if self.kind in ("classic", "consumer"):
            return self.kind
        return "spark" if self.consumer_id.startswith(SPARK_MEMBER_PREFIX) else "coordinator"

    def owned(self) -> set[TopicPartition]:
        """Partitions this member holds (may be fetching)."""
        return {tp for tps in (self.assignment or {}).values() for tp in tps}

    def threads(self) -> dict[TopicPartition, str]:
        """``{partition: thread}`` of what it holds."""
        return {tp: thread for thread, tps in (self.assignment or {}).items() for tp in tps}

    def hold(self, threads: "Mapping[TopicPartition, str]", epoch: int) -> None:
        """It holds exactly ``threads`` from now on; partitions new to it were given in ``epoch``."""
        before = self.owned()
        assignment: Assignment = {}
        for tp, thread in sorted(threads.items()):
            assignment.setdefault(thread, []).append(tp)
        self.assignment = assignment
        self.acquired = {tp: (self.acquired.get(tp, epoch) if tp in before else epoch) for tp in threads}

    def release(self, partitions: "Iterable[TopicPartition] | None") -> None:
        """It stopped ``partitions`` (None: everything, and it needs a StartFetcher again)."""
        if partitions is None:
            self.assignment = None
            self.acquired = {}
            return
        gone = set(partitions)
        if self.assignment is not None:
            self.assignment = {th: [tp for tp in tps if tp not in gone] for th, tps in self.assignment.items()}
            self.assignment = {th: tps for th, tps in self.assignment.items() if tps}
        for tp in gone:
            self.acquired.pop(tp, None)

    def accepts_epoch(self, epoch: object) -> bool:
        """May a report stamped ``epoch`` come from this member at all?  Any epoch sent to it, even one
        whose request it has not answered yet: a member commits as soon as it starts fetching, and that
        commit may overtake its answer to the first StartFetcher."""
        newest = max(self.sent_epoch, self.epoch if self.epoch is not None else -1)
        return isinstance(epoch, int) and not isinstance(epoch, bool) and 0 <= epoch <= newest

    @property
    def connected(self) -> bool:
        return self.channel is not None

    @property
    def holds_assignment(self) -> bool:
        """It may be fetching something."""
        return bool(self.assignment)

    def lease_bound_ms(self) -> int:
        """The latest time this member can still be fetching, judged from the requests sent to it."""
        return self.last_sent_ms + self.session_timeout_ms + LEASE_MARGIN_MS

    def to_stored(self) -> StoredMember:
        """What the store keeps about the member, to restore it after a failover."""
        return StoredMember(self.consumer_id, self.topic_count, self.auto_commit,
                            self.auto_offset_reset, self.session_timeout_ms, self.sent_epoch
                            if self.sent_epoch >= 0 else None, self.incremental, self.kind, self.external_id)

    @property
    def peer(self) -> str:
        return getattr(self.channel, "peer", "?") if self.channel is not None else "(not connected)"


@dataclass
class GroupRegistry:
    """One group: members, its epoch counter, offsets, owners and its rebalance task."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    members: dict[str, ConsumerRegistry] = field(default_factory=dict)
    #: The group's epoch counter (Kafka's group epoch; the seeds' generation): every epoch handed to a
    #: member comes from it, and it is persisted before a request carries one.
    generation_id: int = 0
    #: Latest consumed offset per partition (next offset to read).
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    #: Whose holding (consumer id, epoch it got the partition in) set each offset: within one holding
    #: an offset never goes backwards (DESIGN invariant 3).
    offset_holding: dict[TopicPartition, tuple[str, int]] = field(default_factory=dict)
    #: Partitions whose offset changed since the last commit to ZooKeeper.
    dirty: set[TopicPartition] = field(default_factory=set)
    #: Owners as last written to ZooKeeper: every partition a member may be fetching, with its thread.
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    #: Bumped by every change that needs a new assignment (a member joined, failed or left, topics
    #: changed): a rebalance attempt that sees it move runs again.
    changes: int = 0
    #: The group's one rebalance task while a rebalance is wanted (seeds: the rebalancer the group
    #: is assigned to); None when the group is settled.
    rebalance_task: "asyncio.Task[None] | None" = None
    #: The StopFetcher/StartFetcher round in flight, if any.
    current_round: "DelayedFetcherRound | None" = None
    #: Serialises this group's store writes, so they land in the order they were made.
    store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_error: str | None = None
    #: Partitions that changed owner in the last completed rebalance (for logs and metrics).
    last_moved: int = 0

    def transition_to(self, target: GroupState) -> None:
        """Move to ``target``; ``IllegalStateTransition`` if the table does not allow it."""
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(f"group {self.group_id!r}: {self.state.name} -> {target.name} is not allowed")
        log.debug("group %s: %s -> %s", self.group_id, self.state.name, target.name)
        self.state = target

    @property
    def is_dirty(self) -> bool:
        return bool(self.dirty)

    def live_members(self) -> dict[str, ConsumerRegistry]:
        """Members with a live channel (absent ones excluded)."""
        return {cid: m for cid, m in self.members.items() if m.channel is not None}

    def absent_members(self) -> dict[str, ConsumerRegistry]:
        """Members without a channel: restored and not back yet, or whose connection closed."""
        return {cid: m for cid, m in self.members.items() if m.channel is None}

    def holder_of(self, tp: TopicPartition) -> ConsumerRegistry | None:
        for m in self.members.values():
            if tp in m.acquired:
                return m
        return None

    def holdings(self) -> dict[TopicPartition, str]:
        """``{partition: thread}`` of everything the members hold."""
        return {tp: thread for m in self.members.values() for tp, thread in m.threads().items()}

    def interested_in(self, topic: str) -> bool:
        """Does any member subscribe to ``topic`` (statically or by pattern)?"""
        return any(m.topic_count.matches(topic) for m in self.members.values())

    def has_wildcard(self) -> bool:
        return any(m.topic_count.is_wildcard for m in self.members.values())

    def max_session_timeout_ms(self) -> int:
        return max((m.session_timeout_ms for m in self.members.values()), default=0)

    def owned_by(self, consumer_id: str) -> Assignment:
        """The ``{thread: [partitions]}`` the group's owners give ``consumer_id``."""
        out: Assignment = {}
        for tp, thread in sorted(self.owners.items()):
            if thread_owner(thread) == consumer_id:
                out.setdefault(thread, []).append(tp)
        return out

    def record_offset(self, tp: TopicPartition, offset: int, holding: tuple[str, int] | None) -> bool:
        """Take a reported offset unless it moves backwards within ``holding`` (None: outside any)."""
        current = self.offsets.get(tp)
        if current is not None and holding is not None and offset < current \
                and self.offset_holding.get(tp) == holding:
            log.debug("group %s: ignoring offset %d for %s-%d behind %d", self.group_id, offset, tp[0], tp[1], current)
            return False
        if current == offset:
            return False
        self.offsets[tp] = offset
        if holding is None:
            self.offset_holding.pop(tp, None)
        else:
            self.offset_holding[tp] = holding
        self.dirty.add(tp)
        return True

    def is_behind(self, tp: TopicPartition, offset: int, holding: tuple[str, int]) -> bool:
        """Would ``offset`` move ``tp`` backwards within ``holding``?"""
        current = self.offsets.get(tp)
        return current is not None and offset < current and self.offset_holding.get(tp) == holding

    def forget_topic(self, topic: str) -> bool:
        """Drop every offset and owner of a deleted topic; True if there was any."""
        gone = [tp for tp in set(self.offsets) | set(self.owners) if tp[0] == topic]
        for tp in gone:
            self.offsets.pop(tp, None)
            self.offset_holding.pop(tp, None)
            self.dirty.discard(tp)
            self.owners.pop(tp, None)
        for m in self.members.values():
            held = [tp for tp in m.owned() if tp[0] == topic]
            if held:
                m.release(held)
                gone.extend(held)
            for tp in [tp for tp in m.last_offsets if tp[0] == topic]:
                del m.last_offsets[tp]
        return bool(gone)
