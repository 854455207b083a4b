"""Injected time: a ``Clock`` to read it and a ``Timer`` to act on it later.

Production uses ``SystemClock`` and ``LoopTimer`` (asyncio's ``call_later``);
unit tests use ``ManualClock`` and ``ManualTimer``, advanced by hand, so that a
session timeout of ten seconds takes no time at all in a test and every
expiry happens in a known order (Kafka's ``MockTimer`` idea).

Timer callbacks run on the event loop thread.  By convention they *post* work
(complete a future, ``loop.call_soon`` a coordinator method) rather than change
group state themselves.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable, Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds on a monotonic clock."""
        ...


class TimerHandle(Protocol):
    def cancel(self) -> None:
        """Do not run the callback (no effect when it already ran)."""
        ...


class Timer(Protocol):
    def call_later(self, delay_ms: float, fn: Callable[[], object]) -> TimerHandle:
        """Run ``fn()`` on the loop thread after ``delay_ms`` milliseconds."""
        ...


class SystemClock:
    """The process's monotonic clock."""

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)


class LoopTimer:
    """A ``Timer`` on an asyncio event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop

    def call_later(self, delay_ms: float, fn: Callable[[], object]) -> TimerHandle:
        return self.loop.call_later(max(0.0, delay_ms) / 1000.0, fn)


class ManualClock:
    """A clock that moves only when told to (``ManualTimer.advance`` moves it)."""

    def __init__(self, start_ms: int = 0):
        self._now = int(start_ms)

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError(f"a clock does not go back: {now_ms} < {self._now}")
        self._now = int(now_ms)


class _ManualHandle:
    __slots__ = ("due", "fn", "cancelled")

    def __init__(self, due: int, fn: Callable[[], object]):
        self.due = due
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimer:
    """A ``Timer`` for tests: nothing fires until ``advance(ms)``.

    ``advance`` moves the clock forward and runs every callback that falls due on
    the way, in due-time order (ties in scheduling order), with the clock set to
    each callback's due time while it runs; callbacks scheduled by callbacks run
    too if they fall inside the window.
    """

    def __init__(self, clock: ManualClock | None = None):
        self.clock = clock or ManualClock()
        self._heap: list[tuple[int, int, _ManualHandle]] = []
        self._seq = itertools.count()

    def call_later(self, delay_ms: float, fn: Callable[[], object]) -> TimerHandle:
        handle = _ManualHandle(self.clock.now_ms() + max(0, int(delay_ms)), fn)
        heapq.heappush(self._heap, (handle.due, next(self._seq), handle))
        return handle

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` forward, firing what falls due; returns how many callbacks ran."""
        if ms < 0:
            raise ValueError(f"cannot advance by {ms} ms")
        target = self.clock.now_ms() + int(ms)
        fired = 0
        while self._heap and self._heap[0][0] <= target:
            due, _, handle = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self.clock.set(due)
            handle.cancelled = True
            handle.fn()
            fired += 1
        self.clock.set(target)
        return fired

    def pending(self) -> int:
        """How many callbacks are scheduled and not cancelled."""
        return sum(1 for _, _, h in self._heap if not h.cancelled)

    def next_due(self) -> int | None:
        """Due time of the earliest live callback, or None."""
        live = [h.due for _, _, h in self._heap if not h.cancelled]
        return min(live) if live else None


async def sleep_ms(timer: Timer, delay_ms: float) -> None:
    """Wait ``delay_ms`` on ``timer`` (so a ``ManualTimer`` controls it); cancellable."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    handle = timer.call_later(delay_ms, wake)
    try:
        await fut
    finally:
        handle.cancel()
