"""Rebalancer workers (seeds 003 section 9 and 12.7 ``RebalanceRequestHandler``).

``coordinator.rebalance.threads`` asyncio tasks, each with its own queue of
group ids.  A group sticks to the worker it was queued at while its rebalance
is queued or running (``GroupRegistry.current_rebalancer``), so no group is
ever rebalanced by two workers at once; otherwise groups are dealt round-robin.

One attempt, for a snapshot of the group's live members:

1. compute the assignment (the configured assignor over the known topics);
2. skip when the store's owners already match it *and* every member was
   started in the current generation with exactly its share (a member that
   (re)registered has no assignment yet, so it always needs a round);
3. StopFetcher to every member, wait (answers carry offsets);
4. commit the group's offsets (forced);
5. generation += 1, persisted;
6. StartFetcher to every member with its threads' partitions and start
   offsets (committed offset, or -1: apply your auto.offset.reset), wait;
7. write the owners.

A round that times out, a member that fails or joins, or a store error fails
the attempt; the worker backs off (``coordinator.rebalance.backoff.ms``) and
retries, at most ``coordinator.rebalance.max.retries`` times, then logs
ConsumerRebalanceFailed.  When a newer rebalance request for the group is
already queued, the worker leaves the retry to it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from spark_coord.coordinator.api import NO_OFFSET, CoordinatorApi
from spark_coord.coordinator.assignors import by_consumer
from spark_coord.coordinator.channel import ChannelClosed
from spark_coord.coordinator.clock import sleep_ms
from spark_coord.coordinator.delayed import DelayedFetcherRound, RoundKind, response_timeout_ms
from spark_coord.coordinator.group import ConsumerRegistry, GroupRegistry, GroupState
from spark_coord.coordinator.purgatory import GroupKey
from spark_coord.coordinator.store import Fenced, StoreError

if TYPE_CHECKING:
    from spark_coord.coordinator.coordinator import Coordinator

log = logging.getLogger(__name__)

Plan = dict[str, dict[str, list[tuple[str, int]]]]


def thread_owner(thread_id: str) -> str:
    """The consumer id of a consumer thread id ``<consumer_id>-<i>``."""
    return thread_id.rsplit("-", 1)[0]


class RebalanceError(Exception):
    """One rebalance attempt failed; the message says why."""


class RebalancerPool:
    """The workers and their queues."""

    def __init__(self, coordinator: "Coordinator"):
        self.c = coordinator
        self.queues: list[asyncio.Queue[str]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self._next = 0
        #: Groups being rebalanced right now -> worker index (never two workers for one group).
        self.running: dict[str, int] = {}
        #: How often a worker found its group already being rebalanced by another (must stay 0).
        self.concurrency_violations = 0
        #: Completed attempts as (worker, group, outcome) -- for describe and tests.
        self.completed: list[tuple[int, str, str | None]] = []

    def start(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        self.queues = [asyncio.Queue() for _ in range(n)]
        self.tasks = [loop.create_task(self._worker(i), name=f"rebalancer-{i}") for i in range(n)]
        self._next = 0

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in self.tasks if t is not current), return_exceptions=True)
        self.tasks, self.queues = [], []
        self.running.clear()

    def add_rebalance_request(self, group: GroupRegistry) -> None:
        """Queue a rebalance of ``group`` (once: a request already queued covers this one)."""
        if group.rebalance_requested or not self.queues:
            return
        group.rebalance_requested = True
        if group.current_rebalancer is None:
            group.current_rebalancer = self._next
            self._next = (self._next + 1) % len(self.queues)
        self.queues[group.current_rebalancer].put_nowait(group.group_id)

    async def _worker(self, index: int) -> None:
        queue = self.queues[index]
        while True:
            group_id = await queue.get()
            group = self.c.groups.get(group_id)
            if group is None or group.state == GroupState.DEAD:
                continue
            group.rebalance_requested = False
            if group_id in self.running:
                self.concurrency_violations += 1
                log.error("group %s is already being rebalanced by worker %d; worker %d skips it",
                          group_id, self.running[group_id], index)
                continue
            self.running[group_id] = index
            group.rebalancing = True
            try:
                await self._rebalance_with_retries(index, group)
            except Fenced:
                return  # the coordinator deactivates (and cancels us)
            except Exception:  # a bug: keep the worker alive for the other groups
                log.exception("rebalance of group %s crashed", group_id)
            finally:
                self.running.pop(group_id, None)
                group.rebalancing = False
                if not group.rebalance_requested:
                    group.current_rebalancer = None

    async def _rebalance_with_retries(self, index: int, group: GroupRegistry) -> None:
        cfg = self.c.config
        attempts = cfg.rebalance_max_retries + 1
        reason = "no attempt made"
        for attempt in range(1, attempts + 1):
            if self.c.groups.get(group.group_id) is not group:
                return
            group.rebalance_failed = False
            try:
                await self._attempt(group)
                group.last_error = None
                self.completed.append((index, group.group_id, None))
                return
            except RebalanceError as e:
                reason = str(e)
            self.completed.append((index, group.group_id, reason))
            group.last_error = reason
            group.current_round = None
            _to_preparing(group)
            if group.rebalance_requested:
                log.info("group %s: rebalance attempt %d failed (%s); a newer request takes over",
                         group.group_id, attempt, reason)
                return
            if attempt == attempts:
                break
            log.warning("group %s: rebalance attempt %d of %d failed (%s); retrying in %d ms",
                        group.group_id, attempt, attempts, reason, cfg.rebalance_backoff_ms)
            await sleep_ms(self.c.timer, cfg.rebalance_backoff_ms)
            if group.rebalance_requested:
                return
        log.error("ConsumerRebalanceFailed: group %s could not be rebalanced in %d attempts; last failure: %s",
                  group.group_id, attempts, reason)

    # ------------------------------------------------------------ one attempt

    def _check(self, group: GroupRegistry, step: str) -> None:
        if group.rebalance_failed:
            raise RebalanceError(f"{step}: {group.last_error or 'membership or topics changed'}")
        if self.c.groups.get(group.group_id) is not group:
            raise RebalanceError(f"{step}: group was dropped")

    async def _store(self, group: GroupRegistry, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            async with group.store_lock:
                return await fn(*args)
        except Fenced:
            self.c.fenced(f"{step} for group {group.group_id}")
            raise
        except (StoreError, OSError) as e:
            raise RebalanceError(f"{step}: {e}") from None

    async def _attempt(self, group: GroupRegistry) -> None:
        c = self.c
        gid = group.group_id
        _to_preparing(group)
        members = dict(group.live_members())
        if not members:
            if group.owners or await self._store(group, "read owners", c.store.read_owners, gid):
                await self._store(group, "clear owners", c.store.write_owners, gid, {})
            self._check(group, "clearing owners")
            group.owners = {}
            group.transition_to(GroupState.EMPTY)
            log.info("group %s has no members left", gid)
            return

        owners = c.assignor({cid: m.topic_count for cid, m in members.items()}, c.topics)
        plan: Plan = {cid: {} for cid in members}
        plan.update(by_consumer(owners, thread_owner))
        current = await self._store(group, "read owners", c.store.read_owners, gid)
        self._check(group, "reading owners")
        if current == owners and all(m.assignment is not None and m.generation_id == group.generation_id
                                     and _same(m.assignment, plan[cid]) for cid, m in members.items()):
            group.owners = dict(current)
            group.transition_to(GroupState.STABLE)
            log.debug("group %s: assignment unchanged, no rebalance needed", gid)
            return

        # StopFetcher to everyone, wait
        group.transition_to(GroupState.STOPPING_FETCHERS)
        await self._round(group, RoundKind.STOP_FETCHER, members, lambda cid, m: {
            "coordinator_epoch": c.epoch, "generation_id": group.generation_id, "consumer_id": cid})
        for m in members.values():
            m.assignment = None  # stopped: owns nothing until started again

        # commit (forced), bump the generation
        if not await c.commit_group(group):
            raise RebalanceError("forced offset commit failed")
        self._check(group, "committing offsets")
        generation = group.generation_id + 1
        await self._store(group, "save generation", c.store.save_generation, gid, generation)
        self._check(group, "saving the generation")
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

        await self._round(group, RoundKind.START_FETCHER, members, start_body, plan)
        await self._store(group, "write owners", c.store.write_owners, gid, owners)
        self._check(group, "writing owners")
        group.owners = dict(owners)
        group.transition_to(GroupState.STABLE)
        log.info("group %s rebalanced: generation %d, %d members, %d partitions assigned",
                 gid, generation, len(members), len(owners))

    async def _round(self, group: GroupRegistry, kind: RoundKind, members: dict[str, ConsumerRegistry],
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
            c.round_purgatory.try_complete_else_watch(rnd, [GroupKey(group.group_id)])
            for cid, m in members.items():
                if rnd.is_completed:
                    break
                if group.members.get(cid) is not m or m.channel is None:
                    rnd.fail(f"member {cid} left before {kind.value}")
                    break
                try:
                    m.channel.send(api, body(cid, m))
                except ChannelClosed:
                    rnd.fail(f"member {cid}'s connection closed while sending {kind.value}")
                    c.handle_consumer_failure(group, m, "connection closed")
                    break
            outcome = await future
        finally:
            if group.current_round is rnd:
                group.current_round = None
        if outcome is not None:
            raise RebalanceError(outcome)
        self._check(group, kind.value)


def _same(a: dict[str, list[tuple[str, int]]], b: dict[str, list[tuple[str, int]]]) -> bool:
    norm = lambda d: {t: sorted(tps) for t, tps in d.items() if tps}  # noqa: E731
    return norm(a) == norm(b)


def _to_preparing(group: GroupRegistry) -> None:
    if group.state not in (GroupState.PREPARING_REBALANCE, GroupState.DEAD):
        group.transition_to(GroupState.PREPARING_REBALANCE)
