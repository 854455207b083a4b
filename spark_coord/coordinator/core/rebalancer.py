"""The ``Rebalancer``: one task per group that needs a new assignment (seeds 003 sections 9 and 12.7,
made incremental: DESIGN.md "A rebalance").

A group has at most one rebalance task (``GroupRegistry.rebalance_task``), so it is
never rebalanced twice at once; ``coordinator.rebalance.threads`` bounds how many
groups run an attempt at the same time (the seeds' pool of rebalancer threads).
``request(group, reason)`` is the only way in: it bumps ``group.changes``, moves a
settled group to PREPARING_REBALANCE and starts the task if none runs.  The task
runs attempts until one settles the group.

One attempt:

1. the target: the group's assignor over every member's subscription, given what
   each member holds now (``sticky``, the default, keeps it where it can).  An
   absent member's partitions stay with it -- it may still be fetching them until
   its lease ends -- and it gets nothing new;
2. the plan: a live member is *touched* when it must give up a partition, gets
   one, was never started, or left a request of an earlier attempt unanswered;
   nobody else hears anything.  A touched member that
   hands over incrementally (StopFetcher v1, Kafka's cooperative protocol) is asked
   to stop only the partitions that leave it; any other touched member that holds
   something is stopped entirely (StopFetcher v0, an eager Kafka consumer's
   rejoin), as before;
3. the epochs: the group's counter moves on by one for the stops and one for the
   starts, persisted before any request carries them;
4. StopFetcher to the members that give something up; each answer (with offsets)
   releases what it stopped, whenever it arrives;
5. the group's offsets are committed (forced), so new holders start where the old
   ones stopped;
6. StartFetcher to every touched member: its complete assignment -- what it
   holds, plus the partitions of its target that nobody holds any more.  Before
   it is sent, the owners (every partition some member may be fetching) and the
   started members' epochs are written to the store in one write, and the
   coordinator counts those partitions as the member's: a member may start
   fetching the moment the request reaches it;
7. when every member holds its target the group is STABLE; otherwise (a member
   did not answer, a partition was still held) the attempt failed and is retried.

So a partition has one holder at a time (DESIGN.md "One holder at a time (invariant 1)"): it goes
to a new holder only after the old one answered that it stopped it, left, or can no longer
be fetching (its lease ran out and it was removed).

A change while an attempt runs (a member joined or left, topics changed) does not
break the rounds in flight: the attempt finishes what it sent and the task runs
another one at once.  One exception, which only KIP-848 members can see (their
channels alone can take a StopFetcher back): when every member a StopFetcher round
still waits for was not told of it yet, the change withdraws those requests, the
attempt ends there (no StartFetcher round) and the next one computes the new target
at once -- the stops it then sends are the ones the members should get, instead of a
round trip for a target already out of date (Kafka's coordinator, too, recomputes a
member's target on every change until the member acknowledged it).  A member gone in
the middle of a round is no longer waited for.  A round that times out, or a member
answering an error, fails the attempt; a member that made
``coordinator.max.ping.retries`` + 1 rounds in a row fail is failed itself (it answers
pings but cannot be rebalanced).  After a failure the task backs off
(``coordinator.rebalance.backoff.ms``) and tries again; after
``coordinator.rebalance.max.retries`` failures in a row it logs
ConsumerRebalanceFailed and keeps trying at the pace of the largest session
timeout, so a group never stays unassigned waiting for an unrelated change.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from spark_coord.coordinator.core.api import NO_OFFSET, CoordinatorApi
from spark_coord.coordinator.core.assignors import thread_owner
from spark_coord.coordinator.core.delayed import DelayedFetcherRound, RoundKind, response_timeout_ms
from spark_coord.coordinator.core.group import ConsumerRegistry, GroupRegistry, GroupState, TopicPartition
from spark_coord.coordinator.core.purgatory import GroupKey, Purgatory
from spark_coord.coordinator.core.registration import is_int
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.wire.coordinator import INCREMENTAL_VERSION

if TYPE_CHECKING:
    from spark_coord.coordinator.core.interface import CoordinatorCore

log = logging.getLogger(__name__)

#: ``{partition: thread}``
Threads = dict[TopicPartition, str]


#: Why a round stopped waiting for a member whose StopFetcher was withdrawn untold.
WITHDRAWN = "withdrawn before it was told: the group changed"


class RebalanceError(Exception):
    """One rebalance attempt failed; the message says why."""

    def __init__(self, message: str, culprits: tuple[str, ...] = ()):
        super().__init__(message)
        #: Members whose answer (or silence) made it fail.
        self.culprits = culprits


class AttemptTimes:
    """Where one attempt's seconds went, for the line it logs when it ends (the rebalance profile
    of docs/benchmarks/coordinator.md): each round's members and wall time (from the last request
    sent until the round completed: waiting for the members), the calls to the store (the
    generation and assignment writes, the forced offset commit) and their latency, and the CPU
    the coordinator's process used meanwhile (its other groups' and connections' work included)."""

    __slots__ = ("began", "cpu", "rounds", "writes", "write_s")

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.cpu = time.process_time()
        #: (kind, members sent to, seconds until the round completed)
        self.rounds: list[tuple[str, int, float]] = []
        self.writes = 0
        self.write_s = 0.0

    def line(self) -> str:
        rounds = ", ".join(f"{kind} round {n} member(s) {s:.3f} s" for kind, n, s in self.rounds) or "no round"
        return (f"{time.monotonic() - self.began:.3f} s: {rounds}; {self.writes} store call(s) "
                f"{self.write_s:.3f} s; process CPU {time.process_time() - self.cpu:.3f} s")


