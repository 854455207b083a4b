"""The consumer-group coordinator (seeds 003 sections 5-11; fencing from DESIGN section 6).

Everything here runs on the event loop thread: the broker glue calls
``register`` / ``on_response`` / ``on_channel_closed``, the topic watcher calls
``on_topics_changed``, the elector calls ``activate`` / ``deactivate``.  Timer
callbacks (ping schedule, ping expiry, committer, restore deadline) only
*post* coordinator methods with ``loop.call_soon``; rebalances run in the
``RebalancerPool`` workers.  A store write that raises ``Fenced`` means another
broker is coordinator now: the coordinator drops everything (``deactivate``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Awaitable, Callable, Iterable, Mapping

from spark_coord.coordinator.api import CoordinatorApi
from spark_coord.coordinator.assignors import get_assignor
from spark_coord.coordinator.channel import ChannelClosed, MemberChannel
from spark_coord.coordinator.clock import Clock, Timer, TimerHandle
from spark_coord.coordinator.config import CoordinatorConfig
from spark_coord.coordinator.delayed import DelayedPing, RoundKind
from spark_coord.coordinator.group import ConsumerRegistry, GroupRegistry, GroupState
from spark_coord.coordinator.purgatory import GroupKey, MemberKey, Purgatory
from spark_coord.coordinator.rebalancer import RebalancerPool
from spark_coord.coordinator.store import Fenced, GroupStore, StoredGroup
from spark_coord.coordinator.subscription import TopicCount
from spark_coord.errors import ErrorCode
from spark_coord.zk import paths

log = logging.getLogger(__name__)

ClusterView = Callable[[], Iterable[tuple[int, str, int]]]
OFFSET_RESETS = ("smallest", "largest")
#: A member's first ping comes up to this fraction of the ping interval early, at random, so that
#: members registering together (a failover, a restarted job) are not pinged in one burst ever after.
FIRST_PING_JITTER = 0.25


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Coordinator:
    """The elected coordinator's state and behaviour; inert until ``activate``."""

    def __init__(self, config: CoordinatorConfig, store: GroupStore, timer: Timer, clock: Clock,
                 cluster_view: ClusterView, *, on_fenced: Callable[[], None] | None = None,
                 first_ping_jitter: float = FIRST_PING_JITTER, rng: random.Random | None = None):
        self.config = config
        self.store = store
        self.timer = timer
        self.clock = clock
        self.cluster_view = cluster_view
        self.on_fenced = on_fenced
        self.first_ping_jitter = first_ping_jitter
        self._rng = rng or random.Random()
        self.assignor = get_assignor(config.assignment_strategy)
        self.epoch: int | None = None
        self.active = False
        self.groups: dict[str, GroupRegistry] = {}
        self.topics: dict[str, int] = {}
        self.ping_purgatory = Purgatory(timer, "ping")
        self.round_purgatory = Purgatory(timer, "fetcher-round")
        self.rebalancer = RebalancerPool(self)
        self._channels: dict[int, tuple[MemberChannel, str, str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._commit_handle: TimerHandle | None = None
        self._incarnation = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------ life cycle

    async def activate(self, epoch: int) -> None:
        """Elected: restore the groups from the store, start the workers, the committer and the pings."""
        if self.active or self.epoch is not None:
            await self.deactivate()
        self._loop = asyncio.get_running_loop()
        self._incarnation += 1
        incarnation = self._incarnation
        self.epoch = epoch
        topics = await self.store.topics()
        stored = await self.store.load_groups()
        if incarnation != self._incarnation:  # deactivated while loading
            return
        self.topics = dict(topics)
        self.active = True
        self.rebalancer.start(self.config.rebalance_threads)
        for sg in stored.values():
            self._restore_group(sg)
        self._schedule_commit()
        log.info("coordinator active (epoch %d): %d groups restored, %d topics", epoch, len(stored), len(topics))

    async def deactivate(self) -> None:
        """Resigned or fenced: drop ALL in-memory state, cancel timers, close member channels."""
        was_active = self.active
        self.active = False
        self.epoch = None
        self._incarnation += 1
        if self._commit_handle is not None:
            self._commit_handle.cancel()
            self._commit_handle = None
        await self.rebalancer.stop()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self.ping_purgatory.cancel_all()
        self.round_purgatory.cancel_all()
        for group in self.groups.values():
            if group.restore_handle is not None:
                group.restore_handle.cancel()
            for m in group.members.values():
                self._stop_pinging(m)
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

    # ------------------------------------------------------------ plumbing

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon, unless the coordinator resigned meanwhile."""
        incarnation = self._incarnation

        def run() -> None:
            if incarnation == self._incarnation and self.active:
                fn(*args)

        assert self._loop is not None
        self._loop.call_soon(run)

    def _spawn(self, coro: Awaitable[Any], what: str) -> None:
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

    async def _write_member(self, group: GroupRegistry, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        async with group.store_lock:
            await fn(*args)

    # ------------------------------------------------------------ restore (failover)

    def _restore_group(self, sg: StoredGroup) -> None:
        group = GroupRegistry(sg.group_id, state=GroupState.RESTORING, generation_id=sg.generation_id,
                              offsets=dict(sg.offsets), owners=dict(sg.owners))
        group.offset_generation = {tp: sg.generation_id for tp in sg.offsets}
        for cid, sm in sg.members.items():
            group.members[cid] = ConsumerRegistry(sg.group_id, cid, sm.topic_count, sm.auto_commit,
                                                  sm.auto_offset_reset, sm.session_timeout_ms)
        self.groups[sg.group_id] = group
        if not group.members:
            group.transition_to(GroupState.EMPTY)
            return
        group.awaiting = set(group.members)
        wait = group.max_session_timeout_ms()
        group.restore_handle = self.timer.call_later(wait, lambda: self._post(self._finish_restore, sg.group_id, True))
        log.info("group %s restored (generation %d, %d members); waiting up to %d ms for them to re-register",
                 sg.group_id, sg.generation_id, len(group.members), wait)

    def _finish_restore(self, group_id: str, timed_out: bool = False) -> None:
        group = self.groups.get(group_id)
        if group is None or group.state != GroupState.RESTORING:
            return
        if group.restore_handle is not None:
            group.restore_handle.cancel()
            group.restore_handle = None
        for cid in sorted(group.awaiting):
            log.info("group %s: restored member %s did not re-register; dropping it", group_id, cid)
            del group.members[cid]
            self._spawn(self._write_member(group, self.store.remove_member, group_id, cid), f"remove {group_id}/{cid}")
        group.awaiting.clear()
        group.transition_to(GroupState.PREPARING_REBALANCE)
        self.rebalancer.add_rebalance_request(group)

    # ------------------------------------------------------------ registration

    def register(self, channel: MemberChannel, body: Mapping[str, Any]) -> dict[str, Any]:
        """Answer a RegisterConsumer request; on success the member joins its group."""
        def answer(code: ErrorCode, message: str = "") -> dict[str, Any]:
            if code != ErrorCode.NONE:
                log.info("RegisterConsumer from %s refused: %s %s", getattr(channel, "peer", "?"), code.name, message)
            return {"error_code": int(code), "error_message": message or None,
                    "coordinator_epoch": self.epoch if self.epoch is not None else -1}

        if not self.active:
            return answer(ErrorCode.NOT_COORDINATOR, "this broker is not the coordinator")
        if not isinstance(body, Mapping):
            return answer(ErrorCode.INVALID_REQUEST, "request body is not a struct")
        try:
            group_id = paths.validate_group(body.get("group_id"))
        except ValueError as e:
            return answer(ErrorCode.INVALID_GROUP_ID, str(e))
        try:
            consumer_id = paths.validate_consumer_id(body.get("consumer_id"))
        except ValueError as e:
            return answer(ErrorCode.INVALID_REQUEST, str(e))
        session = body.get("session_timeout_ms")
        if not _is_int(session) or session <= 0:
            return answer(ErrorCode.INVALID_REQUEST, f"session_timeout_ms {session!r} is not a positive integer")
        if session < self.config.min_session_timeout_ms:
            return answer(ErrorCode.SESSION_TIMEOUT_TOO_SMALL,
                          f"session timeout {session} ms is below the minimum {self.config.min_session_timeout_ms} ms")
        reset = body.get("auto_offset_reset", "largest")
        if reset not in OFFSET_RESETS:
            return answer(ErrorCode.INVALID_REQUEST, f"auto_offset_reset {reset!r} is not smallest|largest")
        auto_commit = body.get("auto_commit", True)
        if not isinstance(auto_commit, bool):
            return answer(ErrorCode.INVALID_REQUEST, f"auto_commit {auto_commit!r} is not a boolean")
        try:
            topic_count = TopicCount.from_request(body.get("topics"), body.get("pattern"),
                                                  body.get("pattern_streams", 1))
        except ValueError as e:
            return answer(ErrorCode.INVALID_SUBSCRIPTION, str(e))
        if id(channel) in self._channels:
            return answer(ErrorCode.INVALID_REQUEST, "this connection already registered a consumer")

        group = self.groups.get(group_id) or self._handle_new_group(group_id)
        existing = group.members.get(consumer_id)
        if existing is not None and existing.channel is not None:
            return answer(ErrorCode.CONSUMER_ID_ALREADY_REGISTERED,
                          f"consumer {consumer_id!r} is already registered in group {group_id!r}")
        member = ConsumerRegistry(group_id, consumer_id, topic_count, auto_commit, reset, session, channel=channel)
        self._handle_added_consumer(group, member)
        return answer(ErrorCode.NONE)

    def _handle_new_group(self, group_id: str) -> GroupRegistry:
        """handleNewGroup: a registry with no members."""
        group = GroupRegistry(group_id)
        self.groups[group_id] = group
        log.info("new group %s", group_id)
        return group

    def _handle_added_consumer(self, group: GroupRegistry, member: ConsumerRegistry) -> None:
        """handleAddedConsumer: schedule pings, add to the group, persist, rebalance."""
        assert member.channel is not None
        group.members[member.consumer_id] = member
        self._channels[id(member.channel)] = (member.channel, group.group_id, member.consumer_id)
        self._schedule_ping(member, first=True)
        self._spawn(self._write_member(group, self.store.save_member, group.group_id, member.to_stored()),
                    f"save member {group.group_id}/{member.consumer_id}")
        log.info("group %s: consumer %s registered from %s (%s, session %d ms)", group.group_id,
                 member.consumer_id, member.peer, member.topic_count.describe(), member.session_timeout_ms)
        if group.state == GroupState.RESTORING:
            group.awaiting.discard(member.consumer_id)
            if not group.awaiting:
                self._finish_restore(group.group_id)
            return
        self.request_rebalance(group, f"consumer {member.consumer_id} joined")

    def request_rebalance(self, group: GroupRegistry, reason: str) -> None:
        """Fail any rebalance in flight and queue a new one (no-op while RESTORING)."""
        if not self.active or group.state in (GroupState.RESTORING, GroupState.DEAD):
            return
        self._fail_round(group, reason)
        if group.state != GroupState.PREPARING_REBALANCE:
            group.transition_to(GroupState.PREPARING_REBALANCE)
        self.rebalancer.add_rebalance_request(group)

    def _fail_round(self, group: GroupRegistry, reason: str) -> None:
        if group.rebalancing:
            group.rebalance_failed = True
            group.last_error = reason
        rnd = group.current_round
        if rnd is not None and not rnd.is_completed:
            log.info("group %s: failing the %s round: %s", group.group_id, rnd.kind.value, reason)
            rnd.fail(reason)

    # ------------------------------------------------------------ failure detection

    def _schedule_ping(self, member: ConsumerRegistry, first: bool = False) -> None:
        interval = max(1, member.session_timeout_ms // 3)
        if first and self.first_ping_jitter > 0:  # early, never late: failure detection is not delayed
            interval = max(1, round(interval * (1 - self.first_ping_jitter * self._rng.random())))
        member.ping_handle = self.timer.call_later(interval, lambda: self._post(self._ping_due, member))

    def _stop_pinging(self, member: ConsumerRegistry) -> None:
        if member.ping_handle is not None:
            member.ping_handle.cancel()
            member.ping_handle = None
        if member.ping is not None:
            member.ping.force_complete()
            member.ping = None

    def _current(self, member: ConsumerRegistry) -> GroupRegistry | None:
        group = self.groups.get(member.group_id)
        if group is None or group.members.get(member.consumer_id) is not member or member.channel is None:
            return None
        return group

    def _ping_due(self, member: ConsumerRegistry) -> None:
        group = self._current(member)
        if group is None:
            return
        self._schedule_ping(member)
        if member.ping is not None and (not member.ping.is_completed or member.ping.expired):
            return  # the previous ping is still out, or its expiry (posted) is not counted yet
        op = DelayedPing(group.group_id, member.consumer_id, member.session_timeout_ms,
                         on_expired=lambda expired: self._post(self._ping_expired, member, expired))
        member.ping = op
        self.ping_purgatory.try_complete_else_watch(op, [MemberKey(group.group_id, member.consumer_id)])
        try:
            assert member.channel is not None
            member.channel.send(CoordinatorApi.PING, {
                "coordinator_epoch": self.epoch, "generation_id": group.generation_id,
                "consumer_id": member.consumer_id, "num_retries": member.failed_pings})
        except ChannelClosed:
            self.handle_consumer_failure(group, member, "connection closed")

    def _ping_expired(self, member: ConsumerRegistry, op: DelayedPing) -> None:
        group = self._current(member)
        if group is None or member.ping is not op:
            return
        member.ping = None
        member.failed_pings += 1
        log.warning("group %s: consumer %s did not answer ping (%d unanswered in a row)",
                    group.group_id, member.consumer_id, member.failed_pings)
        if member.failed_pings > self.config.max_ping_retries:
            self.handle_consumer_failure(group, member, f"{member.failed_pings} pings unanswered")

    def handle_consumer_failure(self, group: GroupRegistry, member: ConsumerRegistry, reason: str) -> None:
        """handleConsumerFailure: stop pinging, close, remove, fail the round in flight, rebalance."""
        if group.members.get(member.consumer_id) is not member:
            return
        log.warning("group %s: consumer %s failed: %s", group.group_id, member.consumer_id, reason)
        self._stop_pinging(member)                                  # 1
        if member.channel is not None:                              # 2
            self._channels.pop(id(member.channel), None)
            _close(member.channel)
            member.channel = None
        del group.members[member.consumer_id]                       # 3
        self._spawn(self._write_member(group, self.store.remove_member, group.group_id, member.consumer_id),
                    f"remove member {group.group_id}/{member.consumer_id}")
        reason = f"consumer {member.consumer_id} failed ({reason})"
        self._fail_round(group, reason)                             # 4
        self.request_rebalance(group, reason)                       # 5 (also when empty: clears owners)

    # ------------------------------------------------------------ member answers

    def on_channel_closed(self, channel: MemberChannel) -> None:
        """A member's connection went away: fail it at once."""
        entry = self._channels.get(id(channel))
        if entry is None or entry[0] is not channel:
            return
        _, group_id, consumer_id = entry
        group = self.groups.get(group_id)
        member = group.members.get(consumer_id) if group else None
        if group is None or member is None:
            self._channels.pop(id(channel), None)
            return
        self.handle_consumer_failure(group, member, "connection closed")

    def on_response(self, channel: MemberChannel, api_key: int, body: Mapping[str, Any]) -> None:
        """A member answered a Ping, StopFetcher or StartFetcher request."""
        entry = self._channels.get(id(channel))
        if not self.active or entry is None or entry[0] is not channel:
            log.debug("answer (api %s) on an unregistered channel ignored", api_key)
            return
        _, group_id, consumer_id = entry
        group = self.groups.get(group_id)
        member = group.members.get(consumer_id) if group else None
        if group is None or member is None:
            return
        if not isinstance(body, Mapping) or body.get("consumer_id", consumer_id) != consumer_id:
            log.warning("group %s: consumer %s sent a malformed or misaddressed answer (api %s); ignored",
                        group_id, consumer_id, api_key)
            return
        code = body.get("error_code", 0)
        if api_key == CoordinatorApi.PING:
            member.failed_pings = 0
            if member.ping is not None:
                member.ping.answered = True
                self.ping_purgatory.check_and_complete(MemberKey(group_id, consumer_id))
                member.ping = None
            if code == ErrorCode.NONE:
                self.accept_offsets(group, member, body)
            else:
                log.warning("group %s: consumer %s answered ping with %s", group_id, consumer_id,
                            ErrorCode.name_of(code) if _is_int(code) else code)
        elif api_key in (CoordinatorApi.STOP_FETCHER, CoordinatorApi.START_FETCHER):
            kind = RoundKind.STOP_FETCHER if api_key == CoordinatorApi.STOP_FETCHER else RoundKind.START_FETCHER
            if code == ErrorCode.NONE and kind == RoundKind.STOP_FETCHER:
                self.accept_offsets(group, member, body)
            rnd = group.current_round
            if rnd is None or rnd.is_completed or rnd.kind != kind or consumer_id not in rnd.members:
                log.debug("group %s: late %s answer from %s ignored", group_id, kind.value, consumer_id)
                return
            if kind == RoundKind.START_FETCHER and body.get("generation_id") != rnd.generation_id:
                rnd.fail(f"consumer {consumer_id} answered StartFetcher for generation "
                         f"{body.get('generation_id')!r}, not {rnd.generation_id}")
                return
            if code != ErrorCode.NONE:
                rnd.fail(f"consumer {consumer_id} answered {kind.value} with "
                         f"{ErrorCode.name_of(code) if _is_int(code) else code!r}")
                return
            if rnd.answered(consumer_id) and kind == RoundKind.START_FETCHER:
                member.generation_id = rnd.generation_id
                member.assignment = {t: list(tps) for t, tps in rnd.planned.get(consumer_id, {}).items()}
            self.round_purgatory.check_and_complete(GroupKey(group_id))
        else:
            log.warning("group %s: consumer %s sent an answer for unknown api %s; ignored", group_id, consumer_id,
                        api_key)

    def accept_offsets(self, group: GroupRegistry, member: ConsumerRegistry, body: Mapping[str, Any]) -> ErrorCode:
        """Record the offsets a Ping/StopFetcher answer carries.

        Only a member of the current generation may report (STALE_GENERATION
        otherwise), only for partitions it owns (PARTITION_NOT_OWNED, per
        partition), and an offset never moves backwards within a generation.
        Refusals are logged and ignored; returns the first refusal or NONE."""
        offsets = body.get("offsets") or []
        if not offsets:
            return ErrorCode.NONE
        if not isinstance(offsets, list):
            log.warning("group %s: consumer %s sent offsets that are not a list", group.group_id, member.consumer_id)
            return ErrorCode.INVALID_REQUEST
        generation = body.get("generation_id")
        if generation != group.generation_id or member.generation_id != group.generation_id:
            log.warning("group %s: STALE_GENERATION: offsets from consumer %s for generation %r refused "
                        "(group generation %d, member started in %r)", group.group_id, member.consumer_id,
                        generation, group.generation_id, member.generation_id)
            return ErrorCode.STALE_GENERATION
        owned = member.owned()
        result = ErrorCode.NONE
        for entry in offsets:
            t = entry.get("topic") if isinstance(entry, Mapping) else None
            p = entry.get("partition") if isinstance(entry, Mapping) else None
            o = entry.get("offset") if isinstance(entry, Mapping) else None
            if not isinstance(t, str) or not _is_int(p) or not _is_int(o) or p < 0 or o < 0:
                log.warning("group %s: consumer %s sent a malformed offset %r; ignored",
                            group.group_id, member.consumer_id, entry)
                result = result or ErrorCode.INVALID_REQUEST
                continue
            if (t, p) not in owned:
                log.warning("group %s: PARTITION_NOT_OWNED: consumer %s reported an offset for %s-%d it does not own",
                            group.group_id, member.consumer_id, t, p)
                result = result or ErrorCode.PARTITION_NOT_OWNED
                continue
            member.last_offsets[(t, p)] = o
            group.record_offset((t, p), o)
        return result

    # ------------------------------------------------------------ topics

    def on_topics_changed(self, topics: Mapping[str, int], *, complete: bool = False) -> None:
        """New topics or partition counts (``complete``: ``topics`` is the whole cluster, so
        absent ones were deleted).  Rebalances every group interested in a changed topic."""
        changed: set[str] = set()
        for topic, n in topics.items():
            if not isinstance(topic, str) or not _is_int(n) or n < 0:
                log.warning("ignoring topic update %r: %r", topic, n)
                continue
            if self.topics.get(topic) != n:
                changed.add(topic)
                self.topics[topic] = n
        if complete:
            for topic in [t for t in self.topics if t not in topics]:
                del self.topics[topic]
                changed.add(topic)
        if not changed or not self.active:
            return
        for group in self.groups.values():
            hit = sorted(t for t in changed if group.interested_in(t))
            if hit:
                self.request_rebalance(group, f"topics changed: {', '.join(hit)}")

    # ------------------------------------------------------------ offsets committer

    def _schedule_commit(self) -> None:
        self._commit_handle = self.timer.call_later(self.config.offsets_commit_interval_ms,
                                                    lambda: self._post(self._commit_tick))

    def _commit_tick(self) -> None:
        self._schedule_commit()
        for group in list(self.groups.values()):
            if group.is_dirty:
                self._spawn(self.commit_group(group), f"commit offsets of {group.group_id}")

    async def commit_group(self, group: GroupRegistry) -> bool:
        """Write the group's dirty offsets; False (still dirty) on a store error; raises Fenced."""
        async with group.store_lock:
            if not group.dirty:
                return True
            batch = {tp: group.offsets[tp] for tp in group.dirty}
            group.dirty.clear()
            try:
                await self.store.commit_offsets(group.group_id, batch)
            except Fenced:
                self.fenced(f"commit offsets of {group.group_id}")
                raise
            except Exception as e:
                group.dirty.update(batch)
                log.warning("group %s: committing %d offsets failed: %s", group.group_id, len(batch), e)
                return False
        log.debug("group %s: committed %d offsets", group.group_id, len(batch))
        return True

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
            "members": [{"consumer_id": m.consumer_id, "peer": m.peer, "subscription": m.topic_count.to_json(),
                         "session_timeout_ms": m.session_timeout_ms, "auto_commit": m.auto_commit,
                         "generation_id": m.generation_id,
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


def _close(channel: MemberChannel | None) -> None:
    if channel is None:
        return
    try:
        channel.close()
    except Exception:  # closing is best effort
        log.debug("closing channel %r failed", channel, exc_info=True)
