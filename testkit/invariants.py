"""Checks of the invariants (one holder at a time: DESIGN.md "One holder at a time (invariant 1)";
at least once, offsets never backwards, liveness) over member journals and a ZooKeeper history.

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
   ``acknowledged_commits_kept``: an owner never starts below an offset whose commit the
   coordinator acknowledged before its ownership began.
8. ``liveness``: while records wait on a partition a member owns, that member
   delivers some of them within a bound (leader outages and member pauses excepted).

Share groups (KIP-932) have checks of their own over the journals of ``testkit.share_member``
(``recs`` lines carry each record's delivery ``counts``; ``ack`` lines what ``commit_sync``
answered per partition, ``code`` 0 = the broker confirmed the acceptance):

- ``share_at_least_once``: every expected record was delivered to the share group at least once;
- ``share_lock_overlaps``: no record was acquired by a member while another delivery of it still
  held its acquisition lock (two deliveries with the same delivery count, or a later one within
  the lock duration of the earlier one without a release: holder killed or closed, leader
  killed, the group reassigned);
- ``share_confirmed_again``: no record whose acceptance the broker confirmed was acquired again
  (after the confirmation: delivered again; before it: a stale acknowledgement accepted);
- ``share_redeliveries``: every redelivery explained by a fault that hit the records in flight
  (of their holder, of the partition's leader), or else by a reassignment of the group.

``exact_after_clean_close`` is the stronger check for a run in which members only
joined and left cleanly: every record consumed exactly once and the committed
offset equal to the number of records consumed, per partition.  ``duplicates``
counts extra deliveries (and how many went to a member that had read the record
already).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from spark_coord.common import TopicPartition
from testkit.zk_history import Sample

Journal = Sequence[Mapping[str, Any]]


def assignments_by_generation(journals: Mapping[str, Journal]) -> dict[int, dict[str, set[TopicPartition]]]:
    """generation -> member -> partitions it was started with (from ``assign`` events; those of
    Kafka-protocol members carry no generation and are left out)."""
    out: dict[int, dict[str, set[TopicPartition]]] = defaultdict(dict)
    for member, events in journals.items():
        for e in events:
            if e["ev"] == "assign" and e.get("gen") is not None:
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
    complete assignment: a partition it already owned goes on being owned.

    Kafka-protocol members (``testkit.kafka_member``) journal what their rebalance callbacks
    received: an ``assign`` marked ``incremental`` (cooperative protocol) adds partitions to
    those held, a ``revoke`` or a ``lost`` naming ``parts`` ends the ownership of those only."""
    out: dict[TopicPartition, list[tuple[float, float, str]]] = defaultdict(list)
    for member, events in journals.items():
        died = (deaths or {}).get(member)
        _add_ownership(out, member, events, died if died is not None else end_of_run)
    return {tp: sorted(v) for tp, v in out.items()}


def _add_ownership(out: dict[TopicPartition, list[tuple[float, float, str]]], member: str, events: Journal,
                   end: float) -> None:
    """Append ``member``'s intervals (``ownership_intervals``) to ``out``; those still open end at ``end``."""
    open_: dict[TopicPartition, float] = {}

    def close_all(at: float) -> None:
        for tp, start in open_.items():
            out[tp].append((start, max(start, at), member))
        open_.clear()

    def close(tps: Iterable[TopicPartition], at: float) -> None:
        for tp in tps:
            start = open_.pop(tp, None)
            if start is not None:
                out[tp].append((start, max(start, at), member))

    for e in events:
        if e["ev"] == "assign" and e.get("incremental"):
            for t, p, _ in e["parts"]:
                open_.setdefault((t, p), e["ts"])
        elif e["ev"] in ("assign", "resume"):
            named = {(t, p) for t, p, _ in e["parts"]}
            close([tp for tp in open_ if tp not in named], e["ts"])
            for tp in named:
                open_.setdefault(tp, e["ts"])
        elif e["ev"] in ("revoke", "lost") and "parts" in e:
            close([(t, p) for t, p in e["parts"]], e["ts"])
        elif e["ev"] == "stop" and e.get("parts") is not None:
            close([(t, p) for t, p in e["parts"]], e["ts"])
        elif e["ev"] in ("stop", "closed"):
            close_all(e["ts"])
        elif e["ev"] == "lost":
            close_all(min(e["ts"], e.get("lease_end", e["ts"])))
    close_all(end)


