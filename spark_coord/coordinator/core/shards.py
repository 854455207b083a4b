"""Coordinator shards: which shard a group belongs to, and which coordinator holds each shard.

A group belongs to shard ``(hashCode(group) & 0x7fffffff) % count`` -- Kafka's own rule
(``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``), so a group's shard is
the ``__consumer_offsets`` partition Kafka would give it.  ``hashCode`` is Java's
``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, with
32-bit wrap-around.

``place`` is the target every coordinator computes alike from the live coordinators
and the shards' current holders: sticky (a shard stays with its live holder while
that holder is within its share), balanced (loads differ by at most one) and spread
(each shard has a preferred coordinator, round-robin over the live ids); free and
surplus shards go to their preferred coordinator, else the least-loaded, ties by id.
A coordinator joining or leaving moves only the shards that must move.
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["java_hash", "shard_of", "place"]


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s`` (a signed 32-bit int)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def shard_of(group_id: str, count: int) -> int:
    """The shard of ``group_id`` among ``count`` shards (Kafka's partition of the group)."""
    return (java_hash(group_id) & 0x7FFFFFFF) % count


def place(count: int, live: Iterable[int], holders: Mapping[int, int | None]) -> dict[int, int | None]:
    """The target holder of each shard ``0..count-1`` (None for all when nobody is live).

    ``holders``: each shard's current holder (missing or None: free).  Each shard has a
    preferred coordinator, the live ids round-robin (``ids[shard % n]``), so that a
    coordinator's shards are spread over the shard range rather than one block of it
    (groups named alike hash to neighbouring shards).  A live holder keeps up to
    ``count // n`` of its shards, its preferred ones first, and holders with more than that
    keep one more, by id, while ``count % n`` such places remain; every other shard goes
    to its preferred coordinator while that one has fewer than ``count // n``, else to
    the least-loaded live coordinator (ties by the lower id).  So loads differ by at most
    one, and only shards above a holder's share, or of a holder gone, move."""
    ids = sorted(set(live))
    if not ids:
        return {s: None for s in range(count)}
    n = len(ids)
    base, extra = divmod(count, n)

    def preferred(s: int) -> int:
        return ids[s % n]

    held: dict[int, list[int]] = {c: [] for c in ids}
    for s in range(count):
        h = holders.get(s)
        if h in held:
            held[h].append(s)
    target: dict[int, int | None] = {}
    load = {c: 0 for c in ids}
    for c in ids:  # the extra places by id, not by size: the same choice at every step of a handover
        keep = base
        if extra and len(held[c]) > base:
            keep, extra = base + 1, extra - 1
        for s in sorted(held[c], key=lambda s: (preferred(s) != c, s))[:keep]:
            target[s] = c
            load[c] += 1
    for s in range(count):
        if s not in target:
            p = preferred(s)
            c = p if load[p] < base else min(ids, key=lambda c: (load[c], c))
            target[s] = c
            load[c] += 1
    return target
