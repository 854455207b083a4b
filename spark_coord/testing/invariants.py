"""Checks of DESIGN section 9 over member journals and a ZooKeeper history.

Each check returns a list of human-readable violations (empty: the invariant
held), so a test can assert on it and print every violation at once.

1. ``single_owner``: within one generation, no partition is assigned to two members;
   ``one_owner_at_a_time``: whatever the generations, no two members own a partition
   at the same moment (ownership intervals from the journals, ended by a member's
   death, its StopFetcher, or the end of its lease);
   ``delivered_outside_ownership``: no member delivered a record of a partition it did
   not own at that moment.
2. ``at_least_once``: every offset below the log end of every partition was consumed
   by some member (the topics are fresh, so the log starts at offset 0).
3. ``offsets_monotonic``: a committed offset in ZooKeeper never moves backwards
   between two samples of the same generation.
8. ``liveness``: while records wait on a partition a member owns, that member
   delivers some of them within a bound (leader outages and member pauses excepted).

``exact_after_clean_close`` is the stronger check for a run in which members only
joined and left cleanly: every record consumed exactly once and the committed
offset equal to the number of records consumed, per partition.  ``duplicates``
counts extra deliveries (and how many went to a member that had read the record
already).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable, Mapping, Sequence

from spark_coord.common import TopicPartition
from spark_coord.testing.zk_history import Sample

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


# ------------------------------------------------------------------ ownership over time

Interval = tuple[float, float]   #: (start, end) in epoch seconds
Windows = Mapping[str, Sequence[Interval]]


def ownership_intervals(journals: Mapping[str, Journal], deaths: Mapping[str, float] | None = None,
                        end_of_run: float = float("inf")) -> dict[TopicPartition, list[tuple[float, float, str]]]:
    """partition -> [(start, end, member)]: a member owns a partition from an ``assign`` or
    ``resume`` naming it until its next ``stop`` (of everything, or naming it in ``parts``),
    ``lost`` (at its ``lease_end`` when earlier), ``closed``, an ``assign`` without it, or
    its death (``deaths``: member -> time of its SIGKILL).  An ``assign`` is the member's
    complete assignment: a partition it already owned goes on being owned."""
    out: dict[TopicPartition, list[tuple[float, float, str]]] = defaultdict(list)
    for member, events in journals.items():
        open_: dict[TopicPartition, float] = {}

        def close_all(at: float) -> None:
            for tp, start in open_.items():
                out[tp].append((start, max(start, at), member))
            open_.clear()

        def close(tps, at: float) -> None:
            for tp in tps:
                start = open_.pop(tp, None)
                if start is not None:
                    out[tp].append((start, max(start, at), member))

        for e in events:
            if e["ev"] in ("assign", "resume"):
                named = {(t, p) for t, p, _ in e["parts"]}
                close([tp for tp in open_ if tp not in named], e["ts"])
                for tp in named:
                    open_.setdefault(tp, e["ts"])
            elif e["ev"] == "stop" and e.get("parts") is not None:
                close([(t, p) for t, p in e["parts"]], e["ts"])
            elif e["ev"] in ("stop", "closed"):
                close_all(e["ts"])
            elif e["ev"] == "lost":
                close_all(min(e["ts"], e.get("lease_end", e["ts"])))
        died = (deaths or {}).get(member)
        close_all(died if died is not None else end_of_run)
    return {tp: sorted(v) for tp, v in out.items()}


def one_owner_at_a_time(intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]]) -> list[str]:
    """Invariant 1 over time: no two members own a partition at the same moment."""
    bad = []
    for tp, spans in sorted(intervals.items()):
        for i, (s1, e1, m1) in enumerate(spans):
            for s2, e2, m2 in spans[i + 1:]:
                if s2 >= e1:
                    break
                if m2 != m1 and min(e1, e2) > s2:
                    bad.append(f"{tp[0]}-{tp[1]} owned by {m1} ({s1:.3f}-{e1:.3f}) and {m2} ({s2:.3f}-{e2:.3f}) "
                               f"for {min(e1, e2) - s2:.3f} s at once")
    return bad


def deliveries(journals: Mapping[str, Journal]) -> dict[str, list[tuple[float, str, int, list[int]]]]:
    """member -> [(ts, topic, partition, offsets)] of its ``recs`` events."""
    return {m: [(e["ts"], e["t"], e["p"], e["offs"]) for e in events if e["ev"] == "recs"]
            for m, events in journals.items()}


def delivered_outside_ownership(journals: Mapping[str, Journal],
                                intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]],
                                slack: float = 0.05) -> list[str]:
    """No member hands out a record of a partition it does not own at that moment (``slack``
    seconds of tolerance: the journal line follows the delivery)."""
    bad = []
    for member, recs in deliveries(journals).items():
        for ts, t, p, offs in recs:
            spans = intervals.get((t, p), ())
            if not any(m == member and s - slack <= ts <= e + slack for s, e, m in spans):
                bad.append(f"{member} delivered {t}-{p} offsets {offs[0]}..{offs[-1]} at {ts:.3f} without owning it")
    return bad


def _during(windows: Sequence[Interval], a: float, b: float) -> bool:
    return any(s < b and e > a for s, e in windows)


def _start_offsets(journals: Mapping[str, Journal]) -> dict[tuple[str, float, TopicPartition], int]:
    """(member, ts of its assign/resume, partition) -> the offset it started from (-1: unknown)."""
    return {(m, e["ts"], (t, p)): o for m, events in journals.items() for e in events
            if e["ev"] in ("assign", "resume") for t, p, o in e["parts"]}


def liveness(journals: Mapping[str, Journal],
             intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]],
             log_ends: Mapping[TopicPartition, Sequence[tuple[float, int]]], bound: float,
             leader_down: Mapping[TopicPartition, Sequence[Interval]] | None = None,
             member_paused: Windows | None = None, step: float = 1.0, unknown_start: int = -1) -> list[str]:
    """Invariant 8: while a member owns a partition on which records wait (log end, sampled,
    above its position: what it delivered in that ownership, or where it started), it delivers
    some within ``bound`` seconds -- unless the partition's leader was down or the member was
    paused meanwhile.  ``log_ends``: partition -> [(ts, end)]; ``unknown_start``: the position
    of a member started with offset -1 (auto.offset.reset: 0 for smallest on a fresh topic)."""
    recs = deliveries(journals)
    starts = _start_offsets(journals)
    bad = []
    for tp, spans in sorted(intervals.items()):
        ends = sorted(log_ends.get(tp, ()))
        if not ends:
            continue
        for start, end, member in spans:
            mine = sorted((ts, max(offs) + 1) for ts, t, p, offs in recs.get(member, ())
                          if (t, p) == tp and start <= ts <= end)
            position = starts.get((member, start, tp), -1)
            position = unknown_start if position < 0 else position
            x = start + bound
            while x + bound <= end:
                sampled = [e for ts, e in ends if ts <= x]
                at = max([position] + [o for ts, o in mine if ts <= x])
                if sampled and at >= 0 and sampled[-1] > at and \
                        not _during((leader_down or {}).get(tp, ()), x - bound, x + bound) and \
                        not _during((member_paused or {}).get(member, ()), x - bound, x + bound) and \
                        not any(x < ts <= x + bound for ts, _ in mine):
                    bad.append(f"{tp[0]}-{tp[1]}: {member} owned it with records waiting (log end {sampled[-1]}, "
                               f"its position {at}) at {x:.3f} and delivered none within {bound:.0f} s")
                    break
                x += step
    return bad


def duplicates(journals: Mapping[str, Journal]) -> dict[str, int]:
    """``records`` distinct, ``extra`` deliveries beyond the first, ``same_member`` of those extra
    deliveries that went to a member (incarnation) that had delivered that record already."""
    seen: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    extra = same = total = 0
    for member, events in journals.items():
        for e in events:
            if e["ev"] != "recs":
                continue
            for o in e["offs"]:
                key = (e["t"], e["p"], o)
                total += 1
                if key in seen:
                    extra += 1
                    if member in seen[key]:
                        same += 1
                seen[key].add(member)
    return {"records": len(seen), "deliveries": total, "extra": extra, "same_member": same}


def committed_at_log_end(committed: Mapping[TopicPartition, int], log_end: Mapping[TopicPartition, int]) -> list[str]:
    """Invariant 6: after a clean close the group's committed offsets equal the log end."""
    return [f"{tp[0]}-{tp[1]}: committed {committed.get(tp)}, log end {end}"
            for tp, end in sorted(log_end.items()) if committed.get(tp, 0 if end == 0 else None) != end]


def check_all(journals: Mapping[str, Journal], samples: Sequence[Sample],
              log_end: Mapping[TopicPartition, int]) -> list[str]:
    """Invariants 1-3 together."""
    return (single_owner(journals) + at_least_once(journals, log_end) + offsets_monotonic(samples))