def one_owner_at_a_time(intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]],
                        unleased: Iterable[str] = (), journals: Mapping[str, Journal] | None = None,
                        zombie: Windows | None = None, fenced: Windows | None = None) -> list[str]:
    """Invariant 1 over time: no two members own a partition at the same moment.

    ``unleased`` members (Kafka-protocol members: no lease; a member paused past its session
    learns that it lost its partitions, and journals it, only once it runs again) count in an
    overlap only when they delivered a record of the partition during it (from ``journals``).
    Deliveries inside one of an unleased member's ``zombie`` windows (member -> windows: from a
    pause past its session until it learnt of the loss) do not count: a Kafka client hands out
    what it fetched before the pause before it hears that its session ended, and Kafka fences
    only its commits (which fail), not that delivery.  An overlap that lies inside one of a member's
    ``fenced`` windows (``fenced_windows``: its coordinator had fenced it before the other owner's
    assignment, and accepted no commit of it since) is such a zombie's too."""
    unleased = set(unleased)
    recs = deliveries(journals) if unleased and journals is not None else {}
    for m, windows in (zombie or {}).items():
        if m in recs:
            recs[m] = [r for r in recs[m] if not any(a <= r[0] <= b for a, b in windows)]
    bad = []
    for tp, spans in sorted(intervals.items()):
        for i, (s1, e1, m1) in enumerate(spans):
            for s2, e2, m2 in spans[i + 1:]:
                if s2 >= e1:
                    break
                if m2 != m1 and min(e1, e2) > s2:
                    a, b = s2, min(e1, e2)
                    if any(w0 <= a and b <= w1 for m in (m1, m2) for w0, w1 in (fenced or {}).get(m, ())):
                        continue  # one of them was a fenced zombie all along
                    if any(m in unleased and not any((t, p) == tp and a <= ts <= b for ts, t, p, _ in recs.get(m, ()))
                           for m in (m1, m2)):
                        continue  # the unleased one delivered nothing of it meanwhile
                    bad.append(f"{tp[0]}-{tp[1]} owned by {m1} ({s1:.3f}-{e1:.3f}) and {m2} ({s2:.3f}-{e2:.3f}) "
                               f"for {min(e1, e2) - s2:.3f} s at once")
    return bad


def fenced_windows(journals: Mapping[str, Journal], members: Iterable[str]) -> dict[str, list[Interval]]:
    """Kafka-protocol ``members`` -> the windows in which their coordinator may have fenced them and
    they did not know yet: from the last commit the coordinator accepted before a ``lost`` (librdkafka's
    callback for an assignment taken away without a revocation: the member's session or epoch ended
    at the coordinator) until that ``lost``.  Nothing the member committed in such a window counted
    (an accepted commit ends the window before it starts); what it delivered there was fetched by a
    zombie, which Kafka fences at its commits, not at its fetches.  A window starts no earlier than
    the member's ownership that the ``lost`` ends."""
    out: dict[str, list[Interval]] = {}
    for m in members:
        since = None     # start of the window in the making: the latest accepted commit or assignment
        for e in journals.get(m, ()):
            ev = e["ev"]
            if ev == "assign" or (ev == "commit" and e.get("code", 0) == 0):
                since = e["ts"]
            elif ev == "lost" and since is not None:
                out.setdefault(m, []).append((since, e["ts"]))
                since = None
    return out


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
            if _owned_since(intervals, member, (t, p), ts, slack) is None:
                bad.append(f"{member} delivered {t}-{p} offsets {offs[0]}..{offs[-1]} at {ts:.3f} without owning it")
    return bad


class _Acknowledged:
    """The commits the coordinator acknowledged (``commit`` lines with code 0, any member), per
    partition in time order: the highest offset acknowledged by a moment, and when."""

    def __init__(self, journals: Mapping[str, Journal]):
        acked: dict[TopicPartition, list[tuple[float, int]]] = defaultdict(list)
        for events in journals.values():
            for e in events:
                if e["ev"] == "commit" and e.get("code", 0) == 0:
                    acked[(e["t"], e["p"])].append((e["ts"], e["off"]))
        self._by_tp: dict[TopicPartition, tuple[list[float], list[int], list[float]]] = {}
        for tp, commits in acked.items():
            commits.sort()
            highest, when, top, at = [], [], -1, 0.0
            for ts, off in commits:
                if off > top:
                    top, at = off, ts
                highest.append(top)
                when.append(at)
            self._by_tp[tp] = ([ts for ts, _ in commits], highest, when)

    def before(self, tp: TopicPartition, moment: float) -> tuple[int, float]:
        """(the highest offset acknowledged before ``moment``, when it was); (-1, 0.0) if none."""
        found = self._by_tp.get(tp)
        if found is None:
            return -1, 0.0
        times, highest, when = found
        i = bisect.bisect_left(times, moment)
        return (highest[i - 1], when[i - 1]) if i else (-1, 0.0)


