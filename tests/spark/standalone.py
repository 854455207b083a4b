"""A Spark standalone cluster on loopback for tests: one master and N workers started
from the pyspark wheel with its ``bin/spark-class`` (``org.apache.spark.deploy.master.Master``,
``org.apache.spark.deploy.worker.Worker``: the wheel ships no sbin start scripts), as an
operator would start them.

The workers' environment has no PYTHONPATH and no PYSPARK_PYTHON: executors see only
what a job ships them (``--archives env.tar.gz#env``) and the pyspark of SPARK_HOME.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from helpers import free_port, wait_until

#: Environment variables that would hand the executors this checkout or this Python.
_PRIVATE = ("PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env() -> dict:
    """The environment a machine of the cluster would have: Spark's home, loopback addresses."""
    env = {k: v for k, v in os.environ.items() if k not in _PRIVATE}
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m")
    return env


class StandaloneSpark:
    """``with StandaloneSpark(tmp_path, workers=2) as s: ... s.master_url ...``"""

    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 120):
        self.base = Path(base)
        self.workers = workers
        self.cores, self.memory, self.timeout = cores, memory, timeout
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def work_dir(self, i: int) -> Path:
        return self.base / f"worker-{i}"

    def _daemon(self, name: str, main_class: str, *args: str) -> subprocess.Popen:
        log = self.base / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=cluster_env(), cwd=self.base, start_new_session=True)
        self.procs.append(proc)
        return proc

    def _log_has(self, log: Path, text: str, proc: subprocess.Popen) -> bool:
        assert proc.poll() is None, f"{log.name} exited {proc.returncode}:\n{self.tail(log)}"
        return text in log.read_text(errors="replace")

    def start(self) -> "StandaloneSpark":
        self.base.mkdir(parents=True, exist_ok=True)
        master = self._daemon("master", "org.apache.spark.deploy.master.Master",
                            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0")
        wait_until(lambda: self._log_has(self.logs[0], "I have been elected leader", master), self.timeout,
                   interval=0.2, message="the Spark master to lead")
        for i in range(self.workers):
            worker = self._daemon(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                                "--host", "127.0.0.1", "--webui-port", "0", "--cores", str(self.cores),
                                "--memory", self.memory, "--work-dir", str(self.work_dir(i)), self.master_url)
            log = self.logs[-1]
            wait_until(lambda log=log, worker=worker: self._log_has(log, "Successfully registered with master", worker),
                       self.timeout, interval=0.2, message=f"Spark worker {i} to register")
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    @staticmethod
    def tail(log: Path, lines: int = 40) -> str:
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> "StandaloneSpark":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