class Outcome(enum.Enum):
    SETTLED = "settled"        # STABLE or EMPTY
    WAITING = "waiting"        # only absent members, who may still hold partitions: wait for them
    AGAIN = "again"            # the group changed meanwhile: another attempt at once


class Rebalancer:
    """Per-group rebalance tasks, at most ``coordinator.rebalance.threads`` attempts at a time."""

    def __init__(self, coordinator: "CoordinatorCore"):
        self.c = coordinator
        self.purgatory = Purgatory(coordinator.timer, "fetcher-round")
        self._slots: asyncio.Semaphore | None = None
        #: Groups with an attempt running right now (never one group twice).
        self.running: set[str] = set()
        #: How often an attempt found its group already in an attempt (must stay 0).
        self.concurrency_violations = 0
        #: Finished attempts as (group, outcome or failure reason) -- for tests.
        self.completed: list[tuple[str, str]] = []
        #: Groups backing off after a failed attempt -> what wakes them early (a new request).
        self._backing_off: dict[str, asyncio.Future[None]] = {}
        #: How many StopFetcher rounds a change ended by withdrawing their untold requests (for tests).
        self.withdrawn = 0
        #: The running attempt's ``group.changes`` when it began, by group.
        self._began_at: dict[str, int] = {}
        #: The running attempt's times, by group.
        self._times: dict[str, AttemptTimes] = {}
        #: Called after each attempt with (group, outcome or failure, seconds, partitions moved).
        self.on_attempt: Callable[[GroupRegistry, str, float, int], None] | None = None

    def start(self) -> None:
        self._slots = asyncio.Semaphore(self.c.config.rebalance_threads)

    async def stop(self) -> None:
        tasks = [g.rebalance_task for g in self.c.groups.values() if g.rebalance_task is not None]
        current = asyncio.current_task()
        for t in tasks:
            if t is not current:
                t.cancel()
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)
        self.purgatory.cancel_all()
        self.running.clear()

    # ------------------------------------------------------------------ requests
    def request(self, group: GroupRegistry, reason: str) -> None:
        """The group needs a new assignment: (re)start its task; an attempt under way runs again."""
        if not self.c.active or group.state in (GroupState.RESTORING, GroupState.DEAD):
            return
        group.changes += 1
        log.debug("group %s: rebalance wanted: %s", group.group_id, reason)
        if group.state in (GroupState.STABLE, GroupState.EMPTY):
            group.transition_to(GroupState.PREPARING_REBALANCE)
        wake = self._backing_off.pop(group.group_id, None)
        if wake is not None and not wake.done():
            wake.set_result(None)  # a change: no point waiting out the backoff
        self._withdraw_stops(group)
        self.kick(group)

    def _withdraw_stops(self, group: GroupRegistry) -> None:
        """The group changed while a StopFetcher round waits: if every member it still waits for
        can take its request back untold (KIP-848 members only, ``withdraw_stop``), take them all
        back, so that the attempt ends now and the next one asks for the new target."""
        rnd = group.current_round
        if rnd is None or rnd.is_completed or rnd.kind != RoundKind.STOP_FETCHER or not rnd.pending:
            return
        withdraw: list[tuple[str, Callable[[], bool]]] = []
        for cid in sorted(rnd.pending):
            m = group.members.get(cid)
            ch = m.channel if m is not None else None
            if ch is None or not getattr(ch, "stop_withdrawable", lambda: False)():
                return
            withdraw.append((cid, getattr(ch, "withdraw_stop", lambda: False)))
        for cid, take_back in withdraw:
            if take_back():
                rnd.drop(cid, WITHDRAWN)
        self.withdrawn += 1
        log.debug("group %s: %d untold StopFetcher(s) withdrawn: the group changed", group.group_id, len(withdraw))
        self.purgatory.check_and_complete(GroupKey(group.group_id))

    def kick(self, group: GroupRegistry) -> None:
        """Start the group's task if the group wants a rebalance and none runs."""
        if group.rebalance_task is None and group.state == GroupState.PREPARING_REBALANCE and self.c.active:
            group.rebalance_task = self.c.spawn(self._run(group), f"rebalance {group.group_id}")

    def another_attempt_due(self, group: GroupRegistry) -> bool:
        """An attempt runs for the group and the group changed since it began: another one follows."""
        began = self._began_at.get(group.group_id)
        return began is not None and group.changes != began

    def member_gone(self, group: GroupRegistry, member: ConsumerRegistry, reason: str) -> None:
        """A member of a round in flight went away: the round no longer waits for it."""
        rnd = group.current_round
        if rnd is not None and not rnd.is_completed and rnd.drop(member.consumer_id, reason):
            self.purgatory.check_and_complete(GroupKey(group.group_id))

    async def _run(self, group: GroupRegistry) -> None:
        cfg = self.c.config
        failures = 0
        failed_at = group.changes
        began, owners_before = self.c.clock.now_ms(), dict(group.owners)  # metrics
        self.c.metrics.rebalance_started(group.group_id)  # metrics
        try:
            while group.state == GroupState.PREPARING_REBALANCE and self.c.groups.get(group.group_id) is group:
                if group.changes != failed_at:
                    failures = 0  # something changed since the last failure: a fresh start
                assert self._slots is not None
                async with self._slots:
                    outcome = await self._attempt_once(group)
                if outcome is Outcome.SETTLED:  # metrics
                    self.c.metrics.rebalance_completed(group, self.c.clock.now_ms() - began, owners_before)  # metrics
                if outcome in (Outcome.SETTLED, Outcome.WAITING):
                    return  # WAITING: the absent members' return or expiry requests again
                if outcome is Outcome.AGAIN:
                    continue
                self.c.metrics.rebalance_failed(group.group_id, outcome)  # metrics
                failures += 1
                failed_at = group.changes
                backoff = cfg.rebalance_backoff_ms
                if failures > cfg.rebalance_max_retries:
                    backoff = max(backoff, group.max_session_timeout_ms())
                    if failures == cfg.rebalance_max_retries + 1:
                        log.error("ConsumerRebalanceFailed: group %s could not be rebalanced in %d attempts "
                                  "(last failure: %s); retrying every %d ms", group.group_id, failures,
                                  outcome, backoff)
                else:
                    log.warning("group %s: rebalance attempt %d failed (%s); retrying in %d ms",
                                group.group_id, failures, outcome, backoff)
                await self._back_off(group, backoff)
        finally:
            if group.rebalance_task is asyncio.current_task():
                group.rebalance_task = None

    async def _back_off(self, group: GroupRegistry, ms: int) -> None:
        """Wait ``ms`` on the coordinator's timer, or until the group changes."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._backing_off[group.group_id] = wake

        def wake_up() -> None:
            if not wake.done():
                wake.set_result(None)

        handle = self.c.timer.call_later(ms, wake_up)
        try:
            await wake
        finally:
            handle.cancel()
            if self._backing_off.get(group.group_id) is wake:
                del self._backing_off[group.group_id]

    async def _attempt_once(self, group: GroupRegistry) -> Outcome | str:
        """One attempt: an Outcome, or why it failed."""
        gid = group.group_id
        if gid in self.running:
            self.concurrency_violations += 1
            log.error("group %s is already in a rebalance attempt", gid)
            return Outcome.WAITING
        self.running.add(gid)
        times = self._times[gid] = AttemptTimes()
        changes = self._began_at[gid] = group.changes
        started = time.monotonic()
        group.last_moved = 0
        result: Outcome | str = "cancelled"
        try:
            result = await self._attempt(group, changes)
            if result is not Outcome.AGAIN:
                group.last_error = None
        except RebalanceError as e:
            if group.state not in (GroupState.PREPARING_REBALANCE, GroupState.DEAD):
                group.transition_to(GroupState.PREPARING_REBALANCE)
            group.last_error = str(e)
            self._blame(group, e.culprits)
            result = str(e)
            if group.changes != changes:
                log.info("group %s: rebalance attempt left work for the next one (%s)", gid, e)
                result = Outcome.AGAIN
        finally:
            group.current_round = None
            self.running.discard(gid)
            self._times.pop(gid, None)
            self._began_at.pop(gid, None)
            what = result.value if isinstance(result, Outcome) else result
            log.info("group %s: attempt (%s) took %s", gid, what if len(what) < 80 else what[:77] + "...",
                     times.line())
            self.completed.append((gid, what))
            if self.on_attempt is not None:
                try:
                    self.on_attempt(group, what, time.monotonic() - started, group.last_moved)
                except Exception:
                    log.exception("on_attempt callback failed")
        return result

    def _blame(self, group: GroupRegistry, culprits: tuple[str, ...]) -> None:
        """Count failed rounds per member; fail a member that keeps making rounds fail."""
        for cid in culprits:
            m = group.members.get(cid)
            if m is None:
                continue
            m.failed_rounds += 1
            if m.failed_rounds > self.c.config.max_ping_retries:
                self.c.handle_consumer_failure(group, m, f"{m.failed_rounds} rebalance rounds failed in a row")

    # ------------------------------------------------------------ one attempt

    def _check(self, group: GroupRegistry, step: str) -> None:
        if self.c.groups.get(group.group_id) is not group or not self.c.active:
            raise RebalanceError(f"{step}: group was dropped")

    async def _store(self, group: GroupRegistry, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        times = self._times.get(group.group_id)
        began = time.monotonic()
        try:
            async with group.store_lock:
                return await fn(*args)
        except Fenced:
            self.c.fenced(f"{step} for group {group.group_id}")
            raise
        except (StoreError, OSError) as e:
            raise RebalanceError(f"{step}: {e}") from None
        finally:
            if times is not None:
                times.writes += 1
                times.write_s += time.monotonic() - began

    def target(self, group: GroupRegistry) -> Threads:
        """The partitions each member should hold (``{partition: thread}``): the assignor's answer,
        with absent members keeping what they hold and getting nothing more."""
        c = self.c
        held = group.holdings()
        owners = dict(c.assignor_for(group)({cid: m.assignable(c.topics) for cid, m in group.members.items()},
                                            c.topics, held))
        absent = group.absent_members()
        for m in absent.values():
            owners.update(m.threads())
        return {tp: th for tp, th in owners.items()
                if thread_owner(th) not in absent or held.get(tp) == th}

    async def _attempt(self, group: GroupRegistry, changes: int) -> Outcome:
        c = self.c
        gid = group.group_id
        if not group.members:
            if group.owners or await self._store(group, "read owners", c.store.read_owners, gid):
                await self._store(group, "clear owners", c.store.write_owners, gid, {})
            self._check(group, "clearing owners")
            group.owners = {}
            group.transition_to(GroupState.EMPTY)
            log.info("group %s has no members left", gid)
            return Outcome.SETTLED
        if not group.live_members():
            log.info("group %s: waiting for %s (absent, may still hold partitions)", gid,
                     ", ".join(sorted(group.members)))
            return Outcome.WAITING

        target = self.target(group)
        before = group.holdings()
        stops: dict[str, set[TopicPartition] | None] = {}
        touched: dict[str, ConsumerRegistry] = {}
        for cid, m in group.live_members().items():
            mine = m.threads()
            wanted = {tp: th for tp, th in target.items() if thread_owner(th) == cid}
            revoke = {tp for tp, th in mine.items() if wanted.get(tp) != th}
            gain = {tp for tp, th in wanted.items() if mine.get(tp) != th}
            unconfirmed = m.assignment is None or m.epoch is None or m.epoch < m.sent_epoch or m.needs_start
            if not (revoke or gain or unconfirmed):
                continue
            touched[cid] = m
            if mine and not m.incremental:
                stops[cid] = None      # hands over only by stopping everything
            elif revoke:
                stops[cid] = revoke
        if not touched:
            return await self._settle(group, changes, target, "confirmed, nobody touched")

        # epochs: one for the stops, one for the starts, persisted before any request carries them
        stop_epoch = group.generation_id + 1
        start_epoch = group.generation_id + (2 if stops else 1)
        # A member stopped only in part takes the StopFetcher's epoch and may get no StartFetcher
        # before a failover: its epoch is stored with the generation, or a successor would refuse
        # its claim as newer than the one it knows
        partial = [touched[cid] for cid, parts in sorted(stops.items())
                   if parts is not None and touched[cid].incremental]
        if partial:
            for m in partial:
                m.sent_epoch = max(m.sent_epoch, stop_epoch)
            await self._store(group, "save generation", c.store.save_assignment, gid, start_epoch,
                              [m.to_stored() for m in partial], dict(group.owners))
        else:
            await self._store(group, "save generation", c.store.save_generation, gid, start_epoch)
        self._check(group, "saving the generation")
        group.generation_id = max(group.generation_id, start_epoch)
        failures: list[str] = []
        culprits: set[str] = set()
        stopped: set[str] = set()

        if stops:
            group.transition_to(GroupState.STOPPING_FETCHERS)
            rnd = await self._round(group, RoundKind.STOP_FETCHER, stop_epoch, {
                cid: (touched[cid], self._stop_body(touched[cid], stop_epoch, parts))
                for cid, parts in stops.items()})
            stopped = rnd.done
            if rnd.outcome():
                failures.append(f"StopFetcher: {rnd.outcome()}")
                culprits |= rnd.blamed
            self._check(group, "stopping fetchers")
            if WITHDRAWN in rnd.failed.values():
                # the target is out of date: the next attempt (at once: the group changed) asks again;
                # what was stopped meanwhile is free, and its members are started then (needs_start)
                raise RebalanceError(f"StopFetcher: {rnd.outcome()}", tuple(sorted(culprits)))

        times, began = self._times.get(gid), time.monotonic()
        committed = await c.offsets.commit_group(group)
        if times is not None:
            times.writes, times.write_s = times.writes + 1, times.write_s + time.monotonic() - began
        if not committed:
            raise RebalanceError("forced offset commit failed", tuple(sorted(culprits)))
        self._check(group, "committing offsets")

        held = group.holdings()
        starts: dict[str, Threads] = {}
        for cid, m in touched.items():
            if group.members.get(cid) is not m or m.channel is None or (cid in stops and cid not in stopped):
                continue
            now = m.threads()
            for tp, th in target.items():
                if thread_owner(th) == cid and tp not in held:
                    now[tp] = th
                    group.last_moved += before.get(tp) != th
            starts[cid] = now
        if starts:
            for cid, now in starts.items():
                m = group.members[cid]
                m.hold(now, start_epoch)
                m.sent_epoch = start_epoch
                m.needs_start = False
            owners = group.holdings()
            await self._store(group, "save the assignment", c.store.save_assignment, gid, start_epoch,
                              [group.members[cid].to_stored() for cid in sorted(starts)], owners)
            self._check(group, "saving the assignment")
            group.owners = owners
            group.transition_to(GroupState.STARTING_FETCHERS)
            brokers = [{"node_id": int(b), "host": str(h), "port": int(p)} for b, h, p in c.cluster_view()]
            rnd2 = await self._round(group, RoundKind.START_FETCHER, start_epoch, {
                cid: (group.members[cid], self._start_body(group, group.members[cid], start_epoch, brokers))
                for cid in starts if group.members.get(cid) is not None})
            if rnd2.outcome():
                failures.append(f"StartFetcher: {rnd2.outcome()}")
                culprits |= rnd2.blamed
            self._check(group, "starting fetchers")
        if failures:
            raise RebalanceError("; ".join(failures), tuple(sorted(culprits)))
        return await self._settle(group, changes, target, f"epoch {start_epoch}")

    async def _settle(self, group: GroupRegistry, changes: int, target: Threads, how: str) -> Outcome:
        """Every member holds its target: write the owners if the store differs; STABLE (or another
        attempt, when the group changed meanwhile)."""
        held = group.holdings()
        if held != target:
            raise RebalanceError(f"the assignment was not reached ({len(set(held.items()) ^ set(target.items()))} "
                                 f"partition(s) not yet where they go)")
        if group.owners != held:
            await self._store(group, "write owners", self.c.store.write_owners, group.group_id, held)
            self._check(group, "writing owners")
            group.owners = held
        if group.changes != changes:
            if group.state != GroupState.PREPARING_REBALANCE:
                group.transition_to(GroupState.PREPARING_REBALANCE)
            return Outcome.AGAIN
        group.transition_to(GroupState.STABLE)
        live = group.live_members()
        log.info("group %s rebalanced (%s): %d member(s), %d partition(s) held, %d absent", group.group_id, how,
                 len(live), len(held), len(group.members) - len(live))
        for m in live.values():
            m.failed_rounds = 0
        return Outcome.SETTLED

    # ------------------------------------------------------------ rounds

    def _stop_body(self, m: ConsumerRegistry, epoch: int, parts: set[TopicPartition] | None) -> dict[str, Any]:
        c = self.c
        if parts is None or not m.incremental:
            return {"coordinator_epoch": c.epoch, "generation_id": m.epoch if m.epoch is not None else -1,
                    "consumer_id": m.consumer_id}
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(parts):
            by_topic.setdefault(t, []).append(p)
        return {"coordinator_epoch": c.epoch, "generation_id": epoch, "consumer_id": m.consumer_id,
                "partitions": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]}

    def _start_body(self, group: GroupRegistry, m: ConsumerRegistry, epoch: int,
                    brokers: list[dict[str, Any]]) -> dict[str, Any]:
        return {"coordinator_epoch": self.c.epoch, "generation_id": epoch, "consumer_id": m.consumer_id,
                "ownership": [{"consumer_thread_id": thread,
                               "partitions": [{"topic": t, "partition": p,
                                               "offset": group.offsets.get((t, p), NO_OFFSET)} for t, p in sorted(tps)]}
                              for thread, tps in sorted((m.assignment or {}).items())],
                "brokers": brokers}

    async def _round(self, group: GroupRegistry, kind: RoundKind, epoch: int,
                     sends: Mapping[str, tuple[ConsumerRegistry, dict[str, Any]]]) -> DelayedFetcherRound:
        """Send ``kind`` to each member of ``sends`` and wait until each answered, failed or went away."""
        c = self.c
        api = CoordinatorApi.STOP_FETCHER if kind == RoundKind.STOP_FETCHER else CoordinatorApi.START_FETCHER
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        delay = response_timeout_ms(max((m.session_timeout_ms for m, _ in sends.values()), default=1))
        rnd = DelayedFetcherRound(kind, group.group_id, epoch, sends, delay, future)
        group.current_round = rnd
        self.purgatory.try_complete_else_watch(rnd, [GroupKey(group.group_id)])
        for cid, (m, body) in sends.items():
            if group.members.get(cid) is not m or m.channel is None:
                rnd.drop(cid, "gone before the request was sent")
                continue
            version = INCREMENTAL_VERSION if m.incremental else 0
            asked = body.get("partitions")
            if kind == RoundKind.STOP_FETCHER:
                if m.incremental and asked is not None:
                    m.sent_epoch = max(m.sent_epoch, epoch)
                log.info("group %s: StopFetcher to %s: %s", group.group_id, cid, "everything" if asked is None else
                         ", ".join(f"{e['topic']}-{p}" for e in asked for p in e["partitions"]))
            if not c.send(group, m, api, body, functools.partial(self._answered, group, m, rnd, asked),
                          version=version):
                rnd.drop(cid, f"connection closed while sending {kind.value}")
        self.purgatory.check_and_complete(GroupKey(group.group_id))
        began = time.monotonic()
        await future
        times = self._times.get(group.group_id)
        if times is not None:
            times.rounds.append((kind.value, len(sends), time.monotonic() - began))
        if group.current_round is rnd:
            group.current_round = None
        return rnd

    def _answered(self, group: GroupRegistry, member: ConsumerRegistry, rnd: DelayedFetcherRound,
                  asked: list[dict] | None, body: Any) -> None:
        """A member answered StopFetcher or StartFetcher (in time or late: what it did counts)."""
        if self.c.current_group(member) is not group:
            return
        cid = member.consumer_id
        if not isinstance(body, dict) or body.get("consumer_id", cid) != cid:
            log.warning("group %s: consumer %s sent a malformed or misaddressed %s answer; ignored",
                        group.group_id, cid, rnd.kind.value)
            return
        code = body.get("error_code", 0)
        if code != ErrorCode.NONE:
            rnd.blame(cid, f"answered {rnd.kind.value} with "
                           f"{ErrorCode.name_of(code) if is_int(code) else repr(code)}")
        elif rnd.kind == RoundKind.STOP_FETCHER:
            self.c.offsets.accept(group, member, body.get("offsets"), body.get("generation_id"))
            if asked is None or not member.incremental:
                member.release(None)
            else:
                member.release((e["topic"], p) for e in asked for p in e["partitions"])
                member.epoch = max(member.epoch if member.epoch is not None else -1, rnd.epoch)
            member.needs_start = True
            rnd.answered(cid)
        elif body.get("generation_id") != rnd.epoch:
            rnd.blame(cid, f"answered StartFetcher for epoch {body.get('generation_id')!r}, not {rnd.epoch}")
        else:
            if member.epoch is None or member.epoch < rnd.epoch:
                member.epoch = rnd.epoch
            member.failed_rounds = 0
            rnd.answered(cid)
        self.purgatory.check_and_complete(GroupKey(group.group_id))
