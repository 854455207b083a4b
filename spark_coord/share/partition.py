"""One share partition (KIP-932, "Queues for Kafka"): the state a partition's leader keeps per
(share group, partition), as a pure state table -- no I/O, no clock (times are numbers in ms
passed in), no threads.  Modelled on Kafka's ``SharePartition`` / ``RecordState``.

In a share group several members consume the same partition.  The leader hands records out
one at a time under an *acquisition lock*: a record acquired by a member is that member's
until it acknowledges it, releases it, or its lock runs out.  Per partition the leader keeps

* the share-partition start offset (SPSO, ``start_offset``): every offset below it is done;
* the in-flight window ``[start_offset, end_offset)``: each offset in it has a state, a
  delivery count (how often it was handed out), and while ACQUIRED a holder (member id) and
  a lock deadline.  Offsets at or beyond ``end_offset`` have not been read from the log yet.

States (Kafka's ids) and the only moves between them -- ``_MOVES`` below is this table, and
every change of state goes through ``SharePartition._move``, which checks it::

    from          move                         to
    AVAILABLE     acquire (count + 1)          ACQUIRED      (holder, lock deadline)
    ACQUIRED      accept                       ACKNOWLEDGED
    ACQUIRED      reject / gap                 ARCHIVED
    ACQUIRED      release / lock expiry        AVAILABLE, or ARCHIVED when the delivery
                                               count reached delivery_count_limit
    ACQUIRED      abort (data of an aborted    ARCHIVED      (count kept; never handed out)
                  transaction, read_committed)
    ACQUIRED      renew                        ACQUIRED      (new lock deadline)
    AVAILABLE     skip (offset beyond the      ARCHIVED      (count 0: a gap of a compacted
                  window with no record; or     log, never handed out; or a
                  reached by an acquisition     record delivered as often as
                  at a lowered limit)           a lowered limit allows)

A read_committed group (``share.isolation.level``) acquires only below the last stable offset
(``acquire``'s ``stable_offset``), and the records of aborted transactions it acquires are
ARCHIVED at once, as Kafka's ``SharePartition.filterAbortedTransactionalAcquiredRecords`` does:
acquired (their delivery count goes up) and archived in the same step, never handed out.

ACKNOWLEDGED and ARCHIVED are final.  The SPSO moves up over the lowest offsets while they are
final (they leave the window), never past ``end_offset``; ``move_start`` moves it by decree
(log retention, an admin reset).

Representation: a sorted list of disjoint ranges covering the window exactly, each range one
tuple ``(first, last, state, delivery_count, holder, lock_deadline)`` (holder and deadline
``None`` unless ACQUIRED).  Ranges are split only where those fields differ and merged again
where neighbours become equal, so a steady stream of whole batches keeps a handful of ranges;
lookups bisect on ``first`` and every operation costs O(log n + ranges touched), with per-offset
work only for per-offset acknowledgement types.

``snapshot()`` / ``restore()`` are what the persister writes and reads: an acquisition does not
survive a crash (the record is AVAILABLE again, its delivery count kept, or ARCHIVED when that
count reached the limit, as a lock running out would leave it), an acceptance or a rejection does.
"""

from __future__ import annotations

import enum
import heapq
from bisect import bisect_right
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any, Sequence

from spark_coord.errors import ErrorCode
from spark_coord.share import delta

__all__ = ["AckType", "Acquired", "RecordState", "SharePartition"]


class RecordState(enum.IntEnum):
    """A record's state in a share partition (Kafka's ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """ShareAcknowledge / ShareFetch ``AcknowledgeTypes`` on the wire."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, slots=True)
class Acquired:
    """One ``AcquiredRecords`` entry of a ShareFetch answer."""

    first_offset: int
    last_offset: int
    delivery_count: int


# Plain ints inside (cheaper than enum members in the hot paths).
_AVAILABLE, _ACQUIRED, _ACKNOWLEDGED, _ARCHIVED = 0, 1, 2, 4
_DONE = _ACKNOWLEDGED  # a state >= this one is final

