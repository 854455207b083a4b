"""A group's state machine and registries (seeds 003 section 12.1: GroupRegistry, ConsumerRegistry).

Ownership rule: everything here is changed only on the event loop thread, by
the coordinator's methods or by the rebalancer worker the group is currently
assigned to; timer callbacks post work instead of changing it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_coord.coordinator.store import StoredMember
from spark_coord.coordinator.subscription import TopicCount

if TYPE_CHECKING:
    from spark_coord.coordinator.channel import MemberChannel
    from spark_coord.coordinator.clock import TimerHandle
    from spark_coord.coordinator.delayed import DelayedFetcherRound, DelayedPing

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class IllegalStateTransition(RuntimeError):
    """A group was asked to move to a state it cannot reach from where it is."""


class GroupState(enum.Enum):
    """Where a group is in its life; each state says what it accepts."""

    EMPTY = "Empty"
    """No members.  RegisterConsumer -> PREPARING_REBALANCE."""

    RESTORING = "Restoring"
    """Restored from ZooKeeper by a newly elected coordinator; waiting for the
    restored members to re-register.  RegisterConsumer is accepted (a restored id
    takes its place back); pings and rebalances wait.  When every restored member
    is back, or the largest restored session timeout passed (missing members are
    dropped) -> PREPARING_REBALANCE, or EMPTY when nobody came back."""

    STABLE = "Stable"
    """Every member runs the current generation's assignment.  Ping answers with
    offsets are accepted; RegisterConsumer, a member failure or a topic change ->
    PREPARING_REBALANCE."""

    PREPARING_REBALANCE = "PreparingRebalance"
    """A rebalance is queued or backing off.  Everything is accepted; the
    rebalancer moves on to STOPPING_FETCHERS (or STABLE when nothing changed,
    EMPTY when no member is left)."""

    STOPPING_FETCHERS = "StoppingFetchers"
    """A StopFetcher round is out.  StopFetcher answers (with offsets) complete
    it; RegisterConsumer or a member failure fail it -> PREPARING_REBALANCE."""

    STARTING_FETCHERS = "StartingFetchers"
    """The generation was bumped and a StartFetcher round is out.  StartFetcher
    answers complete it -> STABLE; RegisterConsumer or a member failure fail
    it -> PREPARING_REBALANCE."""

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
    GroupState.STARTING_FETCHERS: frozenset({GroupState.STOPPING_FETCHERS}),
    GroupState.STABLE: frozenset({GroupState.STARTING_FETCHERS, GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(set(GroupState) - {GroupState.DEAD}),
}

#: States in which a StopFetcher/StartFetcher round may be in flight.
ROUND_STATES = frozenset({GroupState.STOPPING_FETCHERS, GroupState.STARTING_FETCHERS})


@dataclass
class ConsumerRegistry:
    """One member: what it registered with, its channel, and the coordinator's bookkeeping."""

    group_id: str
    consumer_id: str
    topic_count: TopicCount
    auto_commit: bool = True
    auto_offset_reset: str = "largest"
    session_timeout_ms: int = 10000
    #: The live connection; None for a member restored from ZooKeeper that has not re-registered.
    channel: "MemberChannel | None" = None
    #: The ping awaiting its answer, if any.
    ping: "DelayedPing | None" = None
    #: Consecutive pings that expired unanswered.
    failed_pings: int = 0
    #: The scheduler's next ping for this member.
    ping_handle: "TimerHandle | None" = None
    #: Generation whose StartFetcher this member answered; None until it did.
    generation_id: int | None = None
    #: ``{thread_id: [(topic, partition)]}`` the member was started with; None: never started
    #: (or stopped since), so it needs a rebalance round.
    assignment: dict[str, list[TopicPartition]] | None = None
    #: The offsets the member reported last, per partition.
    last_offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def owned(self) -> set[TopicPartition]:
        """Partitions this member owns in its generation."""
        return {tp for tps in (self.assignment or {}).values() for tp in tps}

    @property
    def connected(self) -> bool:
        return self.channel is not None

    def to_stored(self) -> StoredMember:
        """What the store keeps about the member, to restore it after a failover."""
        return StoredMember(self.consumer_id, self.topic_count, self.auto_commit,
                            self.auto_offset_reset, self.session_timeout_ms)

    @property
    def peer(self) -> str:
        return getattr(self.channel, "peer", "?") if self.channel is not None else "(not connected)"


@dataclass
class GroupRegistry:
    """One group: members, generation, offsets, owners and the rebalance bookkeeping."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    members: dict[str, ConsumerRegistry] = field(default_factory=dict)
    generation_id: int = 0
    #: Latest consumed offset per partition (next offset to read).
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    #: Generation in which each offset was last set (offsets never go back within one).
    offset_generation: dict[TopicPartition, int] = field(default_factory=dict)
    #: Partitions whose offset changed since the last commit to ZooKeeper.
    dirty: set[TopicPartition] = field(default_factory=set)
    #: Owners as written to ZooKeeper at the end of the last successful rebalance.
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    #: A rebalance is queued at a worker and not yet picked up (seed: rebalanceInitiated).
    rebalance_requested: bool = False
    #: Index of the worker this group sticks to while a rebalance is queued or running.
    current_rebalancer: int | None = None
    #: The current rebalance attempt failed (round expired, member failed or joined).
    rebalance_failed: bool = False
    #: The StopFetcher/StartFetcher round in flight, if any.
    current_round: "DelayedFetcherRound | None" = None
    #: Restored member ids still expected to re-register (RESTORING only).
    awaiting: set[str] = field(default_factory=set)
    restore_handle: "TimerHandle | None" = None
    #: True while a worker runs a rebalance of this group (checked: never two at once).
    rebalancing: bool = False
    #: Serialises this group's store writes, so they land in the order they were made.
    store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_error: str | None = None

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
        """Members with a live channel (restored placeholders excluded)."""
        return {cid: m for cid, m in self.members.items() if m.channel is not None}

    def interested_in(self, topic: str) -> bool:
        """Does any member subscribe to ``topic`` (statically or by pattern)?"""
        return any(m.topic_count.matches(topic) for m in self.members.values())

    def has_wildcard(self) -> bool:
        return any(m.topic_count.is_wildcard for m in self.members.values())

    def max_session_timeout_ms(self) -> int:
        return max((m.session_timeout_ms for m in self.members.values()), default=0)

    def record_offset(self, tp: TopicPartition, offset: int) -> bool:
        """Take a reported offset unless it moves backwards within the current generation."""
        current = self.offsets.get(tp)
        if current is not None and offset < current and self.offset_generation.get(tp) == self.generation_id:
            log.debug("group %s: ignoring offset %d for %s-%d behind %d", self.group_id, offset, tp[0], tp[1], current)
            return False
        if current == offset:
            return False
        self.offsets[tp] = offset
        self.offset_generation[tp] = self.generation_id
        self.dirty.add(tp)
        return True