def _owned_since(intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]], member: str,
                 tp: TopicPartition, ts: float, slack: float = 0.05) -> float | None:
    """When ``member``'s ownership of ``tp`` that holds ``ts`` began (None: it held none then)."""
    for start, end, m in intervals.get(tp, ()):
        if m == member and start - slack <= ts <= end + slack:
            return start
    return None


def acknowledged_commits_kept(journals: Mapping[str, Journal],
                              intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]]) -> list[str]:
    """A commit the group's coordinator acknowledged is never read past again: an owner whose
    ownership of a partition began after a commit of offset C was acknowledged (a ``commit``
    line with code 0, any member) starts at C or later.  Only an owner's first delivery of each
    ownership counts, so a fenced zombie still delivering what it fetched (Kafka allows it; its
    ownership began before the commit) is not one; a commit answered but not in the store is.  Give
    it the journals without a restarted Spark member's replayed batches (which start where its
    checkpoint says, below what the group committed since, by design)."""
    acked = _Acknowledged(journals)
    firsts: dict[tuple[str, TopicPartition], list[tuple[float, int]]] = defaultdict(list)
    for member, recs in deliveries(journals).items():
        for ts, t, p, offs in recs:
            if offs:
                firsts[(member, (t, p))].append((ts, offs[0]))
    bad = []
    for tp, spans in intervals.items():
        for start, end, member in spans:
            top, when = acked.before(tp, start)
            if top < 0:
                continue
            recs = firsts.get((member, tp), [])
            j = bisect.bisect_left(recs, (start, -1))
            if j == len(recs) or recs[j][0] > end:
                continue
            ts, first = recs[j]
            if first < top:
                bad.append(f"{tp[0]}-{tp[1]}: {member} took it at {start:.3f} and read from {first} at {ts:.3f}, "
                           f"below offset {top} whose commit was acknowledged at {when:.3f}")
    return bad


def duplicate_causes(journals: Mapping[str, Journal],
                     intervals: Mapping[TopicPartition, Sequence[tuple[float, float, str]]]) -> dict[str, int]:
    """Why each delivery of a record after its first happened: ``unacknowledged`` -- no commit
    past it had been acknowledged yet (at-least-once: the first reader's commits failed or never
    came, and the next owner read from the last commit); ``zombie`` -- one had, but the member
    delivering it again owned the partition from before that commit (a fenced member delivering
    what it fetched earlier, which Kafka allows; or a member reading its own prefetched records);
    ``acknowledged`` -- one had, before this member's ownership began (a commit lost after it was
    answered: ``acknowledged_commits_kept`` names them); ``replayed`` -- a batch a restarted Spark
    member replayed from its checkpoint (its ``recs`` line marked ``replay``: planned by the killed
    run of the query, delivered again by design); ``outside`` -- by a member owning the partition
    at no moment near then (``delivered_outside_ownership`` lists them; a Spark member's batch in
    flight when it was paused past its session is one)."""
    acked = _Acknowledged(journals)
    causes = {"unacknowledged": 0, "zombie": 0, "acknowledged": 0, "replayed": 0, "outside": 0}
    for ts, member, e, o, again in _deliveries(journals):
        if not again:
            continue
        if e.get("replay"):
            causes["replayed"] += 1
            continue
        tp = (e["t"], e["p"])
        top, when = acked.before(tp, ts)
        if top <= o:
            causes["unacknowledged"] += 1
            continue
        since = _owned_since(intervals, member, tp, ts)
        if since is None:
            causes["outside"] += 1
        elif when >= since:
            causes["zombie"] += 1
        else:
            causes["acknowledged"] += 1
    return causes


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
    by_owner: dict[tuple[str, TopicPartition], list[tuple[float, int]]] = defaultdict(list)
    for member, recs in deliveries(journals).items():
        for ts, t, p, offs in recs:
            by_owner[(member, (t, p))].append((ts, max(offs) + 1))
    for owned in by_owner.values():
        owned.sort()
    starts = _start_offsets(journals)
    bad = []
    for tp, spans in sorted(intervals.items()):
        ends = sorted(log_ends.get(tp, ()))
        if not ends:
            continue
        end_ts = [ts for ts, _ in ends]
        for start, end, member in spans:
            # an ownership open at the end (no close journaled) ends with the samples
            end = min(end, end_ts[-1] + bound)
            owned = by_owner.get((member, tp), [])
            lo, hi = bisect.bisect_left(owned, (start, -1)), bisect.bisect_right(owned, (end, float("inf")))
            mine_ts = [ts for ts, _ in owned[lo:hi]]
            reached = list(itertools.accumulate((o for _, o in owned[lo:hi]), max))  # position after each
            position = starts.get((member, start, tp), -1)
            position = unknown_start if position < 0 else position
            x = start + bound
            while x + bound <= end:
                n_sampled = bisect.bisect_right(end_ts, x)
                n_mine = bisect.bisect_right(mine_ts, x)
                at = max(position, reached[n_mine - 1]) if n_mine else position
                delivered_next = n_mine < len(mine_ts) and mine_ts[n_mine] <= x + bound
                if n_sampled and at >= 0 and ends[n_sampled - 1][1] > at and \
                        not _during((leader_down or {}).get(tp, ()), x - bound, x + bound) and \
                        not _during((member_paused or {}).get(member, ()), x - bound, x + bound) and \
                        not delivered_next:
                    bad.append(f"{tp[0]}-{tp[1]}: {member} owned it with records waiting (log end "
                               f"{ends[n_sampled - 1][1]}, its position {at}) at {x:.3f} and delivered none "
                               f"within {bound:.0f} s")
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