# Moves.
_ACQUIRE, _ACCEPT, _REJECT, _GAP, _RELEASE, _EXPIRE, _RENEW, _SKIP, _ABORT = range(9)
_MOVE_NAMES = ("acquire", "accept", "reject", "gap", "release", "lock expiry", "renew", "skip", "abort")

#: (from state, move) -> to state: the whole state machine.  RELEASE and EXPIRE lead to
#: ARCHIVED instead when the delivery count reached the limit (``SharePartition._move``).
_MOVES: dict[tuple[int, int], int] = {
    (_AVAILABLE, _ACQUIRE): _ACQUIRED,
    (_ACQUIRED, _ACCEPT): _ACKNOWLEDGED,
    (_ACQUIRED, _REJECT): _ARCHIVED,
    (_ACQUIRED, _GAP): _ARCHIVED,
    (_ACQUIRED, _RELEASE): _AVAILABLE,
    (_ACQUIRED, _EXPIRE): _AVAILABLE,
    (_ACQUIRED, _RENEW): _ACQUIRED,
    (_AVAILABLE, _SKIP): _ARCHIVED,
    (_ACQUIRED, _ABORT): _ARCHIVED,
}

#: Wire acknowledge type -> move.
_ACK_MOVES = (_GAP, _ACCEPT, _RELEASE, _REJECT, _RENEW)

_FIRST = itemgetter(0)
_SNAPSHOT_VERSION = 1
_STATE_KEYS = (("available", _AVAILABLE), ("acquired", _ACQUIRED), ("acknowledged", _ACKNOWLEDGED),
               ("archived", _ARCHIVED))

# A range: (first, last, state, delivery_count, holder, lock_deadline).
_Range = tuple


def _push(out: list, r: _Range) -> None:
    """Append ``r`` to ``out``, merged into the last range when adjacent and equal."""
    if out:
        p = out[-1]
        if p[1] + 1 == r[0] and p[2] == r[2] and p[3] == r[3] and p[4] == r[4] and p[5] == r[5]:
            out[-1] = (p[0], r[1], p[2], p[3], p[4], p[5])
            return
    out.append(r)


def _add_acquired(out: list, first: int, last: int, count: int) -> None:
    if out:
        p = out[-1]
        if p[1] + 1 == first and p[2] == count:
            p[1] = last
            return
    out.append([first, last, count])


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


