"""Diagnostics of a chaos run: while a member's commits keep failing although another member's
commits succeed meanwhile (so a coordinator is there), a dump of every thread's stack of the
member (SIGUSR1: ``faulthandler``, into its log) and, when ``py-spy`` is installed, of the
coordinator broker's threads (into ``<workdir>/diagnostics/``)."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)


class JournalTail:
    """Reads the lines appended to a journal since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self._pos = 0
        self._rest = b""

    def new_events(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self._pos += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class CommitWatcher(threading.Thread):
    """Watches the members' journals; while a member's commits have kept failing for
    ``diagnose_after_s`` and another member committed meanwhile (a coordinator answers
    others: not an outage), asks it for every thread's stack (SIGUSR1) and dumps the
    coordinator broker's threads with py-spy when it is installed -- every 5 s, at most 4
    times per run of failures."""

    def __init__(self, run, every_s: float = 5.0, per_run: int = 4):
        super().__init__(name="commit-watcher", daemon=True)
        self.run_ = run
        self.every = every_s
        self.per_run = per_run
        self._stop_event = threading.Event()
        self._tails: dict[str, JournalTail] = {}
        self._state: dict[str, dict] = {}
        self.dir = run.workdir / "diagnostics"
        self.py_spy = shutil.which("py-spy") or next(
            (str(p) for p in [Path(sys.executable).parent / "py-spy"] if p.exists()), None)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(30)

    def run(self) -> None:
        while not self._stop_event.wait(1.0):
            try:
                self._scan()
            except Exception:
                log.exception("commit watcher failed")

    def _scan(self) -> None:
        r = self.run_
        members = list(r.members.items())   # the fault loop adds incarnations meanwhile: one view per scan
        for name, m in members:
            tail = self._tails.setdefault(name, JournalTail(m.journal_path))
            st = self._state.setdefault(name, {"since": None, "failed": 0.0, "dumps": 0, "last": 0.0,
                                               "started": False, "committed": 0.0})
            for e in tail.new_events():
                if e["ev"] == "start":
                    st["started"] = True
                elif e["ev"] == "commit_failed":
                    if st["since"] is None:
                        st["since"], st["dumps"] = e["ts"], 0
                    st["failed"] = e["ts"]
                elif e["ev"] == "commit":
                    st["since"] = None
                    st["committed"] = e["ts"]
        now = time.time()
        for name, m in members:
            st = self._state[name]
            # commits still failing (the last one lately), for long enough, while another member commits
            if st["since"] is None or not st["started"] or not m.alive() or now - st["failed"] > 2.0 \
                    or st["failed"] - st["since"] < r.s.diagnose_after_s:
                continue
            if not any(o["committed"] > st["since"] + 1.0 for n, o in self._state.items() if n != name):
                continue
            if any(a <= now <= (b or now) for a, b in [(f.at, f.until) for f in r.faults if f.target == name]):
                continue  # paused by a fault: it is not answering anything, and that is expected
            if st["dumps"] >= self.per_run or now - st["last"] < self.every:
                continue
            st["dumps"] += 1
            st["last"] = now
            self._dump(name, m, now, now - st["since"])

    def _dump(self, name: str, m, now: float, failing_s: float) -> None:
        r = self.run_
        log.warning("%s: commits failing for %.1f s; dumping its threads (SIGUSR1 -> %s)", name, failing_s,
                    m.log_path.name)
        m.signal(signal.SIGUSR1)
        r.diagnostics.append({"target": name, "at": now, "where": str(m.log_path.name)})
        coordinator = r._coordinator()
        if self.py_spy is None or coordinator is None:
            return
        proc = r.cluster.procs.get(coordinator)
        if proc is None or proc.poll() is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        out = self.dir / f"broker-{coordinator}-{now - r.t0:.0f}s-for-{name}.txt"
        try:
            res = subprocess.run([self.py_spy, "dump", "--pid", str(proc.pid)], capture_output=True, timeout=30)
            out.write_bytes(res.stdout + res.stderr)
            r.diagnostics.append({"target": f"broker {coordinator}", "at": now, "where": out.name})
        except (OSError, subprocess.TimeoutExpired) as e:
            log.info("py-spy dump of broker %d failed: %s", coordinator, e)