def _deliveries(journals: Mapping[str, Journal]) -> Iterator[tuple[float, str, dict, int, bool]]:
    """Every delivery of a record, in time order across members (journal order for equal times):
    (time, member, its ``recs`` event, offset, ``again``: some member had delivered the record before)."""
    seen: set[tuple[str, int, int]] = set()
    events = sorted(((e["ts"], member, e) for member, evs in journals.items() for e in evs if e["ev"] == "recs"),
                    key=lambda x: x[0])
    for ts, member, e in events:
        for o in e["offs"]:
            key = (e["t"], e["p"], o)
            again = key in seen
            if not again:
                seen.add(key)
            yield ts, member, e, o, again


def redelivery_times(journals: Mapping[str, Journal]) -> list[float]:
    """When each delivery of a record after its first happened (one entry per record delivered
    again, a batch's records sharing its time), in time order."""
    return [ts for ts, _, _, _, again in _deliveries(journals) if again]


def duplicates_by_member(journals: Mapping[str, Journal]) -> dict[str, dict[str, int]]:
    """member -> ``records`` (distinct records it delivered), ``extra`` (its deliveries of a record
    some member had delivered before: a duplicate it handed out), ``same_member`` (of those, the
    records it had delivered itself before).  Deliveries are ordered by time across members."""
    out: dict[str, dict[str, int]] = {m: {"records": 0, "extra": 0, "same_member": 0} for m in journals}
    mine: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for _, member, e, o, again in _deliveries(journals):
        stats, key = out[member], (e["t"], e["p"], o)
        if again:
            stats["extra"] += 1
            if key in mine[member]:
                stats["same_member"] += 1
        if key not in mine[member]:
            mine[member].add(key)
            stats["records"] += 1
    return out


def committed_at_log_end(committed: Mapping[TopicPartition, int], log_end: Mapping[TopicPartition, int]) -> list[str]:
    """Invariant 6: after a clean close the group's committed offsets equal the log end."""
    return [f"{tp[0]}-{tp[1]}: committed {committed.get(tp)}, log end {end}"
            for tp, end in sorted(log_end.items()) if committed.get(tp, 0 if end == 0 else None) != end]


# ------------------------------------------------------------------ share groups (KIP-932)

Record = tuple[str, int, int]   #: (topic, partition, offset)


class ShareDelivery(NamedTuple):
    """One delivery of one record to a share member (a ``recs`` line of ``testkit.share_member``)."""

    ts: float       #: when the member journaled it (the broker acquired it before)
    lo: float       #: the earliest the broker may have acquired it: the member's previous poll, less slack
    member: str
    count: int      #: its delivery count, as the broker told it


