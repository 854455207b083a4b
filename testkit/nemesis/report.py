"""The report of a nemesis run (``NemesisReport``: the chaos report, Jepsen's anomalies, a table
per fault kind) and of many runs (``aggregate``, ``aggregate_tables``: the bar ten runs must clear)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from testkit import jepsen_checks
from testkit.chaos import ChaosReport


@dataclass
class NemesisReport:
    chaos: ChaosReport
    prefix: str
    jepsen: dict
    #: kind -> injected, combined, longest stall (s) of partitions it did not touch (every one, and over the
    #: faults with no other fault in their window: ``alone``), anomalies in its windows.
    by_kind: dict[str, dict]
    clock: str
    skipped: list[str] = field(default_factory=list)
    #: Every fault: kind, target, at / until (seconds from the members' start), detail, combined.
    faults: list[dict] = field(default_factory=list)
    #: What the run was: seed, faults, duration, member kinds, members' session (ms).
    settings: dict = field(default_factory=dict)
    #: The share nemesis (runs with share members): figures, and the violations of its checks
    #: (accepted or rejected records delivered again, deliveries beyond the count limit, records
    #: ending neither accepted nor archived, the start offset past the log end).
    share: dict = field(default_factory=dict)
    share_violations: list[str] = field(default_factory=list)
    #: The transactional workload (runs with ``txn_writers``): ``testkit.txn_checks.TxnResult.to_dict()``
    #: (transactions committed, aborted, indeterminate and how the final read resolved them, reads per
    #: reader, each anomaly listed), and its violations.
    txn: dict = field(default_factory=dict)
    txn_violations: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return self.chaos.violations + self.jepsen_violations + self.share_violations + self.txn_violations

    @property
    def jepsen_violations(self) -> list[str]:
        keys = jepsen_checks.JepsenResult.VIOLATIONS
        return [f"{k}: {v}" for k in keys for v in self.jepsen.get(k, [])]

    def table(self) -> str:
        rows = [("fault kind", "injected", "longest stall, untouched partitions (s)", "same, alone (s)", "anomalies",
                 "redelivered in its windows")]
        for kind, d in self.by_kind.items():
            stall = "-" if d["stall_max_s"] is None else f"{d['stall_max_s']:.1f}"
            alone = "-" if d.get("alone_max_s") is None else f"{d['alone_max_s']:.1f} ({len(d['alone'])})"
            rows.append((kind, str(d["injected"]), stall, alone, str(d["anomalies"]), _redelivered(d)))
        return markdown_table(rows)

    def summary(self) -> str:
        j = self.jepsen
        counts = {k: len(j.get(k, [])) for k in ("lost_write", "duplicate", "inconsistent_offsets",
                                                  "nonmonotonic_poll", "poll_skip", "unseen")}
        return "\n".join([
            self.chaos.summary(),
            "Jepsen anomalies: " + ", ".join(f"{k} {v}" for k, v in counts.items())
            + f"; worst realtime lag {j.get('worst_realtime_lag_s', 0):.2f} s"
            + f" ({j.get('worst_reachable_lag_s', 0):.2f} s leaving out the time leaders were unreachable)",
            *(f"skipped: {s}" for s in self.skipped),
            *([self.share_summary()] if self.share else []),
            *([self.txn_summary()] if self.txn else []),
            "faults: " + "; ".join(f"+{f['at']:.0f}s {f['kind']} {f['target']}"
                                   + (f" ({f['detail']})" if f["detail"] else "")
                                   + (" [combined]" if f["combined"] else "") for f in self.faults),
            self.table(),
        ])

    def share_summary(self) -> str:
        sh = self.share
        v = sh.get("violations", {})
        return (f"share nemesis: {sh['records']} records in {sh['partitions']} partitions, {sh['records_delivered']} "
                f"delivered, {sh['deliveries']} deliveries ({sh['redeliveries']} redeliveries, highest count "
                f"{sh['max_count']}, {sh['records_at_limit']} records reached the limit {sh['count_limit']}); "
                f"accepted {sh['accepted']} ({sh['accepted_confirmed']} confirmed), rejected {sh['rejected']} "
                f"({sh['rejected_confirmed']}), released {sh['released']} ({sh['released_confirmed']}); drain "
                f"deliveries {sh['drain_deliveries']}; start at the log end at the end on "
                f"{sh['final_start_at_log_end']} of {sh['partitions']} partitions; {sh['start_samples']} start "
                f"samples; truncations {len(sh['truncations'])} ({sh['truncated_records']} acknowledged records cut "
                f"off); violations: " + ", ".join(f"{k} {n}" for k, n in v.items()))

    def txn_summary(self) -> str:
        from testkit.txn_checks import TxnResult

        t = self.txn
        reads = "; ".join(f"{name} ({r['isolation']}) {r['records']} records, {r['aborted_values']} of aborted "
                          f"transactions" for name, r in sorted(t.get("reads", {}).items()))
        return (f"transactions: {t['transactions']} ({t['committed']} committed, {t['aborted']} aborted, "
                f"{t['unknown']} indeterminate: {t['unknown_committed']} resolved committed, {t['unknown_aborted']} "
                f"aborted); readers: {reads}; transactional anomalies: "
                + ", ".join(f"{k} {len(t.get(k, []))}" for k in TxnResult.VIOLATIONS))

    def to_dict(self) -> dict:
        out = {"chaos": asdict(self.chaos), "prefix": self.prefix, "jepsen": self.jepsen, "by_kind": self.by_kind,
               "clock": self.clock, "skipped": self.skipped, "faults": self.faults, "settings": self.settings,
               "share": self.share, "txn": self.txn, "violations": self.violations}
        out["chaos"]["duplicate_pct"] = self.chaos.duplicate_pct
        return out


def markdown_table(rows: list[tuple[str, ...]]) -> str:
    """A Markdown table, columns padded; the first row is the header."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (x + 2) for x in w) + "|")
    return "\n".join(lines)


