"""Real peers of the metrics tests: a Prometheus server (Debian's ``prometheus``) scraping our
endpoints, and headless Chromium (Debian's ``chromium``) loading the status page.

Both run as processes of their own on free ports, with their data in the test's temporary
directory; a test skips, naming what is missing, where they are not installed (``.ci/run``
installs them)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

log = logging.getLogger(__name__)

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--mute-audio"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed (Debian package {package}; .ci/run installs it)")
    return path


class PrometheusServer:
    """A Prometheus server scraping ``targets`` (host:port) every ``interval``, queried over its HTTP API."""

    def __init__(self, workdir: Path, targets: list[str], interval: str = "1s"):
        self.binary = require("prometheus", "prometheus")
        self.workdir = Path(workdir)
        self.targets = targets
        self.interval = interval
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "PrometheusServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {self.interval}\n  scrape_timeout: {self.interval}\n"
            f"  evaluation_interval: {self.interval}\n"
            "scrape_configs:\n  - job_name: spark-coord\n    static_configs:\n"
            f"      - targets: [{', '.join(repr(t) for t in self.targets)}]\n")
        self.port = _free_port()
        self._log = open(self.workdir / "prometheus.log", "ab")
        self.proc = subprocess.Popen([self.binary, f"--config.file={config}",
                                      f"--storage.tsdb.path={self.workdir / 'data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}; see {self.workdir}/prometheus.log")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready after {timeout:.0f} s")
            time.sleep(0.2)

    def query(self, promql: str) -> list[tuple[dict, float]]:
        """An instant query: [(labels, value)]."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {doc}")
        return [(item["metric"], float(item["value"][1])) for item in doc["data"]["result"]]

    def value(self, promql: str) -> float | None:
        """The single value of a query (None: no result)."""
        result = self.query(promql)
        return result[0][1] if result else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def chromium(workdir: Path, url: str, *extra: str, timeout: float = 120.0) -> str:
    """Run headless Chromium (a fresh profile in ``workdir``) on ``url``; returns its stdout."""
    binary = require("chromium", "chromium")
    profile = Path(workdir) / f"chromium-profile-{time.monotonic_ns()}"
    profile.mkdir(parents=True)
    env = dict(os.environ, HOME=str(profile))
    done = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, timeout=timeout, env=env, cwd=profile)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return done.stdout.decode(errors="replace")


def dump_dom(workdir: Path, url: str, wait_ms: int = 3000) -> str:
    """The page's DOM once its scripts ran (``wait_ms`` of virtual time for its timers and fetches)."""
    return chromium(workdir, url, f"--virtual-time-budget={wait_ms}", "--dump-dom")


def screenshot(workdir: Path, url: str, path: Path, size: str = "1280,1400", wait_ms: int = 3000) -> Path:
    chromium(workdir, url, f"--virtual-time-budget={wait_ms}", f"--window-size={size}", f"--screenshot={path}")
    if not Path(path).exists() or Path(path).stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot to {path}")
    return Path(path)