def share_deliveries(journals: Mapping[str, Journal], slack: float = 1.0) -> dict[Record, list[ShareDelivery]]:
    """record -> its deliveries, in acquisition order: by delivery count (the leader counts every
    acquisition), then by time.  A delivery's acquisition lies in ``[lo, ts]``: a member's poll
    returns records acquired since its previous poll (fetched ahead, or answered to a request sent
    before a pause), so ``lo`` is the journal time of the member's previous poll (its ``start`` for
    the first one) less ``slack`` seconds."""
    out: dict[Record, list[ShareDelivery]] = defaultdict(list)
    for member, events in journals.items():
        prev_poll = last_recs = None
        in_poll = False
        for e in events:
            if e["ev"] == "start" and prev_poll is None:
                prev_poll = e["ts"]
            if e["ev"] != "recs":
                in_poll = False
                continue
            if not in_poll:  # the first line of a poll (a poll writes one line per partition, together)
                in_poll = True
                if last_recs is not None:
                    prev_poll = last_recs
            last_recs = e["ts"]
            lo = (prev_poll if prev_poll is not None else e["ts"]) - slack
            counts = e.get("counts") or [0] * len(e["offs"])
            for o, c in zip(e["offs"], counts, strict=True):
                out[(e["t"], e["p"], o)].append(ShareDelivery(e["ts"], lo, member, c))
    for v in out.values():
        v.sort(key=lambda d: (d.count, d.ts))
    return dict(out)


def share_confirmed(journals: Mapping[str, Journal]) -> dict[Record, list[tuple[float, float, str]]]:
    """record -> [(confirmed at, commit_sync called at, member)]: acceptances the broker confirmed."""
    out: dict[Record, list[tuple[float, float, str]]] = defaultdict(list)
    for member, events in journals.items():
        for e in events:
            if e["ev"] == "ack" and e.get("code") == 0:
                for o in e["offs"]:
                    out[(e["t"], e["p"], o)].append((e["ts"], e.get("sent", e["ts"]), member))
    return dict(out)


def share_at_least_once(journals: Mapping[str, Journal], expected: Mapping[TopicPartition, Iterable[int]],
                        what: str = "records") -> list[str]:
    """Every expected offset of every partition was delivered to the share group at least once."""
    got = {(e["t"], e["p"], o) for events in journals.values() for e in events if e["ev"] == "recs"
           for o in e["offs"]}
    bad = []
    for (t, p), offs in sorted(expected.items()):
        offs = list(offs)
        missing = [o for o in offs if (t, p, o) not in got]
        if missing:
            bad.append(f"share group: {t}-{p}: {len(missing)} of {len(offs)} {what} never delivered "
                       f"(offsets {_ranges(missing)})")
    return bad


def _fmt(d: ShareDelivery) -> str:
    return f"{d.member} at {d.ts:.3f} (count {d.count})"


def share_lock_overlaps(journals: Mapping[str, Journal], lock_s: float, *,
                        released: Mapping[str, Sequence[float]] | None = None,
                        leader_lost: Mapping[TopicPartition, Sequence[float]] | None = None,
                        reassigned: Sequence[Interval] = (), slack: float = 1.0,
                        deliveries: Mapping[Record, list[ShareDelivery]] | None = None,
                        record_released: Mapping[Record, Sequence[tuple[float, str]]] | None = None) -> list[str]:
    """No record has two lock holders: each delivery of a record after the first (acquisition
    order) was acquired only once the one before it no longer held it.

    Two deliveries with the same delivery count are two acquisitions the leader did not count:
    allowed only when the partition's leader lost its in-memory state in between (``leader_lost``:
    partition -> when its leader was SIGKILLed; an acquisition is written to ZooKeeper behind, so
    its count may be lost with it).  A later count acquired (at the latest when journaled)
    before the earlier delivery's lock could have run out (its earliest acquisition plus
    ``lock_s``) needs a release in between: its holder killed or closed (``released``: member ->
    times), the leader SIGKILLed, or a reassignment of the group (``reassigned`` windows: a
    member whose assignment loses a partition forgets it in its share session, and what it held
    there goes back).  ``record_released`` (``share_released``: record -> [(sent, member)]): a
    release of the record by the earlier holder, sent in between, also lets it go."""
    deliveries = share_deliveries(journals, slack) if deliveries is None else deliveries
    released = released or {}
    leader_lost = leader_lost or {}
    record_released = record_released or {}
    bad = []
    for (t, p, o), ds in sorted(deliveries.items()):
        for d1, d2 in zip(ds, ds[1:], strict=False):
            lost = any(d1.lo <= k <= d2.ts for k in leader_lost.get((t, p), ()))
            if d1.count == d2.count and d1.count > 0:
                if not lost:
                    bad.append(f"{t}-{p} offset {o}: acquired twice with delivery count {d1.count}: "
                               f"{_fmt(d1)} and {_fmt(d2)}, no leader crash in between")
                continue
            if d2.ts >= d1.lo + lock_s or lost:
                continue
            if any(d1.lo <= k <= d2.ts for k in released.get(d1.member, ())):
                continue
            if any(m == d1.member and d1.lo <= k <= d2.ts for k, m in record_released.get((t, p, o), ())):
                continue
            if _during(reassigned, d1.lo, d2.ts):
                continue
            bad.append(f"{t}-{p} offset {o}: delivered to {_fmt(d2)} while {_fmt(d1)} still held it "
                       f"(its lock runs {lock_s:.1f} s from its acquisition, at the earliest {d1.lo:.3f}; "
                       f"no release, leader crash or reassignment in between)")
    return bad


