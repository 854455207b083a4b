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
(``InitialJoin``, one per group): when the wait is over they all register in one go, so the
coordinator's first rebalance of the group sees every one of them.  Each period is a
``DelayedOperation`` in the door's purgatory that completes only by expiring; its expiry posts
the decision (another period, or the end of the wait) to the coordinator's loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

from spark_coord.coordinator.core.purgatory import DelayedOperation
from spark_coord.errors import ErrorCode

__all__ = ["InitialJoin", "InitialJoinPeriod", "Waiter"]


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
