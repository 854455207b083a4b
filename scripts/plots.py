#!/usr/bin/env python3
"""Plots of the benchmarks' figures (``bench/results/*.json``, written by ``bench/figures.py``).

The docs build calls ``render_all`` (``scripts/docs_hooks.py``) and puts the SVGs on the
benchmarks page; to look at them alone::

    .venv/bin/python scripts/plots.py [--results bench/results] [--out bench/results/plots]

Each plot names the runs it draws; the benchmarks page lists each run's machine, date and
commit. A plot whose JSON file is missing is left out.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLORS = {"coordkafka": "#1f77b4", "ceiling": "#bbbbbb", "inflating": "#777777", "confluent": "#ff7f0e",
          "sticky": "#2ca02c", "range": "#d62728"}
KIND_COLORS = {"member_kill": "#1f77b4", "member_stop": "#aec7e8", "coordinator_kill": "#d62728",
               "broker_kill": "#ff7f0e", "coordinator_expiry": "#9467bd"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"svg.hashsalt": "spark-coord", "svg.fonttype": "none", "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _svg(fig) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    _plt().close(fig)
    return out.getvalue()


def _runs(results: Path, name: str) -> list[dict]:
    path = results / f"{name}.json"
    if not path.exists():
        return []
    return json.loads(path.read_text()).get("runs", [])


def _caption(run: dict) -> str:
    return f"{run['label']} ({run.get('date', '?')}, {run.get('commit') or '?'})"


# ------------------------------------------------------------------ the plots

def spark_source(runs: list[dict]) -> str:
    """Per run and shape: coordkafka (warm), the raw ceiling, the decompressing ceiling where the run
    measured it (``inflating``: the same Python source inflating the shape's compressed frames first, the
    fair bound for the compressed shapes) and confluent-kafka; above coordkafka's bar its ratio to the
    decompressing ceiling where measured, else to the raw one."""
    plt = _plt()
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 3.2 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        rows = run["figures"]["rows"]
        inflating = any(r.get("inflating") for r in rows)
        bars = [("coordkafka (warm)", [r["warm"] for r in rows], COLORS["coordkafka"]),
                ("ceiling: any Python data source", [r["ceiling"] for r in rows], COLORS["ceiling"])]
        if inflating:
            bars.append(("decompressing ceiling: the same, inflating the frames first",
                         [r.get("inflating") or 0 for r in rows], COLORS["inflating"]))
        bars.append(("confluent-kafka Consumer -> pyarrow", [r.get("confluent") or 0 for r in rows],
                     COLORS["confluent"]))
        w = 0.8 / len(bars)
        x = range(len(rows))
        for n, (label, values, color) in enumerate(bars):
            ax.bar([i + (n - (len(bars) - 1) / 2) * w for i in x], [v / 1e6 for v in values], w, label=label,
                   color=color)
        first = -(len(bars) - 1) / 2 * w
        for i, r in enumerate(rows):
            ratio = (r.get("ratio_inflating") or r["warm"] / r["inflating"] if r.get("inflating")
                     else r.get("ratio") or r["warm"] / r["ceiling"])
            ax.annotate(f"{ratio:.2f}", (i + first, r["warm"] / 1e6), ha="center", va="bottom", fontsize=7)
        long_names = any(len(r["shape"]) > 8 for r in rows)  # "d (headers)": slanted, not overlapping
        ax.set_xticks(list(x), [r["shape"] for r in rows], rotation=20 if long_names else 0)
        ax.set_ylabel("million rows/s")
        ax.set_title(f"Spark read rate per shape against the ceilings -- {_caption(run)}", fontsize=9)
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.text(0.01, -0.01, "number above a bar: coordkafka / decompressing ceiling (runs without it: / ceiling)",
             fontsize=7)
    fig.tight_layout()
    return _svg(fig)


def coordinator_lateness(runs: list[dict]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    markers = "osD^v<>"
    for n, run in enumerate(runs):
        pts = run["figures"]["points"]
        xs = [p["members_per_coordinator"] for p in pts]
        ax.scatter(xs, [p["p99_ms"] for p in pts], marker=markers[n % len(markers)], s=36,
                   label=f"p99: {_caption(run)}")
        ax.scatter(xs, [p["p50_ms"] for p in pts], marker=markers[n % len(markers)], s=20, facecolors="none",
                   edgecolors="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(50, color="grey", lw=0.8, ls="--")
    ax.annotate("target p99 50 ms", (ax.get_xlim()[0] * 1.1, 52), fontsize=7, color="grey")
    ax.set_xlabel("members per coordinator")
    ax.set_ylabel("ping lateness (ms)")
    ax.set_title("Coordinator ping lateness against members (filled: p99, hollow: p50)", fontsize=9)
    ax.legend(fontsize=6.5, frameon=False, loc="upper left")
    return _svg(fig)


def _median(values) -> float:
    values = sorted(values if isinstance(values, list) else [values])
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def rebalance(runs: list[dict]) -> str:
    plt = _plt()
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(9, 3.2))
    labels = [r["label"] for r in runs]
    colors = [COLORS.get(lbl, None) for lbl in labels]
    f = [r["figures"] for r in runs]
    x = range(len(runs))
    left.bar([i - 0.2 for i in x], [d["stopped"] for d in f], 0.4, color=colors, label="stopped (StopFetcher)")
    left.bar([i + 0.2 for i in x], [d["started"] for d in f], 0.4, color=colors, alpha=0.5,
             label="started (StartFetcher)")
    left.set_yscale("log")
    left.set_xticks(list(x), labels)
    left.set_title("members stopped / started\nwhen one joins 1,000", fontsize=9)
    left.legend(fontsize=7, frameon=False)
    for i, d in enumerate(f):
        left.annotate(str(d["stopped"]), (i - 0.2, d["stopped"]), ha="center", va="bottom", fontsize=7)
    mid.bar([i - 0.2 for i in x], [d["new_member_start_s"] for d in f], 0.4, color=colors,
            label="newcomer's first fetch")
    mid.bar([i + 0.2 for i in x], [d["stable_s"] for d in f], 0.4, color=colors, alpha=0.5, label="group Stable")
    mid.set_xticks(list(x), labels)
    mid.set_ylabel("s after the join")
    mid.set_title("time to first fetch", fontsize=9)
    mid.legend(fontsize=7, frameon=False)
    right.bar([i - 0.2 for i in x], [_median(d["quiet_gap_ms"]) for d in f], 0.4, color="#cccccc", label="quiet")
    right.bar([i + 0.2 for i in x], [_median(d["join_gap_ms"]) for d in f], 0.4, color=colors, label="over the join")
    right.set_xticks(list(x), labels)
    right.set_ylabel("ms")
    right.set_title("unmoved consumers' longest\ndelivery gap", fontsize=9)
    right.legend(fontsize=7, frameon=False)
    fig.suptitle("One member joins a group of 1,000: sticky against range -- "
                 + "; ".join(f"{r['label']} {r.get('date', '?')}, {r.get('commit') or '?'}" for r in runs), fontsize=8)
    fig.tight_layout()
    return _svg(fig)


def chaos_faults(runs: list[dict]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(runs) + 1.4))
    kinds: list[str] = []
    for run in runs:
        for k in run["figures"]["faults"]:
            if k not in kinds:
                kinds.append(k)
    y = list(range(len(runs)))
    left = [0.0] * len(runs)
    for k in kinds:
        counts = [run["figures"]["faults"].get(k, 0) for run in runs]
        ax.barh(y, counts, left=left, label=k.replace("_", " "), color=KIND_COLORS.get(k, "#dddddd"))
        left = [a + b for a, b in zip(left, counts, strict=True)]
    ax.set_yticks(y, [_caption(r) for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("faults injected")
    ax.set_title("Chaos runs: faults by kind", fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=3, loc="lower right")
    return _svg(fig)


def chaos_outcomes(runs: list[dict]) -> str:
    plt = _plt()
    fig, (dup, stall) = plt.subplots(1, 2, figsize=(9, 0.55 * len(runs) + 1.6), sharey=True)
    y = list(range(len(runs)))
    f = [r["figures"] for r in runs]
    dup.barh(y, [d.get("duplicate_pct") or 0 for d in f], color="#1f77b4")
    dup.set_yticks(y, [_caption(r) for r in runs], fontsize=7)
    dup.invert_yaxis()
    dup.set_xlabel("duplicate deliveries (% of records); 0 lost in every run")
    med = [d["coordinator_kill_stall_s"].get("median") or 0 for d in f]
    mx = [d["coordinator_kill_stall_s"].get("max") or 0 for d in f]
    base = [d.get("baseline_stall_s", {}).get("median") or 0 for d in f]
    stall.barh([i - 0.25 for i in y], base, 0.25, color="#cccccc", label="quiet moment (baseline), median")
    stall.barh(y, med, 0.25, color="#d62728", label="after a coordinator SIGKILL, median")
    stall.barh([i + 0.25 for i in y], mx, 0.25, color="#d62728", alpha=0.4, label="after a coordinator SIGKILL, max")
    stall.set_xlabel("consumption stall (s)")
    stall.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.suptitle("Chaos runs: duplicates and stalls", fontsize=9)
    fig.tight_layout()
    return _svg(fig)


def share(runs: list[dict]) -> str:
    plt = _plt()
    run = runs[-1]
    readers = run["figures"]["readers"]
    fig, ax = plt.subplots(figsize=(7, 2.6))
    y = list(range(len(readers)))
    ax.barh(y, [r["records_per_s"] / 1e3 for r in readers], color=["#ff7f0e"] + ["#1f77b4"] * (len(readers) - 1))
    for i, r in enumerate(readers):
        ax.annotate(f"{r['ratio']:.2f}x", (r["records_per_s"] / 1e3, i), va="center", fontsize=7)
    ax.set_yticks(y, [r["reader"] for r in readers], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("thousand records/s")
    ax.set_title(f"Share consumers against a consumer group -- {_caption(run)}", fontsize=9)
    return _svg(fig)


PLOTS = {
    "spark-source": ("spark_source", spark_source),
    "coordinator-lateness": ("coordinator", coordinator_lateness),
    "rebalance": ("rebalance", rebalance),
    "chaos-faults": ("chaos", chaos_faults),
    "chaos-outcomes": ("chaos", chaos_outcomes),
    "share": ("share", share),
}


def render_all(results: Path = ROOT / "bench" / "results") -> dict[str, str]:
    """``{plot name: SVG text}`` for every plot whose figures exist."""
    out = {}
    for name, (source, draw) in PLOTS.items():
        runs = _runs(Path(results), source)
        if runs:
            out[name] = draw(runs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "plots")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, svg in render_all(args.results).items():
        (args.out / f"{name}.svg").write_text(svg)
        print(args.out / f"{name}.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
