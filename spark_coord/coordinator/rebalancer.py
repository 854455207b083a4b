"""The ``Rebalancer``: one task per group that needs a new assignment (seeds 003 sections 9 and 12.7).

A group has at most one rebalance task (``GroupRegistry.rebalance_task``), so it is
never rebalanced twice at once; ``coordinator.rebalance.threads`` bounds how many
groups run an attempt at the same time (the seeds' pool of rebalancer threads).
``request(group, reason)`` is the only way in: it moves the group to
PREPARING_REBALANCE, fails a round in flight, bumps ``group.changes`` and starts
the task if none runs.  The task runs attempts until one settles the group.

One attempt, over a snapshot of the group's members:

0. wait while a member that holds an assignment is absent: its partitions go to
   nobody else until it is back (with a claim) or its lease ran out;
1. compute the assignment (the configured assignor over the known topics);
2. skip when the store's owners already match it *and* every member was
   started (or accepted back with its claim) in the current generation with
   exactly its share -- a coordinator failover with unchanged membership stops
   nobody;
3. StopFetcher to every member, wait (answers carry offsets);
4. commit the group's offsets (forced);
5. generation += 1, persisted;
6. StartFetcher to every member with its threads' partitions and start
   offsets (committed offset, or -1: apply your auto.offset.reset), wait;
7. write the owners.

An attempt gives way when ``group.changes`` moved (a member joined, failed or
left, topics changed: the next attempt sees the new state).  A round that times
out or a member answering an error fails the attempt; a member that made
``coordinator.max.ping.retries`` + 1 rounds in a row fail is failed itself (it
answers pings but cannot be rebalanced).  After a failure the task backs off
(``coordinator.rebalance.backoff.ms``) and tries again; after
``coordinator.rebalance.max.retries`` failures in a row it logs
ConsumerRebalanceFailed and keeps trying at the pace of the largest session
timeout, so a group never stays stopped waiting for an unrelated change.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Any, Callable

from spark_coord.coordinator.api import NO_OFFSET, CoordinatorApi
from spark_coord.coordinator.assignors import by_consumer
from spark_coord.coordinator.delayed import DelayedFetcherRound, RoundKind, response_timeout_ms
from spark_coord.coordinator.group import ConsumerRegistry, GroupRegistry, GroupState
from spark_coord.coordinator.purgatory import GroupKey, Purgatory
from spark_coord.coordinator.registration import is_int
from spark_coord.coordinator.store import Fenced, StoreError
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:
    from spark_coord.coordinator.coordinator import Coordinator

log = logging.getLogger(__name__)

Plan = dict[str, dict[str, list[tuple[str, int]]]]


class RebalanceError(Exception):
    """One rebalance attempt failed; the message says why."""

    def __init__(self, message: str, culprits: tuple[str, ...] = ()):
        super().__init__(message)
        #: Members whose answer (or silence) made it fail.
        self.culprits = culprits


class Outcome(enum.Enum):
    SETTLED = "settled"        # STABLE or EMPTY
    WAITING = "waiting"        # absent members may still hold partitions: wait for them


class Rebalancer:
    """Per-group rebalance tasks, at most ``coordinator.rebalance.threads`` attempts at a time."""

    def __init__(self, coordinator: "Coordinator"):
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
        """The group needs a new assignment: fail what is in flight and (re)start its task."""
        if not self.c.active or group.state in (GroupState.RESTORING, GroupState.DEAD):
            return
        group.changes += 1
        rnd = group.current_round
        if rnd is not None and not rnd.is_completed:
            log.info("group %s: failing the %s round: %s", group.group_id, rnd.kind.value, reason)
            rnd.fail(reason)
        if group.state != GroupState.PREPARING_REBALANCE:
            group.transition_to(GroupState.PREPARING_REBALANCE)
        wake = self._backing_off.pop(group.group_id, None)
        if wake is not None and not wake.done():
            wake.set_result(None)  # a change: no point waiting out the backoff
        self.kick(group)

    def kick(self, group: GroupRegistry) -> None:
        """Start the group's task if the group wants a rebalance and none runs."""
        if group.rebalance_task is None and group.state == GroupState.PREPARING_REBALANCE and self.c.active:
            group.rebalance_task = self.c.spawn(self._run(group), f"rebalance {group.group_id}")

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
                if outcome is Outcome.SETTLED or outcome is Outcome.WAITING:
                    return  # WAITING: the absent member's return or expiry requests again
                if isinstance(outcome, str):  # failed
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
        handle = self.c.timer.call_later(ms, lambda: wake.done() or wake.set_result(None))
        try:
            await wake
        finally:
            handle.cancel()
            if self._backing_off.get(group.group_id) is wake:
                del self._backing_off[group.group_id]

    async def _attempt_once(self, group: GroupRegistry) -> Outcome | str | None:
        """One attempt; returns an Outcome, None (gave way to a newer change: go again) or the failure."""
        gid = group.group_id
        if gid in self.running:
            self.concurrency_violations += 1
            log.error("group %s is already in a rebalance attempt", gid)
            return Outcome.WAITING
        self.running.add(gid)
        changes = group.changes
        try:
            outcome = await self._attempt(group, changes)
            group.last_error = None
            self.completed.append((gid, outcome.value))
            return outcome
        except RebalanceError as e:
            group.current_round = None
            if group.state not in (GroupState.PREPARING_REBALANCE, GroupState.DEAD):
                group.transition_to(GroupState.PREPARING_REBALANCE)
            if group.changes != changes:
                log.info("group %s: rebalance attempt gave way to a newer change (%s)", gid, e)
                self.completed.append((gid, f"superseded: {e}"))
                return None
            group.last_error = str(e)
            self.completed.append((gid, str(e)))
            self._blame(group, e.culprits)
            return str(e)
        finally:
            self.running.discard(gid)

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

    def _check(self, group: GroupRegistry, changes: int, step: str) -> None:
        if self.c.groups.get(group.group_id) is not group or not self.c.active:
            raise RebalanceError(f"{step}: group was dropped")
        if group.changes != changes:
            raise RebalanceError(f"{step}: {group.last_error or 'membership or topics changed'}")

    async def _store(self, group: GroupRegistry, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            async with group.store_lock:
                return await fn(*args)
        except Fenced:
            self.c.fenced(f"{step} for group {group.group_id}")
            raise
        except (StoreError, OSError) as e:
            raise RebalanceError(f"{step}: {e}") from None

    async def _attempt(self, group: GroupRegistry, changes: int) -> Outcome:
        c = self.c
        gid = group.group_id
        waiting = {cid: m for cid, m in group.absent_members().items() if m.holds_assignment}
        if waiting:
            log.info("group %s: waiting for %s (absent, may still hold partitions) before rebalancing",
                     gid, ", ".join(sorted(waiting)))
            return Outcome.WAITING
        members = dict(group.live_members())
        if not members:
            if group.owners or await self._store(group, "read owners", c.store.read_owners, gid):
                await self._store(group, "clear owners", c.store.write_owners, gid, {})
            self._check(group, changes, "clearing owners")
            group.owners = {}
            group.transition_to(GroupState.EMPTY)
            log.info("group %s has no members left", gid)
            return Outcome.SETTLED

        owners = c.assignor({cid: m.assignable(c.topics) for cid, m in members.items()}, c.topics)
        plan: Plan = {cid: {} for cid in members}
        plan.update(by_consumer(owners))
        current = await self._store(group, "read owners", c.store.read_owners, gid)
        self._check(group, changes, "reading owners")
        if current == owners and all(m.assignment is not None and m.generation_id == group.generation_id
                                     and _same(m.assignment, plan[cid]) for cid, m in members.items()):
            group.owners = dict(current)
            group.transition_to(GroupState.STABLE)
            log.info("group %s: assignment of generation %d confirmed (%d members), nobody stopped",
                     gid, group.generation_id, len(members))
            return Outcome.SETTLED

        # StopFetcher to everyone, wait
        group.transition_to(GroupState.STOPPING_FETCHERS)
        await self._round(group, changes, RoundKind.STOP_FETCHER, members, lambda cid, m: {
            "coordinator_epoch": c.epoch, "generation_id": group.generation_id, "consumer_id": cid})

        # commit (forced), bump the generation
        if not await c.offsets.commit_group(group):
            raise RebalanceError("forced offset commit failed")
        self._check(group, changes, "committing offsets")
        generation = group.generation_id + 1
        await self._store(group, "save generation", c.store.save_generation, gid, generation)
        self._check(group, changes, "saving the generation")
        group.generation_id = generation
        # the committed offsets are where the new generation starts: none may move below them
        group.offset_generation = {tp: generation for tp in group.offsets}
        group.transition_to(GroupState.STARTING_FETCHERS)

        # StartFetcher to everyone, wait
        brokers = [{"node_id": int(b), "host": str(h), "port": int(p)} for b, h, p in c.cluster_view()]

        def start_body(cid: str, m: ConsumerRegistry) -> dict[str, Any]:
            return {"coordinator_epoch": c.epoch, "generation_id": generation, "consumer_id": cid,
                    "ownership": [{"consumer_thread_id": thread,
                                   "partitions": [{"topic": t, "partition": p,
                                                   "offset": group.offsets.get((t, p), NO_OFFSET)} for t, p in tps]}
                                  for thread, tps in sorted(plan[cid].items())],
                    "brokers": brokers}

        await self._round(group, changes, RoundKind.START_FETCHER, members, start_body, plan)
        await self._store(group, "write owners", c.store.write_owners, gid, owners)
        self._check(group, changes, "writing owners")
        group.owners = dict(owners)
        group.transition_to(GroupState.STABLE)
        log.info("group %s rebalanced: generation %d, %d members, %d partitions assigned",
                 gid, generation, len(members), len(owners))
        return Outcome.SETTLED

    async def _round(self, group: GroupRegistry, changes: int, kind: RoundKind, members: dict[str, ConsumerRegistry],
                     body: Callable[[str, ConsumerRegistry], dict[str, Any]], plan: Plan | None = None) -> None:
        """Send ``kind`` to every member and wait for all answers; RebalanceError when the round fails."""
        c = self.c
        api = CoordinatorApi.STOP_FETCHER if kind == RoundKind.STOP_FETCHER else CoordinatorApi.START_FETCHER
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        delay = response_timeout_ms(max(m.session_timeout_ms for m in members.values()))
        rnd = DelayedFetcherRound(kind, group.group_id, group.generation_id, members, delay, future)
        rnd.planned = plan or {}
        group.current_round = rnd
        try:
            self.purgatory.try_complete_else_watch(rnd, [GroupKey(group.group_id)])
            for cid, m in members.items():
                if rnd.is_completed:
                    break
                if group.members.get(cid) is not m or m.channel is None:
                    rnd.fail(f"member {cid} left before {kind.value}")
                    break
                if not c.send(group, m, api, body(cid, m), lambda answer, m=m: self._answered(group, m, rnd, answer)):
                    rnd.fail(f"member {cid}'s connection closed while sending {kind.value}")
                    break
            outcome = await future
        finally:
            if group.current_round is rnd:
                group.current_round = None
        if outcome is not None:
            culprits = tuple(sorted(rnd.blamed)) if rnd.blamed else (tuple(sorted(rnd.pending)) if rnd.expired else ())
            raise RebalanceError(outcome, culprits)
        self._check(group, changes, kind.value)
        for m in members.values():
            m.failed_rounds = 0

    def _answered(self, group: GroupRegistry, member: ConsumerRegistry, rnd: DelayedFetcherRound, body: Any) -> None:
        """A member answered StopFetcher or StartFetcher."""
        if self.c.current_group(member) is not group:
            return
        cid = member.consumer_id
        if not isinstance(body, dict) or body.get("consumer_id", cid) != cid:
            log.warning("group %s: consumer %s sent a malformed or misaddressed %s answer; ignored",
                        group.group_id, cid, rnd.kind.value)
            return
        code = body.get("error_code", 0)
        if code == ErrorCode.NONE and rnd.kind == RoundKind.STOP_FETCHER:
            self.c.offsets.accept(group, member, body.get("offsets"), body.get("generation_id"))
        if rnd.is_completed or cid not in rnd.pending:
            log.debug("group %s: late %s answer from %s ignored", group.group_id, rnd.kind.value, cid)
            return
        if rnd.kind == RoundKind.START_FETCHER and body.get("generation_id") != rnd.generation_id:
            rnd.blame(cid, f"consumer {cid} answered StartFetcher for generation "
                           f"{body.get('generation_id')!r}, not {rnd.generation_id}")
            return
        if code != ErrorCode.NONE:
            rnd.blame(cid, f"consumer {cid} answered {rnd.kind.value} with "
                           f"{ErrorCode.name_of(code) if is_int(code) else repr(code)}")
            return
        if rnd.answered(cid):
            if rnd.kind == RoundKind.START_FETCHER:
                member.generation_id = rnd.generation_id
                member.assignment = {t: list(tps) for t, tps in rnd.planned.get(cid, {}).items()}
            else:
                member.assignment = None  # it stopped: it holds nothing until started again
        self.purgatory.check_and_complete(GroupKey(group.group_id))


def _same(a: dict[str, list[tuple[str, int]]], b: dict[str, list[tuple[str, int]]]) -> bool:
    norm = lambda d: {t: sorted(tps) for t, tps in d.items() if tps}  # noqa: E731
    return norm(a) == norm(b)