def share_confirmed_again(journals: Mapping[str, Journal], slack: float = 1.0,
                          deliveries: Mapping[Record, list[ShareDelivery]] | None = None) -> list[str]:
    """No record whose acceptance the broker confirmed is acquired again.  The confirmed
    delivery is the member's last delivery of it before its ``commit_sync``; any delivery
    acquired after it (a higher delivery count, or -- counts equal -- surely acquired later) is a
    violation: journaled after the confirmation, the record came back; before it, the broker
    accepted an acknowledgement from a member that no longer held the record."""
    deliveries = share_deliveries(journals, slack) if deliveries is None else deliveries
    bad = []
    for rec, confirms in sorted(share_confirmed(journals).items()):
        ds = deliveries.get(rec, [])
        for at, sent, member in confirms:
            mine = [d for d in ds if d.member == member and d.ts <= sent]
            if not mine:
                bad.append(f"{rec[0]}-{rec[1]} offset {rec[2]}: {member}'s acceptance confirmed at {at:.3f} but it "
                           f"journaled no delivery of it before")
                continue
            a = max(mine, key=lambda d: d.ts)
            for d in ds:
                if d == a or not (d.count > a.count or (d.count == a.count and d.lo > a.ts)):
                    continue
                if d.ts > at:
                    bad.append(f"{rec[0]}-{rec[1]} offset {rec[2]}: delivered to {_fmt(d)} after the broker "
                               f"confirmed {member}'s acceptance (of its delivery at {a.ts:.3f}, count "
                               f"{a.count}) at {at:.3f}")
                else:
                    bad.append(f"{rec[0]}-{rec[1]} offset {rec[2]}: the broker confirmed {member}'s acceptance "
                               f"(of its delivery at {a.ts:.3f}, count {a.count}; commit at {sent:.3f}, confirmed "
                               f"{at:.3f}) although {_fmt(d)} had acquired it since")
    return bad


