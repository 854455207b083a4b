"""What changed in a share partition, as the share-state journal writes it between snapshots.

Kafka's share coordinator writes a ShareSnapshot record now and then and ShareUpdate records in
between: the start offset plus the state batches that changed (first and last offset, delivery
state, delivery count), merged into the snapshot on replay.  This module is that for
``SharePartition``: the partition notes the offsets it touched (``note`` into its ``_touched``
list, from ``_replace``), ``changes`` turns them into an update -- ``{"start": SPSO, "ranges":
[[first, last, state, delivery_count], ...]}``, the *current* state of every touched offset in the
window, in ``snapshot()``'s encoding -- and ``apply`` replays an update onto a snapshot.

An update leaves out touched offsets that are AVAILABLE with delivery count 0, as a snapshot does:
such an offset was never handed out, so it was AVAILABLE with count 0 (or beyond the window) in
every earlier state too, and nothing needs overwriting.  Applying an update: offsets below its
start are dropped, its ranges overwrite those offsets, the rest is kept; equal neighbours are
merged, so a snapshot with its updates applied in order equals ``snapshot()`` taken when the last
of them was.  Updates fold (``apply`` of one update onto another is the update doing both), so
replaying many updates costs one pass over the snapshot.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter
from typing import Any, Sequence

__all__ = ["note", "changes", "apply", "MAX_TOUCHED"]

_AVAILABLE, _ACQUIRED, _ARCHIVED = 0, 1, 4
_FIRST = itemgetter(0)

#: Touched intervals noted at most before they are merged (and, when still more than half of this,
#: replaced by the one interval spanning them): the bookkeeping stays bounded however long nobody
#: takes the update (a share partition written to ZooKeeper only).
MAX_TOUCHED = 1024


def _merged(touched: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``touched`` sorted, overlapping and adjacent intervals merged."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(touched):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def note(touched: list[tuple[int, int]], first: int, last: int) -> None:
    """Offsets ``first``..``last`` changed (or may have): into ``touched``, kept bounded."""
    if touched:
        a, b = touched[-1]
        if first <= b + 1 and a <= last + 1:  # overlaps or adjoins the last one (the common case)
            touched[-1] = (a if a < first else first, b if b > last else last)
            return
    touched.append((first, last))
    if len(touched) > MAX_TOUCHED:
        touched[:] = _merged(touched)
        if len(touched) > MAX_TOUCHED // 2:
            touched[:] = [(touched[0][0], touched[-1][1])]


def changes(ranges: Sequence[tuple], touched: list[tuple[int, int]], start: int, limit: int) -> list[list[int]]:
    """The snapshot encoding (``SharePartition.snapshot``) of the touched offsets at or above ``start``:
    ``ranges`` are the partition's ``(first, last, state, delivery_count, holder, deadline)`` ranges,
    ``limit`` its delivery-count limit (ACQUIRED is written as its lock running out would leave it)."""
    out: list[list[int]] = []
    for a, b in _merged(touched):
        if b < start:
            continue
        if a < start:
            a = start
        k = max(bisect_right(ranges, a, key=_FIRST) - 1, 0)
        while k < len(ranges) and ranges[k][0] <= b:
            r = ranges[k]
            k += 1
            state, count = r[2], r[3]
            if state == _ACQUIRED:
                state = _ARCHIVED if count >= limit else _AVAILABLE
            elif state == _AVAILABLE and count == 0:
                continue
            f, last = (r[0] if r[0] > a else a), (r[1] if r[1] < b else b)
            if f > last:
                continue
            if out:
                p = out[-1]
                if p[1] + 1 == f and p[2] == state and p[3] == count:
                    p[1] = last
                    continue
            out.append([f, last, state, count])
    return out


def apply(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` (a snapshot, or an update) with ``update`` applied: the start is the update's, offsets
    below it dropped, the update's ranges overwrite those offsets, equal neighbours merged.  Keys of
    ``base`` other than ``start`` and ``ranges`` (a snapshot's ``version``) are kept."""
    start = update["start"]
    over = update["ranges"]
    n = len(over)
    pieces: list[list[int]] = []
    k = 0
    for f, last, state, count in base["ranges"]:
        if last < start:
            continue
        if f < start:
            f = start
        while k < n and over[k][1] < f:
            k += 1
        j = k
        while f <= last:
            if j < n and over[j][0] <= last:
                of, ol = over[j][0], over[j][1]
                if of > f:
                    pieces.append([f, of - 1, state, count])
                f = ol + 1
                j += 1
            else:
                pieces.append([f, last, state, count])
                break
    pieces.extend([list(r) for r in over if r[1] >= start])
    pieces.sort(key=_FIRST)
    out: list[list[int]] = []
    for r in pieces:
        if r[0] < start:
            r[0] = start
        if out:
            p = out[-1]
            if p[1] + 1 == r[0] and p[2] == r[2] and p[3] == r[3]:
                p[1] = r[1]
                continue
        out.append(r)
    doc = dict(base)
    doc["start"], doc["ranges"] = start, out
    return doc
