"""The cluster of a nemesis run in its namespaces, and processes under a false clock.

``net_cluster`` makes a ``LocalCluster`` whose broker i runs in namespace ``b<i>`` at its own
address, behind a ``testkit.linkproxy`` of its namespace in a ``proxied`` run.  ``spawn_env``
starts processes under libfaketime (``faketime_lib()``) with a ``FAKETIME`` clock, and
``process_start`` and ``real_time`` map the times such a process journaled back to real time.
``LogTail`` reads what the log held during the run, for ``jepsen_checks.inconsistent_offsets``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from testkit.nemesis.netns import Net

log = logging.getLogger(__name__)

_FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                  "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                  "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1")


def faketime_lib() -> str | None:
    """The path of libfaketime's multi-threaded library (Debian package ``faketime``), or None."""
    for p in _FAKETIME_LIBS:
        if Path(p).exists():
            return p
    return None


def clock_unavailable_reason() -> str | None:
    return None if faketime_lib() else "libfaketime is not installed (Debian package `faketime`)"


def real_time(fake: float, start: float, offset: float, rate: float) -> float:
    """The real time of ``fake``, a time read by a process started at ``start`` under libfaketime's
    ``FAKETIME="+<offset> x<rate>"`` (fake = start + offset + (real - start) * rate)."""
    return start + (fake - start - offset) / rate


