"""Keeping the cyclic garbage collector's full collections out of a busy event loop.

CPython's cyclic collector stops the process for a full (generation 2) collection
whenever the objects that survived into the oldest generation since the last one
reach a quarter of those it kept then, and a full collection visits every
container object of the process.  A coordinator keeps a few hundred objects per
member (its registry entry, connection, stream buffers, purgatory keys, offsets),
and every ping leaves some behind that live long enough to be promoted: with
5,000 members it ran a full collection every 8-10 s, each one holding the event
loop 300-430 ms (the benchmark's ping lateness p99), and in steady state they
found nothing to free.

Freezing the survivors alone (``gc.freeze`` every 10 s) was not enough: the
objects promoted in those 10 s (100-230 thousand with 5,000 members: timers and
purgatory entries of pings in flight) still set off a full collection every 4-8 s,
each 90-210 ms of CPU (visiting them means touching what they point to, frozen or not).

So ``HeapFreezer`` turns automatic full collections off (the oldest generation's
threshold is raised out of reach; young collections go on as before), moves what
survived out of the collector's sight (``gc.freeze``, which costs nothing) every
``interval_s``, and runs a full collection itself (unfreeze, collect, freeze) only
when the interpreter's allocated memory blocks have grown by ``growth`` (doubled,
by default) since the last one; it looks every second, so that collection comes
while the heap grows rather than in the steady state after it.  Objects freed by reference counting still go at
once (nearly all the garbage a broker makes: the full collections of the
benchmark found none in steady state); cyclic garbage that reached the oldest
generation waits for the next full collection.  Like Go's collector at
GOGC=100, a full collection's cost is paid while the heap grows (members
arriving), and leaked cycles can at most double the heap before they are freed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time

log = logging.getLogger(__name__)

#: Seconds between two freezes of the survivors.
INTERVAL_S = 10.0
#: Seconds between two looks at the heap's size (``sys.getallocatedblocks`` costs nothing): a full
#: collection runs while the heap grows, not up to ``INTERVAL_S`` after it stopped growing.
CHECK_S = 1.0
#: A full collection runs once allocated blocks grew by this fraction since the last one.
GROWTH = 1.0
#: The oldest generation's threshold while a freezer runs: young collections never set off a full one.
NO_AUTOMATIC_FULL = 1 << 30


class HeapFreezer:
    """No automatic full collections; survivors frozen every ``interval_s``; a full collection when the heap
    doubled."""

    def __init__(self, interval_s: float = INTERVAL_S, growth: float = GROWTH):
        if interval_s <= 0 or growth <= 0:
            raise ValueError(f"interval_s and growth must be positive, not {interval_s} and {growth}")
        self.interval_s = interval_s
        self.growth = growth
        #: Full collections run so far, and how long the last one took (seconds).
        self.full_collections = 0
        self.last_full_s = 0.0
        self._blocks_after_full = 0
        self._frozen_at = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thresholds: tuple[int, int, int] | None = None

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Collect once in full (what start-up left behind), freeze, and freeze again every ``interval_s``."""
        if self._handle is not None:
            return
        self._loop = loop or asyncio.get_running_loop()
        self._thresholds = gc.get_threshold()
        gc.set_threshold(self._thresholds[0], self._thresholds[1], NO_AUTOMATIC_FULL)
        self.collect_full()
        self._handle = self._loop.call_later(min(CHECK_S, self.interval_s), self._tick)

    def stop(self) -> None:
        """Give every object back to the collector's own schedule."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
        gc.unfreeze()

    def collect_full(self) -> None:
        """Unfreeze, collect every generation, freeze what is left."""
        t0 = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self._frozen_at = time.monotonic()
        self.last_full_s = time.perf_counter() - t0
        self.full_collections += 1
        self._blocks_after_full = sys.getallocatedblocks()
        log.info("full garbage collection: %.0f ms, %d unreachable objects found, %d memory blocks in use",
                 self.last_full_s * 1000, found, self._blocks_after_full)

    def due_for_full(self) -> bool:
        """The heap grew by ``growth`` since the last full collection."""
        return sys.getallocatedblocks() > self._blocks_after_full * (1 + self.growth)

    def _tick(self) -> None:
        assert self._loop is not None
        self._handle = self._loop.call_later(min(CHECK_S, self.interval_s), self._tick)
        if self.due_for_full():
            self.collect_full()
        elif time.monotonic() - self._frozen_at >= self.interval_s:
            gc.freeze()
            self._frozen_at = time.monotonic()


def start_from_config(interval_ms: int) -> HeapFreezer | None:
    """A started freezer for the ``gc.freeze.interval.ms`` setting (0: the collector's own schedule)."""
    if interval_ms <= 0:
        return None
    freezer = HeapFreezer(interval_ms / 1000)
    freezer.start()
    return freezer