def share_redeliveries(journals: Mapping[str, Journal], lock_s: float, margin_s: float, *,
                       holder_faults: Mapping[str, Sequence[Interval]] | None = None,
                       leader_faults: Mapping[TopicPartition, Sequence[Interval]] | None = None,
                       reassigned: Sequence[Interval] = (), slack: float = 1.0,
                       deliveries: Mapping[Record, list[ShareDelivery]] | None = None,
                       record_released: Mapping[Record, Sequence[tuple[float, str]]] | None = None
                       ) -> dict[str, Any]:
    """Every redelivery (a delivery after a record's first, in acquisition order) explained by a
    fault that caught the earlier delivery in flight: one that began at most ``lock_s +
    margin_s`` after that delivery's earliest acquisition and ended (SIGCONT, restart) at most
    ``margin_s`` before it was journaled, and began before the redelivery (plus ``margin_s``) --
    of its holder (``holder_faults``: member -> (from, to) of its kills and pauses) or of the
    partition's leader (``leader_faults``: partition -> (from, to) of its kills and pauses).
    Those not explained so are explained by a reassignment when one of the ``reassigned``
    windows falls between the earlier delivery and the redelivery; the rest are unexplained.

    Returns ``redeliveries``, ``records`` (distinct records redelivered), ``holder``,
    ``leader``, ``reassigned`` (how many each explains, first match in that order),
    ``unexplained`` (count) and ``violations`` (the unexplained ones, described).  With
    ``record_released`` (``share_released``), a redelivery after the earlier holder released the
    record (the release sent between the two deliveries) is explained first, counted as ``released``."""
    deliveries = share_deliveries(journals, slack) if deliveries is None else deliveries
    record_released_map = record_released or {}
    holder_faults = holder_faults or {}
    leader_faults = leader_faults or {}
    n = Counter()
    records = 0
    bad = []

    def caught(windows, d1, d2) -> bool:
        return any(a <= d1.ts + lock_s + margin_s and b + margin_s >= d1.lo and a <= d2.ts + margin_s
                   for a, b in windows)

    for (t, p, o), ds in sorted(deliveries.items()):
        if len(ds) > 1:
            records += 1
        for d1, d2 in zip(ds, ds[1:], strict=False):
            n["redeliveries"] += 1
            if any(m == d1.member and d1.lo <= k <= d2.ts for k, m in record_released_map.get((t, p, o), ())):
                n["released"] += 1
            elif caught(holder_faults.get(d1.member, ()), d1, d2):
                n["holder"] += 1
            elif caught(leader_faults.get((t, p), ()), d1, d2):
                n["leader"] += 1
            elif _during(reassigned, d1.lo, d2.ts):
                n["reassigned"] += 1
            else:
                n["unexplained"] += 1
                bad.append(f"{t}-{p} offset {o}: delivered again to {_fmt(d2)} after {_fmt(d1)}, no fault of "
                           f"{d1.member} or of the partition's leader caught it in flight, no reassignment "
                           f"in between")
    return {"redeliveries": n["redeliveries"], "records": records, "holder": n["holder"], "leader": n["leader"],
            "reassigned": n["reassigned"], "unexplained": n["unexplained"], "violations": bad,
            **({"released": n["released"]} if record_released is not None else {})}


def share_released(journals: Mapping[str, Journal]) -> dict[Record, list[tuple[float, str]]]:
    """record -> [(sent, member)]: releases a member sent (``release`` lines of ``testkit.share_member``)
    that the broker confirmed or did not answer (``code`` 0 or null: it may have applied them)."""
    out: dict[Record, list[tuple[float, str]]] = defaultdict(list)
    for member, events in journals.items():
        for e in events:
            if e["ev"] == "release" and e.get("code") in (0, None):
                for o in e["offs"]:
                    out[(e["t"], e["p"], o)].append((e.get("sent", e["ts"]), member))
    return dict(out)


def share_rejected_again(journals: Mapping[str, Journal], slack: float = 1.0,
                         deliveries: Mapping[Record, list[ShareDelivery]] | None = None) -> list[str]:
    """No record whose rejection the broker confirmed (a ``reject`` line with ``code`` 0: archived for
    good) is acquired again: as ``share_confirmed_again`` for acceptances."""
    deliveries = share_deliveries(journals, slack) if deliveries is None else deliveries
    rejected = {m: [dict(e, ev="ack") for e in events if e["ev"] == "reject"] for m, events in journals.items()}
    return [v.replace("acceptance", "rejection") for v in share_confirmed_again(rejected, slack, deliveries)]


def share_count_limit(journals: Mapping[str, Journal], limit: int,
                      deliveries: Mapping[Record, list[ShareDelivery]] | None = None) -> list[str]:
    """No record is delivered with a delivery count above ``limit`` (the brokers'
    ``group.share.delivery.count.limit``): one released or expired ``limit`` times is archived."""
    deliveries = share_deliveries(journals) if deliveries is None else deliveries
    return [f"{t}-{p} offset {o}: delivered to {_fmt(d)}, above the delivery count limit {limit}"
            for (t, p, o), ds in sorted(deliveries.items()) for d in ds if d.count > limit]


def share_settled(journals: Mapping[str, Journal], expected: Mapping[TopicPartition, Iterable[int]], limit: int,
                  deliveries: Mapping[Record, list[ShareDelivery]] | None = None) -> list[str]:
    """Every expected record ended accepted or archived, by the members' journals: an acceptance or a
    rejection of it was sent (``ack`` / ``reject`` lines, whatever the answer: one answered with an
    error -- a request timed out, a connection lost -- may have been applied; the stored state at the
    end, ``share_final_state``, says which were), or it was delivered with the count ``limit``
    (released or expired after it, it was archived)."""
    deliveries = share_deliveries(journals) if deliveries is None else deliveries
    done = {(e["t"], e["p"], o) for events in journals.values() for e in events
            if e["ev"] in ("ack", "reject") for o in e["offs"]}
    bad = []
    for (t, p), offs in sorted(expected.items()):
        left = [o for o in offs if (t, p, o) not in done
                and not any(d.count >= limit for d in deliveries.get((t, p, o), ()))]
        if left:
            counts = sorted({max((d.count for d in deliveries.get((t, p, o), ())), default=0) for o in left})
            bad.append(f"share group: {t}-{p}: {len(left)} records ended neither accepted nor archived (no "
                       f"acceptance or rejection, no delivery at the count limit {limit}; highest counts {counts}): "
                       f"offsets {_ranges(left)}")
    return bad