def process_start(pid: int) -> float:
    """When process ``pid`` started (epoch seconds, to a clock tick): /proc/<pid>/stat's start time
    after boot, plus when the machine booted (now less ``CLOCK_BOOTTIME``; /proc/stat's btime is
    whole seconds)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2:].split()[19])
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def net_cluster(net: Net, n_brokers: int, data_dir: Path, zk_connect: str, overrides: Mapping[str, object],
                 proxied: bool = False):
    """A ``LocalCluster`` whose broker i runs in namespace ``b<i>`` at its own address, port 9092.

    ``proxied``: broker i listens on 127.0.0.1:9092 of its namespace instead, and advertises
    ``<its address>:9092``, where a ``testkit.linkproxy`` process of the same namespace forwards to
    it (``proxies[i]``, started with the broker's first start and kept across its restarts)."""
    from spark_coord.cluster import STOP_TIMEOUT, ClusterError, LocalCluster, _tail
    from testkit.linkproxy import LinkProxy

    class NetCluster(LocalCluster):
        #: broker id -> clock for its next start (``FAKETIME`` value), set by the clock faults.
        clocks: dict[int, str] = {}

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            #: broker id -> the proxy in front of it (``proxied`` only).
            self.proxies: dict[int, LinkProxy] = {}

        @property
        def brokers(self) -> dict[int, tuple[str, int]]:
            return {i: (net[f"b{i}"].addr, p) for i, p in sorted(self.ports.items())}

        def _spawn(self, broker_id: int) -> None:
            host = net[f"b{broker_id}"].addr
            saved, saved_overrides = self.host, self.overrides
            clock = self.clocks.get(broker_id)
            if proxied:
                self._start_proxy(broker_id)
            with spawn_env(clock):
                if proxied:   # listeners=PLAINTEXT://127.0.0.1:9092, advertised at <its address>:9092
                    self.host = "127.0.0.1"
                    self.overrides = {**saved_overrides,
                                      "advertised.listeners": f"PLAINTEXT://{host}:{self.ports[broker_id]}"}
                else:
                    self.host = host      # listeners=PLAINTEXT://<its address>:9092 (advertised as such)
                try:
                    net.call(f"b{broker_id}", LocalCluster._spawn, self, broker_id)
                finally:
                    self.host, self.overrides = saved, saved_overrides

        def _start_proxy(self, broker_id: int) -> None:
            proxy = self.proxies.get(broker_id)
            if proxy is not None and proxy.alive():
                return
            port = self.ports[broker_id]
            control = self.data_dir / f"proxy-b{broker_id}.sock"
            if len(str(control)) > 100:     # a unix socket path has at most 107 bytes
                control = Path(tempfile.gettempdir()) / f"{net.prefix}-proxy-b{broker_id}.sock"
            proxy = LinkProxy((net[f"b{broker_id}"].addr, port), ("127.0.0.1", port), control,
                              log_path=self.data_dir / f"proxy-b{broker_id}.log")
            self.data_dir.mkdir(parents=True, exist_ok=True)
            net.call(f"b{broker_id}", proxy.start)
            self.proxies[broker_id] = proxy

        def stop(self, timeout: float = STOP_TIMEOUT) -> None:
            try:
                LocalCluster.stop(self, timeout)
            finally:
                for proxy in self.proxies.values():
                    proxy.stop()

        def _wait_ready(self, broker_id: int, deadline: float) -> None:
            from spark_coord.client.connection import BrokerConnection
            from spark_coord.zk import client as zk_client
            from spark_coord.zk import model, paths

            proc, host = self.procs[broker_id], net[f"b{broker_id}"].addr
            zk = zk_client.connect(self.zk_connect, connection_timeout_ms=10000)
            try:
                while True:
                    if proc.poll() is not None:
                        raise ClusterError(f"broker {broker_id} exited with code {proc.returncode}; log:\n"
                                           f"{_tail(self.log_path(broker_id))}")
                    try:
                        data, _ = zk.get(paths.broker(broker_id))
                        if model.parse_broker(broker_id, data).host == host:
                            with BrokerConnection(host, self.ports[broker_id], timeout=5.0):
                                return
                    except Exception:  # noqa: BLE001 -- not yet
                        pass
                    if time.monotonic() >= deadline:
                        raise ClusterError(f"broker {broker_id} did not become ready in time; log:\n"
                                           f"{_tail(self.log_path(broker_id))}")
                    time.sleep(0.1)
            finally:
                zk_client.close(zk)

    return NetCluster(n_brokers, data_dir, zk_connect=zk_connect, base_port=9092, overrides=overrides)


_env_lock = threading.RLock()


class spawn_env:
    """Starts processes under libfaketime with ``FAKETIME=clock`` (None: the real clock).  Holds a lock:
    the child's environment is the process's at fork time."""

    def __init__(self, clock: str | None):
        self.clock = clock

    def __enter__(self):
        _env_lock.acquire()
        self.saved = {k: os.environ.get(k) for k in ("FAKETIME", "LD_PRELOAD", "FAKETIME_NO_CACHE")}
        if self.clock:
            lib = faketime_lib()
            if lib is None:
                raise RuntimeError(clock_unavailable_reason())
            os.environ.update(FAKETIME=self.clock, LD_PRELOAD=lib, FAKETIME_NO_CACHE="1")
        return self

    def __exit__(self, *exc):
        try:
            for k, v in self.saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        finally:
            _env_lock.release()


class LogTail(threading.Thread):
    """Reads every partition's new records (offset, value) every ``interval`` seconds: what the log
    held during the run, for ``jepsen_checks.inconsistent_offsets``."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 1.0):
        super().__init__(name=f"log-tail-{topic}", daemon=True)
        self.bootstrap, self.topic, self.interval = bootstrap, topic, interval
        self.seen: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        #: partition -> the next offset to read.
        self.positions: dict[int, int] = {}
        self._seen_lock = threading.Lock()
        self._stop_event = threading.Event()

    def run(self) -> None:
        from spark_coord.client.fetcher import fetch
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.records.reader import iter_records

        positions = self.positions
        while not self._stop_event.is_set():
            try:
                with ClusterClient(self.bootstrap, timeout=2.0) as cc:
                    while not self._stop_event.is_set():
                        info = cc.topic(self.topic, refresh=True)
                        for p in sorted(info.partitions):
                            try:
                                for pd in fetch(cc.connection(cc.leader(self.topic, p)),
                                                {(self.topic, p): positions.get(p, 0)}, max_wait_ms=0):
                                    if pd.error:
                                        continue
                                    with self._seen_lock:
                                        for rec in iter_records(pd.records or b"",
                                                                min_offset=positions.get(p, 0)):
                                            self.seen.setdefault((self.topic, p), []).append((rec.offset,
                                                                                             rec.value or b""))
                                            positions[p] = rec.offset + 1
                            except Exception as e:  # noqa: BLE001 -- a leader cut off or down: next round
                                log.debug("log tail of %s-%d: %s", self.topic, p, e)
                        self._stop_event.wait(self.interval)
            except Exception as e:  # noqa: BLE001 -- no broker reachable now: the tail goes on until stopped
                log.debug("log tail: %s", e)
                self._stop_event.wait(self.interval)

    def truncated(self, partition: int, log_end: int) -> None:
        """Partition ``partition``'s log was cut back to ``log_end`` (a restart on a truncated log): forget
        what was read at or past it (the offsets are written again, with other records) and read on from it."""
        with self._seen_lock:
            key = (self.topic, partition)
            self.seen[key] = [(o, v) for o, v in self.seen.get(key, []) if o < log_end]
            self.positions[partition] = min(self.positions.get(partition, 0), log_end)

    def stop(self) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
        self._stop_event.set()
        self.join(15)
        return self.seen
