"""Write a benchmark's figures as JSON beside the table it prints.

A benchmark calls ``figures.write(name, data, label=...)`` where it prints its final
table; that writes ``bench/results/<name>.json``::

    {"benchmark": name,
     "runs": [{"label": "sticky", "date": "2026-11-25", "commit": "2a3deea", "dirty": false,
               "machine": {"cpus": 2, "load_average": [..], "platform": .., "python": ..},
               "command": "bench/bench_rebalance.py", "figures": data}, ...]}

``data`` is whatever the benchmark measured, as plain JSON (numbers, lists, dicts).
A run replaces the run of the same label in the file and keeps the others, so
``--strategy range`` does not erase the sticky run; each run says on which machine,
when and at which commit it was measured. ``scripts/plots.py`` knows each benchmark's
figures and draws the docs' plots from these files; the benchmarks page lists where
each run comes from. The files in the repository are kept up to date by committing
them after a benchmark run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _commit() -> tuple[str | None, bool]:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, False
    if head.returncode != 0:
        return None, False
    return head.stdout.strip(), bool(dirty.stdout.strip())


def machine() -> dict:
    """What the figures depend on, without naming the host or any of its paths."""
    info = {"cpus": os.cpu_count(), "platform": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version()}
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def _command(argv: list[str] | None) -> str:
    argv = list(sys.argv if argv is None else argv)
    if argv:
        try:
            argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
        except ValueError:
            argv[0] = Path(argv[0]).name
    return " ".join(argv)


def write(name: str, data, *, label: str = "default", argv: list[str] | None = None,
          results: Path | None = None) -> Path:
    """Record ``data`` as the run ``label`` of ``<results>/<name>.json`` (default ``bench/results``)."""
    folder = Path(results) if results is not None else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    runs: list[dict] = []
    if path.exists():
        try:
            runs = list(json.loads(path.read_text()).get("runs", []))
        except (OSError, ValueError, AttributeError):
            runs = []
    commit, dirty = _commit()
    run = {"label": label, "date": _dt.date.today().isoformat(), "commit": commit, "dirty": dirty,
           "machine": machine(), "command": _command(argv), "figures": data}
    same = [i for i, r in enumerate(runs) if r.get("label") == label]
    if same:                        # the run of that label is replaced where it stood
        runs[same[0]] = run
        runs = [r for i, r in enumerate(runs) if i not in same[1:]]
    else:
        runs.append(run)
    path.write_text(json.dumps({"benchmark": name, "runs": runs}, indent=1, default=_default) + "\n")
    try:
        shown = path.relative_to(ROOT)
    except ValueError:
        shown = path
    print(f"figures: {shown}")
    return path


def _default(value):
    if isinstance(value, (set, tuple)):
        return list(value)
    if hasattr(value, "item"):          # numpy scalars
        return value.item()
    return str(value)