#: Share-partition record states (``spark_coord.share.partition.RecordState``) that are final.
SHARE_FINAL_STATES = (2, 4)   # ACKNOWLEDGED, ARCHIVED


def share_final_state(state: Mapping[TopicPartition, Mapping[str, Any] | None],
                      log_end: Mapping[TopicPartition, int]) -> list[str]:
    """At the end (members drained), by the share group's stored state per partition (``{"start": N,
    "ranges": [[first, last, state, count], ...]}``, the znode ``/share-groups/<g>/<t>/<p>``): every
    record below the log end is accepted or archived -- the start offset is the log end, or every
    range from it to the log end is in a final state -- and the start is not past the log end."""
    bad = []
    for tp, end in sorted(log_end.items()):
        st = state.get(tp)
        if st is None:
            if end > 0:
                bad.append(f"share group: {tp[0]}-{tp[1]}: no stored state, the log ends at {end}")
            continue
        start = int(st["start"])
        if start > end:
            bad.append(f"share group: {tp[0]}-{tp[1]}: the start offset {start} is past the log end {end} at the end")
            continue
        covered, pos = [], start
        for first, last, state_id, _count in sorted(st.get("ranges") or ()):
            if last < pos or first >= end:
                continue
            if first > pos:
                covered.append((pos, first - 1, "no state (available)"))
            if state_id not in SHARE_FINAL_STATES:
                covered.append((max(first, pos), min(last, end - 1), f"state {state_id}"))
            pos = max(pos, last + 1)
        if pos < end:
            covered.append((pos, end - 1, "no state (available)"))
        for a, b, what in covered:
            bad.append(f"share group: {tp[0]}-{tp[1]}: offsets {a}-{b} ended neither accepted nor archived "
                       f"({what}; start {start}, log end {end})")
    return bad


def share_start_within_log(starts: Mapping[TopicPartition, Sequence[tuple[float, int, int]]],
                           log_ends: Mapping[TopicPartition, Sequence[tuple[float, int]]],
                           stale: Mapping[TopicPartition, Iterable[int]] | None = None,
                           cuts: Mapping[TopicPartition, Sequence[float]] | None = None) -> list[str]:
    """The share start offset never past the log end.  ``starts``: partition -> [(ts, start, version)],
    the stored start read at ``ts`` (its znode version); ``log_ends``: partition -> [(ts, end)], sampled.
    A start read at ``ts`` is compared with the first log end sampled at or after it (the last one when
    none is: a log end only grows, but for a truncated log).  ``stale``: partition -> znode versions
    written before its log was truncated and not since (a stored state its leader has not loaded
    again: the leader clips it on load, ``SharePartitionManager``) -- those samples are left out, as are
    those whose log end was sampled only after a truncation (``cuts``: partition -> when its log was cut)."""
    stale = stale or {}
    cuts = cuts or {}
    bad = []
    for tp, samples in sorted(starts.items()):
        ends = sorted(log_ends.get(tp, ()))
        times = [t for t, _ in ends]
        skip = set(stale.get(tp, ()))
        for ts, start, version in samples:
            if not ends or version in skip:
                continue
            i = bisect.bisect_left(times, ts)
            t_end, end = ends[min(i, len(ends) - 1)]
            if any(ts <= c <= t_end for c in cuts.get(tp, ())):
                continue
            if start > end:
                bad.append(f"share group: {tp[0]}-{tp[1]}: start offset {start} (znode version {version}, read at "
                           f"{ts:.3f}) past the log end {end} (sampled at {t_end:.3f})")
    return bad


def check_all(journals: Mapping[str, Journal], samples: Sequence[Sample],
              log_end: Mapping[TopicPartition, int]) -> list[str]:
    """Invariants 1-3 together."""
    return (single_owner(journals) + at_least_once(journals, log_end) + offsets_monotonic(samples))