#: The bar a series of runs must clear (issue: ten runs of 60 faults each).
MAX_DUPLICATE_PCT = 0.1
LAG_SLACK_S = 10.0


def aggregate(runs: list[dict]) -> dict:
    """Many runs' reports (``NemesisReport.to_dict()``) as one: per fault kind, how often it was injected
    (and in how many runs), the longest stall of the partitions it did not touch, the anomalies in its
    windows; per run and in total, the figures of the bar (``verdict``)."""
    kinds: dict[str, dict] = {}
    per_run = []
    for run in runs:
        for kind, d in run["by_kind"].items():
            k = kinds.setdefault(kind, {"injected": 0, "runs": 0, "stall_max_s": None, "alone_max_s": None,
                                        "anomalies": 0})
            k["injected"] += d["injected"]
            k["runs"] += 1
            k["anomalies"] += d["anomalies"]
            if "redelivered" in d:  # reports from before it was counted have none
                k["redelivered"] = k.get("redelivered", 0) + d["redelivered"]
                k["redelivered_injected"] = k.get("redelivered_injected", 0) + d["injected"]
            for key in ("stall_max_s", "alone_max_s"):
                if d.get(key) is not None:
                    k[key] = round(max(k[key] or 0.0, d[key]), 2)
        chaos, jep, settings = run["chaos"], run["jepsen"], run.get("settings", {})
        per_run.append({
            "seed": settings.get("seed"), "faults": len(run["faults"]), "kinds_drawn": len(run["by_kind"]),
            "acked": chaos["acked"], "lost_write": len(jep["lost_write"]),
            "inconsistent_offsets": len(jep["inconsistent_offsets"]), "overlaps": len(chaos["overlaps"]),
            "fenced_overlaps": len(chaos.get("fenced_overlaps", ())),
            "duplicate_pct": round(chaos["duplicate_pct"], 3),
            "duplicate_causes": chaos.get("duplicates", {}).get("causes", {}),
            "worst_lag_s": jep["worst_realtime_lag_s"],
            "worst_reachable_lag_s": jep.get("worst_reachable_lag_s", jep["worst_realtime_lag_s"]),
            "lag_bar_s": settings.get("session_ms", 0) / 1000 + LAG_SLACK_S,
            "redelivered_outside_faults": settings.get("redelivered_outside_faults"),
            "violations": len(run["violations"])})
    verdict = {
        "runs": len(per_run), "faults": sum(r["faults"] for r in per_run),
        "records": sum(r["acked"] for r in per_run),
        "lost_write": sum(r["lost_write"] for r in per_run),
        "inconsistent_offsets": sum(r["inconsistent_offsets"] for r in per_run),
        "overlaps": sum(r["overlaps"] for r in per_run),
        "max_duplicate_pct": max((r["duplicate_pct"] for r in per_run), default=0.0),
        "worst_reachable_lag_s": max((r["worst_reachable_lag_s"] for r in per_run), default=0.0),
        "runs_over_lag_bar": sum(1 for r in per_run if r["worst_reachable_lag_s"] > r["lag_bar_s"]),
        "violations": sum(r["violations"] for r in per_run)}
    verdict["passed"] = (not verdict["lost_write"] and not verdict["inconsistent_offsets"]
                         and not verdict["overlaps"] and not verdict["violations"]
                         and verdict["max_duplicate_pct"] < MAX_DUPLICATE_PCT and not verdict["runs_over_lag_bar"])
    return {"by_kind": dict(sorted(kinds.items())), "runs": per_run, "verdict": verdict}


