"""Checks of DESIGN section 9, invariants 1-3, over member journals and a ZooKeeper history.

Each check returns a list of human-readable violations (empty: the invariant
held), so a test can assert on it and print every violation at once.

1. ``single_owner``: within one generation, no partition is assigned to two members.
2. ``at_least_once``: every offset below the log end of every partition was consumed
   by some member (the topics are fresh, so the log starts at offset 0).
3. ``offsets_monotonic``: a committed offset in ZooKeeper never moves backwards
   between two samples of the same generation.

``exact_after_clean_close`` is the stronger check for a run in which members only
joined and left cleanly: every record consumed exactly once and the committed
offset equal to the number of records consumed, per partition.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable, Mapping, Sequence

from spark_coord.testing.zk_history import Sample

TopicPartition = tuple[str, int]
Journal = Sequence[Mapping[str, Any]]


def assignments_by_generation(journals: Mapping[str, Journal]) -> dict[int, dict[str, set[TopicPartition]]]:
    """generation -> member -> partitions it was started with (from ``assign`` events)."""
    out: dict[int, dict[str, set[TopicPartition]]] = defaultdict(dict)
    for member, events in journals.items():
        for e in events:
            if e["ev"] == "assign":
                out[e["gen"]][member] = {(t, p) for t, p, _ in e["parts"]}
    return dict(out)


def single_owner(journals: Mapping[str, Journal]) -> list[str]:
    """Invariant 1: at any generation a partition is owned by at most one member."""
    bad = []
    for gen, members in sorted(assignments_by_generation(journals).items()):
        seen: dict[TopicPartition, str] = {}
        for member, tps in sorted(members.items()):
            for tp in sorted(tps):
                if tp in seen:
                    bad.append(f"generation {gen}: {tp[0]}-{tp[1]} assigned to both {seen[tp]} and {member}")
                else:
                    seen[tp] = member
    return bad


def consumed(journals: Mapping[str, Journal]) -> Counter:
    """(topic, partition, offset) -> how many times any member took it."""
    c: Counter = Counter()
    for events in journals.values():
        for e in events:
            if e["ev"] == "recs":
                for o in e["offs"]:
                    c[(e["t"], e["p"], o)] += 1
    return c


def _ranges(offsets: Iterable[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"`` (for readable violations)."""
    out: list[str] = []
    run: list[int] = []
    for o in sorted(offsets):
        if run and o == run[-1] + 1:
            run.append(o)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [o]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def at_least_once(journals: Mapping[str, Journal], log_end: Mapping[TopicPartition, int]) -> list[str]:
    """Invariant 2: every offset in [0, log end) of every partition was consumed at least once."""
    got = consumed(journals)
    bad = []
    for (t, p), end in sorted(log_end.items()):
        missing = [o for o in range(end) if (t, p, o) not in got]
        if missing:
            bad.append(f"{t}-{p}: {len(missing)} of {end} records never consumed (offsets {_ranges(missing)})")
    return bad


def offsets_monotonic(samples: Sequence[Sample]) -> list[str]:
    """Invariant 3: within a generation, no committed offset in ZooKeeper moves backwards."""
    bad = []
    last: dict[TopicPartition, tuple[int, int, float]] = {}  # tp -> (generation, offset, ts)
    for s in samples:
        for tp, off in s.offsets.items():
            prev = last.get(tp)
            if prev is not None and prev[0] == s.generation and off < prev[1]:
                bad.append(f"generation {s.generation}: committed offset of {tp[0]}-{tp[1]} went back from "
                           f"{prev[1]} to {off} (at {s.ts:.3f})")
            last[tp] = (s.generation, off, s.ts)
    return bad


def offset_regressions_across_generations(samples: Sequence[Sample]) -> list[str]:
    """Committed offsets that moved backwards across a generation change (allowed, but worth a look)."""
    out = []
    last: dict[TopicPartition, tuple[int, int]] = {}
    for s in samples:
        for tp, off in s.offsets.items():
            prev = last.get(tp)
            if prev is not None and off < prev[1]:
                out.append(f"{tp[0]}-{tp[1]}: {prev[1]} (generation {prev[0]}) -> {off} (generation {s.generation})")
            last[tp] = (s.generation, off)
    return out


def exact_after_clean_close(journals: Mapping[str, Journal], committed: Mapping[TopicPartition, int],
                            log_end: Mapping[TopicPartition, int]) -> list[str]:
    """After members only joined and closed cleanly: each record consumed once, and the
    committed offset of each partition equals the records consumed from it (= its log end)."""
    got = consumed(journals)
    per_partition: Counter = Counter()
    bad = []
    dups: dict[TopicPartition, list[int]] = defaultdict(list)
    for (t, p, o), n in got.items():
        per_partition[(t, p)] += 1
        if n > 1:
            dups[(t, p)].append(o)
    for tp, offs in sorted(dups.items()):
        bad.append(f"{tp[0]}-{tp[1]}: {len(offs)} records consumed more than once (offsets {_ranges(offs)})")
    for tp in sorted(set(log_end) | set(committed)):
        c, n, end = committed.get(tp), per_partition.get(tp, 0), log_end.get(tp)
        if c != n or n != end:
            bad.append(f"{tp[0]}-{tp[1]}: committed offset {c}, {n} distinct records consumed, log end {end}")
    return bad


def check_all(journals: Mapping[str, Journal], samples: Sequence[Sample],
              log_end: Mapping[TopicPartition, int]) -> list[str]:
    """Invariants 1-3 together."""
    return (single_owner(journals) + at_least_once(journals, log_end) + offsets_monotonic(samples))
