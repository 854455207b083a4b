"""The anomalies of Jepsen's Kafka workload, over our journals and what the log holds.

Jepsen's ``jepsen.tests.kafka`` checker names what can go wrong in a queue: these
functions find the same anomalies in a chaos run's history, so that a report reads in
the words of an analysis of Kafka itself.  A history here is

- ``acked``: partition -> values the producer had acknowledged (``testkit.producer``:
  value ``<partition>:<seq>``);
- ``log``: partition -> {offset: value}, the log read back at the end;
- ``seen``: partition -> [(offset, value)] read from the log during the run (a tailing
  reader, ``nemesis.LogTail``), in the order read -- what was at an offset earlier;
- ``journals``: member incarnation -> its journal (``testkit.member`` /
  ``testkit.kafka_member``): ``recs`` lines (``t``, ``p``, ``offs``) are its polls, and
  ``assign`` / ``resume`` / ``revoke`` / ``lost`` / ``stop`` / ``closed`` lines bound
  one assignment of a partition;
- ``log_ends``: partition -> [(ts, end)] sampled during the run (``LogEndSampler``).

Checks (each returns a list of human-readable anomalies; empty: none):

- ``lost_writes``: an acknowledged value that no poll ever returned although a poll
  returned a later offset of its partition, or that is not in the log at all (Jepsen's
  *lost-write*);
- ``unseen``: acknowledged values in the log that no poll returned and that lie above the
  highest offset any poll returned on their partition (Jepsen's *unseen*: not yet read
  when the run ended -- a violation only where every member caught up);
- ``duplicates``: one value at more than one offset of the log (Jepsen's *duplicate*);
- ``inconsistent_offsets``: two different values at one offset -- between what the tail
  reader saw during the run and the final log (Jepsen's *inconsistent-offsets*; in a
  one-replica log: a tail lost in a crash and the offsets written again);
- ``nonmonotonic_polls``: within one member's assignment of a partition, a poll that
  starts at or below the last offset it returned (Jepsen's *nonmonotonic-poll*);
- ``poll_skips``: within one assignment, a poll that starts above the next offset the
  log holds after the previous poll's last (Jepsen's *poll-skip*);
- ``realtime_lag``: per partition, the worst time from a record's appearance in the log
  (the first log-end sample that covered it) to its first poll (Jepsen's *worst realtime
  lag*; a figure, not an anomaly); given the windows when a partition's leader could not
  be reached, the same without the time spent inside them (the lag of a partition whose
  leader is reachable).

``check`` runs them all and returns a ``JepsenResult``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]
Journal = Sequence[Mapping[str, Any]]

#: Journal lines that end (or restart) a member's assignment of partitions: the poll order starts over.
_BOUNDARIES = ("assign", "resume", "revoke", "lost", "stop", "closed", "start")


def _polls(journals: Mapping[str, Journal]) -> dict[TopicPartition, set[int]]:
    out: dict[TopicPartition, set[int]] = defaultdict(set)
    for events in journals.values():
        for e in events:
            if e["ev"] == "recs":
                out[(e["t"], e["p"])].update(e["offs"])
    return out


def _where(log: Mapping[TopicPartition, Mapping[int, bytes]]) -> dict[TopicPartition, dict[bytes, list[int]]]:
    out: dict[TopicPartition, dict[bytes, list[int]]] = {}
    for tp, recs in log.items():
        by_value: dict[bytes, list[int]] = defaultdict(list)
        for off, value in sorted(recs.items()):
            by_value[value].append(off)
        out[tp] = by_value
    return out


def _never_polled(acked: Mapping[TopicPartition, Iterable[bytes]], log: Mapping[TopicPartition, Mapping[int, bytes]],
                  journals: Mapping[str, Journal]):
    """Per partition (in order): (partition, highest offset polled, [(value, its offsets in the log or
    [])] of the acknowledged values no member polled at any of their offsets)."""
    polled = _polls(journals)
    where = _where(log)
    for tp, values in sorted(acked.items()):
        seen = polled.get(tp, set())
        offsets = where.get(tp, {})
        yield tp, max(seen, default=-1), [(v, offsets.get(v) or []) for v in sorted(values)
                                          if not any(o in seen for o in offsets.get(v) or [])]


def lost_writes(acked: Mapping[TopicPartition, Iterable[bytes]], log: Mapping[TopicPartition, Mapping[int, bytes]],
                journals: Mapping[str, Journal]) -> list[str]:
    bad = []
    for tp, top, missing in _never_polled(acked, log, journals):
        for v, offs in missing:
            if not offs:
                bad.append(f"{tp[0]}-{tp[1]}: acknowledged value {v!r} is not in the log")
            elif min(offs) < top:
                bad.append(f"{tp[0]}-{tp[1]}: acknowledged value {v!r} at offset {min(offs)} was never polled, "
                           f"although offset {top} was")
    return bad


def unseen(acked: Mapping[TopicPartition, Iterable[bytes]], log: Mapping[TopicPartition, Mapping[int, bytes]],
           journals: Mapping[str, Journal]) -> list[str]:
    bad = []
    for tp, top, never in _never_polled(acked, log, journals):
        missing = sorted(min(offs) for _, offs in never if offs and min(offs) > top)
        if missing:
            bad.append(f"{tp[0]}-{tp[1]}: {len(missing)} acknowledged values never polled, offsets "
                       f"{missing[0]}..{missing[-1]} (highest polled {top})")
    return bad


def duplicates(log: Mapping[TopicPartition, Mapping[int, bytes]]) -> list[str]:
    bad = []
    for tp, by_value in sorted(_where(log).items()):
        for v, offs in sorted(by_value.items()):
            if len(offs) > 1:
                bad.append(f"{tp[0]}-{tp[1]}: value {v!r} at offsets {offs}")
    return bad


def inconsistent_offsets(seen: Mapping[TopicPartition, Sequence[tuple[int, bytes]]],
                         log: Mapping[TopicPartition, Mapping[int, bytes]]) -> list[str]:
    bad = []
    for tp in sorted(set(seen) | set(log)):
        values: dict[int, list[bytes]] = defaultdict(list)
        for off, v in seen.get(tp, ()):
            if v not in values[off]:
                values[off].append(v)
        for off, v in log.get(tp, {}).items():
            if v not in values[off]:
                values[off].append(v)
        for off, vs in sorted(values.items()):
            if len(vs) > 1:
                bad.append(f"{tp[0]}-{tp[1]}: offset {off} held {' then '.join(repr(v) for v in vs)}")
    return bad


def _poll_runs(journals: Mapping[str, Journal]):
    """(member, tp, [polls]) for every run of polls of one partition within one assignment."""
    for member, events in sorted(journals.items()):
        runs: dict[TopicPartition, list[list[int]]] = {}
        for e in events:
            if e["ev"] == "recs" and e.get("replay"):
                # a batch an earlier run of a Spark query planned, replayed from its checkpoint after a
                # restart: not a poll of the assignment the new run got (that starts at the group's offset)
                polls = runs.pop((e["t"], e["p"]), None)
                if polls:
                    yield member, (e["t"], e["p"]), polls
                yield member, (e["t"], e["p"]), [list(e["offs"])]
            elif e["ev"] == "recs":
                runs.setdefault((e["t"], e["p"]), []).append(list(e["offs"]))
            elif e["ev"] in _BOUNDARIES:
                parts = e.get("parts")
                touched = [(x[0], x[1]) for x in parts] if parts is not None and e["ev"] in (
                    "revoke", "lost", "stop") else list(runs)
                if e["ev"] in ("assign", "resume") and parts is not None and not e.get("incremental"):
                    # a new complete assignment: partitions it names start over (new start offsets)
                    touched = list(runs)
                for tp in touched:
                    polls = runs.pop(tp, None)
                    if polls:
                        yield member, tp, polls
        for tp, polls in runs.items():
            yield member, tp, polls


def nonmonotonic_polls(journals: Mapping[str, Journal]) -> list[str]:
    bad = []
    for member, tp, polls in _poll_runs(journals):
        last = None
        for offs in polls:
            if not offs:
                continue
            if any(b <= a for a, b in zip(offs, offs[1:], strict=False)) or (last is not None and offs[0] <= last):
                bad.append(f"{tp[0]}-{tp[1]}: {member} polled {offs[0]}..{offs[-1]} after {last}")
            last = max(offs[-1], last if last is not None else -1)
    return bad


def poll_skips(journals: Mapping[str, Journal], log: Mapping[TopicPartition, Mapping[int, bytes]]) -> list[str]:
    bad = []
    for member, tp, polls in _poll_runs(journals):
        present = sorted(log.get(tp, {}))
        last = None
        for offs in polls:
            if not offs:
                continue
            if last is not None:
                between = [o for o in present if last < o < offs[0]]
                if between:
                    bad.append(f"{tp[0]}-{tp[1]}: {member} polled {offs[0]} right after {last}, skipping "
                               f"{len(between)} offsets in the log ({between[0]}..{between[-1]})")
            within = [o for o in present if offs[0] <= o <= offs[-1] and o not in set(offs)]
            if within:
                bad.append(f"{tp[0]}-{tp[1]}: {member}'s poll {offs[0]}..{offs[-1]} skipped {within[:5]}")
            last = max(offs[-1], last if last is not None else -1)
    return bad


def _overlap(a: float, b: float, windows: Sequence[tuple[float, float]]) -> float:
    """Seconds of [a, b] covered by ``windows`` (which may overlap each other)."""
    covered, edge = 0.0, a
    for x, y in sorted(windows):
        x, y = max(x, edge), min(y, b)
        if y > x:
            covered += y - x
            edge = y
    return covered


def realtime_lag(journals: Mapping[str, Journal],
                 log_ends: Mapping[TopicPartition, Sequence[tuple[float, int]]],
                 unreachable: Mapping[TopicPartition, Sequence[tuple[float, float]]] | None = None,
                 ) -> dict[TopicPartition, float]:
    """partition -> the worst seconds from a record's first log-end sample to its first poll (records
    never polled count until the last poll of the run).  With ``unreachable`` (partition -> windows when
    its leader could not be reached), the time of a record's wait inside those windows is not counted:
    the lag of a partition whose leader is reachable."""
    first: dict[tuple[str, int, int], float] = {}
    last_poll = 0.0
    for events in journals.values():
        for e in events:
            if e["ev"] != "recs":
                continue
            last_poll = max(last_poll, e["ts"])
            for o in e["offs"]:
                key = (e["t"], e["p"], o)
                if key not in first or e["ts"] < first[key]:
                    first[key] = e["ts"]
    out: dict[TopicPartition, float] = {}
    for tp, samples in log_ends.items():
        worst, covered = 0.0, 0
        away = (unreachable or {}).get(tp, ())
        for ts, end in sorted(samples):
            for o in range(covered, end):
                got = first.get((tp[0], tp[1], o), last_poll)
                worst = max(worst, got - ts - (_overlap(ts, got, away) if away else 0.0))
            covered = max(covered, end)
        out[tp] = worst
    return out


@dataclass
class JepsenResult:
    lost_write: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    inconsistent_offsets: list[str] = field(default_factory=list)
    nonmonotonic_poll: list[str] = field(default_factory=list)
    poll_skip: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)
    worst_realtime_lag_s: float = 0.0
    realtime_lag_s: dict[str, float] = field(default_factory=dict)
    #: The same, not counting the time a partition's leader could not be reached (``check``'s ``unreachable``).
    worst_reachable_lag_s: float = 0.0

    #: The anomalies that are violations of a consumer group's contract (at-least-once, one value per
    #: offset, order within an assignment).  Duplicates are allowed (at-least-once delivery with
    #: a producer retry) but counted.
    VIOLATIONS = ("lost_write", "inconsistent_offsets", "nonmonotonic_poll", "poll_skip", "unseen")

    @property
    def violations(self) -> list[str]:
        return [f"{k}: {v}" for k in self.VIOLATIONS for v in getattr(self, k)]

    def counts(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in ("lost_write", "duplicate", "inconsistent_offsets",
                                                     "nonmonotonic_poll", "poll_skip", "unseen")}

    def to_dict(self) -> dict:
        return asdict(self)


def check(acked: Mapping[TopicPartition, Iterable[bytes]], log: Mapping[TopicPartition, Mapping[int, bytes]],
          journals: Mapping[str, Journal], seen: Mapping[TopicPartition, Sequence[tuple[int, bytes]]] | None = None,
          log_ends: Mapping[TopicPartition, Sequence[tuple[float, int]]] | None = None,
          unreachable: Mapping[TopicPartition, Sequence[tuple[float, float]]] | None = None) -> JepsenResult:
    lags = realtime_lag(journals, log_ends or {})
    reachable = realtime_lag(journals, log_ends or {}, unreachable) if unreachable else lags
    return JepsenResult(
        lost_write=lost_writes(acked, log, journals), duplicate=duplicates(log),
        inconsistent_offsets=inconsistent_offsets(seen or {}, log),
        nonmonotonic_poll=nonmonotonic_polls(journals), poll_skip=poll_skips(journals, log),
        unseen=unseen(acked, log, journals),
        worst_realtime_lag_s=round(max(lags.values(), default=0.0), 3),
        realtime_lag_s={f"{t}-{p}": round(v, 3) for (t, p), v in sorted(lags.items())},
        worst_reachable_lag_s=round(max(reachable.values(), default=0.0), 3))