def _redelivered(d: dict) -> str:
    """Records delivered again in the windows of a kind's faults, in all and per injection."""
    if "redelivered" not in d:
        return "-"
    n = d.get("redelivered_injected", d["injected"])
    return f"{d['redelivered']:,} ({d['redelivered'] / max(n, 1):,.0f} each)"


def _causes(c: dict) -> str:
    return " / ".join(str(c.get(k, 0)) for k in ("unacknowledged", "zombie", "acknowledged", "outside")) if c else "-"


def aggregate_tables(agg: dict) -> str:
    """The per-kind table and the per-run table of ``aggregate``'s result, in Markdown."""
    rows = [("fault kind", "injected (runs)", "longest stall, untouched partitions (s)", "same, alone (s)",
             "anomalies", "redelivered in its windows")]
    for kind, d in agg["by_kind"].items():
        rows.append((kind, f"{d['injected']} ({d['runs']})",
                     "-" if d["stall_max_s"] is None else f"{d['stall_max_s']:.1f}",
                     "-" if d["alone_max_s"] is None else f"{d['alone_max_s']:.1f}", str(d["anomalies"]),
                     _redelivered(d)))
    runs = [("seed", "faults", "kinds", "records", "lost", "inconsistent", "two owners", "fenced zombies",
             "duplicates %", "of them: unacknowledged / zombie / acknowledged / outside", "worst lag (s)",
             "reachable lag (s)", "violations")]
    for r in agg["runs"]:
        runs.append((str(r["seed"]), str(r["faults"]), str(r["kinds_drawn"]), f"{r['acked']:,}", str(r["lost_write"]),
                     str(r["inconsistent_offsets"]), str(r["overlaps"]), str(r.get("fenced_overlaps", 0)),
                     f"{r['duplicate_pct']:.3f}", _causes(r.get("duplicate_causes") or {}),
                     f"{r['worst_lag_s']:.1f}", f"{r['worst_reachable_lag_s']:.1f}", str(r["violations"])))
    v = agg["verdict"]
    return "\n\n".join([markdown_table(rows), markdown_table(runs), (
        f"{v['runs']} runs, {v['faults']} faults, {v['records']:,} records: lost {v['lost_write']}, inconsistent "
        f"offsets {v['inconsistent_offsets']}, two owners {v['overlaps']}, duplicates at most "
        f"{v['max_duplicate_pct']:.3f}% (bar {MAX_DUPLICATE_PCT}%), worst reachable lag "
        f"{v['worst_reachable_lag_s']:.1f} s "
        f"({v['runs_over_lag_bar']} runs over session + {LAG_SLACK_S:.0f} s) -- "
        + ("passed" if v["passed"] else "NOT passed"))])
