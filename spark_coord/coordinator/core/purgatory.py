"""Kafka-style request purgatory: operations waiting for a condition or a deadline.

A ``DelayedOperation`` completes exactly once: either ``try_complete`` finds its
condition met (someone called ``Purgatory.check_and_complete`` on one of its
keys after changing what it waits for), or something forces it
(``force_complete``, e.g. a member failure failing a rebalance round), or its
delay runs out and the purgatory expires it (``force_complete`` and then
``on_expiration``).  ``on_complete`` runs exactly once in all three cases.

Operations are watched under small frozen keys: ``MemberKey(group, consumer_id)``
and ``GroupKey(group)``.  Expiry goes through the injected ``Timer``, so unit
tests drive it with a ``ManualTimer``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Hashable, Iterable

from spark_coord.coordinator.core.clock import Timer, TimerHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberKey:
    """Watch key for operations about one member (its outstanding ping)."""

    group: str
    consumer_id: str


@dataclass(frozen=True)
class GroupKey:
    """Watch key for operations about a whole group (its StopFetcher/StartFetcher round)."""

    group: str


class DelayedOperation(ABC):
    """An operation that completes once, when its condition holds, when forced, or when it expires."""

    def __init__(self, delay_ms: int):
        if delay_ms < 0:
            raise ValueError(f"delay must be >= 0 ms, got {delay_ms}")
        self.delay_ms = int(delay_ms)
        self._completed = False
        self.expired = False
        self._timer_handle: TimerHandle | None = None

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now; True if this call completed it, False if it was already complete."""
        if self._completed:
            return False
        self._completed = True
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        self.on_complete()
        return True

    def expire(self) -> None:
        """The purgatory's expiry: complete (if not already) and then ``on_expiration``."""
        if self._completed:
            return
        self.expired = True
        if self.force_complete():
            self.on_expiration()

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if it holds, ``return self.force_complete()``, else False."""

    @abstractmethod
    def on_complete(self) -> None:
        """Runs exactly once, whichever way the operation completed."""

    def on_expiration(self) -> None:
        """Runs after ``on_complete`` when the operation completed by expiring.  A hook: nothing
        by default (not abstract: most operations have nothing more to do on expiry)."""
        return None


class Purgatory:
    """Delayed operations watched by key, expired by the injected timer."""

    def __init__(self, timer: Timer, name: str = "purgatory"):
        self.timer = timer
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if it can, else watch it under ``keys`` until it completes or expires.

        Returns True when it completed at once."""
        if op.try_complete():
            return True
        keys = list(keys)
        for key in keys:
            watchers = self._watchers.setdefault(key, [])
            watchers[:] = [w for w in watchers if not w.is_completed]
            watchers.append(op)
        if op.try_complete():  # the condition may have changed while we registered
            self._purge(keys)
            return True
        op._timer_handle = self.timer.call_later(op.delay_ms, lambda: self._expire(op, keys))
        return False

    def _expire(self, op: DelayedOperation, keys: list[Hashable]) -> None:
        op._timer_handle = None
        if not op.is_completed:
            log.debug("%s: %r expired after %d ms", self.name, op, op.delay_ms)
            op.expire()
        self._purge(keys)

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every operation watched under ``key``; returns how many completed."""
        watchers = self._watchers.get(key)
        if not watchers:
            return 0
        done = sum(1 for op in list(watchers) if not op.is_completed and op.try_complete())
        self._purge([key])
        return done

    def watched(self, key: Hashable) -> list[DelayedOperation]:
        """The operations still pending under ``key``."""
        return [op for op in self._watchers.get(key, ()) if not op.is_completed]

    def pending(self) -> int:
        """How many distinct operations are pending."""
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.is_completed})

    def _purge(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers is None:
                continue
            watchers[:] = [w for w in watchers if not w.is_completed]
            if not watchers:
                del self._watchers[key]

    def cancel_all(self) -> None:
        """Forget every pending operation without completing it (the coordinator resigned)."""
        for ops in self._watchers.values():
            for op in ops:
                if op._timer_handle is not None:
                    op._timer_handle.cancel()
                    op._timer_handle = None
        self._watchers.clear()
