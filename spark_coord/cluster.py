"""A local cluster: one embedded ZooKeeper and N broker SUBPROCESSES.

Used by ``spark-coord up``, the demo and the integration tests.  Each broker is
``python -m spark_coord.cli broker --override ...`` with its output in
``<data_dir>/broker-<id>.log`` and its partitions in ``<data_dir>/broker-<id>/``.
With ``base_port=0`` every broker gets a free port picked once, so a broker
restarted with ``start_broker`` comes back at the same address.  ``metrics_port``
turns on every broker's metrics endpoint: broker i at ``metrics_port + i``, or free
ports picked once with 0 (``metrics_ports``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from spark_coord.net import free_port

if TYPE_CHECKING:
    from spark_coord.security.client import ClientSecurity

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
#: Broker settings every ``LocalCluster`` starts with, under its own ``overrides``: none for
#: ``spark-coord up`` and the demo; the test suite puts its own here (tests/helpers.py), as Kafka's
#: test configurations set group.initial.rebalance.delay.ms=0.
DEFAULT_OVERRIDES: dict[str, object] = {}


class ClusterError(RuntimeError):
    """A broker of the local cluster failed to start (the message carries its log tail)."""


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalCluster:
    """ZooKeeper (embedded unless ``zk_connect`` is given) plus ``n_brokers`` broker processes.

    ``overrides`` are broker settings applied to every broker.  ``security``: how a client
    reaches the brokers' one listener (a ``ClientSecurity``; None: PLAINTEXT): each listens
    on ``<its protocol>://host:port`` (the TLS and SASL settings are the ``overrides``' part)
    and is ready once it answers ApiVersions over it.  Use as a context manager, or call
    ``start()`` / ``stop()``.
    """

    def __init__(self, n_brokers: int, data_dir: str | os.PathLike, zk_connect: str | None = None, zk_port: int = 0,
                 base_port: int = 0, overrides: Mapping[str, object] | None = None, host: str = "127.0.0.1",
                 metrics_port: int | None = None, security: "ClientSecurity | None" = None):
        if n_brokers < 1:
            raise ValueError(f"n_brokers must be at least 1, got {n_brokers}")
        self.n_brokers = n_brokers
        self.data_dir = Path(data_dir)
        self.host = host
        self._zk_connect = zk_connect
        self.zk_port = zk_port
        self.base_port = base_port
        self.metrics_port = metrics_port
        self.security = security
        #: broker id -> port of its metrics endpoint (with ``metrics_port``).
        self.metrics_ports: dict[int, int] = {}
        merged = {**DEFAULT_OVERRIDES, **(overrides or {})}
        self.overrides = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in merged.items()}
        from spark_coord import config

        config.load(config.BROKER, None, self.overrides)  # ConfigError naming a bad key now, not in a subprocess
        self.zookeeper = None  # EmbeddedZooKeeper when we run one
        self.ports: dict[int, int] = {}
        self.procs: dict[int, subprocess.Popen] = {}
        self._log_files: dict[int, object] = {}

    # ------------------------------------------------------------------ addresses
    @property
    def zk_connect(self) -> str:
        if self._zk_connect is None:
            raise RuntimeError("cluster not started")
        return self._zk_connect

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        """broker id -> (host, port), for every broker of the cluster (running or not)."""
        return {i: (self.host, p) for i, p in sorted(self.ports.items())}

    @property
    def bootstrap(self) -> str:
        """``host:port,host:port,...`` of every broker."""
        return ",".join(f"{h}:{p}" for h, p in self.brokers.values())

    def log_path(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}.log"

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = START_TIMEOUT) -> "LocalCluster":
        """Start ZooKeeper (unless given) and every broker; wait until all serve."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            if self._zk_connect is None:
                from spark_coord.zk.embedded import EmbeddedZooKeeper

                self.zookeeper = EmbeddedZooKeeper(port=self.zk_port, data_dir=self.data_dir / "zookeeper")
                self.zookeeper.start(timeout=timeout)
                self._zk_connect = self.zookeeper.connect_string
            for i in range(self.n_brokers):
                self.ports[i] = self.base_port + i if self.base_port else free_port(self.host)
                if self.metrics_port is not None:
                    self.metrics_ports[i] = self.metrics_port + i if self.metrics_port else free_port(self.host)
            for i in range(self.n_brokers):
                self._spawn(i)
            deadline = time.monotonic() + timeout
            for i in range(self.n_brokers):
                self._wait_ready_or_move(i, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, broker_id: int) -> None:
        protocol = self.security.protocol if self.security is not None else "PLAINTEXT"
        settings = {
            "broker.id": broker_id,
            "listeners": f"{protocol}://{self.host}:{self.ports[broker_id]}",
            "log.dirs": str(self.data_dir / f"broker-{broker_id}"),
            "zookeeper.connect": self.zk_connect,
        }
        if broker_id in self.metrics_ports:
            settings["metrics.port"] = self.metrics_ports[broker_id]
        settings.update(self.overrides)
        cmd = [sys.executable, "-m", "spark_coord.cli", "broker"]
        for k, v in settings.items():
            cmd += ["--override", f"{k}={v}"]
        out = open(self.log_path(broker_id), "ab")
        self._log_files[broker_id] = out
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.procs[broker_id] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                 env=env, start_new_session=True)
        log.debug("started broker %d (pid %d) on port %d", broker_id, self.procs[broker_id].pid,
                  self.ports[broker_id])

    def _wait_ready(self, broker_id: int, deadline: float) -> None:
        """Wait until the broker is registered in ZooKeeper at its port and answers ApiVersions."""
        from kazoo.exceptions import KazooException

        from spark_coord.client.connection import BrokerConnection
        from spark_coord.zk import client as zk_client
        from spark_coord.zk import model, paths

        proc = self.procs[broker_id]
        zk = zk_client.connect(self.zk_connect,
                               connection_timeout_ms=max(1000, int((deadline - time.monotonic()) * 1000)))
        try:
            while True:
                if proc.poll() is not None:
                    raise ClusterError(f"broker {broker_id} exited with code {proc.returncode}; its log "
                                       f"({self.log_path(broker_id)}) ends with:\n{_tail(self.log_path(broker_id))}")
                registered = False
                try:
                    data, _ = zk.get(paths.broker(broker_id))
                    registered = model.parse_broker(broker_id, data).port == self.ports[broker_id]
                except (KazooException, ValueError):
                    pass  # not registered yet (or no longer), or half written
                if registered:
                    try:
                        with BrokerConnection(self.host, self.ports[broker_id], timeout=5.0, security=self.security):
                            return
                    except (OSError, ValueError) as e:
                        log.debug("broker %d not answering yet: %s", broker_id, e)
                if time.monotonic() >= deadline:
                    raise ClusterError(f"broker {broker_id} did not become ready in time; its log ends with:\n"
                                       f"{_tail(self.log_path(broker_id))}")
                time.sleep(0.1)
        finally:
            zk_client.close(zk)

    def _wait_ready_or_move(self, broker_id: int, deadline: float, attempts: int = 3) -> None:
        """Like ``_wait_ready``; a broker on a port we picked that lost it to another process
        before binding is started again on a new port."""
        for attempt in range(attempts):
            try:
                return self._wait_ready(broker_id, deadline)
            except ClusterError as e:
                if self.base_port or "address already in use" not in str(e) or attempt == attempts - 1:
                    raise
                old, self.ports[broker_id] = self.ports[broker_id], free_port(self.host)
                if self.metrics_port == 0:  # either port may be the one taken
                    self.metrics_ports[broker_id] = free_port(self.host)
                log.info("broker %d lost port %d before binding it; starting it on %d", broker_id, old,
                         self.ports[broker_id])
                self._close_log(broker_id)
                self._spawn(broker_id)

    def start_broker(self, broker_id: int, timeout: float = START_TIMEOUT) -> None:
        """(Re)start broker ``broker_id`` at its port and wait until it serves."""
        if broker_id not in self.ports:
            raise KeyError(f"no broker {broker_id} in this cluster")
        proc = self.procs.get(broker_id)
        if proc is not None and proc.poll() is None:
            raise RuntimeError(f"broker {broker_id} is already running (pid {proc.pid})")
        self._close_log(broker_id)
        self._spawn(broker_id)
        self._wait_ready(broker_id, time.monotonic() + timeout)

    def add_broker(self, timeout: float = START_TIMEOUT) -> int:
        """Start one more broker (the next id) and wait until it serves; returns its id."""
        broker_id = max(self.ports, default=-1) + 1
        self.ports[broker_id] = free_port(self.host)
        self._spawn(broker_id)
        self._wait_ready(broker_id, time.monotonic() + timeout)
        return broker_id

    def kill_broker(self, broker_id: int, sig: int = signal.SIGKILL, timeout: float = STOP_TIMEOUT) -> int | None:
        """Send ``sig`` to broker ``broker_id`` and wait for it to exit; returns its exit code."""
        proc = self.procs[broker_id]
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("broker %d ignored signal %d for %.0f s; killing it", broker_id, sig, timeout)
                proc.kill()
                proc.wait(timeout)
        self._close_log(broker_id)
        return proc.returncode

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM every broker (SIGKILL after ``timeout``), then stop ZooKeeper if we started it."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for broker_id, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("broker %d did not stop within %.0f s; killing it", broker_id, timeout)
                proc.kill()
                proc.wait(timeout)
            self._close_log(broker_id)
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None

    def _close_log(self, broker_id: int) -> None:
        f = self._log_files.pop(broker_id, None)
        if f is not None:
            f.close()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cli(args) -> int:
    """``spark-coord up --brokers N --zk-port P --port P --data-dir DIR --override k=v``."""
    from spark_coord.config import parse_overrides

    overrides = parse_overrides(args.override)
    cluster = LocalCluster(args.brokers, args.data_dir, zk_port=args.zk_port, base_port=args.port,
                           overrides=overrides, metrics_port=args.metrics_port)
    stopping = {"signal": None}

    def on_signal(signum, _frame) -> None:
        stopping["signal"] = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        cluster.start()
        log.info("ZooKeeper at %s", cluster.zk_connect)
        for broker_id, (host, port) in cluster.brokers.items():
            log.info("broker %d at %s:%d (log %s)", broker_id, host, port, cluster.log_path(broker_id))
            if broker_id in cluster.metrics_ports:
                log.info("broker %d metrics at http://%s:%d/metrics, status page at http://%s:%d/", broker_id, host,
                         cluster.metrics_ports[broker_id], host, cluster.metrics_ports[broker_id])
        log.info("bootstrap: %s -- stop with Ctrl-C", cluster.bootstrap)
        while stopping["signal"] is None:
            for broker_id, proc in cluster.procs.items():
                if proc.poll() is not None:
                    log.error("broker %d exited with code %s; stopping the cluster", broker_id, proc.returncode)
                    stopping["signal"] = -1
            time.sleep(0.2)
        log.info("stopping the cluster")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        cluster.stop()
    return 0 if stopping["signal"] != -1 else 1
