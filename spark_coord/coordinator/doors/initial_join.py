"""Kafka's initial rebalance delay for classic groups (``group.initial.rebalance.delay.ms``, Kafka's
``InitialDelayedJoin``), as the classic door (``doors.classic``) applies it.

When a classic group is empty and a member joins, Kafka's coordinator does not complete the
first rebalance at once: it waits a *period* of ``group.initial.rebalance.delay.ms`` (3 s by
default) for more members, so that consumers started together get their shares in one
generation, instead of the first one taking every partition and handing them on, one
rebalance per newcomer.  When a period ends and a new member joined during it, one more
period follows, of min(delay, rebalance timeout - time waited so far): the whole wait never
passes the group's rebalance timeout (here the largest ``rebalance_timeout_ms`` of the
members waiting), except that the first period is always the full delay, as in Kafka.  When a
period ends with nobody new, the wait is over.  0 turns the delay off.  Only a group with no
member waits; later rebalances do not.

Here the JoinGroups wait in the door, before their members register with the coordinator
(``InitialJoin``, one per group, driven by the door's ``InitialDelays``): when the wait is over
they all register in one go, so the coordinator's first rebalance of the group sees every one of
them.  Each period is a ``DelayedOperation`` in the door's purgatory that completes only by
expiring; its expiry posts the decision (another period, or the end of the wait) to the
coordinator's loop.  ListGroups, DescribeGroups and DeleteGroups see a group whose first members
wait here as PreparingRebalance.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from spark_coord.coordinator.core.group import GroupState, registry_key
from spark_coord.coordinator.core.purgatory import DelayedOperation, GroupKey, Purgatory
from spark_coord.errors import ErrorCode

if TYPE_CHECKING:
    from spark_coord.coordinator.core.interface import GroupCoordinator

__all__ = ["InitialDelays", "InitialJoin", "InitialJoinPeriod", "Waiter"]

log = logging.getLogger(__name__)


@dataclass
class Waiter:
    """A JoinGroup held for the initial delay.  Its future gets None when the wait is over (the
    member registers now), or the error its JoinGroup is answered with."""

    member_id: str
    rebalance_timeout_ms: int
    future: "asyncio.Future[ErrorCode | None]"


class InitialJoinPeriod(DelayedOperation):
    """One period of an initial join: it completes only by expiring (``on_over`` then decides what
    follows), or when forced because the wait ended early (nobody waits any more, or the
    coordinator resigned)."""

    def __init__(self, group_id: str, delay_ms: int, on_over: Callable[["InitialJoinPeriod"], None]):
        super().__init__(delay_ms)
        self.group_id = group_id
        self._on_over = on_over

    def try_complete(self) -> bool:
        return False  # as Kafka's InitialDelayedJoin: only time ends a period

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self._on_over(self)

    def __repr__(self) -> str:
        return f"InitialJoinPeriod({self.group_id}, {self.delay_ms} ms)"


class InitialJoin:
    """The JoinGroups of one empty classic group, held until its initial delay is over."""

    def __init__(self, group_id: str, delay_ms: int, started_ms: int):
        if delay_ms <= 0:
            raise ValueError(f"an initial join needs a delay > 0 ms, got {delay_ms}")
        self.group_id = group_id
        self.delay_ms = delay_ms
        self.started_ms = started_ms
        #: Held JoinGroups by the member's registry name (its instance id when static), in join order.
        self.waiters: dict[str, Waiter] = {}
        #: The largest rebalance timeout of the members that waited here: the wait never passes it.
        self.rebalance_timeout_ms = 0
        #: Kafka's ``newMemberAdded``: someone joined during the current period.
        self.new_member_added = False
        #: The period running now, and how many ran before it.
        self.period: InitialJoinPeriod | None = None
        self.periods = 0

    def add(self, key: str, waiter: Waiter) -> Waiter | None:
        """Hold ``waiter``'s JoinGroup; returns the earlier JoinGroup it replaces (the same member, or
        another incarnation of the same static member, joining again), if any."""
        earlier = self.waiters.pop(key, None)
        if earlier is None and self.waiters:
            self.new_member_added = True
        self.waiters[key] = waiter
        self.rebalance_timeout_ms = max(self.rebalance_timeout_ms, waiter.rebalance_timeout_ms)
        return earlier

    def remove(self, key: str, future: "asyncio.Future[ErrorCode | None]") -> Waiter | None:
        """Stop holding the JoinGroup waiting on ``future`` (its member left or its connection
        closed); None if that one is not held (any more)."""
        waiter = self.waiters.get(key)
        if waiter is None or waiter.future is not future:
            return None
        del self.waiters[key]
        return waiter

    def next_period_ms(self, now_ms: int) -> int | None:
        """A period ended at ``now_ms``: the length of the next one, or None when the wait is over
        (nobody new joined during the last one, or the rebalance timeout is used up)."""
        remaining = self.started_ms + self.rebalance_timeout_ms - now_ms
        if not self.new_member_added or remaining <= 0:
            return None
        self.new_member_added = False
        self.periods += 1
        return min(self.delay_ms, remaining)

    def waited_ms(self, now_ms: int) -> int:
        return now_ms - self.started_ms

    def __repr__(self) -> str:
        return f"InitialJoin({self.group_id}, {len(self.waiters)} waiting, {self.periods + 1} period(s))"


class InitialDelays:
    """The initial delays running in one classic door: each empty group's first JoinGroups held in
    an ``InitialJoin`` until its periods are over."""

    def __init__(self, coordinator: "GroupCoordinator", purgatory: Purgatory,
                 fence: Callable[[str, str, str], None]):
        self.c = coordinator
        self.purgatory = purgatory
        #: Called with (group, member id, instance id) when a static member's newer incarnation
        #: replaces the one held: the earlier member id is fenced.
        self._fence = fence
        self._initial: dict[str, InitialJoin] = {}

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._initial

    def groups(self) -> set[str]:
        """The groups whose first members wait here."""
        return set(self._initial)

    def delay_ms(self) -> int:
        """``group.initial.rebalance.delay.ms`` (0: off)."""
        return int(getattr(self.c.config, "initial_rebalance_delay_ms", 0) or 0)

    def reset(self) -> None:
        """The coordinator resigned: every held JoinGroup is answered NOT_COORDINATOR."""
        for initial in list(self._initial.values()):
            self._end(initial, ErrorCode.NOT_COORDINATOR)

    async def hold(self, group_id: str, member_id: str, instance: str | None, rebalance_timeout_ms: int,
                   gone: "asyncio.Future[Any] | None") -> ErrorCode | None:
        """Hold the JoinGroup of a new member of an empty group (or of one whose initial delay runs)
        until the delay is over (Kafka's InitialDelayedJoin).  None: register the member now (at
        once when nothing is delayed); else the error to answer the JoinGroup with."""
        initial = self._initial.get(group_id)
        if initial is None:
            delay = self.delay_ms()
            group = self.c.groups.get(group_id)
            if delay <= 0 or (group is not None and (group.members or group.state == GroupState.RESTORING)):
                return None
            initial = self._initial[group_id] = InitialJoin(group_id, delay, self.c.clock.now_ms())
            self._start_period(initial, delay)
            log.info("group %s is empty: its first rebalance waits %d ms for more members "
                     "(group.initial.rebalance.delay.ms)", group_id, delay)
        key = registry_key(instance) if instance else member_id
        future: asyncio.Future[ErrorCode | None] = asyncio.get_running_loop().create_future()
        earlier = initial.add(key, Waiter(member_id, rebalance_timeout_ms, future))
        if earlier is not None and not earlier.future.done():
            if earlier.member_id != member_id and instance:  # a newer incarnation of a static member (KIP-345)
                self._fence(group_id, earlier.member_id, instance)
                earlier.future.set_result(ErrorCode.FENCED_INSTANCE_ID)
            else:  # the same member joined again: its earlier JoinGroup is superseded
                earlier.future.set_result(ErrorCode.REBALANCE_IN_PROGRESS)
        if gone is not None:
            gone.add_done_callback(lambda _f: self.leave(group_id, key, future))
        code = await future
        if code is None and gone is not None and gone.done():
            return ErrorCode.UNKNOWN_MEMBER_ID
        if code is None and not self.c.active:
            return ErrorCode.NOT_COORDINATOR
        return code

    def leave(self, group_id: str, key: str, future: "asyncio.Future[ErrorCode | None]") -> bool:
        """A held JoinGroup's member left or its connection closed: no longer held (answered
        UNKNOWN_MEMBER_ID); a group nobody waits for any more is empty again, with no delay running."""
        initial = self._initial.get(group_id)
        waiter = initial.remove(key, future) if initial is not None else None
        if initial is None or waiter is None:
            return False
        if not future.done():
            future.set_result(ErrorCode.UNKNOWN_MEMBER_ID)
        if not initial.waiters:
            self._end(initial, None)
        return True

    def held(self, group_id: str, member_id: str) -> tuple[str, Waiter] | None:
        """The held JoinGroup of ``member_id`` in ``group_id``'s initial delay, with its key."""
        initial = self._initial.get(group_id)
        if initial is not None:
            for key, waiter in initial.waiters.items():
                if waiter.member_id == member_id:
                    return key, waiter
        return None

    def _start_period(self, initial: InitialJoin, delay_ms: int) -> None:
        period = initial.period = InitialJoinPeriod(
            initial.group_id, delay_ms, lambda op: self.c.post(self._period_over, initial, op))
        self.purgatory.try_complete_else_watch(period, [GroupKey(initial.group_id)])

    def _period_over(self, initial: InitialJoin, period: InitialJoinPeriod) -> None:
        """A period of ``initial`` ended: another one if someone joined during it, else the end."""
        if self._initial.get(initial.group_id) is not initial or initial.period is not period:
            return
        now = self.c.clock.now_ms()
        following = initial.next_period_ms(now)
        if following is not None:
            log.info("group %s: more members joined during its initial rebalance delay; waiting %d ms more",
                     initial.group_id, following)
            self._start_period(initial, following)
            return
        log.info("group %s: initial rebalance delay over after %d ms; %d member(s) join", initial.group_id,
                 initial.waited_ms(now), len(initial.waiters))
        self._end(initial, None)

    def _end(self, initial: InitialJoin, code: ErrorCode | None) -> None:
        """The wait is over: every held JoinGroup goes on (``code`` None: its member registers now,
        all of them before the rebalance they ask for runs) or is answered ``code``."""
        if self._initial.get(initial.group_id) is initial:
            del self._initial[initial.group_id]
        if initial.period is not None and initial.period.force_complete():
            self.purgatory.check_and_complete(GroupKey(initial.group_id))  # forget it (its timer is cancelled)
        for waiter in list(initial.waiters.values()):
            if not waiter.future.done():
                waiter.future.set_result(code)
