"""Standalone coordinator processes (``spark-coord coordinator``) for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spark_coord.net import free_port


class CoordinatorProcess:
    """One ``spark-coord coordinator`` process on a loopback port (``port``: a restart on the same one).
    ``args``: more command-line arguments (``-X key=value``, ``--command-config FILE``)."""

    def __init__(self, coordinator_id: int, data_bootstrap: str, zk_connect: str, workdir: Path,
                 port: int | None = None, args: tuple[str, ...] = (), **overrides):
        self.coordinator_id = coordinator_id
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = workdir / f"coordinator-{coordinator_id}.log"
        settings = {"coordinator.id": coordinator_id, "listeners": f"PLAINTEXT://{self.address}",
                    "bootstrap.servers": data_bootstrap, "zookeeper.connect": zk_connect,
                    "zookeeper.session.timeout.ms": 4000, "coordinator.metadata.refresh.ms": 500, **overrides}
        cmd = [sys.executable, "-m", "spark_coord.cli", "coordinator"]
        for k, v in settings.items():
            cmd += ["--override", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
        cmd += list(args)
        self._out = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)

    def wait_listening(self, timeout: float = 60.0) -> "CoordinatorProcess":
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"coordinator {self.coordinator_id} exited {self.proc.returncode}:\n"
                                   f"{self.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"coordinator {self.coordinator_id} not listening within {timeout} s:\n"
                           f"{self.log.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)

    def stop(self) -> None:
        try:
            self.kill(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
        self._out.close()
