"""The checks of a chaos run over what it recorded, and the vocabulary they share with it.

``RunAnalysis`` is what ``ChaosRun`` (``testkit.chaos``) inherits to judge a run once it is
over: which members waited and when, which moments with two owners count, how long the
partitions no fault touched waited after a fault (against quiet moments of the same run),
what each member incarnation was handed again, and the share group's checks.  It starts
nothing and touches no process: it reads the run's record -- ``s`` (its ``ChaosSettings``),
``t0``, ``topic``, ``faults`` (``Fault``), ``members`` (incarnation -> process, with its
``kind``), ``kinds``, ``leaders`` (partition -> broker), ``broker_down`` and
``member_paused`` (windows), ``deaths`` (incarnation -> SIGKILL time), ``_owners`` (the
ownership intervals of ``invariants.ownership_intervals``), ``share_group`` -- and asks the
run for the share members' journals (``_share_journals()``) and for the brokers a fault hit
(``_share_leaders_hit(fault)``).  ``NemesisRun`` (``testkit.nemesis``) widens some of these
for its network and clock faults.

The checks themselves, over journals, are ``testkit.invariants``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from testkit import invariants

#: Member kinds: our thin consumer, confluent-kafka with the default (eager) assignors, with
#: cooperative-sticky and with the KIP-848 protocol, a Spark query -- members of the consumer group;
#: and ``share``, a confluent-kafka ShareConsumer of the run's share group.
MEMBER_KINDS = ("thin", "eager", "cooperative", "kip848", "spark", "share")
#: The kinds that are members of the consumer group.
GROUP_KINDS = ("thin", "eager", "cooperative", "kip848", "spark")
#: Member kinds that are librdkafka consumers (testkit.kafka_member).
KAFKA_KINDS = ("eager", "cooperative", "kip848")
#: How long after SIGCONT a Kafka member paused past its session may still deliver what it fetched
#: before the pause, at most, before it journals the loss (its next poll tells it).
ZOMBIE_GRACE_S = 5.0


@dataclass
class Fault:
    at: float          # epoch seconds when injected
    kind: str
    target: str        # member name or broker id
    until: float | None = None   # recovered (restarted, SIGCONT) at


class RunAnalysis:
    """The checks of a finished chaos run over its record (see the module's docstring)."""

    # ---------------------------------------------------------------- share group
    def _share_checks(self, ends: Mapping[tuple[str, int], int], acked: set[tuple[int, int]],
                      offsets: Mapping[tuple[int, int], int]) -> dict:
        """The share group's checks (``invariants.share_*``) over the share members' journals and the
        faults of the run; figures and violations.  ``offsets``: (partition, seq) -> offset of the
        producer's records in the log (``chaos.log_offsets``)."""
        s = self.s
        journals = self._share_journals()
        lock_s, slack, margin = s.share_lock_ms / 1000, s.share_slack_s, s.share_margin_s
        acked_in_log: dict = {}
        for key in acked:
            if key in offsets:
                acked_in_log.setdefault((self.topic, key[0]), []).append(offsets[key])
        acked_set = {(tp, o) for tp, offs in acked_in_log.items() for o in offs}
        others = {tp: [o for o in range(end) if (tp, o) not in acked_set] for tp, end in ends.items()}
        lost = (invariants.share_at_least_once(journals, {tp: sorted(v) for tp, v in acked_in_log.items()},
                                               "records acknowledged to the producer")
                + invariants.share_at_least_once(journals, {tp: v for tp, v in others.items() if v},
                                                 "records in the log not acknowledged to the producer"))
        deliveries = invariants.share_deliveries(journals, slack)
        share_names = [n for n in self.members if self._kind_of(n) == "share"]
        released: dict[str, list[float]] = {n: [e["ts"] for e in journals.get(n, ()) if e["ev"] == "closed"]
                                            for n in share_names}
        for n in share_names:
            if n in self.deaths:
                released[n].append(self.deaths[n])
        holder_faults: dict[str, list[tuple[float, float]]] = {}
        leader_faults: dict[tuple[str, int], list[tuple[float, float]]] = {}
        leader_lost: dict[tuple[str, int], list[float]] = {}
        reassigned: list[tuple[float, float]] = []
        session_s = s.member_session_ms / 1000
        for f in self.faults:
            until = f.until or f.at
            hit = self._share_leaders_hit(f)
            if hit:
                for p, b in self.leaders.items():
                    if b in hit:
                        leader_faults.setdefault((self.topic, p), []).append((f.at, until))
                        leader_lost.setdefault((self.topic, p), []).extend(hit[b])
                if f.kind in ("coordinator_kill", "coordinator_expiry"):
                    reassigned.append((f.at, until + 15.0))   # the members join the next coordinator
            elif self._kind_of(f.target) == "share":
                holder_faults.setdefault(f.target, []).append((f.at, until))
                reassigned.append((f.at, (f.at + session_s + 5.0) if f.kind == "member_kill" else until + 5.0))
        for n in share_names:
            for e in journals.get(n, ()):
                if e["ev"] == "start":
                    reassigned.append((e["ts"], e["ts"] + 10.0))
                elif e["ev"] == "closed":
                    reassigned.append((e["ts"] - 1.0, e["ts"] + 3.0))
        # records a member released (``--release``): delivered again by design, the release lets the lock go
        record_released = invariants.share_released(journals)
        redeliveries = invariants.share_redeliveries(
            journals, lock_s, margin, holder_faults=holder_faults, leader_faults=leader_faults,
            reassigned=reassigned, slack=slack, deliveries=deliveries, record_released=record_released)
        overlaps = invariants.share_lock_overlaps(journals, lock_s, released=released, leader_lost=leader_lost,
                                                  reassigned=reassigned, slack=slack, deliveries=deliveries,
                                                  record_released=record_released)
        again = invariants.share_confirmed_again(journals, slack, deliveries=deliveries)
        acks = [e for events in journals.values() for e in events if e["ev"] == "ack"]
        codes: dict[str, int] = {}
        for e in acks:
            if e.get("code") not in (0, None):
                key = str(e["code"])
                codes[key] = codes.get(key, 0) + len(e["offs"])
        n_records = len(deliveries)
        figures = {
            "group": self.share_group, "members": self.kinds.count("share"), "lock_s": lock_s,
            "expected": sum(ends.values()), "acked_expected": len(acked_set), "records": n_records,
            "deliveries": sum(len(v) for v in deliveries.values()),
            "redeliveries": redeliveries["redeliveries"], "redelivered_records": redeliveries["records"],
            "redelivered_pct": 100.0 * redeliveries["redeliveries"] / max(1, n_records),
            "by_holder": redeliveries["holder"], "by_leader": redeliveries["leader"],
            "by_reassignment": redeliveries["reassigned"], "unexplained": redeliveries["unexplained"],
            "by_release": redeliveries.get("released", 0),
            "max_count": max((d.count for v in deliveries.values() for d in v), default=0),
            # acquired before, by a member that died before journaling them (or by a fetch lost in a crash)
            "first_count_above_1": sum(1 for v in deliveries.values() if v[0].count > 1),
            "accepted": sum(len(e["offs"]) for e in acks),
            "confirmed": sum(len(e["offs"]) for e in acks if e.get("code") == 0),
            "ack_errors": sum(codes.values()), "ack_error_codes": dict(sorted(codes.items())),
            "ack_unknown": sum(len(e["offs"]) for e in acks if e.get("code") is None),
        }
        return {"figures": figures, "lost": lost, "lock_overlaps": overlaps, "confirmed_again": again,
                "unexplained": redeliveries["violations"]}

    # ---------------------------------------------------------------- waits and owners
    def _waiting_members(self, journals: Mapping[str, list[dict]] | None = None
                         ) -> dict[str, list[tuple[float, float]]]:
        """Member -> windows in which it could not deliver: paused by a fault; for a Kafka
        member, while the coordinator was down or paused and until librdkafka reconnects (its
        synchronous commit after a batch waits for a coordinator; its reconnect backoff grows
        to 10 s); and for a Spark member, from its start until its first batch (a cold query's
        JVM, Python workers and first reads: 10 to 27 s on a loaded 2-core machine). A Spark
        member that never delivers is not excused."""
        out = {m: list(w) for m, w in self.member_paused.items()}
        stalls = [(f.at, (f.until or f.at) + 15.0) for f in self.faults
                  if f.kind in ("coordinator_kill", "coordinator_expiry")]
        for name, m in self.members.items():
            if getattr(m, "kind", "thin") != "thin":
                out.setdefault(name, []).extend(stalls)
            if getattr(m, "kind", "thin") == "spark":
                events = (journals or {}).get(name, ())
                started = min((e["ts"] for e in events if e["ev"] == "start"), default=None)
                first = min((e["ts"] for e in events if e["ev"] == "recs"), default=None)
                if started is not None and first is not None:
                    out.setdefault(name, []).append((started, first))
        return out

    def _overlaps(self, journals: Mapping[str, list[dict]], intervals) -> tuple[list[str], list[str]]:
        """Moments with two owners of a partition: those that count, and those counted as well when the
        deliveries of fenced zombies (``invariants.fenced_windows``) are not set aside."""
        unleased = [n for n in self.members if self._kind_of(n) != "thin"]
        zombie = self._zombie_windows(journals)
        fenced = invariants.fenced_windows(journals, [n for n in unleased if self._kind_of(n) in KAFKA_KINDS])
        kept = without_replays(journals)
        return (invariants.one_owner_at_a_time(intervals, unleased=unleased, journals=kept, zombie=zombie,
                                               fenced=fenced),
                invariants.one_owner_at_a_time(intervals, unleased=unleased, journals=kept, zombie=zombie))

    def _zombie_windows(self, journals: Mapping[str, list[dict]]) -> dict[str, list[tuple[float, float]]]:
        """Kafka member -> windows from a pause (SIGSTOP) longer than its session timeout until it
        journaled the loss after SIGCONT (at most ``ZOMBIE_GRACE_S`` later): what it delivers then
        was fetched before the pause, and Kafka's guarantee ends at its session timeout."""
        session_s = (self.s.kafka_session_ms or self.s.member_session_ms) / 1000
        out: dict[str, list[tuple[float, float]]] = {}
        for f in self.faults:
            if f.kind != "member_stop" or f.until is None or self._kind_of(f.target) == "thin" \
                    or f.until - f.at <= session_s:
                continue
            learnt = [e["ts"] for e in journals.get(f.target, ()) if e["ev"] in ("lost", "revoke", "closed")
                      and f.until <= e["ts"] <= f.until + ZOMBIE_GRACE_S]
            out.setdefault(f.target, []).append((f.at, min(learnt, default=f.until + ZOMBIE_GRACE_S)))
        return out

    def _without_paused_batches(self, journals: Mapping[str, list[dict]]) -> dict[str, list[dict]]:
        """The journals without the ``recs`` lines of the batch a Spark member had in flight when it
        was paused (SIGSTOP) for longer than its session: the first batch it delivered after SIGCONT.
        Planned while its lease held, it is read and written once the process runs again, whatever
        the lease says by then -- what a paused Kafka consumer does with what it had fetched."""
        session_s = self.s.member_session_ms / 1000
        paused: dict[str, set] = {}
        for f in self.faults:
            if f.kind != "member_stop" or f.until is None or self._kind_of(f.target) != "spark" \
                    or f.until - f.at <= session_s:
                continue
            after = [e for e in journals.get(f.target, ()) if e["ev"] == "recs" and e["ts"] >= f.until]
            if after and after[0].get("batch") is not None:
                paused.setdefault(f.target, set()).add(after[0]["batch"])
        return {name: [e for e in events if not (e["ev"] == "recs" and e.get("batch") in paused.get(name, ()))]
                for name, events in journals.items()}

    # ---------------------------------------------------------------- stalls
    def _faulted_member(self, tp: tuple[str, int], a: float, b: float) -> bool:
        """Was the owner of ``tp`` at ``a`` paused or killed between ``a`` and ``b``?"""
        owners = {m for s, e, m in self._owners.get(tp, ()) if s <= a < e}
        return any(any(x < b and y > a for x, y in self.member_paused.get(m, ())) or
                   (m in self.deaths and a - 1 <= self.deaths[m] < b) for m in owners)

    def _stall(self, at: float, victim: int | None, journals, log_ends, horizon: float = 120.0) -> float:
        """How long after ``at`` every partition led by a live broker delivered a record produced
        after ``at`` again (the slowest partition; partitions whose owner was itself paused or
        killed meanwhile are left out: that stall is the member fault's, not the coordinator's)."""
        first: dict[int, list[tuple[float, int]]] = {}
        for events in journals.values():
            for e in events:
                if e["ev"] == "recs" and at < e["ts"] < at + horizon:
                    first.setdefault(e["p"], []).append((e["ts"], max(e["offs"])))
        worst = 0.0
        for p, leader in self.leaders.items():
            if leader == victim or any(a < at + 30 and b > at for a, b in self.broker_down.get(leader, ())):
                continue
            if self._faulted_member((self.topic, p), at, at + 10):
                continue
            after = [end for ts, end in log_ends.get((self.topic, p), ()) if ts >= at]
            if not after:
                continue
            threshold = after[0]
            got = sorted(ts for ts, top in first.get(p, ()) if top >= threshold)
            worst = max(worst, (got[0] - at) if got else horizon)
        return worst

    def _baseline(self, journals, log_ends, n: int = 10) -> list[float]:
        """The stall measure at moments with no fault within 8 s (what "no stall" looks like)."""
        busy = [(f.at - 8, (f.until or f.at) + 8) for f in self.faults]
        samples = [ts for v in log_ends.values() for ts, _ in v]
        if not samples:
            return []
        lo, hi = min(samples) + 5, max(samples) - 30
        quiet = [t for t in (lo + i for i in range(int(max(0, hi - lo)))) if not any(a <= t <= b for a, b in busy)]
        picked = quiet[:: max(1, len(quiet) // n)][:n]
        return [self._stall(t, None, journals, log_ends) for t in picked]

    # ---------------------------------------------------------------- member figures
    def _kind_of(self, name: str) -> str:
        m = self.members.get(name)
        return getattr(m, "kind", "thin") if m is not None else "?"

    def _member_figures(self, journals) -> list[dict]:
        """Per member incarnation; a share member's ``extra`` counts its deliveries of records delivered
        to the share group before, and its ``commit_failed`` its acknowledgements answered with an error."""
        share = self._share_journals()
        dups = {**invariants.duplicates_by_member(journals), **invariants.duplicates_by_member(share)}
        out = []
        for name in sorted(self.members, key=lambda n: (n.split(".")[0], len(n), n)):
            events = journals.get(name) or share.get(name, [])
            out.append(dict(name=name, kind=self._kind_of(name), **dups.get(name, {}),
                            commit_failed=sum(1 for e in events if e["ev"] == "commit_failed"
                                              or (e["ev"] == "ack" and e.get("code") not in (0, None))),
                            faults=[{"kind": f.kind, "at": f.at - self.t0} for f in self.faults if f.target == name]))
        return out

    # ------------------------------------------------------ member SIGKILL stalls
    def _kill_window_s(self) -> float:
        """After a member SIGKILL: its session timeout (its partitions wait that long) plus a rebalance."""
        return self.s.member_session_ms / 1000 + 15.0

    def _member_kill_stall(self, fault: Fault, first, log_ends) -> dict:
        """The longest wait of a record (from the log end sample that first showed it to its first
        delivery) on partitions owned at the SIGKILL by other members that no fault touched, over
        the victim's session timeout and the rebalance after it."""
        at, window = fault.at, self._kill_window_s()
        parts = []
        for p, leader in self.leaders.items():
            tp = (self.topic, p)
            owners = {m for a, b, m in self._owners.get(tp, ()) if a <= at < b}
            if not owners or fault.target in owners:
                continue
            if any(a < at + window and b > at - 1 for a, b in self.broker_down.get(leader, ())):
                continue
            if self._faulted_member(tp, at, at + window):
                continue
            parts.append(p)
        others = [f for f in self.faults if f is not fault
                  and f.at - 8 < at + window and (f.until or f.at) + 8 > at]
        return {"victim": fault.target, "kind": self._kind_of(fault.target), "at": at - self.t0,
                "window_s": window, "partitions": len(parts),
                "stall": self._max_latency(parts, at, at + window, first, log_ends),
                "clean": not others}

    def _max_latency(self, parts, a: float, b: float, first, log_ends, horizon: float = 120.0) -> float:
        worst = 0.0
        for p in parts:
            for ts, end in log_ends.get((self.topic, p), ()):
                if not a <= ts <= b or end <= 0:
                    continue
                got = first.get((self.topic, p, end - 1))
                worst = max(worst, horizon if got is None else min(horizon, max(0.0, got - ts)))
        return worst

    def _latency_baseline(self, first, log_ends, length: float = 10.0, n: int = 10) -> list[float]:
        """The longest wait of a record over windows of ``length`` seconds away from faults: 8 s
        from a broker fault, and from a member fault until its session timeout and a rebalance
        have passed (what it causes comes then); with fewer than 3 such windows, 8 s from any."""
        samples = [ts for v in log_ends.values() for ts, _ in v]
        if not samples:
            return []
        lo, hi = max(min(samples), self.t0) + self.s.warmup_s * 0.7, max(samples) - 30 - length

        def quiet(busy):
            return [t for t in (lo + i for i in range(int(max(0, hi - lo))))
                    if not any(a <= t + length and b >= t for a, b in busy)]

        after = self._kill_window_s()
        picked = quiet([(f.at - 8, (f.until or f.at) + (after if f.kind.startswith("member") else 8))
                        for f in self.faults])
        if len(picked) < 3:
            picked = quiet([(f.at - 8, (f.until or f.at) + 8) for f in self.faults])
        picked = picked[:: max(1, len(picked) // n)][:n]
        return [self._max_latency(sorted(self.leaders), t, t + length, first, log_ends) for t in picked]


def without_replays(journals: Mapping[str, list[dict]]) -> dict[str, list[dict]]:
    """The journals without the ``recs`` lines of batches a restarted Spark member replayed (planned
    by its killed predecessor: delivered again at least once, whoever owns the partitions now)."""
    return {name: [e for e in events if not (e["ev"] == "recs" and e.get("replay"))]
            for name, events in journals.items()}


def first_deliveries(journals) -> dict[tuple[str, int, int], float]:
    """(topic, partition, offset) -> when some member first delivered it."""
    first: dict[tuple[str, int, int], float] = {}
    for events in journals.values():
        for e in events:
            if e["ev"] != "recs":
                continue
            for o in e["offs"]:
                key = (e["t"], e["p"], o)
                if key not in first or e["ts"] < first[key]:
                    first[key] = e["ts"]
    return first


def commit_failure_runs(journals, min_s: float) -> list[dict]:
    """Runs of a member's consecutive ``commit_failed`` lines (no ``commit`` between) spanning
    ``min_s`` seconds or more: member, start, end (epoch s), count, codes, and the distinct
    messages of the thin member's ``commit_error`` lines among them."""
    out = []
    for member, events in journals.items():
        out += _commit_failure_runs_of(member, events, min_s)
    return sorted(out, key=lambda r: r["start"])


def _commit_failure_runs_of(member: str, events: list[dict], min_s: float) -> list[dict]:
    """``commit_failure_runs`` of one member's journal."""
    out = []
    run: list[dict] = []
    msgs: dict[str, int] = {}

    def flush() -> None:
        if run and run[-1]["ts"] - run[0]["ts"] >= min_s:
            out.append({"member": member, "start": run[0]["ts"], "end": run[-1]["ts"], "count": len(run),
                        "codes": sorted({e.get("code") for e in run}, key=str), "messages": dict(msgs)})
        run.clear()
        msgs.clear()

    for e in events:
        if e["ev"] == "commit_failed":
            run.append(e)
            if e.get("msg"):
                msgs[e["msg"]] = msgs.get(e["msg"], 0) + 1
        elif e["ev"] == "commit_error" and run is not None:
            msgs[e["msg"]] = msgs.get(e["msg"], 0) + 1
        elif e["ev"] in ("commit", "start", "closed"):
            flush()
    flush()
    return out