class SharePartition:
    """The in-flight state of one partition of one share group (see the module docstring)."""

    __slots__ = ("_start", "_end", "_ranges", "_limit", "_max_in_flight", "_n", "_held", "_locks",
                 "_heap", "_version", "_archived_total", "_deliveries_total", "_acknowledged_total", "_touched")

    def __init__(self, start_offset: int, *, delivery_count_limit: int = 5, max_in_flight: int = 2000):
        self._start = self._end = _check_count("start_offset", start_offset, 0)
        self._limit = _check_count("delivery_count_limit", delivery_count_limit, 1)
        self._max_in_flight = _check_count("max_in_flight", max_in_flight, 1)
        self._ranges: list[_Range] = []
        self._n = [0, 0, 0, 0, 0]           # offsets in the window per state id
        self._held: dict[str, int] = {}     # holder -> ACQUIRED offsets
        self._locks: dict[float, int] = {}  # lock deadline -> ACQUIRED offsets
        self._heap: list[float] = []        # the deadlines of _locks (and stale ones, popped lazily)
        self._version = 0
        self._archived_total = 0
        self._deliveries_total = 0
        self._acknowledged_total = 0
        self._touched: list[tuple[int, int]] = []  # offsets changed since ``take_update`` (``delta.note``)

    # ------------------------------------------------------------------ read-only views

    @property
    def start_offset(self) -> int:
        """The share-partition start offset (SPSO): every offset below it is done."""
        return self._start

    @property
    def end_offset(self) -> int:
        """One past the last offset in the window (``start_offset`` when it is empty)."""
        return self._end

    @property
    def version(self) -> int:
        """Goes up with every change that alters ``snapshot()`` (and otherwise only when a record
        acquired at the delivery-count limit is released or its lock runs out: written ARCHIVED
        already, it leaves the snapshot as it was)."""
        return self._version

    @property
    def delivery_count_limit(self) -> int:
        return self._limit

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    def set_limits(self, *, delivery_count_limit: int, max_in_flight: int) -> None:
        """New limits (a group's configs changed): they apply from the next acquisition, release or
        lock expiry on.  A record AVAILABLE with a count at or past a lowered delivery limit is
        ARCHIVED when an acquisition reaches it; a window beyond a lowered ``max_in_flight`` shrinks
        as its records finish (nothing in it is dropped)."""
        limit = _check_count("delivery_count_limit", delivery_count_limit, 1)
        self._max_in_flight = _check_count("max_in_flight", max_in_flight, 1)
        if limit != self._limit and self._end > self._start:  # ACQUIRED offsets snapshot by the limit
            delta.note(self._touched, self._start, self._end - 1)
        self._limit = limit

    @property
    def archived_total(self) -> int:
        """Offsets made ARCHIVED since creation (rejected, gaps, released at the limit, skipped)."""
        return self._archived_total

    @property
    def deliveries_total(self) -> int:
        """Offsets acquired since creation (each redelivery counts again)."""
        return self._deliveries_total

    @property
    def acknowledged_total(self) -> int:
        """Offsets accepted since creation."""
        return self._acknowledged_total

    def __repr__(self) -> str:
        return (f"SharePartition(start={self._start}, end={self._end}, ranges={len(self._ranges)}, "
                f"counts={self.counts()}, version={self._version})")

    def fetch_offset(self) -> int | None:
        """Where the leader should read the log from: the first AVAILABLE offset in the window,
        else ``end_offset`` while the window has room, else None (nothing acquirable)."""
        if self._n[_AVAILABLE]:
            for r in self._ranges:
                if r[2] == _AVAILABLE:
                    return r[0]
        if self._end - self._start < self._max_in_flight:
            return self._end
        return None

    def holders(self) -> dict[str, int]:
        """Member id -> how many offsets it holds (ACQUIRED)."""
        return dict(self._held)

    def counts(self) -> dict[str, int]:
        """Offsets in the window per state."""
        n = self._n
        return {key: n[state] for key, state in _STATE_KEYS}

    def next_lock_deadline(self) -> float | None:
        """The earliest lock deadline of an ACQUIRED offset, None when nothing is acquired."""
        heap, locks = self._heap, self._locks
        while heap and heap[0] not in locks:
            heapq.heappop(heap)
        return heap[0] if heap else None

    # ------------------------------------------------------------------ the one place moves happen

    def _move(self, r: _Range, move: int, holder: str | None = None, deadline: float | None = None) -> _Range:
        """``r`` after ``move`` (first/last kept), checked against ``_MOVES``."""
        state, count = r[2], r[3]
        to = _MOVES.get((state, move))
        if to is None:
            raise AssertionError(f"share partition: no move {_MOVE_NAMES[move]} from "
                                 f"{RecordState(state).name} (offsets {r[0]}-{r[1]})")
        if move == _ACQUIRE:
            count += 1
        elif to == _AVAILABLE and count >= self._limit:
            to = _ARCHIVED
        if to == _ACQUIRED:
            return (r[0], r[1], _ACQUIRED, count, holder, deadline)
        return (r[0], r[1], to, count, None, None)

    # ------------------------------------------------------------------ bookkeeping

    def _account(self, r: _Range, sign: int) -> None:
        n = (r[1] - r[0] + 1) * sign
        state = r[2]
        self._n[state] += n
        if state == _ACQUIRED:
            held = self._held
            v = held.get(r[4], 0) + n
            if v:
                held[r[4]] = v
            else:
                del held[r[4]]
            locks, d = self._locks, r[5]
            v = locks.get(d, 0) + n
            if v:
                if d not in locks:
                    heap = self._heap
                    if len(heap) > 2 * len(locks) + 32:  # too many stale deadlines: rebuild
                        heap[:] = locks
                        heapq.heapify(heap)
                    heapq.heappush(heap, d)
                locks[d] = v
            else:
                del locks[d]

    def _replace(self, i: int, j: int, new: list[_Range]) -> None:
        """Ranges ``[i, j)`` become ``new`` (which covers the same offsets, or extends the
        window at its end), merged with each other and with the neighbours where equal; their
        offsets noted as touched (``take_update``)."""
        rs = self._ranges
        if new:
            t, a, b = self._touched, new[0][0], new[-1][1]
            if t and t[-1][0] <= a <= t[-1][1] + 1:  # the common case inline: it extends the last interval
                if b > t[-1][1]:
                    t[-1] = (t[-1][0], b)
            else:
                delta.note(t, a, b)
        for r in new:            # add before subtracting: counts touching 0 and back churn the heap
            self._account(r, 1)
        for k in range(i, j):
            self._account(rs[k], -1)
        out: list[_Range] = []
        if i > 0:
            i -= 1
            out.append(rs[i])
        for r in new:
            _push(out, r)
        if j < len(rs):
            _push(out, rs[j])
            j += 1
        rs[i:j] = out

    def _advance(self) -> bool:
        """Move the SPSO over the final offsets at the bottom of the window."""
        rs = self._ranges
        k, n = 0, len(rs)
        while k < n and rs[k][2] >= _DONE:
            k += 1
        if not k:
            return False
        for r in rs[:k]:
            self._account(r, -1)
        del rs[:k]
        self._start = rs[0][0] if rs else self._end
        return True

    def _index(self, offset: int) -> int:
        """The index of the range holding ``offset`` (which must be in the window)."""
        return bisect_right(self._ranges, offset, key=_FIRST) - 1

    # ------------------------------------------------------------------ acquire

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], *, max_records: int,
                lock_deadline: float, batch_optimized: bool = False, stable_offset: int | None = None,
                aborted: Sequence[tuple[int, int]] = (), read_end: int | None = None) -> list[Acquired]:
        """Acquire records for ``member_id`` from ``batches``, the ``(first_offset, last_offset)``
        of the data batches the leader read from the log at ``fetch_offset()`` (ascending,
        non-overlapping; a batch may start before it).

        In offset order: AVAILABLE offsets inside the window that lie within a batch are
        acquired; then offsets beyond ``end_offset`` within a batch (they extend the window).
        Offsets beyond ``end_offset`` that no batch holds -- between batches, or between
        ``end_offset`` and the first batch past it: gaps of a compacted log, and the offsets of
        control batches (transaction markers), which are no data -- become ARCHIVED with delivery
        count 0 and are never handed out (when the window is empty such a gap moves the SPSO at
        once).  ``read_end``: one past the last offset the read covered, control batches
        included; the offsets from the last batch's end up to it are such a gap too, once every
        batch is in the window (a marker after the last data batch does not hold the SPSO back).
        Stops at ``max_records`` acquired offsets (``batch_optimized``: finishes the batch it is
        in, as Kafka's default batch-optimized mode does) and never grows the window beyond
        ``start_offset + max_in_flight``.

        read_committed (``share.isolation.level``): nothing at or past ``stable_offset`` (the log's
        last stable offset) is acquired or archived -- a batch there is left for a later fetch,
        once its transaction ended; ``aborted`` are the ``(first_offset, last_offset)`` of the
        batches among ``batches`` that belong to aborted transactions: their offsets acquired here
        are ARCHIVED at once, the delivery count the acquisition gave them kept, and not returned
        (Kafka's ``filterAbortedTransactionalAcquiredRecords``: acquire, then archive; they count
        against ``max_records`` as there).

        Each acquired offset's delivery count goes up by one; it is ACQUIRED by ``member_id``
        until ``lock_deadline``.  Returns the acquired offsets as ranges, contiguous offsets with
        the same delivery count merged.  Raises ValueError for batches out of order.
        """
        prev = -1
        for bf, bl in batches:  # checked first: a refusal changes nothing
            if bf > bl or bf <= prev:
                raise ValueError(f"share partition: batches must be ascending and disjoint, got {bf}-{bl} "
                                 f"after one ending at {prev}")
            prev = bl
        if stable_offset is not None:
            batches = [(bf, min(bl, stable_offset - 1)) for bf, bl in batches if bf < stable_offset]
            if read_end is not None:
                read_end = min(read_end, stable_offset)
        got_list: list[list[int]] = []
        remaining = max_records
        archived_before = self._archived_total
        changed = False
        total = 0
        stopped = False
        for bf, bl in batches:
            if remaining <= 0:
                stopped = True
                break
            if bl < self._start:
                continue
            budget = bl - bf + 1 if batch_optimized else remaining
            got = 0
            end = self._end
            a = bf if bf > self._start else self._start
            if a < end:
                got = self._acquire_window(a, min(bl, end - 1), budget, member_id, lock_deadline, got_list)
            full = False
            if bl >= end and got < budget:
                rs = self._ranges
                if bf > end:  # no records in [end, bf)
                    changed |= self._skip_gap(bf)
                    end = self._end
                limit = self._start + self._max_in_flight
                lo = max(bf, end)
                hi = min(bl, limit - 1, lo + (budget - got) - 1)
                if hi >= lo:
                    r = self._move((lo, hi, _AVAILABLE, 0, None, None), _ACQUIRE, member_id, lock_deadline)
                    self._replace(len(rs), len(rs), [r])
                    self._end = hi + 1
                    _add_acquired(got_list, lo, hi, 1)
                    got += hi - lo + 1
                full = self._end >= limit
            remaining -= got
            total += got
            if full:
                stopped = True
                break
        if read_end is not None and not stopped and read_end > self._end and \
                (not batches or self._end > batches[-1][1]):
            changed |= self._skip_gap(read_end)
        if aborted and got_list:
            dropped = self._archive_aborted(got_list, aborted)
            total -= dropped
            self._archived_total += dropped
        if total:
            self._deliveries_total += total
            changed = True
        if changed or self._archived_total != archived_before:
            self._advance()
            self._version += 1
        return [Acquired(first, last, count) for first, last, count in got_list]

    def _skip_gap(self, upto: int) -> bool:
        """``[end_offset, upto)`` holds no records: ARCHIVED with delivery count 0 (within the
        window's limit), or, when the window is empty, the SPSO moves to ``upto``.  Whether
        anything changed."""
        end = self._end
        if upto <= end:
            return False
        if self._start == end:
            self._archived_total += upto - end
            self._start = self._end = upto
            return True
        hi = min(upto, self._start + self._max_in_flight) - 1
        if hi < end:
            return False
        rs = self._ranges
        self._replace(len(rs), len(rs), [self._move((end, hi, _AVAILABLE, 0, None, None), _SKIP)])
        self._archived_total += hi - end + 1
        self._end = hi + 1
        return True

    def _archive_aborted(self, got_list: list[list[int]], aborted: Sequence[tuple[int, int]]) -> int:
        """The offsets of ``got_list`` (just acquired) inside ``aborted`` ranges become ARCHIVED
        (move abort) and leave ``got_list``.  Returns how many."""
        kept: list[list[int]] = []
        cuts: list[tuple[int, int]] = []
        k, n = 0, len(aborted)
        for first, last, count in got_list:
            while k < n and aborted[k][1] < first:
                k += 1
            o, j = first, k
            while o <= last:
                if j < n and aborted[j][0] <= last:
                    af, al = aborted[j]
                    if af > o:
                        _add_acquired(kept, o, af - 1, count)
                        o = af
                    e = min(al, last)
                    if e >= o:
                        cuts.append((o, e))
                        o = e + 1
                    if al <= last:
                        j += 1
                else:
                    _add_acquired(kept, o, last, count)
                    o = last + 1
        for s, e in cuts:
            rs = self._ranges
            i = j = self._index(s)
            new: list[_Range] = []
            if rs[i][0] < s:
                new.append((rs[i][0], s - 1) + rs[i][2:])
            while j < len(rs) and rs[j][0] <= e:
                r = rs[j]
                new.append(self._move((max(r[0], s), min(r[1], e)) + r[2:], _ABORT))
                j += 1
            if rs[j - 1][1] > e:
                new.append((e + 1, rs[j - 1][1]) + rs[j - 1][2:])
            self._replace(i, j, new)
        got_list[:] = kept
        return sum(e - s + 1 for s, e in cuts)

    def _acquire_window(self, a: int, b: int, budget: int, member_id: str, deadline: float,
                        got_list: list) -> int:
        """Acquire up to ``budget`` AVAILABLE offsets of ``[a, b]`` (inside the window)."""
        rs = self._ranges
        j = self._index(a)
        n = len(rs)
        edits: list[tuple[int, list[_Range]]] = []  # (index of an AVAILABLE range, what it becomes)
        got = 0
        while j < n and got < budget:
            r = rs[j]
            if r[0] > b:
                break
            if r[2] == _AVAILABLE:
                spent = r[3] >= self._limit  # handed out as often as a lowered limit allows: archived
                s = a if a > r[0] else r[0]
                e = min(r[1], b) if spent else min(r[1], b, s + (budget - got) - 1)
                pieces = [(r[0], s - 1) + r[2:]] if s > r[0] else []
                m = self._move((s, e) + r[2:], _SKIP) if spent else \
                    self._move((s, e) + r[2:], _ACQUIRE, member_id, deadline)
                pieces.append(m)
                if e < r[1]:
                    pieces.append((e + 1, r[1]) + r[2:])
                edits.append((j, pieces))
                if spent:
                    self._archived_total += e - s + 1
                else:
                    _add_acquired(got_list, s, e, m[3])
                    got += e - s + 1
            j += 1
        # From the right, so the indices to the left hold; a range just acquired never equals
        # the AVAILABLE range on its left, so no merge reaches one not yet replaced.
        for j, pieces in reversed(edits):
            self._replace(j, j + 1, pieces)
        return got

    # ------------------------------------------------------------------ acknowledge

    def acknowledge(self, member_id: str, first_offset: int, last_offset: int, types: Sequence[int], *,
                    lock_deadline: float | None = None) -> ErrorCode:
        """One AcknowledgementBatch: ``types`` has one entry (for every offset) or one per offset.

        ACCEPT -> ACKNOWLEDGED; GAP, REJECT -> ARCHIVED; RELEASE -> AVAILABLE (ARCHIVED at the
        delivery limit); RENEW -> still ACQUIRED until ``lock_deadline``.  All or nothing:
        INVALID_REQUEST for first > last, a negative offset, a types length other than 1 or
        last-first+1, a type outside 0..4, RENEW without ``lock_deadline``; INVALID_RECORD_STATE
        when any offset of the range is not ACQUIRED by ``member_id`` (outside the window
        included).  Then the SPSO advances.
        """
        if first_offset < 0 or first_offset > last_offset:
            return ErrorCode.INVALID_REQUEST
        size = last_offset - first_offset + 1
        nt = len(types)
        if nt != 1 and nt != size:
            return ErrorCode.INVALID_REQUEST
        t0 = types[0]
        single = nt == 1 or types.count(t0) == nt
        if (not 0 <= t0 <= 4) if single else (min(types) < 0 or max(types) > 4):
            return ErrorCode.INVALID_REQUEST
        if lock_deadline is None and (t0 == AckType.RENEW if single else AckType.RENEW in types):
            return ErrorCode.INVALID_REQUEST
        if first_offset < self._start or last_offset >= self._end:
            return ErrorCode.INVALID_RECORD_STATE
        rs = self._ranges
        i = j = self._index(first_offset)
        while True:
            r = rs[j]
            if r[2] != _ACQUIRED or r[4] != member_id:
                return ErrorCode.INVALID_RECORD_STATE
            j += 1
            if r[1] >= last_offset:
                break

        new: list[_Range] = []
        head = rs[i]
        if head[0] < first_offset:
            new.append((head[0], first_offset - 1) + head[2:])
        move = _ACK_MOVES[t0] if single else -1
        for k in range(i, j):
            r = rs[k]
            s = first_offset if first_offset > r[0] else r[0]
            e = last_offset if last_offset < r[1] else r[1]
            if single:
                new.append(self._move((s, e) + r[2:], move, member_id, lock_deadline))
            else:
                o = s
                for t, run in groupby(types[s - first_offset:e - first_offset + 1]):
                    n = len(list(run))
                    new.append(self._move((o, o + n - 1) + r[2:], _ACK_MOVES[t], member_id, lock_deadline))
                    o += n
        tail = rs[j - 1]
        if tail[1] > last_offset:
            new.append((last_offset + 1, tail[1]) + tail[2:])

        changed = False
        for r in new:
            if r[2] >= _DONE and r[0] >= first_offset and r[1] <= last_offset:
                changed = True
                if r[2] == _ACKNOWLEDGED:
                    self._acknowledged_total += r[1] - r[0] + 1
                else:
                    self._archived_total += r[1] - r[0] + 1
        self._replace(i, j, new)
        if changed:
            self._advance()
            self._version += 1
        return ErrorCode.NONE

    # ------------------------------------------------------------------ release, expiry, start

    def release_member(self, member_id: str) -> int:
        """Everything ``member_id`` holds goes back: AVAILABLE (ARCHIVED at the delivery limit).
        Returns how many offsets."""
        if member_id not in self._held:
            return 0
        return self._release(lambda r: r[4] == member_id, _RELEASE)

    def expire_locks(self, now: float) -> int:
        """Offsets whose lock deadline is <= ``now`` go back as ``release_member`` does.
        Returns how many."""
        d = self.next_lock_deadline()
        if d is None or d > now:
            return 0
        return self._release(lambda r: r[5] <= now, _EXPIRE)

    def _release(self, which, move: int) -> int:
        rs = self._ranges
        released = archived = 0
        # From the right, so the indices to the left hold (an ACQUIRED range not yet replaced
        # never equals what its right neighbour became, so no merge reaches it).
        for k in range(len(rs) - 1, -1, -1):
            r = rs[k]
            if r[2] == _ACQUIRED and which(r):
                m = self._move(r, move)
                n = r[1] - r[0] + 1
                released += n
                if m[2] == _ARCHIVED:
                    archived += n
                self._replace(k, k + 1, [m])
        if archived:
            self._archived_total += archived
            self._advance()
            self._version += 1
        return released

    def move_start(self, offset: int) -> None:
        """The log start moved to ``offset`` (retention) or an admin reset: offsets below it are
        done, acquired ones too; past ``end_offset`` the window becomes empty at ``offset``.
        An offset at or below ``start_offset`` changes nothing."""
        if offset <= self._start:
            return
        rs = self._ranges
        if offset >= self._end:
            self._replace(0, len(rs), [])
            self._start = self._end = offset
        else:
            i = self._index(offset)
            r = rs[i]
            self._replace(0, i + 1, [(offset,) + r[1:]])
            self._start = offset
            self._advance()
        self._version += 1

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict:
        """JSON-able: ``{"version": 1, "start": SPSO, "ranges": [[first, last, state, delivery_count],
        ...]}`` for the offsets in the window other than AVAILABLE with delivery count 0, merged;
        ACQUIRED is written as its lock running out would leave it (an acquisition does not survive
        a crash, its count does): AVAILABLE, or ARCHIVED once the count reached the limit -- so a
        record handed out ``delivery_count_limit`` times is never handed out again after a crash."""
        out: list[list[int]] = []
        for r in self._ranges:
            state, count = r[2], r[3]
            if state == _ACQUIRED:
                state = _ARCHIVED if count >= self._limit else _AVAILABLE
            elif state == _AVAILABLE and count == 0:
                continue
            if out:
                p = out[-1]
                if p[1] + 1 == r[0] and p[2] == state and p[3] == count:
                    p[1] = r[1]
                    continue
            out.append([r[0], r[1], state, count])
        return {"version": _SNAPSHOT_VERSION, "start": self._start, "ranges": out}

    @classmethod
    def restore(cls, snap: dict, **limits: int) -> SharePartition:
        """The inverse of ``snapshot()`` (``limits``: ``delivery_count_limit``, ``max_in_flight``).
        Offsets between the ranges are AVAILABLE with delivery count 0; the window ends after the
        last range.  Raises ValueError naming what is wrong with ``snap``."""
        if not isinstance(snap, dict):
            raise ValueError(f"share partition snapshot: not a dict but {type(snap).__name__}")
        if snap.get("version") != _SNAPSHOT_VERSION:
            raise ValueError(f"share partition snapshot: version {snap.get('version')!r}, "
                             f"only {_SNAPSHOT_VERSION} is known")
        start = snap.get("start")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"share partition snapshot: start must be an integer >= 0, not {start!r}")
        ranges = snap.get("ranges")
        if not isinstance(ranges, (list, tuple)):
            raise ValueError(f"share partition snapshot: ranges must be a list, not {type(ranges).__name__}")
        sp = cls(start, **limits)
        pieces: list[_Range] = []
        prev = start - 1
        for k, item in enumerate(ranges):
            if not isinstance(item, (list, tuple)) or len(item) != 4:
                raise ValueError(f"share partition snapshot: ranges[{k}] is not [first, last, state, "
                                 f"delivery_count]: {item!r}")
            for name, v in zip(("first", "last", "state", "delivery_count"), item, strict=True):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"share partition snapshot: ranges[{k}] {name} is not an integer: {v!r}")
                if v < 0:
                    raise ValueError(f"share partition snapshot: ranges[{k}] {name} is negative: {v}")
            first, last, state, count = item
            if first > last:
                raise ValueError(f"share partition snapshot: ranges[{k}] ends before it starts: {first}-{last}")
            if first < start:
                raise ValueError(f"share partition snapshot: ranges[{k}] starts at {first}, below start {start}")
            if first <= prev:
                raise ValueError(f"share partition snapshot: ranges[{k}] ({first}-{last}) overlaps or is "
                                 f"out of order after one ending at {prev}")
            if state not in (_AVAILABLE, _ACKNOWLEDGED, _ARCHIVED):
                what = ("ACQUIRED is never written" if state == _ACQUIRED else "unknown state")
                raise ValueError(f"share partition snapshot: ranges[{k}] state {state}: {what}")
            if first > prev + 1:
                pieces.append((prev + 1, first - 1, _AVAILABLE, 0, None, None))
            if state == _AVAILABLE and count >= sp._limit:  # written under a higher limit
                state = _ARCHIVED
            pieces.append((first, last, state, count, None, None))
            prev = last
        sp._end = prev + 1
        sp._replace(0, 0, pieces)
        sp._advance()
        sp._touched.clear()
        return sp

    def take_update(self) -> dict:
        """What changed since the last call (or ``restore``): ``{"start": SPSO, "ranges": [[first, last,
        state, delivery_count], ...]}``, the current state of every offset changed since, in the window, in
        ``snapshot()``'s encoding (``delta.changes``); ``delta.apply`` of it onto the snapshot taken at the
        last call gives ``snapshot()``.  Kafka's ShareUpdate record between ShareSnapshots."""
        touched, self._touched = self._touched, []
        return {"start": self._start, "ranges": delta.changes(self._ranges, touched, self._start, self._limit)}
