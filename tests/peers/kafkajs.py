"""kafkajs (the Node.js Kafka client) as a test peer, driven through ``kafkajs_runner.js``.

``install_kafkajs()`` installs kafkajs with npm into a cache directory outside the
repository (``$SPARK_COORD_NODE_CACHE``, else ``$XDG_CACHE_HOME/spark-coord/node``,
else ``~/.cache/spark-coord/node``), once: later runs reuse it.  ``KafkaJS.run(mode,
**arguments)`` runs one operation of the runner and returns the JSON events it
printed (see the runner's header for the modes).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

KAFKAJS_VERSION = "2.2.4"
RUNNER = Path(__file__).with_name("kafkajs_runner.js")


class KafkaJSUnavailable(RuntimeError):
    """node or npm is missing, or kafkajs could not be installed (the message says which)."""


class KafkaJSFailed(AssertionError):
    """A runner operation exited with an error; carries its events and stderr."""

    def __init__(self, mode: str, events: list[dict], stderr: str):
        self.events = events
        self.stderr = stderr
        error = next((e for e in events if e.get("event") == "error"), {})
        super().__init__(f"kafkajs {mode} failed: {error.get('name')}: {error.get('message')}\n"
                         f"{stderr[-2000:]}")


def cache_dir() -> Path:
    explicit = os.environ.get("SPARK_COORD_NODE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-coord" / "node"


def install_kafkajs(prefix: Path | None = None, timeout: float = 300.0) -> Path:
    """The ``node_modules`` directory holding kafkajs KAFKAJS_VERSION, installing it on first use."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise KafkaJSUnavailable(f"{'node' if node is None else 'npm'} is not on PATH (kafkajs needs Node.js)")
    prefix = prefix or cache_dir() / f"kafkajs-{KAFKAJS_VERSION}"
    modules = prefix / "node_modules"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time; later runs reuse it
        if _installed_version(modules) != KAFKAJS_VERSION:
            log.info("installing kafkajs %s into %s", KAFKAJS_VERSION, prefix)
            try:
                done = subprocess.run([npm, "install", "--prefix", str(prefix), f"kafkajs@{KAFKAJS_VERSION}",
                                       "--no-audit", "--no-fund", "--no-save", "--loglevel=error"],
                                      capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise KafkaJSUnavailable(f"npm install kafkajs@{KAFKAJS_VERSION} failed: {e}") from e
            if done.returncode != 0 or _installed_version(modules) != KAFKAJS_VERSION:
                raise KafkaJSUnavailable(f"npm install kafkajs@{KAFKAJS_VERSION} failed: {done.stderr[-1000:]}")
    return modules


def _installed_version(modules: Path) -> str | None:
    try:
        return json.loads((modules / "kafkajs" / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


class KafkaJS:
    """Runs ``kafkajs_runner.js`` operations with the installed kafkajs."""

    def __init__(self, modules: Path):
        self.modules = modules
        self.env = dict(os.environ, NODE_PATH=str(modules), KAFKAJS_NO_PARTITIONER_WARNING="1")

    def command(self, mode: str, **arguments) -> list[str]:
        return [shutil.which("node") or "node", str(RUNNER), mode, json.dumps(arguments)]

    def run(self, mode: str, timeout: float = 90.0, check: bool = True, **arguments) -> list[dict]:
        """Run one operation to its end; its events.  Raises KafkaJSFailed if it failed and ``check``."""
        done = subprocess.run(self.command(mode, **arguments), capture_output=True, text=True, env=self.env,
                              timeout=timeout)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if check and done.returncode != 0:
            raise KafkaJSFailed(mode, events, done.stderr)
        return events

    def start(self, mode: str, **arguments) -> subprocess.Popen:
        """Start a long-running operation (its stdout is a pipe of JSON lines)."""
        return subprocess.Popen(self.command(mode, **arguments), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)


def by_event(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("event") == name]
