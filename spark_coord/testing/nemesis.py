"""Network and clock faults for chaos runs: every process in a network namespace of its own.

A nemesis as Jepsen's: ``Net`` makes, for one run, a Linux bridge and one network
namespace per process (ZooKeeper, each broker, each member, and ``client`` for the
producer and the run's own readers), each joined to the bridge by a veth pair and given
an address in a private /24 (10.77.0.0/24 by default) that exists only inside the run's
namespaces: no address on the host, no traffic leaves the bridge.  Names start with a
short prefix unique to the run (``nm`` + 4 hex digits); ``cleanup(prefix)`` removes the
leftovers of a run that died (its processes, namespaces, veths and bridge), and a run
removes its own on exit, on an exception and from an ``atexit`` hook.

A cut is a ``blackhole`` route on both sides (``ip route add blackhole <addr>/32`` in
each namespace): this kernel has no netem, prio qdisc nor drop action, and a blackhole
makes every packet between the two vanish at once (a local sender gets an error, as a
machine whose route is gone).  ``Net.cut(a, b)`` / ``Net.heal(a, b)``, ``isolate``,
``heal_all``.

Processes are started inside a namespace by a thread that entered it (``setns``; a
child inherits the network namespace of the thread that forks it), so the existing
process classes (``MemberProcess``, ``KafkaMemberProcess``, the brokers of
``LocalCluster``, ``EmbeddedZooKeeper``) start there unchanged: ``Net.call(node, fn)``.
``Net.exec_argv(node, argv)`` gives the ``ip netns exec`` form for a shell.

``NemesisRun`` is a ``ChaosRun`` (``testing.chaos``: its members, journals, producer and
checks) on such a network, adding the fault kinds of ``NET_KINDS`` and ``CLOCK_KINDS``
to the process faults, and the Jepsen-named checks of ``testing.jepsen_checks``:

- ``isolate_broker``: a broker (the coordinator's, half the time) cut from everyone;
- ``coordinator_zk_cut``: the group's coordinator broker cut from ZooKeeper only (its
  members still reach it);
- ``member_coordinator_cut``: a member cut from its coordinator's broker only (it still
  reaches the other brokers);
- ``broker_clients_cut``: a broker cut from every member and the producer, not from
  ZooKeeper nor the other brokers;
- ``bridge``: one server node (ZooKeeper or a broker) reaches all others, the rest split
  in two halves that do not reach each other;
- ``flap``: the coordinator cut from ZooKeeper, healed, cut again, 3 to 5 times, each
  cut shorter than its session;
- ``isolate_member``: a member cut from everyone;
- clocks (with libfaketime, ``faketime_lib()``): ``clock_member_offset`` /
  ``clock_member_fast`` restart a member under ``FAKETIME="+<2x session>s"`` or
  ``"x2"`` (its journal times are mapped back to real time before the checks),
  ``clock_coordinator_offset`` / ``clock_coordinator_fast`` restart the coordinator's
  broker so; each lasts a while, then the process is restarted with the real clock.

Each fault may come with a second one at the same moment (``combine``, a member fault
beside a broker fault).  The report adds, per fault kind: how often it was injected, the
longest wait of a record on the partitions it did not touch (neither their leader nor
their owner), and the Jepsen anomalies.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from spark_coord.testing import jepsen_checks
from spark_coord.testing.chaos import BROKER_KINDS, ChaosReport, ChaosRun, ChaosSettings, Fault

log = logging.getLogger(__name__)

NET_KINDS = ("isolate_broker", "coordinator_zk_cut", "member_coordinator_cut", "broker_clients_cut", "bridge",
             "flap", "isolate_member")
CLOCK_KINDS = ("clock_member_offset", "clock_member_fast", "clock_coordinator_offset", "clock_coordinator_fast")
PROCESS_KINDS = ("member_kill", "member_stop", "coordinator_kill", "broker_kill", "coordinator_expiry")
ALL_KINDS = NET_KINDS + CLOCK_KINDS + PROCESS_KINDS
#: Fault kinds that take a broker (at most one at a time, as in ``ChaosRun``).
SERVER_KINDS = ("isolate_broker", "coordinator_zk_cut", "broker_clients_cut", "bridge", "flap",
                "clock_coordinator_offset", "clock_coordinator_fast") + BROKER_KINDS
MEMBER_NET_KINDS = ("member_coordinator_cut", "isolate_member", "clock_member_offset", "clock_member_fast")
STATE_DIR = Path("/run/spark-coord-nemesis")
CLONE_NEWNET = 0x40000000
_FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                  "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                  "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1")


class NemesisUnavailable(RuntimeError):
    """Network namespaces cannot be made here (the message says why)."""


def unavailable_reason() -> str | None:
    """Why this machine cannot run a nemesis (None: it can): not root, no ``ip``, no netns support."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"nmprobe{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def faketime_lib() -> str | None:
    """The path of libfaketime's multi-threaded library (Debian package ``faketime``), or None."""
    for p in _FAKETIME_LIBS:
        if Path(p).exists():
            return p
    return None


def clock_unavailable_reason() -> str | None:
    return None if faketime_lib() else "libfaketime is not installed (Debian package `faketime`)"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


_libc = ctypes.CDLL(None, use_errno=True)


def _enter(ns: str) -> None:
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup(prefix: str) -> list[str]:
    """Remove what a run with ``prefix`` left behind: SIGKILL the processes in its namespaces, delete
    the namespaces, its veths and its bridge.  Returns what was removed."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if not ns.startswith(prefix + "-"):
            continue
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", ns, check=False)
        removed.append(f"netns {ns}")
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        if name.startswith(prefix):
            _ip("link", "del", name, check=False)
            removed.append(f"link {name}")
    try:
        (STATE_DIR / f"{prefix}.pid").unlink()
    except OSError:
        pass
    return removed


def cleanup_stale() -> list[str]:
    """``cleanup`` every run whose controlling process is gone (its pid file under ``STATE_DIR``)."""
    removed = []
    if STATE_DIR.is_dir():
        for f in STATE_DIR.glob("nm*.pid"):
            try:
                pid = int(f.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if not pid or not _pid_alive(pid):
                removed += cleanup(f.stem)
    return removed


@dataclass
class Node:
    name: str
    ns: str
    addr: str
    index: int


class Net:
    """One run's bridge and namespaces.  ``add(name)`` makes a node; ``close()`` removes everything."""

    def __init__(self, prefix: str | None = None, subnet: str = "10.77.0"):
        reason = unavailable_reason()
        if reason:
            raise NemesisUnavailable(reason)
        cleanup_stale()
        self.prefix = prefix or f"nm{secrets.token_hex(2)}"
        self.subnet = subnet
        self.bridge = f"{self.prefix}br"
        self.nodes: dict[str, Node] = {}
        self._cuts: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._closed = False
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / f"{self.prefix}.pid").write_text(str(os.getpid()))
        atexit.register(self.close)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        log.info("nemesis network %s: bridge %s, %s.0/24", self.prefix, self.bridge, subnet)

    def add(self, name: str) -> Node:
        i = len(self.nodes) + 1
        if i > 200:
            raise ValueError("at most 200 nodes")
        node = Node(name, f"{self.prefix}-{name}", f"{self.subnet}.{i + 1}", i)
        host, peer = f"{self.prefix}h{i}", f"{self.prefix}n{i}"
        _ip("netns", "add", node.ns)
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", node.ns)
        _ip("link", "set", host, "master", self.bridge, "up")
        _ip("-n", node.ns, "addr", "add", f"{node.addr}/24", "dev", peer)
        _ip("-n", node.ns, "link", "set", peer, "up")
        _ip("-n", node.ns, "link", "set", "lo", "up")
        self.nodes[name] = node
        return node

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    # ------------------------------------------------------------------ processes
    def call(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` on a thread inside ``name``'s namespace: processes it starts, and threads it
        starts, live there.  Returns its result or raises its exception."""
        box: dict[str, Any] = {}

        def body() -> None:
            try:
                _enter(self.nodes[name].ns)
                box["result"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 -- handed to the caller
                box["error"] = e

        t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def exec_argv(self, name: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.nodes[name].ns, *argv]

    # ------------------------------------------------------------------ faults
    def _route(self, op: str, src: str, dst: str) -> None:
        _ip("-n", self.nodes[src].ns, "route", op, "blackhole", f"{self.nodes[dst].addr}/32", check=op == "add")

    def cut(self, a: str, b: str) -> None:
        """No packet between ``a`` and ``b`` (a blackhole route on both sides)."""
        with self._lock:
            for src, dst in ((a, b), (b, a)):
                if (src, dst) not in self._cuts:
                    self._route("add", src, dst)
                    self._cuts.add((src, dst))

    def heal(self, a: str, b: str) -> None:
        with self._lock:
            for src, dst in ((a, b), (b, a)):
                if (src, dst) in self._cuts:
                    self._route("del", src, dst)
                    self._cuts.discard((src, dst))

    def isolate(self, a: str, others: list[str] | None = None) -> list[str]:
        peers = [n for n in (others or self.nodes) if n != a]
        for b in peers:
            self.cut(a, b)
        return peers

    def heal_all(self) -> None:
        with self._lock:
            for src, dst in sorted(self._cuts):
                self._route("del", src, dst)
            self._cuts.clear()

    def cuts(self) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._cuts)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        removed = cleanup(self.prefix)
        log.info("nemesis network %s removed (%d items)", self.prefix, len(removed))

    def __enter__(self) -> "Net":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ====================================================================== the cluster
def _net_cluster(net: Net, n_brokers: int, data_dir: Path, zk_connect: str, overrides: Mapping[str, object]):
    """A ``LocalCluster`` whose broker i runs in namespace ``b<i>`` at its own address, port 9092."""
    from spark_coord.cluster import ClusterError, LocalCluster, _tail

    class NetCluster(LocalCluster):
        #: broker id -> clock for its next start (``FAKETIME`` value), set by the clock faults.
        clocks: dict[int, str] = {}

        @property
        def brokers(self) -> dict[int, tuple[str, int]]:
            return {i: (net[f"b{i}"].addr, p) for i, p in sorted(self.ports.items())}

        def _spawn(self, broker_id: int) -> None:
            host = net[f"b{broker_id}"].addr
            saved = self.host
            clock = self.clocks.get(broker_id)
            with _spawn_env(clock):
                self.host = host      # listeners=PLAINTEXT://<its address>:9092 (advertised as such)
                try:
                    net.call(f"b{broker_id}", LocalCluster._spawn, self, broker_id)
                finally:
                    self.host = saved

        def _wait_ready(self, broker_id: int, deadline: float) -> None:
            from spark_coord.client.connection import BrokerConnection
            from spark_coord.zk import client as zk_client, model, paths

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


class _spawn_env:
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


# ====================================================================== the run
@dataclass
class NemesisSettings(ChaosSettings):
    #: Relative weights of every fault kind (``ALL_KINDS``); kinds missing weigh 0.
    weights: dict[str, float] = field(default_factory=lambda: {
        "isolate_broker": 2, "coordinator_zk_cut": 3, "member_coordinator_cut": 3, "broker_clients_cut": 2,
        "bridge": 1, "flap": 2, "isolate_member": 1, "clock_member_offset": 1, "clock_member_fast": 1,
        "clock_coordinator_offset": 1, "clock_coordinator_fast": 1,
        "member_kill": 1, "member_stop": 1, "coordinator_kill": 1, "broker_kill": 0, "coordinator_expiry": 1})
    #: How long a cut lasts (seconds, drawn uniformly); longer than the sessions by default.
    cut_s: tuple[float, float] = (3.0, 12.0)
    #: How long a process runs under a false clock before it is restarted with the real one.
    clock_s: tuple[float, float] = (8.0, 15.0)
    #: Chance that a second fault (a member fault beside a broker fault, or the reverse) starts with one.
    combine: float = 0.2
    #: Explicit faults instead of random ones: [(seconds after the warm-up, kind), ...].
    schedule: list[tuple[float, str]] = field(default_factory=list)
    #: Seconds past the end of a fault during which the stall of the partitions it did not touch is measured.
    stall_window_s: float = 10.0


@dataclass
class NemesisReport:
    chaos: ChaosReport
    prefix: str
    jepsen: dict
    #: kind -> injected, combined, longest stall (s) of partitions it did not touch (every one, and over the
    #: faults with no other fault in their window: ``alone``), anomalies in its windows.
    by_kind: dict[str, dict]
    clock: str
    skipped: list[str] = field(default_factory=list)
    #: Every fault: kind, target, at / until (seconds from the members' start), detail, combined.
    faults: list[dict] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return self.chaos.violations + self.jepsen_violations

    @property
    def jepsen_violations(self) -> list[str]:
        keys = jepsen_checks.JepsenResult.VIOLATIONS
        return [f"{k}: {v}" for k in keys for v in self.jepsen.get(k, [])]

    def table(self) -> str:
        rows = [("fault kind", "injected", "longest stall, untouched partitions (s)", "same, alone (s)", "anomalies")]
        for kind, d in self.by_kind.items():
            stall = "-" if d["stall_max_s"] is None else f"{d['stall_max_s']:.1f}"
            alone = "-" if d.get("alone_max_s") is None else f"{d['alone_max_s']:.1f} ({len(d['alone'])})"
            rows.append((kind, str(d["injected"]), stall, alone, str(d["anomalies"])))
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("-" * (x + 2) for x in w) + "|")
        return "\n".join(lines)

    def summary(self) -> str:
        j = self.jepsen
        counts = {k: len(j.get(k, [])) for k in ("lost_write", "duplicate", "inconsistent_offsets",
                                                  "nonmonotonic_poll", "poll_skip", "unseen")}
        return "\n".join([
            self.chaos.summary(),
            "Jepsen anomalies: " + ", ".join(f"{k} {v}" for k, v in counts.items())
            + f"; worst realtime lag {j.get('worst_realtime_lag_s', 0):.2f} s",
            *(f"skipped: {s}" for s in self.skipped),
            "faults: " + "; ".join(f"+{f['at']:.0f}s {f['kind']} {f['target']}"
                                   + (f" ({f['detail']})" if f["detail"] else "")
                                   + (" [combined]" if f["combined"] else "") for f in self.faults),
            self.table(),
        ])

    def to_dict(self) -> dict:
        out = {"chaos": asdict(self.chaos), "prefix": self.prefix, "jepsen": self.jepsen, "by_kind": self.by_kind,
               "clock": self.clock, "skipped": self.skipped, "faults": self.faults,
               "violations": self.violations}
        out["chaos"]["duplicate_pct"] = self.chaos.duplicate_pct
        return out


class LogTail(threading.Thread):
    """Reads every partition's new records (offset, value) every ``interval`` seconds: what the log
    held during the run, for ``jepsen_checks.inconsistent_offsets``."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 1.0):
        super().__init__(name=f"log-tail-{topic}", daemon=True)
        self.bootstrap, self.topic, self.interval = bootstrap, topic, interval
        self.seen: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        from spark_coord.client.fetcher import fetch
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.records.reader import iter_records

        positions: dict[int, int] = {}
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
                                    for rec in iter_records(pd.records or b"", min_offset=positions.get(p, 0)):
                                        self.seen.setdefault((self.topic, p), []).append((rec.offset,
                                                                                         rec.value or b""))
                                        positions[p] = rec.offset + 1
                            except Exception as e:  # noqa: BLE001 -- a leader cut off or down: next round
                                log.debug("log tail of %s-%d: %s", self.topic, p, e)
                        self._stop_event.wait(self.interval)
            except Exception as e:  # noqa: BLE001
                log.debug("log tail: %s", e)
                self._stop_event.wait(self.interval)

    def stop(self) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
        self._stop_event.set()
        self.join(15)
        return self.seen


class NemesisRun(ChaosRun):
    """A ``ChaosRun`` with every process in a namespace of its own and network and clock faults.

    ``NemesisRun(settings, workdir).run()`` returns a ``NemesisReport``; it starts its own
    ZooKeeper (in namespace ``zk``) and removes its network whatever happens."""

    def __init__(self, settings: NemesisSettings, workdir: str | Path, prefix: str | None = None):
        super().__init__(settings, workdir, zk_connect="")
        self.s: NemesisSettings = settings
        self.prefix = prefix
        self.clock_ok = faketime_lib() is not None
        self.skipped: list[str] = []
        #: member incarnation -> (real start, offset s, rate) of a clock it was started with.
        self.clocks: dict[str, tuple[float, float, float]] = {}
        self._next_clock: dict[int, tuple[str, float, float]] = {}
        #: Windows of network faults touching a node: node name -> [(from, to)].
        self.touched: dict[str, list[tuple[float, float]]] = {}
        self.fault_nodes: list[tuple[Fault, set[str]]] = []
        #: id(fault) -> what else to say about it (the clock, the far side of a cut).
        self.details: dict[int, str] = {}

    # ------------------------------------------------------------------ network and processes
    def run(self) -> NemesisReport:  # type: ignore[override]
        self.net = Net(self.prefix)
        self.prefix = self.net.prefix
        try:
            for name in ["zk", "client"] + [f"b{i}" for i in range(self.s.brokers)] + \
                        [f"m{i}" for i in range(len(self.kinds))]:
                self.net.add(name)
            # the run's own clients (producer, samplers, checks) live in ``client``
            return self.net.call("client", self._run_in_client)
        finally:
            self.net.close()

    def _run_in_client(self) -> NemesisReport:
        from spark_coord.zk.embedded import EmbeddedZooKeeper

        zk_addr = self.net["zk"].addr
        zk = EmbeddedZooKeeper(port=2181, data_dir=self.workdir / "zookeeper",
                               settings={"tickTime": 500, "minSessionTimeout": 1000, "maxSessionTimeout": 60000,
                                         "clientPortAddress": zk_addr})
        self.net.call("zk", zk.start, timeout=60)
        self.zookeeper = zk
        self.zk_connect = zk.connect_string
        try:
            self._chaos = ChaosRun.run(self)  # its fault loop is this class's _fault_loop
            return self._nemesis_report
        finally:
            zk.stop()

    def _start_cluster(self):
        from spark_coord.zk.client import connect

        overrides = {"zookeeper.session.timeout.ms": self.s.broker_zk_session_ms,
                     "coordinator.offsets.commit.interval.ms": 200, "coordinator.rebalance.backoff.ms": 200,
                     "coordinator.min.session.timeout.ms": 1000}
        self.cluster = _net_cluster(self.net, self.s.brokers, self.workdir / "cluster", self.zk_connect, overrides)
        self.cluster.start()
        self.zk = connect(self.zk_connect, session_timeout_ms=20000, connection_timeout_ms=10000)
        self.tail = LogTail(self.cluster.bootstrap, self.topic)
        self.tail.start()

    def _member(self, slot: int):
        clock = self._next_clock.pop(slot, None)
        with _spawn_env(clock[0] if clock else None):
            m = self.net.call(f"m{slot}", ChaosRun._member, self, slot)
        if clock:
            self.clocks[m.name] = (time.time(), clock[1], clock[2])
        return m

    def _journals(self) -> dict[str, list[dict]]:
        """The members' journals, with the times of a member started under a false clock mapped back
        to real time (fake = start + offset + (real - start) * rate)."""
        out = ChaosRun._journals(self)
        for name, (start, offset, rate) in self.clocks.items():
            if name not in out:
                continue
            fixed = []
            for e in out[name]:
                e = dict(e)
                for key in ("ts", "lease_end"):
                    if isinstance(e.get(key), (int, float)):
                        e[key] = start + (e[key] - start - offset) / rate
                fixed.append(e)
            out[name] = fixed
        return out

    # ------------------------------------------------------------------ faults
    def _node_of_member(self, name: str) -> str:
        return "m" + name.split(".")[0][1:]

    def _member_nodes(self) -> list[str]:
        return [f"m{i}" for i in range(len(self.kinds))]

    def _touch(self, fault: Fault, nodes: set[str]) -> None:
        self.fault_nodes.append((fault, nodes))

    def _end(self, fault: Fault, heal: Callable[[], None], busy: bool, brokers: list[int] = (),
             members: list[str] = ()) -> None:
        try:
            heal()
        except Exception:
            log.exception("healing %s failed", fault.kind)
        fault.until = time.time()
        for b in brokers:
            self.broker_down.setdefault(b, []).append((fault.at, fault.until))
            self._allow(b, True)
        for m in members:
            self.member_paused.setdefault(m, []).append((fault.at, fault.until + self.s.member_session_ms / 1000))
        if busy:
            self._broker_busy.clear()

    def _inject(self, kind: str) -> Fault | None:
        if kind in CLOCK_KINDS and not self.clock_ok:
            note = f"{kind}: {clock_unavailable_reason()}"
            if note not in self.skipped:
                self.skipped.append(note)
            return None
        if kind in PROCESS_KINDS:
            if kind in BROKER_KINDS and self._broker_busy.is_set():
                return None     # wait for the broker fault in progress (``_fault_loop``)
            return ChaosRun._inject(self, kind)
        if kind in SERVER_KINDS and kind not in BROKER_KINDS:
            if self._broker_busy.is_set():
                return None
            coordinator = self._coordinator()
            if coordinator is None:
                return None
            self._broker_busy.set()
            try:
                return self._server_fault(kind, coordinator)
            except Exception:
                self._broker_busy.clear()
                raise
        return self._member_fault(kind)

    def _server_fault(self, kind: str, coordinator: int) -> Fault:
        s, net, rng = self.s, self.net, self.rng
        brokers = sorted(self.cluster.ports)
        hold = rng.uniform(*s.cut_s)
        clients = ["client"] + self._member_nodes()
        if kind == "isolate_broker":
            victim = coordinator if rng.random() < 0.5 else rng.choice(brokers)
            node = f"b{victim}"
            fault = Fault(time.time(), kind, str(victim))
            self._allow(victim, False)
            net.isolate(node)
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: [net.heal(node, o) for o in net.nodes], True, [victim])
        elif kind == "coordinator_zk_cut":
            node = f"b{coordinator}"
            fault = Fault(time.time(), kind, str(coordinator))
            net.cut(node, "zk")
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: net.heal(node, "zk"), True)
        elif kind == "broker_clients_cut":
            victim = rng.choice(brokers)
            node = f"b{victim}"
            fault = Fault(time.time(), kind, str(victim))
            self._allow(victim, False)
            for c in clients:
                net.cut(node, c)
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: [net.heal(node, c) for c in clients], True, [victim])
        elif kind == "bridge":
            servers = ["zk"] + [f"b{b}" for b in brokers]
            rng.shuffle(servers)
            middle, rest = servers[0], servers[1:]
            half = max(1, len(rest) // 2)
            left, right = rest[:half], rest[half:]
            fault = Fault(time.time(), kind, middle)
            self.details[id(fault)] = f"{middle} bridges {'+'.join(left)} | {'+'.join(right)}"
            for a in left:
                for b in right:
                    net.cut(a, b)
            self._touch(fault, set(servers))

            def heal() -> None:
                for a in left:
                    for b in right:
                        net.heal(a, b)
            self._later(hold, self._end, fault, heal, True)
        elif kind == "flap":
            node = f"b{coordinator}"
            fault = Fault(time.time(), kind, str(coordinator))
            self._touch(fault, {node})
            cuts = rng.randint(3, 5)
            zk_s = s.broker_zk_session_ms / 1000
            plan = [(rng.uniform(0.3, 0.8) * zk_s, rng.uniform(0.3, 0.8)) for _ in range(cuts)]

            def flapping() -> None:
                for down, up in plan:
                    net.cut(node, "zk")
                    time.sleep(down)
                    net.heal(node, "zk")
                    time.sleep(up)
            t = threading.Thread(target=lambda: self._end(fault, flapping, True), daemon=True, name="flap")
            t.start()
            self._recoveries.append(t)
        else:  # clock_coordinator_offset / clock_coordinator_fast
            clock = self._clock(kind)
            fault = Fault(time.time(), kind, str(coordinator))
            self.details[id(fault)] = f"FAKETIME={clock}"
            self._allow(coordinator, False)
            self.cluster.kill_broker(coordinator, signal.SIGKILL)
            self.cluster.clocks[coordinator] = clock
            try:
                self.cluster.start_broker(coordinator)
            finally:
                self.cluster.clocks.pop(coordinator, None)
            self._allow(coordinator, True)
            self._touch(fault, {f"b{coordinator}"})
            hold = rng.uniform(*s.clock_s)

            def back() -> None:
                self._allow(coordinator, False)
                self.cluster.kill_broker(coordinator, signal.SIGKILL)
                self.cluster.start_broker(coordinator)
                self._allow(coordinator, True)
            self._later(hold, self._end, fault, back, True)
        return fault

    def _clock(self, kind: str) -> str:
        session_s = max(self.s.member_session_ms, self.s.broker_zk_session_ms) / 1000
        return f"+{int(2 * session_s + 30)}s" if kind.endswith("offset") else "x2"

    def _member_fault(self, kind: str) -> Fault | None:
        s, net, rng = self.s, self.net, self.rng
        slot = rng.choice(sorted(self.current))
        m = self.current[slot]
        if not m.alive():
            return None
        node = f"m{slot}"
        hold = rng.uniform(*s.cut_s)
        if kind == "isolate_member":
            fault = Fault(time.time(), kind, m.name)
            net.isolate(node)
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: [net.heal(node, o) for o in net.nodes], False, (), [m.name])
            return fault
        if kind == "member_coordinator_cut":
            coordinator = self._coordinator()
            if coordinator is None:
                return None
            fault = Fault(time.time(), kind, m.name)
            self.details[id(fault)] = f"from b{coordinator}"
            net.cut(node, f"b{coordinator}")
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: net.heal(node, f"b{coordinator}"), False, (), [m.name])
            return fault
        # clock_member_offset / clock_member_fast: restart the member under a false clock, later with the real one
        clock = self._clock(kind)
        offset = float(clock[1:-1]) if clock.startswith("+") else 0.0
        rate = float(clock[1:]) if clock.startswith("x") else 1.0
        fault = Fault(time.time(), kind, m.name)
        self.details[id(fault)] = f"FAKETIME={clock}"
        self.deaths[m.name] = time.time()
        m.kill()
        self._next_clock[slot] = (clock, offset, rate)
        new = self._member(slot)
        self._touch(fault, {node})
        hold = rng.uniform(*s.clock_s)

        def back() -> None:
            if new.alive():
                self.deaths[new.name] = time.time()
                new.kill()
            self._member(slot)
        self._later(hold, self._end, fault, back, False, (), [m.name, new.name])
        return fault

    # ------------------------------------------------------------------ schedule
    def _plan(self) -> list[tuple[float, str]]:
        s = self.s
        if s.schedule:
            return [(s.warmup_s + at, kind) for at, kind in s.schedule]
        window = max(1.0, s.duration_s - s.warmup_s - s.cooldown_s)
        kinds = [k for k, w in s.weights.items() if w > 0]
        return sorted((s.warmup_s + self.rng.uniform(0, window),
                       self.rng.choices(kinds, weights=[s.weights[k] for k in kinds])[0]) for _ in range(s.faults))

    def _try_inject(self, kind: str) -> Fault | None:
        try:
            return self._inject(kind)
        except Exception:
            log.exception("injecting %s failed", kind)
            return None

    def _fault_loop(self, t0: float) -> None:
        s = self.s
        for at, kind in self._plan():
            time.sleep(max(0.0, t0 + at - time.time()))
            group = [kind]
            if not s.schedule and self.rng.random() < s.combine:
                other = [k for k, w in s.weights.items() if w > 0 and (k in SERVER_KINDS) != (kind in SERVER_KINDS)]
                if other:
                    group.append(self.rng.choice(other))
            for k in group:
                fault = self._try_inject(k)
                if fault is None and k in SERVER_KINDS and self._broker_busy.is_set():
                    # another broker fault is still on: inject this one once it has healed
                    deadline = time.monotonic() + 30
                    while self._broker_busy.is_set() and time.monotonic() < deadline:
                        time.sleep(0.2)
                    fault = self._try_inject(k)
                if fault is not None:
                    fault.combined = len(group) > 1  # type: ignore[attr-defined]
                    self.faults.append(fault)
                    log.info("fault %d: %s of %s %s%s", len(self.faults), fault.kind, fault.target,
                             self.details.get(id(fault), ""), " (combined)" if len(group) > 1 else "")
        time.sleep(max(0.0, t0 + s.duration_s - time.time()))

    def _teardown(self) -> None:
        tail = getattr(self, "tail", None)
        if tail is not None and tail.is_alive():
            tail.stop()
        try:
            self.net.heal_all()
        except Exception:  # noqa: BLE001 -- the namespaces go anyway
            log.exception("healing the network failed")
        ChaosRun._teardown(self)

    def _heal(self) -> None:
        ChaosRun._heal(self)
        self.net.heal_all()
        self.cluster.clocks.clear()

    def _finish(self, started: float):
        report = ChaosRun._finish(self, started)
        self._nemesis_report = self._nemesis(report)
        return report

    # ------------------------------------------------------------------ checks
    def _nemesis(self, chaos: ChaosReport) -> NemesisReport:
        from spark_coord.testing.chaos import _first_deliveries, _log_offsets

        journals = self._journals()
        seen = self.tail.stop()
        offsets = _log_offsets(self.cluster.bootstrap, self.topic)   # (partition, seq) -> offset
        log_recs: dict[tuple[str, int], dict[int, bytes]] = {}
        for (p, n), off in offsets.items():
            log_recs.setdefault((self.topic, p), {})[off] = f"{p}:{n}".encode()
        acked: dict[tuple[str, int], set[bytes]] = {}
        for p, n in self.producer.acked:
            acked.setdefault((self.topic, p), set()).add(f"{p}:{n}".encode())
        log_ends = self.sampler.samples
        result = jepsen_checks.check(acked, log_recs, journals, seen, log_ends)
        first = _first_deliveries(journals)
        by_kind: dict[str, dict] = {}
        anomalies = result.violations + chaos.violations
        for fault, nodes in self.fault_nodes + [(f, set()) for f in self.faults
                                                if f.kind in PROCESS_KINDS]:
            d = by_kind.setdefault(fault.kind, {"injected": 0, "combined": 0, "stall_max_s": None, "stalls": [],
                                                "alone_max_s": None, "alone": [], "anomalies": 0})
            d["injected"] += 1
            d["combined"] += int(getattr(fault, "combined", False))
            until = (fault.until or fault.at) + s_window(self.s)
            parts = self._untouched(fault, nodes, until)
            stall = self._max_latency(parts, fault.at, until, first, log_ends) if parts else None
            if stall is not None:
                d["stalls"].append(round(stall, 2))
                d["stall_max_s"] = max(d["stall_max_s"] or 0.0, stall)
                # alone: no other fault from 8 s before this one to the end of its window
                if not any(f is not fault and f.at < until and (f.until or f.at) + 8 > fault.at for f in self.faults):
                    d["alone"].append(round(stall, 2))
                    d["alone_max_s"] = max(d["alone_max_s"] or 0.0, stall)
            d["anomalies"] += sum(1 for v in anomalies if _mentions_window(v, fault.at, until))
        faults = [dict(kind=f.kind, target=f.target, at=round(f.at - self.t0, 2),
                       until=None if f.until is None else round(f.until - self.t0, 2),
                       detail=self.details.get(id(f), ""), combined=getattr(f, "combined", False))
                  for f in self.faults]
        return NemesisReport(chaos=chaos, prefix=self.net.prefix, jepsen=result.to_dict(), by_kind=by_kind,
                             clock="libfaketime" if self.clock_ok else "none", skipped=self.skipped, faults=faults)

    def _untouched(self, fault: Fault, nodes: set[str], until: float) -> list[int]:
        """Partitions whose leader and owners at ``fault.at`` the fault did not touch."""
        parts = []
        for p, leader in self.leaders.items():
            if f"b{leader}" in nodes or (fault.kind in BROKER_KINDS and fault.target == str(leader)):
                continue
            owners = {m for a, b, m in self._owners.get((self.topic, p), ()) if a <= until and b >= fault.at}
            if any(self._node_of_member(m) in nodes or m == fault.target for m in owners):
                continue
            parts.append(p)
        return parts

    def _waiting_members(self) -> dict[str, list[tuple[float, float]]]:
        """As ``ChaosRun``'s, plus: Kafka members wait while the coordinator is cut off or restarted
        under a false clock (librdkafka's reconnect backoff), every member while it was cut off."""
        out = ChaosRun._waiting_members(self)
        coordinator_faults = [(f.at, (f.until or f.at) + 15.0) for f in self.faults if f.kind in (
            "isolate_broker", "coordinator_zk_cut", "flap", "bridge", "clock_coordinator_offset",
            "clock_coordinator_fast", "broker_clients_cut")]
        for name, m in self.members.items():
            if getattr(m, "kind", "thin") != "thin":
                out.setdefault(name, []).extend(coordinator_faults)
        return out

    def _zombie_windows(self, journals):
        """As ``ChaosRun``'s, plus: a Kafka member cut off from its coordinator for longer than its session
        delivers what it fetched until it learns it lost the assignment."""
        out = ChaosRun._zombie_windows(self, journals)
        session_s = (self.s.kafka_session_ms or self.s.member_session_ms) / 1000
        for f in self.faults:
            if f.kind not in ("isolate_member", "member_coordinator_cut") or f.until is None:
                continue
            name = f.target
            if self._kind_of(name) == "thin" or f.until - f.at <= session_s:
                continue
            learnt = [e["ts"] for e in journals.get(name, ()) if e["ev"] in ("lost", "revoke", "closed")
                      and e["ts"] >= f.at]
            out.setdefault(name, []).append((f.at + session_s, (min(learnt) if learnt else f.until) + 5.0))
        return out


def s_window(s: NemesisSettings) -> float:
    return s.stall_window_s + s.member_session_ms / 1000


def _mentions_window(violation: str, a: float, b: float) -> bool:
    """Whether a violation message names a time (epoch seconds with decimals) inside [a, b]."""
    import re

    for m in re.finditer(r"\b(1\d{9}\.\d+)", violation):
        if a <= float(m.group(1)) <= b:
            return True
    return False
