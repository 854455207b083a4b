"""Fetched batches waiting for the application, and the positions they define.

``PartitionBuffer`` is the bounded queue between the fetcher threads and the
application's iterator, and the one place consumed positions live, so that
"what the application has taken" and "what we report to the coordinator" can
never disagree:

- the *consumed* position of a partition is the next offset after the last record
  the application took from the iterator (at-least-once: data the fetchers read
  ahead does not count);
- every change of the whole assignment (a StopFetcher of everything, a lost
  coordinator) bumps a *token*, and every partition added gets a new
  *incarnation*; fetchers put batches with the token and incarnation they were
  given, so a late batch of a revoked partition -- revoked alone, or with
  everything -- is dropped instead of delivered;
- taking a batch and advancing its position happen under one lock, so a
  StopFetcher answer never misses a batch the application already has;
- nothing is handed out after the member's lease ran out (``set_lease``): a member
  that was paused past its session timeout delivers nothing more when it resumes,
  even before its connector notices and stops the fetchers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from spark_coord.common import TopicPartition

__all__ = ["PartitionBuffer", "Item"]


@dataclass(frozen=True)
class Item:
    """One fetched batch of one partition; ``next_offset``: where the partition's next fetch starts (the last
    offset in it + 1, or beyond: past the transaction markers and aborted transactions after its records).
    ``batch`` may have no rows: a fetch of nothing but those."""

    token: int
    topic: str
    partition: int
    batch: Any          # pyarrow.RecordBatch
    next_offset: int
    incarnation: int = 0


class PartitionBuffer:
    """A bounded FIFO of fetched batches plus the consumed position of each assigned partition."""

    def __init__(self, max_batches: int = 16):
        if max_batches < 1:
            raise ValueError(f"max_batches must be at least 1, got {max_batches}")
        self.max_batches = max_batches
        self._cond = threading.Condition()
        self._items: deque[Item] = deque()
        self._token = 0
        self._consumed: dict[TopicPartition, int] = {}
        self._assigned: set[TopicPartition] = set()
        self._incarnations: dict[TopicPartition, int] = {}
        self._next_incarnation = 1
        self._closed = False
        self._lease_until = float("inf")

    # ------------------------------------------------------------------ assignment
    @property
    def token(self) -> int:
        with self._cond:
            return self._token

    def assign(self, assignment: dict[TopicPartition, int]) -> int:
        """A new assignment: drop every buffered batch, keep only the positions of the new
        partitions (start offsets >= 0 are their positions; -1 stays unknown until resolved).
        Returns the new token for the fetchers."""
        with self._cond:
            self._token += 1
            self._items.clear()
            self._assigned = set(assignment)
            self._consumed = {tp: off for tp, off in assignment.items() if off >= 0}
            self._incarnations = {}
            self._incarnate(assignment)
            self._cond.notify_all()
            return self._token

    def _incarnate(self, partitions) -> dict[TopicPartition, int]:
        out = {}
        for tp in partitions:
            out[tp] = self._incarnations[tp] = self._next_incarnation
            self._next_incarnation += 1
        return out

    def incarnations(self) -> dict[TopicPartition, int]:
        with self._cond:
            return dict(self._incarnations)

    def add(self, partitions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """More partitions (start offsets as in ``assign``), the others untouched; returns each new
        partition's incarnation for its fetcher."""
        with self._cond:
            self._assigned.update(partitions)
            self._consumed.update({tp: off for tp, off in partitions.items() if off >= 0})
            return self._incarnate(partitions)

    def revoke(self, partitions) -> dict[TopicPartition, int]:
        """Take partitions away (StopFetcher of just these): nothing more of them is delivered, their
        buffered batches are dropped.  Returns their consumed positions at this moment."""
        gone = set(partitions)
        with self._cond:
            final = {tp: self._consumed[tp] for tp in gone if tp in self._consumed}
            self._assigned -= gone
            for tp in gone:
                self._consumed.pop(tp, None)
                self._incarnations.pop(tp, None)
            if any((i.topic, i.partition) in gone for i in self._items):
                self._items = deque(i for i in self._items if (i.topic, i.partition) not in gone)
            self._cond.notify_all()
            return final

    def is_current(self, item: "Item") -> bool:
        """Would ``item`` still be delivered (its partition not revoked since it was fetched)?"""
        with self._cond:
            return self._current(item)

    def _current(self, item: "Item") -> bool:
        tp = (item.topic, item.partition)
        return item.token == self._token and tp in self._assigned and \
            self._incarnations.get(tp, item.incarnation) == item.incarnation

    def clear(self) -> int:
        """Drop every buffered batch (fetchers stopped); positions stay for the answer."""
        with self._cond:
            self._token += 1
            self._items.clear()
            self._cond.notify_all()
            return self._token

    def assigned(self) -> list[TopicPartition]:
        with self._cond:
            return sorted(self._assigned)

    def positions(self) -> dict[TopicPartition, int]:
        """Consumed position (next offset to consume) of each assigned partition that has one."""
        with self._cond:
            return dict(self._consumed)

    def set_position(self, token: int, tp: TopicPartition, offset: int, only_if_idle: bool = False,
                     incarnation: int | None = None) -> bool:
        """Set a position found by the fetchers (auto.offset.reset).  With ``only_if_idle``,
        only when nothing of that partition is buffered (the application has not caught up).
        With ``incarnation``, only while the partition is still that incarnation: a reset resolved
        for a partition that was revoked and given back meanwhile (at the offset its previous
        holder stopped at) belongs to the earlier holding and must not move the new one."""
        with self._cond:
            if token != self._token or tp not in self._assigned:
                return False
            if incarnation is not None and self._incarnations.get(tp) != incarnation:
                return False
            if only_if_idle and any((i.topic, i.partition) == tp for i in self._items):
                return False
            self._consumed[tp] = offset
            return True

    def set_lease(self, until: float) -> None:
        """Hand out batches only until ``until`` (``time.monotonic()``), unless renewed."""
        with self._cond:
            self._lease_until = until
            self._cond.notify_all()

    # --------------------------------------------------------------------- queue
    def put(self, item: Item, stop: threading.Event) -> bool:
        """Queue ``item``, waiting while the buffer is full; False if it was dropped because its
        token is stale, ``stop`` was set, or the buffer closed."""
        with self._cond:
            while True:
                if self._closed or stop.is_set() or not self._current(item):
                    return False
                if len(self._items) < self.max_batches:
                    self._items.append(item)
                    self._cond.notify_all()
                    return True
                self._cond.wait(0.5)  # re-checks ``stop``, which is an Event we cannot wait on together

    def take(self, timeout: float | None, mark: bool = True) -> Item | None:
        """The oldest batch, waiting up to ``timeout`` (None: forever); None on timeout or close.
        With ``mark`` the partition's consumed position moves past the whole batch."""
        with self._cond:
            if not self._cond.wait_for(lambda: (self._items and time.monotonic() < self._lease_until)
                                       or self._closed, timeout):
                return None
            if not self._items or time.monotonic() >= self._lease_until:
                return None
            item = self._items.popleft()
            if mark:
                self._consumed[(item.topic, item.partition)] = item.next_offset
            self._cond.notify_all()
            return item

    def mark(self, item: Item, next_offset: int) -> None:
        """The application took records of ``item`` up to ``next_offset`` - 1 (per-message use);
        ignored once the assignment changed."""
        with self._cond:
            tp = (item.topic, item.partition)
            if self._current(item):
                self._consumed[tp] = max(next_offset, self._consumed.get(tp, next_offset))

    def close(self) -> None:
        """Wake every waiter; takers get None from now on."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
