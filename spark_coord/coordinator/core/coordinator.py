"""The consumer-group coordinator (seeds 003 sections 5-11; fencing from DESIGN.md "Coordinator shards").

The ``Coordinator`` holds the groups and ties the seeds' parts together: the
``PingScheduler`` (failure detection), the ``OffsetCommitter`` (offsets in,
ZooKeeper out), the ``Rebalancer`` (one task per group that needs a new
assignment) and the registration checks (``registration``).

Everything runs on the event loop thread: the broker glue calls ``register`` /
``on_channel_closed`` / ``handle_commit``, member answers arrive through the
callback given with each request, the topic watcher calls
``on_topics_changed``, the elector calls ``activate`` / ``deactivate``, the
broker's shutdown ``shutdown``.  A coordinator pings only while ZooKeeper
confirmed its election recently (``LeadershipLease``), so a deposed one that
resumes from a pause renews nobody's lease.  Timer callbacks only *post* coordinator
methods (``post``).  A store write that raises ``Fenced`` means another broker
is coordinator now: the coordinator drops everything (``deactivate``).

One owner per partition (DESIGN.md "One holder at a time (invariant 1)") across lost
connections and failovers.  A member keeps fetching while it rediscovers a lost coordinator,
but only until its own session timeout has passed since it last heard from a
coordinator; then it stops (its fetch loop and its delivery check that lease
themselves, so a paused member that resumes does not deliver first).  The
coordinator gives a partition to a new owner only after the old owner answered
StopFetcher, left (CommitOffsets with ``leave``), or can no longer be fetching:
a member holding an assignment that goes absent (connection closed, failed by
pings, or restored from ZooKeeper by a newly elected coordinator) keeps its
partitions until its session timeout plus ``group.LEASE_MARGIN_MS`` has passed
since the last request sent to it -- for a restored member, since this
coordinator was elected, which is after anything the old coordinator sent.
Rebalances of its group wait until then.  If the member comes back first with a
claim that matches (``registration.claim_fits``: same generation, same
partitions), it is back in its generation and nothing is stopped; if not, it
has stopped (it does on any refused claim) and joins as a new member.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Awaitable, Callable, Iterable, Mapping

from spark_coord.common import TopicPartition
from spark_coord.coordinator.core.assignors import SERVER_ASSIGNORS, Assignor, get_assignor
from spark_coord.coordinator.core.channel import ChannelClosed, MemberChannel, OnAnswer
from spark_coord.coordinator.core.clock import Clock, Timer
from spark_coord.coordinator.core.config import CoordinatorConfig
from spark_coord.coordinator.core.group import LEASE_MARGIN_MS, ConsumerRegistry, GroupRegistry, GroupState
from spark_coord.coordinator.core.leadership import LeadershipLease
from spark_coord.coordinator.core.metrics import NO_METRICS, CoordinatorMetrics
from spark_coord.coordinator.core.offsets import OffsetCommitter
from spark_coord.coordinator.core.pings import FIRST_PING_JITTER, PingScheduler
from spark_coord.coordinator.core.rebalancer import Rebalancer
from spark_coord.coordinator.core.registration import Refusal, Registration, claim_fits, is_int, parse_registration
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.storage.store import Fenced, GroupStore, StoredGroup
from spark_coord.errors import ErrorCode
from spark_coord.wire.coordinator import INCREMENTAL_REGISTER_VERSION, NO_GENERATION

log = logging.getLogger(__name__)

ClusterView = Callable[[], Iterable[tuple[int, str, int]]]

__all__ = ["Coordinator", "FIRST_PING_JITTER"]


class Coordinator:
    """The elected coordinator's state and behaviour; inert until ``activate``."""

    def __init__(self, config: CoordinatorConfig, store: GroupStore, timer: Timer, clock: Clock,
                 cluster_view: ClusterView, *, on_fenced: Callable[[], None] | None = None,
                 first_ping_jitter: float = FIRST_PING_JITTER, rng: random.Random | None = None,
                 metrics: CoordinatorMetrics | None = None):
        self.config = config
        self.store = store
        self.timer = timer
        self.clock = clock
        self.cluster_view = cluster_view
        self.on_fenced = on_fenced
        self.metrics = metrics if metrics is not None else NO_METRICS  # metrics
        self.assignor = get_assignor(config.assignment_strategy)
        self.epoch: int | None = None
        self.active = False
        self.groups: dict[str, GroupRegistry] = {}
        #: Share groups held here (``share_group.ShareGroups`` fills it): kept on the coordinator so
        #: that every door can tell a share group's id from a consumer group's (``group_type``).
        self.share_groups: dict[str, Any] = {}
        #: Called with the share groups' saved membership (``{group: bytes}``) when this coordinator is
        #: elected (the share door sets it: it takes their members back).
        self.share_restorer: Callable[[dict[str, bytes]], None] | None = None
        self.topics: dict[str, int] = {}
        #: Each topic's id (16 bytes), where the cluster view knows it: Kafka 4's consumers name
        #: topics by id (KIP-848).
        self.topic_ids: dict[str, bytes] = {}
        self._topic_by_id: dict[bytes, str] = {}
        self.pings = PingScheduler(self, first_ping_jitter, rng)
        self.offsets = OffsetCommitter(self)
        self.rebalancer = Rebalancer(self)
        self.leadership = LeadershipLease(self)
        self._channels: dict[int, tuple[MemberChannel, str, str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._incarnation = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Called with (group id, {partition: offset}) after offsets were written to the store (the
        #: standalone coordinator's mirror into the data cluster); must not block.
        self.on_committed: Callable[[str, dict], None] | None = None

    # ------------------------------------------------------------ life cycle

    async def activate(self, epoch: int) -> None:
        """Elected: restore the groups from the store, start the committer and the pings."""
        if self.active or self.epoch is not None:
            await self.deactivate()
        self._loop = asyncio.get_running_loop()
        self._incarnation += 1
        incarnation = self._incarnation
        self.epoch = epoch
        topics = await self.store.topics()
        stored = await self.store.load_groups()
        shares = await self.store.load_share_groups()
        if incarnation != self._incarnation:  # deactivated while loading
            return
        self.topics = dict(topics)
        self.active = True
        self.metrics.elected(epoch)  # metrics
        self.rebalancer.start()
        for sg in stored.values():
            self._restore_group(sg)
        if self.share_restorer is not None:
            self.share_restorer(shares)
        self.offsets.start()
        self.leadership.start()
        log.info("coordinator active (epoch %d): %d groups restored, %d topics", epoch, len(stored), len(topics))

    async def shutdown(self, timeout: float = 5.0) -> None:
        """A clean stop while still elected: commit the offsets held (for at most ``timeout``
        seconds: a broker whose ZooKeeper is unreachable must still stop), then drop everything."""
        if self.active:
            try:
                await asyncio.wait_for(self.offsets.commit_all(), timeout)
            except asyncio.TimeoutError:
                log.warning("could not commit the offsets held within %.0f s; stopping without", timeout)
        await self.deactivate()

    async def deactivate(self) -> None:
        """Resigned or fenced: drop ALL in-memory state, cancel timers, close member channels."""
        was_active = self.active
        self.active = False
        self.epoch = None
        self._incarnation += 1
        self.offsets.stop()
        self.leadership.stop()
        await self.rebalancer.stop()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self.pings.cancel_all()
        for group in self.groups.values():
            for m in group.members.values():
                self.pings.stop(m)
                _cancel_absence(m)
                _close(m.channel)
                m.channel = None
            if group.state != GroupState.DEAD:
                group.transition_to(GroupState.DEAD)
        self.groups.clear()
        self._channels.clear()
        if was_active:
            log.info("coordinator inactive: all group state dropped")

    def fenced(self, what: str) -> None:
        """A store write found that another broker is coordinator now: drop everything."""
        if not self.active:
            return
        log.error("coordinator fenced (%s): another broker was elected; dropping all group state", what)
        self.active = False
        if self.on_fenced is not None:
            try:
                self.on_fenced()
            except Exception:
                log.exception("on_fenced callback failed")
        assert self._loop is not None
        self._loop.create_task(self.deactivate(), name="coordinator-deactivate")

    def group_type(self, group_id: str) -> str | None:
        """``"share"`` or ``"consumer"`` (any member kind of the one registry) for a group held here,
        None for a group id nobody uses: a group id is of one type at a time."""
        if group_id in self.share_groups:
            return "share"
        if group_id in self.groups:
            return "consumer"
        return None

    # ------------------------------------------------------------ plumbing

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon, unless the coordinator resigned meanwhile."""
        incarnation = self._incarnation

        def run() -> None:
            if incarnation == self._incarnation and self.active:
                fn(*args)

        assert self._loop is not None
        self._loop.call_soon(run)

    def spawn(self, coro: Awaitable[Any], what: str) -> "asyncio.Task[Any]":
        """Run ``coro`` as a task of this incarnation (cancelled on deactivate); Fenced deactivates."""
        async def guarded() -> None:
            try:
                await coro
            except Fenced:
                self.fenced(what)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", what)

        assert self._loop is not None
        task = self._loop.create_task(guarded(), name=what)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if hasattr(coro, "close"):  # cancelled before it started: ``coro`` never ran; close it quietly
            task.add_done_callback(lambda t: coro.close() if t.cancelled() else None)
        return task

    def send(self, group: GroupRegistry, member: ConsumerRegistry, api_key: int, body: dict,
             on_answer: OnAnswer, version: int = 0) -> bool:
        """Send a request to a member (its lease runs from now); False if its connection is gone."""
        channel = member.channel
        if channel is None:
            return False
        try:
            channel.send(api_key, body, on_answer, version)
        except ChannelClosed:
            self.post(self._channel_gone, group, member, channel, "connection closed")
            return False
        if getattr(channel, "renews_lease", True):
            member.last_sent_ms = self.clock.now_ms()
        return True

    def current_group(self, member: ConsumerRegistry) -> GroupRegistry | None:
        """The member's group if the member is still registered there with a live channel."""
        group = self.groups.get(member.group_id)
        if group is None or group.members.get(member.consumer_id) is not member or member.channel is None:
            return None
        return group

    def member_of(self, channel: MemberChannel) -> tuple[GroupRegistry, ConsumerRegistry] | None:
        """The group and member registered on ``channel``, if any."""
        entry = self._channels.get(id(channel))
        if entry is None or entry[0] is not channel:
            return None
        group = self.groups.get(entry[1])
        member = group.members.get(entry[2]) if group is not None else None
        if group is None or member is None or member.channel is not channel:
            return None
        return group, member

    def assignor_for(self, group: GroupRegistry) -> Assignor:
        """The assignor that computes ``group``'s targets: the server-side assignor its members ask for
        (Kafka 4's consumers name one: ``uniform`` or ``range``; the last one named wins), else the
        coordinator's own (``coordinator.partition.assignment.strategy``)."""
        named = [a for m in group.members.values() if (a := getattr(m.channel, "assignor", None))]
        if named and named[-1] in SERVER_ASSIGNORS:
            return SERVER_ASSIGNORS[named[-1]]
        return self.assignor

    async def _write_member(self, group: GroupRegistry, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        async with group.store_lock:
            await fn(*args)

    async def _save_member(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        """Persist the member as it is when the write's turn comes (a rebalance may have given it an
        epoch meanwhile, which an earlier snapshot would overwrite); nothing once it left."""
        async with group.store_lock:
            if group.members.get(member.consumer_id) is member:
                await self.store.save_member(group.group_id, member.to_stored())

    # ------------------------------------------------------------ restore (failover)

    def _restore_group(self, sg: StoredGroup) -> None:
        generation = max([sg.generation_id] + [sm.epoch for sm in sg.members.values() if sm.epoch is not None])
        group = GroupRegistry(sg.group_id, state=GroupState.RESTORING, generation_id=generation,
                              offsets=dict(sg.offsets), owners=dict(sg.owners))
        self.groups[sg.group_id] = group
        for topic in sorted({t for t, _ in set(sg.offsets) | set(sg.owners) if t not in self.topics}):
            self._forget_topic(group, topic)
        now = self.clock.now_ms()
        for cid, sm in sg.members.items():
            m = ConsumerRegistry(sg.group_id, cid, sm.topic_count, sm.auto_commit, sm.auto_offset_reset,
                                 sm.session_timeout_ms, incremental=sm.incremental, kind=sm.kind,
                                 external_id=sm.member_id)
            # it may still be fetching what the owners give it, until its lease (counted from now) ends;
            # in which epoch it got each partition is not kept: any of its epochs up to the newest counts
            m.epoch = m.sent_epoch = sm.epoch if sm.epoch is not None else sg.generation_id
            owned = group.owned_by(cid)
            m.assignment = owned or None
            m.acquired = {tp: 0 for tps in owned.values() for tp in tps}
            # the stored offset of a partition it holds counts as its own: a commit of its arriving late
            # (a retried or delayed request, older than the one stored) does not move it backwards
            group.offset_holding.update({tp: (cid, 0) for tp in m.acquired if tp in group.offsets})
            m.last_sent_ms = now
            group.members[cid] = m
            self._await_return(group, m)
        if not group.members:
            group.transition_to(GroupState.EMPTY)
            return
        log.info("group %s restored (generation %d, %d members); waiting up to %d ms for them to re-register",
                 sg.group_id, sg.generation_id, len(group.members), group.max_session_timeout_ms() + LEASE_MARGIN_MS)

    def _maybe_finish_restore(self, group: GroupRegistry) -> None:
        """RESTORING -> PREPARING_REBALANCE (or EMPTY) once no restored member is still awaited."""
        if group.state != GroupState.RESTORING or group.absent_members():
            return
        if not group.members:
            group.transition_to(GroupState.EMPTY)
            self.spawn(self._clear_owners(group), f"clear owners of {group.group_id}")
            return
        group.transition_to(GroupState.PREPARING_REBALANCE)
        self.rebalancer.kick(group)

    async def _clear_owners(self, group: GroupRegistry) -> None:
        if group.owners:
            async with group.store_lock:
                await self.store.write_owners(group.group_id, {})
            group.owners = {}

    # ------------------------------------------------------------ registration

    def register(self, channel: MemberChannel, body: Mapping[str, Any], version: int = 1,
                 incremental: bool | None = None, kind: str | None = None,
                 external_id: str | None = None) -> dict[str, Any]:
        """Answer a RegisterConsumer request of ``version``; on success the member joins its group.
        ``incremental`` (default: ``version`` >= 2) says whether it hands partitions over one by one;
        ``kind`` which door it came in by (Kafka's ``classic`` or ``consumer`` protocol), and
        ``external_id`` its Kafka member id when it registers under another name (its instance id)."""
        def answer(code: ErrorCode, message: str = "", generation: int = NO_GENERATION) -> dict[str, Any]:
            if code != ErrorCode.NONE:
                log.info("RegisterConsumer from %s refused: %s %s", getattr(channel, "peer", "?"), code.name, message)
            return {"error_code": int(code), "error_message": message or None,
                    "coordinator_epoch": self.epoch if self.epoch is not None else -1, "generation_id": generation}

        if not self.active:
            return answer(ErrorCode.NOT_COORDINATOR, "this broker is not the coordinator")
        if not self.leadership.fresh():  # maybe deposed while paused: decide nobody's membership
            return answer(ErrorCode.NOT_COORDINATOR, "ZooKeeper has not confirmed this coordinator's election lately")
        reg = parse_registration(body, self.config.min_session_timeout_ms)
        if isinstance(reg, Refusal):
            return answer(reg.code, reg.message)
        if id(channel) in self._channels:
            return answer(ErrorCode.INVALID_REQUEST, "this connection already registered a consumer")
        group = self.groups.get(reg.group_id) or self._handle_new_group(reg.group_id)
        existing = group.members.get(reg.consumer_id)
        if existing is not None and existing.channel is not None:
            return answer(ErrorCode.CONSUMER_ID_ALREADY_REGISTERED,
                          f"consumer {reg.consumer_id!r} is already registered in group {reg.group_id!r}")
        incremental = version >= INCREMENTAL_REGISTER_VERSION if incremental is None else incremental
        if existing is not None and reg.claim is not None:
            refused = claim_fits(reg.claim, existing)
            if refused is None and existing.topic_count != reg.topic_count:
                refused = "its subscription changed"
            if refused is None:
                existing.external_id = external_id if external_id is not None else existing.external_id
                self._rejoin(group, existing, channel, reg, incremental)
                return answer(ErrorCode.NONE, generation=reg.claim.generation_id)
            if incremental:  # it stops what it holds and registers again; till then its partitions stay
                return answer(ErrorCode.CLAIM_REFUSED, f"claim refused: consumer {reg.consumer_id} {refused}")
            log.info("group %s: consumer %s's claim refused (%s); it joins as a new member", group.group_id,
                     reg.consumer_id, refused)
        elif reg.claim is not None:
            log.info("group %s: consumer %s claims generation %d but is not a member; it joins as a new member",
                     group.group_id, reg.consumer_id, reg.claim.generation_id)
        if existing is not None:  # absent and not taken back: it has stopped (refused claim) or never started
            self._drop(group, existing)
        member = ConsumerRegistry(reg.group_id, reg.consumer_id, reg.topic_count, reg.auto_commit,
                                  reg.auto_offset_reset, reg.session_timeout_ms, channel=channel,
                                  incremental=incremental, kind=kind, external_id=external_id)
        self._handle_added_consumer(group, member)
        return answer(ErrorCode.NONE)

    def _handle_new_group(self, group_id: str) -> GroupRegistry:
        """handleNewGroup: a registry with no members."""
        group = GroupRegistry(group_id)
        self.groups[group_id] = group
        log.info("new group %s", group_id)
        return group

    def _attach(self, group: GroupRegistry, member: ConsumerRegistry, channel: MemberChannel) -> None:
        member.channel = channel
        member.failed_pings = 0
        member.last_sent_ms = self.clock.now_ms()
        self._channels[id(channel)] = (channel, group.group_id, member.consumer_id)
        self.pings.start(member)

    def _handle_added_consumer(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        """handleAddedConsumer: schedule pings, add to the group, persist, rebalance."""
        assert member.channel is not None
        group.members[member.consumer_id] = member
        self._attach(group, member, member.channel)
        self.spawn(self._save_member(group, member),
                   f"save member {group.group_id}/{member.consumer_id}")
        log.info("group %s: consumer %s registered from %s (%s, session %d ms)", group.group_id,
                 member.consumer_id, member.peer, member.topic_count.describe(), member.session_timeout_ms)
        if group.state == GroupState.RESTORING:
            self._maybe_finish_restore(group)
            return
        self.request_rebalance(group, f"consumer {member.consumer_id} joined")

    def _rejoin(self, group: GroupRegistry, member: ConsumerRegistry, channel: MemberChannel,
                reg: Registration, incremental: bool) -> None:
        """An absent member is back with a claim that fits: in its epoch, holding what it claims
        (nothing stopped); what it was counted for and does not claim is free again."""
        assert reg.claim is not None
        _cancel_absence(member)
        member.auto_commit, member.auto_offset_reset = reg.auto_commit, reg.auto_offset_reset
        changed = member.session_timeout_ms != reg.session_timeout_ms or member.incremental != incremental
        member.session_timeout_ms, member.incremental = reg.session_timeout_ms, incremental
        if changed:
            self.spawn(self._save_member(group, member),
                       f"save member {group.group_id}/{member.consumer_id}")
        claimed = {tp: thread for thread, tps in reg.claim.assignment.items() for tp in tps}
        dropped = member.owned() - set(claimed)
        member.release(dropped)
        if member.assignment is None:
            member.assignment = {}
        member.epoch = reg.claim.generation_id
        self._attach(group, member, channel)
        log.info("group %s: consumer %s is back from %s, in epoch %d with %d partition(s)%s", group.group_id,
                 member.consumer_id, member.peer, member.epoch, len(claimed),
                 f" ({len(dropped)} it was counted for are free again)" if dropped else "")
        self.offsets.accept(group, member, reg.claim.offsets, reg.claim.generation_id)
        if group.state == GroupState.RESTORING:
            self._maybe_finish_restore(group)
        elif dropped:
            self.request_rebalance(group, f"consumer {member.consumer_id} came back without {len(dropped)} "
                                          f"partition(s)")

    def request_rebalance(self, group: GroupRegistry, reason: str) -> None:
        """The group needs a new assignment (no-op while RESTORING: finishing the restore rebalances)."""
        self.rebalancer.request(group, reason)

    # ------------------------------------------------------------ absence and failure

    def on_channel_closed(self, channel: MemberChannel) -> None:
        """A member's connection went away."""
        entry = self._channels.pop(id(channel), None)
        if entry is None or entry[0] is not channel:
            return
        group = self.groups.get(entry[1])
        member = group.members.get(entry[2]) if group is not None else None
        if group is None or member is None or member.channel is not channel:
            return
        self._channel_gone(group, member, channel, "connection closed")

    def _channel_gone(self, group: GroupRegistry, member: ConsumerRegistry, channel: MemberChannel,
                      reason: str) -> None:
        if member.channel is not channel or group.members.get(member.consumer_id) is not member:
            return
        self._channels.pop(id(channel), None)
        self._go_absent(group, member, reason)

    def handle_consumer_failure(self, group: GroupRegistry, member: ConsumerRegistry, reason: str) -> None:
        """handleConsumerFailure: stop pinging, close its connection; it is removed once it can no
        longer be fetching (at once when it holds no assignment)."""
        if group.members.get(member.consumer_id) is not member:
            return
        log.warning("group %s: consumer %s failed: %s", group.group_id, member.consumer_id, reason)
        self.metrics.member_failed(reason)  # metrics
        channel = member.channel
        if channel is not None:
            self._channels.pop(id(channel), None)
            _close(channel)
        self._go_absent(group, member, reason)

    def _go_absent(self, group: GroupRegistry, member: ConsumerRegistry, reason: str) -> None:
        self.pings.stop(member)
        member.channel = None
        self.rebalancer.member_gone(group, member, reason)
        if not member.holds_assignment:
            self._remove(group, member, reason)
            return
        self._await_return(group, member)
        log.info("group %s: consumer %s is gone (%s); its partitions wait for it until its lease ends in %d ms",
                 group.group_id, member.consumer_id, reason, (member.absent_until_ms or 0) - self.clock.now_ms())

    def _await_return(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        """Keep the absent ``member`` (and what it holds) until its lease has surely ended."""
        _cancel_absence(member)
        until = member.lease_bound_ms()
        member.absent_until_ms = until
        member.absent_handle = self.timer.call_later(max(0, until - self.clock.now_ms()),
                                                     lambda: self.post(self._absence_over, group, member))

    def _absence_over(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        if self.groups.get(group.group_id) is not group or group.members.get(member.consumer_id) is not member \
                or member.channel is not None:
            return
        if not self.leadership.fresh():  # maybe deposed while paused: the member may be back at the successor
            member.absent_handle = self.timer.call_later(self.leadership.recheck_ms(),
                                                         lambda: self.post(self._absence_over, group, member))
            return
        member.absent_handle = None
        self._remove(group, member, f"did not come back within its session timeout ({member.session_timeout_ms} ms)")

    def released(self, group: GroupRegistry, member: ConsumerRegistry, partitions: "set | None", reason: str) -> None:
        """A member stopped ``partitions`` (None: everything) on its own -- a Kafka eager member that
        joins again has revoked all it held --: they are free, and the group gets a new assignment."""
        if group.members.get(member.consumer_id) is not member:
            return
        member.release(partitions)
        self.request_rebalance(group, reason)

    def resubscribe(self, group_id: str, consumer_id: str, topic_count: "TopicCount") -> bool:
        """A member changed its subscription (Kafka 4's consumers do, with the next heartbeat): it
        keeps what it holds until the next rebalance moves it; False if it is not a member."""
        group = self.groups.get(group_id)
        member = group.members.get(consumer_id) if group is not None else None
        if group is None or member is None:
            return False
        if member.topic_count != topic_count:
            member.topic_count = topic_count
            self.spawn(self._save_member(group, member), f"save member {group_id}/{consumer_id}")
            self.request_rebalance(group, f"consumer {consumer_id} subscribes to {topic_count.describe()}")
        return True

    def heard_from(self, group_id: str, consumer_id: str, channel: MemberChannel, at_ms: int) -> None:
        """A member whose lease runs from its own requests (``renews_lease`` False) sent one."""
        group = self.groups.get(group_id)
        member = group.members.get(consumer_id) if group is not None else None
        if member is not None and member.channel is channel:
            member.last_sent_ms = at_ms

    def set_topic_filter(self, group_id: str, consumer_id: str, topic_filter: "Callable[[str], bool] | None") -> None:
        """Limit what the member is given to topics ``topic_filter`` lets through (its principal's
        Read rights; checked at every rebalance)."""
        group = self.groups.get(group_id)
        member = group.members.get(consumer_id) if group is not None else None
        if member is not None:
            member.topic_filter = topic_filter

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Kafka's DeleteGroups: forget an empty group, here and in the store (Fenced, StoreError)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members or group.rebalance_task is not None:
            return ErrorCode.NON_EMPTY_GROUP
        async with group.store_lock:
            await self.store.delete_group(group_id)
        if self.groups.get(group_id) is group and not group.members:
            del self.groups[group_id]
            log.info("group %s deleted", group_id)
            return ErrorCode.NONE
        return ErrorCode.NON_EMPTY_GROUP

    async def delete_offsets(self, group_id: str,
                             partitions: list[TopicPartition]) -> ErrorCode | dict[TopicPartition, ErrorCode]:
        """Kafka's OffsetDelete: forget the group's committed offsets of ``partitions``, here and in
        the store, except those of topics a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC: the
        group consumes them).  GROUP_ID_NOT_FOUND for an unknown group; raises Fenced, StoreError."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        codes = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if group.interested_in(tp[0]) else ErrorCode.NONE
                 for tp in partitions}
        gone = [tp for tp, code in codes.items() if code == ErrorCode.NONE]
        if gone:
            for tp in gone:  # out of memory first: the committer cannot write them back meanwhile
                group.offsets.pop(tp, None)
                group.offset_holding.pop(tp, None)
                group.dirty.discard(tp)
            async with group.store_lock:
                await self.store.delete_offsets(group_id, gone)
            log.info("group %s: offsets of %d partition(s) deleted", group_id, len(gone))
        return codes

    def member_left(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        """The member stopped fetching and leaves (CommitOffsets with ``leave``): rebalance at once."""
        if group.members.get(member.consumer_id) is not member:
            return
        if member.channel is not None:
            self._channels.pop(id(member.channel), None)
        member.assignment = None
        self._remove(group, member, "left the group")

    def _drop(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        """Forget a member entry without a rebalance of its own (it is replaced at once)."""
        self.pings.stop(member)
        _cancel_absence(member)
        self.rebalancer.member_gone(group, member, "removed")
        if member.channel is not None:
            self._channels.pop(id(member.channel), None)
        group.members.pop(member.consumer_id, None)

    def _remove(self, group: GroupRegistry, member: ConsumerRegistry, reason: str) -> None:
        """Remove the member from its group and the store; rebalance (or finish a restore)."""
        if group.members.get(member.consumer_id) is not member:
            return
        log.info("group %s: consumer %s removed: %s", group.group_id, member.consumer_id, reason)
        self._drop(group, member)
        self.spawn(self._write_member(group, self.store.remove_member, group.group_id, member.consumer_id),
                   f"remove member {group.group_id}/{member.consumer_id}")
        if group.state == GroupState.RESTORING:
            self._maybe_finish_restore(group)
        else:
            self.request_rebalance(group, f"consumer {member.consumer_id} {reason}")  # also when empty: clears owners

    # ------------------------------------------------------------ offsets

    async def handle_commit(self, channel: MemberChannel, body: Any) -> dict[str, Any]:
        """Answer a member's CommitOffsets request once its offsets are in the store."""
        return await self.offsets.handle_commit(channel, body)

    # ------------------------------------------------------------ topics

    def topic_of(self, topic_id: bytes) -> str | None:
        """The topic of an id (None: no such topic, or it was deleted)."""
        if len(self._topic_by_id) != len(self.topic_ids):
            self._topic_by_id = {tid: name for name, tid in self.topic_ids.items()}
        name = self._topic_by_id.get(bytes(topic_id))
        return name if name is not None and self.topic_ids.get(name) == bytes(topic_id) else None

    def on_topics_changed(self, topics: Mapping[str, int], *, complete: bool = False,
                          ids: Mapping[str, bytes] | None = None) -> None:
        """New topics or partition counts (``complete``: ``topics`` is the whole cluster, so
        absent ones were deleted: their offsets and owners are dropped, here and in the store,
        so a topic created again under the same name starts from scratch).  Rebalances every
        group interested in a changed topic."""
        changed: set[str] = set()
        recreated: list[str] = []
        if ids is not None:
            fresh = {t: bytes(i) for t, i in ids.items()
                     if isinstance(i, (bytes, bytearray)) and len(i) == 16 and any(i)}
            recreated = [t for t, i in fresh.items() if self.topic_ids.get(t, i) != i]  # deleted and created again
            self.topic_ids.update(fresh)
            if complete:
                self.topic_ids = {t: i for t, i in self.topic_ids.items() if t in topics}
            self._topic_by_id = {}
            for topic in recreated:
                self.topics.pop(topic, None)  # its partitions are new, whatever their number
                if self.active:
                    for group in self.groups.values():
                        self._forget_topic(group, topic)
        for topic, n in topics.items():
            if not isinstance(topic, str) or not is_int(n) or n < 0:
                log.warning("ignoring topic update %r: %r", topic, n)
                continue
            if self.topics.get(topic) != n:
                changed.add(topic)
                self.topics[topic] = n
        deleted = [t for t in self.topics if t not in topics] if complete else []
        for topic in deleted:
            del self.topics[topic]
            changed.add(topic)
        if not changed or not self.active:
            return
        for group in self.groups.values():
            for topic in deleted:
                self._forget_topic(group, topic)
            hit = sorted(t for t in changed if group.interested_in(t))
            if hit:
                self.request_rebalance(group, f"topics changed: {', '.join(hit)}")

    def _forget_topic(self, group: GroupRegistry, topic: str) -> None:
        if group.forget_topic(topic):
            log.info("group %s: topic %s was deleted; dropping its offsets and owners", group.group_id, topic)
            self.spawn(self._write_member(group, self.store.delete_topic, group.group_id, topic),
                       f"drop offsets of {group.group_id}/{topic}")

    # ------------------------------------------------------------ admin

    def describe_group(self, group_id: str) -> dict[str, Any] | None:
        """Members, generation, owners, offsets and state of one group (None if unknown)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return {
            "group_id": group.group_id,
            "state": group.state.value,
            "generation_id": group.generation_id,
            "members": [{"consumer_id": m.consumer_id, "peer": m.peer, "protocol": m.protocol,
                         "subscription": m.topic_count.to_json(),
                         "session_timeout_ms": m.session_timeout_ms, "auto_commit": m.auto_commit,
                         "generation_id": m.epoch, "incremental": m.incremental,
                         "assignment": {t: [[tp[0], tp[1]] for tp in tps] for t, tps in (m.assignment or {}).items()}}
                        for m in sorted(group.members.values(), key=lambda m: m.consumer_id)],
            "owners": [{"topic": t, "partition": p, "owner": o} for (t, p), o in sorted(group.owners.items())],
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(group.offsets.items())],
            "last_error": group.last_error,
        }

    def describe_groups(self) -> list[dict[str, Any]]:
        """A summary line per group."""
        return [{"group_id": g.group_id, "state": g.state.value, "generation_id": g.generation_id,
                 "members": len(g.members)} for g in sorted(self.groups.values(), key=lambda g: g.group_id)]


def _cancel_absence(member: ConsumerRegistry) -> None:
    if member.absent_handle is not None:
        member.absent_handle.cancel()
        member.absent_handle = None
    member.absent_until_ms = None


def _close(channel: MemberChannel | None) -> None:
    if channel is None:
        return
    try:
        channel.close()
    except Exception:  # closing is best effort
        log.debug("closing channel %r failed", channel, exc_info=True)
