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

``NemesisRun`` is a ``ChaosRun`` (``testkit.chaos``: its members, journals, producer and
checks) on such a network, adding the fault kinds of ``NET_KINDS``, ``CLOCK_KINDS`` and
``PROXY_KINDS`` to the process faults, and the Jepsen-named checks of ``testkit.jepsen_checks``:

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
- ``zk_split``: the ZooKeeper ensemble (``zk_nodes`` servers, 3 by default: a real quorum in
  namespaces ``zk0``..; 1 runs one standalone server in ``zk``) split into a majority and a
  minority of one server, the coordinator's broker with the minority (or, mirrored, with the
  majority and another broker with the minority); only ZooKeeper-to-ZooKeeper and
  broker-to-ZooKeeper links are cut (``testkit.nemesis_zk``);
- ``broker_add`` / ``broker_remove`` (``MEMBERSHIP_KINDS``): a broker with a new id started in
  a new namespace; a broker that leads none of the topic's partitions (one replica each, so
  only an added or a spare one) stopped for good -- the coordinator when it is one of those;
- clocks (with libfaketime, ``faketime_lib()``): ``clock_member_offset`` /
  ``clock_member_fast`` restart a member under ``FAKETIME="+<2x session>s"`` or
  ``"+0 x2"`` (its journal times are mapped back to real time before the checks),
  ``clock_coordinator_offset`` / ``clock_coordinator_fast`` restart the coordinator's
  broker so; each lasts a while, then the process is restarted with the real clock;
- link faults (``PROXY_KINDS``, in a run with ``proxied``: each broker listens on loopback in
  its namespace and advertises ``<its address>:9092``, where a ``testkit.linkproxy`` process
  of its namespace forwards every client connection -- the producer's, the members', the
  thin members' channel to the coordinator): ``slow_broker`` delays every chunk on a
  broker's links by 100-800 ms plus up to half that again of jitter, ``throttle_broker``
  caps each direction of each link at 8-64 KB/s, ``stall_broker`` makes the coordinator's
  broker's links pass no byte at all, open or new, without closing any (what was held
  passes once healed), ``stuck_links`` makes the coordinator's broker's *open* links pass
  nothing, no close reaching either end, while connections made since pass (the path of each
  connection lost, as when a NAT or firewall drops its state: a client recovers only by its own
  timeouts and a new connection; it lasts a cut plus the members' ``socket.timeout.ms``, so they
  do); each for as long as a cut, and each healed by setting ``pass``.

Each fault may come with a second one at the same moment (``combine``, a member fault
beside a broker fault).  The report adds, per fault kind: how often it was injected, the
longest wait of a record on the partitions it did not touch (neither their leader nor
their owner), and the Jepsen anomalies.
"""

from __future__ import annotations

import atexit
import bisect
import ctypes
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from testkit import invariants, jepsen_checks, nemesis_zk
from testkit.chaos import BROKER_KINDS, ChaosReport, ChaosRun, ChaosSettings, Fault

log = logging.getLogger(__name__)

NET_KINDS = ("isolate_broker", "coordinator_zk_cut", "member_coordinator_cut", "broker_clients_cut", "bridge",
             "flap", "isolate_member", "zk_split")
CLOCK_KINDS = ("clock_member_offset", "clock_member_fast", "clock_coordinator_offset", "clock_coordinator_fast")
PROCESS_KINDS = ("member_kill", "member_stop", "coordinator_kill", "broker_kill", "coordinator_expiry")
#: A broker joins for good, a broker leaves for good (``testkit.nemesis_zk``).
MEMBERSHIP_KINDS = ("broker_add", "broker_remove")
#: A broker's client links made slow, narrow or stuck by its proxy (``testkit.linkproxy``; ``proxied`` runs).
PROXY_KINDS = ("slow_broker", "throttle_broker", "stall_broker", "stuck_links")
ALL_KINDS = NET_KINDS + CLOCK_KINDS + PROCESS_KINDS + MEMBERSHIP_KINDS + PROXY_KINDS
#: Fault kinds that take a broker (at most one at a time, as in ``ChaosRun``).
SERVER_KINDS = ("isolate_broker", "coordinator_zk_cut", "broker_clients_cut", "bridge", "flap",
                "clock_coordinator_offset", "clock_coordinator_fast", "zk_split") + BROKER_KINDS + MEMBERSHIP_KINDS \
    + PROXY_KINDS
#: Faults that leave the brokers among their nodes unreachable to clients (the reachable lag leaves them out).
LEADER_AWAY_KINDS = ("isolate_broker", "broker_clients_cut", "stall_broker")
#: Faults after which a share member may find what it held released (``_share_leaders_hit``).
SHARE_LEADER_KINDS = LEADER_AWAY_KINDS + ("slow_broker", "throttle_broker", "stuck_links", "clock_coordinator_offset",
                                          "clock_coordinator_fast")
#: How fast the clock of a ``clock_*_fast`` fault runs.
FAST_CLOCK_RATE = 2
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


def _enter_fd(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


def _enter(ns: str) -> None:
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        _enter_fd(fd, ns)
    finally:
        os.close(fd)


def _call_inside(enter: Callable[[], None], name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on a new thread that first ran ``enter`` (a setns into a network
    namespace: processes and threads it starts live there); its result, or its exception raised."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            enter()
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            box["error"] = e

    t = threading.Thread(target=body, name=name, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


class HostNamespace:
    """The network namespace of the thread that made it (the run's, where its bridge is): ``call``
    runs a function there, e.g. ``Net.add`` from a thread that lives in another namespace."""

    def __init__(self):
        self.fd = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return _call_inside(lambda: _enter_fd(self.fd, "the run's own network namespace"), "netns-host", fn, *args)

    def close(self) -> None:
        os.close(self.fd)


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
        return _call_inside(lambda: _enter(self.nodes[name].ns), f"netns-{name}", fn, *args, **kwargs)

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
        peers = [n for n in (others or list(self.nodes)) if n != a]
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
def _net_cluster(net: Net, n_brokers: int, data_dir: Path, zk_connect: str, overrides: Mapping[str, object],
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
            with _spawn_env(clock):
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
        "member_kill": 1, "member_stop": 1, "coordinator_kill": 1, "broker_kill": 0, "coordinator_expiry": 1,
        "zk_split": 2, "broker_add": 1, "broker_remove": 1, "slow_broker": 2, "throttle_broker": 1, "stall_broker": 2,
        "stuck_links": 2})
    #: Clients reach each broker through a ``testkit.linkproxy`` in its namespace, which the link faults
    #: (``PROXY_KINDS``) need; off, those kinds are skipped with a note.  Off by default: a run that
    #: injects none of them has no use for the extra hop and processes.
    proxied: bool = False
    #: ZooKeeper servers: 1 runs one standalone server (namespace ``zk``), 3 or more a real quorum.
    zk_nodes: int = 3
    #: Chance that a ``zk_split`` puts the coordinator on the minority side (else: mirrored).
    zk_split_coordinator_minority: float = 0.7
    #: Brokers started with the others but given no partition of the run's topic (``broker_remove``
    #: may take them for good).
    spare_brokers: int = 0
    #: ``broker_add`` is skipped while this many brokers run.
    max_brokers: int = 5
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
    #: Draw every kind of weight > 0 at least once when there are at least as many faults as kinds.
    every_kind: bool = True


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
    #: What the run was: seed, faults, duration, member kinds, members' session (ms).
    settings: dict = field(default_factory=dict)

    @property
    def violations(self) -> list[str]:
        return self.chaos.violations + self.jepsen_violations

    @property
    def jepsen_violations(self) -> list[str]:
        keys = jepsen_checks.JepsenResult.VIOLATIONS
        return [f"{k}: {v}" for k in keys for v in self.jepsen.get(k, [])]

    def table(self) -> str:
        rows = [("fault kind", "injected", "longest stall, untouched partitions (s)", "same, alone (s)", "anomalies",
                 "redelivered in its windows")]
        for kind, d in self.by_kind.items():
            stall = "-" if d["stall_max_s"] is None else f"{d['stall_max_s']:.1f}"
            alone = "-" if d.get("alone_max_s") is None else f"{d['alone_max_s']:.1f} ({len(d['alone'])})"
            rows.append((kind, str(d["injected"]), stall, alone, str(d["anomalies"]), _redelivered(d)))
        return markdown_table(rows)

    def summary(self) -> str:
        j = self.jepsen
        counts = {k: len(j.get(k, [])) for k in ("lost_write", "duplicate", "inconsistent_offsets",
                                                  "nonmonotonic_poll", "poll_skip", "unseen")}
        return "\n".join([
            self.chaos.summary(),
            "Jepsen anomalies: " + ", ".join(f"{k} {v}" for k, v in counts.items())
            + f"; worst realtime lag {j.get('worst_realtime_lag_s', 0):.2f} s"
            + f" ({j.get('worst_reachable_lag_s', 0):.2f} s leaving out the time leaders were unreachable)",
            *(f"skipped: {s}" for s in self.skipped),
            "faults: " + "; ".join(f"+{f['at']:.0f}s {f['kind']} {f['target']}"
                                   + (f" ({f['detail']})" if f["detail"] else "")
                                   + (" [combined]" if f["combined"] else "") for f in self.faults),
            self.table(),
        ])

    def to_dict(self) -> dict:
        out = {"chaos": asdict(self.chaos), "prefix": self.prefix, "jepsen": self.jepsen, "by_kind": self.by_kind,
               "clock": self.clock, "skipped": self.skipped, "faults": self.faults, "settings": self.settings,
               "violations": self.violations}
        out["chaos"]["duplicate_pct"] = self.chaos.duplicate_pct
        return out


def markdown_table(rows: list[tuple[str, ...]]) -> str:
    """A Markdown table, columns padded; the first row is the header."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (x + 2) for x in w) + "|")
    return "\n".join(lines)


#: The bar a series of runs must clear (issue: ten runs of 60 faults each).
MAX_DUPLICATE_PCT = 0.1
LAG_SLACK_S = 10.0


def aggregate(runs: list[dict]) -> dict:
    """Many runs' reports (``NemesisReport.to_dict()``) as one: per fault kind, how often it was injected
    (and in how many runs), the longest stall of the partitions it did not touch, the anomalies in its
    windows; per run and in total, the figures of the bar (``verdict``)."""
    kinds: dict[str, dict] = {}
    per_run = []
    for run in runs:
        for kind, d in run["by_kind"].items():
            k = kinds.setdefault(kind, {"injected": 0, "runs": 0, "stall_max_s": None, "alone_max_s": None,
                                        "anomalies": 0})
            k["injected"] += d["injected"]
            k["runs"] += 1
            k["anomalies"] += d["anomalies"]
            if "redelivered" in d:  # reports from before it was counted have none
                k["redelivered"] = k.get("redelivered", 0) + d["redelivered"]
                k["redelivered_injected"] = k.get("redelivered_injected", 0) + d["injected"]
            for key in ("stall_max_s", "alone_max_s"):
                if d.get(key) is not None:
                    k[key] = round(max(k[key] or 0.0, d[key]), 2)
        chaos, jep, settings = run["chaos"], run["jepsen"], run.get("settings", {})
        per_run.append({
            "seed": settings.get("seed"), "faults": len(run["faults"]), "kinds_drawn": len(run["by_kind"]),
            "acked": chaos["acked"], "lost_write": len(jep["lost_write"]),
            "inconsistent_offsets": len(jep["inconsistent_offsets"]), "overlaps": len(chaos["overlaps"]),
            "fenced_overlaps": len(chaos.get("fenced_overlaps", ())),
            "duplicate_pct": round(chaos["duplicate_pct"], 3),
            "duplicate_causes": chaos.get("duplicates", {}).get("causes", {}), "worst_lag_s": jep["worst_realtime_lag_s"],
            "worst_reachable_lag_s": jep.get("worst_reachable_lag_s", jep["worst_realtime_lag_s"]),
            "lag_bar_s": settings.get("session_ms", 0) / 1000 + LAG_SLACK_S,
            "redelivered_outside_faults": settings.get("redelivered_outside_faults"),
            "violations": len(run["violations"])})
    verdict = {
        "runs": len(per_run), "faults": sum(r["faults"] for r in per_run),
        "records": sum(r["acked"] for r in per_run),
        "lost_write": sum(r["lost_write"] for r in per_run),
        "inconsistent_offsets": sum(r["inconsistent_offsets"] for r in per_run),
        "overlaps": sum(r["overlaps"] for r in per_run),
        "max_duplicate_pct": max((r["duplicate_pct"] for r in per_run), default=0.0),
        "worst_reachable_lag_s": max((r["worst_reachable_lag_s"] for r in per_run), default=0.0),
        "runs_over_lag_bar": sum(1 for r in per_run if r["worst_reachable_lag_s"] > r["lag_bar_s"]),
        "violations": sum(r["violations"] for r in per_run)}
    verdict["passed"] = (not verdict["lost_write"] and not verdict["inconsistent_offsets"]
                         and not verdict["overlaps"] and not verdict["violations"]
                         and verdict["max_duplicate_pct"] < MAX_DUPLICATE_PCT and not verdict["runs_over_lag_bar"])
    return {"by_kind": dict(sorted(kinds.items())), "runs": per_run, "verdict": verdict}


def _redelivered(d: dict) -> str:
    """Records delivered again in the windows of a kind's faults, in all and per injection."""
    if "redelivered" not in d:
        return "-"
    n = d.get("redelivered_injected", d["injected"])
    return f"{d['redelivered']:,} ({d['redelivered'] / max(n, 1):,.0f} each)"


def _causes(c: dict) -> str:
    return " / ".join(str(c.get(k, 0)) for k in ("unacknowledged", "zombie", "acknowledged", "outside")) if c else "-"


def aggregate_tables(agg: dict) -> str:
    """The per-kind table and the per-run table of ``aggregate``'s result, in Markdown."""
    rows = [("fault kind", "injected (runs)", "longest stall, untouched partitions (s)", "same, alone (s)",
             "anomalies", "redelivered in its windows")]
    for kind, d in agg["by_kind"].items():
        rows.append((kind, f"{d['injected']} ({d['runs']})",
                     "-" if d["stall_max_s"] is None else f"{d['stall_max_s']:.1f}",
                     "-" if d["alone_max_s"] is None else f"{d['alone_max_s']:.1f}", str(d["anomalies"]),
                     _redelivered(d)))
    runs = [("seed", "faults", "kinds", "records", "lost", "inconsistent", "two owners", "fenced zombies",
             "duplicates %", "of them: unacknowledged / zombie / acknowledged / outside", "worst lag (s)",
             "reachable lag (s)", "violations")]
    for r in agg["runs"]:
        runs.append((str(r["seed"]), str(r["faults"]), str(r["kinds_drawn"]), f"{r['acked']:,}", str(r["lost_write"]),
                     str(r["inconsistent_offsets"]), str(r["overlaps"]), str(r.get("fenced_overlaps", 0)),
                     f"{r['duplicate_pct']:.3f}", _causes(r.get("duplicate_causes") or {}),
                     f"{r['worst_lag_s']:.1f}", f"{r['worst_reachable_lag_s']:.1f}", str(r["violations"])))
    v = agg["verdict"]
    return "\n\n".join([markdown_table(rows), markdown_table(runs), (
        f"{v['runs']} runs, {v['faults']} faults, {v['records']:,} records: lost {v['lost_write']}, inconsistent "
        f"offsets {v['inconsistent_offsets']}, two owners {v['overlaps']}, duplicates at most "
        f"{v['max_duplicate_pct']:.3f}% (bar {MAX_DUPLICATE_PCT}%), worst reachable lag "
        f"{v['worst_reachable_lag_s']:.1f} s "
        f"({v['runs_over_lag_bar']} runs over session + {LAG_SLACK_S:.0f} s) -- "
        + ("passed" if v["passed"] else "NOT passed"))])


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
    ZooKeeper (one server in namespace ``zk``, or an ensemble in ``zk0``, ``zk1``, ...) and removes its
    network whatever happens.  A fault that cuts a broker from ZooKeeper cuts it from every server."""

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
        #: Link faults and their proxy's ``stats()`` as they began and just before the heal.
        self.proxy_stats: list[tuple[Fault, dict, dict]] = []
        #: The namespaces of the ZooKeeper servers (``nemesis_zk.zk_node_names``) and their servers.
        self.zk_nodes: list[str] = nemesis_zk.zk_node_names(settings.zk_nodes)
        self.zk_servers: dict[str, Any] = {}
        #: Per ``zk_split``: its sides, the coordinator before and the coordinators read during it, and
        #: how long the ensemble took to rejoin; per ``broker_remove``: the broker and the coordinator after.
        self.zk_splits: list[dict] = []
        self.removals: list[dict] = []
        self.added_brokers: list[int] = []
        self.removed_brokers: list[int] = []
        self.next_broker_id = settings.brokers + settings.spare_brokers

    # ------------------------------------------------------------------ network and processes
    def run(self) -> NemesisReport:  # type: ignore[override]
        self.net = Net(self.prefix)
        self.prefix = self.net.prefix
        try:
            for name in self.zk_nodes + ["client"] + [f"b{i}" for i in range(self.next_broker_id)] + \
                        [f"m{i}" for i in range(len(self.kinds))]:
                self.net.add(name)
            # ``broker_add`` makes its namespace from here (the bridge's namespace)
            self.host_ns = HostNamespace()
            # the run's own clients (producer, samplers, checks) live in ``client``
            return self.net.call("client", self._run_in_client)
        finally:
            if getattr(self, "host_ns", None) is not None:
                self.host_ns.close()
            self.net.close()

    def _run_in_client(self) -> NemesisReport:
        zk = nemesis_zk.start_zookeeper(self.net, self.zk_nodes, self.workdir / "zookeeper")
        self.zookeeper = zk
        self.zk_servers = nemesis_zk.zk_servers(self.zk_nodes, zk)
        self.zk_connect = zk.connect_string
        try:
            self._chaos = ChaosRun.run(self)  # its fault loop is this class's _fault_loop
            return self._nemesis_report
        finally:
            zk.stop()

    def _start_cluster(self):
        from spark_coord.zk.client import connect

        # the chaos run's settings (share and KIP-848 timeouts included: without them KIP-848 members had
        # the default 45 s session, and a restored group waited that long for a dead one)
        self.cluster = _net_cluster(self.net, self.s.brokers + self.s.spare_brokers, self.workdir / "cluster",
                                    self.zk_connect, self._broker_overrides(), proxied=self.s.proxied)
        self.cluster.start()
        self.zk = connect(self.zk_connect, session_timeout_ms=20000, connection_timeout_ms=10000)
        self.tail = LogTail(self.cluster.bootstrap, self.topic)
        self.tail.start()

    def _create_topic(self) -> None:
        """The run's topic on the original brokers only (explicit assignment): the spare brokers, and
        those ``broker_add`` starts, lead none of its partitions, so ``broker_remove`` may take them for
        good (one replica per partition: a removed leader's partitions would be gone for ever)."""
        nemesis_zk.create_topic(self.cluster.bootstrap, self.topic,
                                nemesis_zk.topic_assignment(self.s.partitions, list(range(self.s.brokers))))

    def _member(self, slot: int):
        clock = self._next_clock.pop(slot, None)
        with _spawn_env(clock[0] if clock else None):
            m = self.net.call(f"m{slot}", ChaosRun._member, self, slot)
        if clock:
            # libfaketime's clock starts at the process's start: read it from /proc, not after the spawn
            self.clocks[m.name] = (process_start(m.pid), clock[1], clock[2])
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
                        e[key] = real_time(e[key], start, offset, rate)
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
        if kind in PROXY_KINDS and not self.s.proxied:
            self.note_skipped(f"{kind}: the run is not proxied (NemesisSettings.proxied)")
            return None
        if kind in SERVER_KINDS and kind not in BROKER_KINDS:
            if self._broker_busy.is_set():
                return None
            coordinator = self._coordinator()
            if coordinator is None:
                return None
            self._broker_busy.set()
            try:
                if kind in PROXY_KINDS:
                    return self._proxy_fault(kind, coordinator)
                return self._server_fault(kind, coordinator)
            except Exception:
                self._broker_busy.clear()
                raise
        return self._member_fault(kind)

    def _server_fault(self, kind: str, coordinator: int) -> Fault | None:
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
            self._later(hold, self._end, fault, lambda: [net.heal(node, o) for o in list(net.nodes)], True, [victim])
        elif kind == "coordinator_zk_cut":
            node = f"b{coordinator}"
            fault = Fault(time.time(), kind, str(coordinator))
            self._cut_zk(node)
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: self._heal_zk(node), True)
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
            # "zk" stands for the whole ensemble, on one side
            pairs = [(x, y) for a in left for b in right for x in self._server_nodes(a) for y in self._server_nodes(b)]
            for a, b in pairs:
                net.cut(a, b)
            self._touch(fault, {n for token in servers for n in self._server_nodes(token)})

            def heal() -> None:
                for a, b in pairs:
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
                    self._cut_zk(node)
                    time.sleep(down)
                    self._heal_zk(node)
                    time.sleep(up)
            t = threading.Thread(target=lambda: self._end(fault, flapping, True), daemon=True, name="flap")
            t.start()
            self._recoveries.append(t)
        elif kind in ("zk_split",) + MEMBERSHIP_KINDS:
            fault = (nemesis_zk.zk_split(self, coordinator) if kind == "zk_split" else
                     nemesis_zk.broker_add(self) if kind == "broker_add" else
                     nemesis_zk.broker_remove(self, coordinator))
            if fault is None:   # skipped (noted in ``skipped``): nothing was touched
                self._broker_busy.clear()
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

    def _server_nodes(self, token: str) -> list[str]:
        """The nodes a server token of a fault stands for: ``zk`` is every ZooKeeper server."""
        return self.zk_nodes if token == "zk" else [token]

    def _cut_zk(self, node: str) -> None:
        """Cut ``node`` from every ZooKeeper server."""
        for z in self.zk_nodes:
            self.net.cut(node, z)

    def _heal_zk(self, node: str) -> None:
        for z in self.zk_nodes:
            self.net.heal(node, z)

    def note_skipped(self, note: str) -> None:
        """Say in the report that a drawn fault could not be injected, and why (once per reason)."""
        if note not in self.skipped:
            self.skipped.append(note)

    def _proxy_fault(self, kind: str, coordinator: int) -> Fault | None:
        """A link fault (``PROXY_KINDS``) set on a broker's proxy for as long as a cut, then ``pass``:
        ``stall_broker`` and ``stuck_links`` take the coordinator's broker, the others it half the time,
        else any running broker."""
        s, rng, cluster = self.s, self.rng, self.cluster
        running = [b for b in sorted(cluster.proxies) if b in cluster.procs and cluster.procs[b].poll() is None]
        if kind in ("stall_broker", "stuck_links") or not running or rng.random() < 0.5:
            victim = coordinator
        else:
            victim = rng.choice(running)
        proxy = cluster.proxies.get(victim)
        if proxy is None or not proxy.alive():
            self.note_skipped(f"{kind}: broker {victim} has no running proxy")
            self._broker_busy.clear()
            return None
        if kind == "slow_broker":
            latency = rng.randint(100, 800)
            mode, detail = ("delay", latency, latency // 2), f"delay {latency} ms + 0-{latency // 2} ms"
        elif kind == "throttle_broker":
            rate = rng.randint(8, 64) * 1024
            mode, detail = ("bandwidth", rate), f"{rate // 1024} KB/s per link and direction"
        elif kind == "stuck_links":
            mode, detail = ("stall_open",), "open links stuck, new ones pass"
        else:
            mode, detail = ("stall",), "stall"
        before = proxy.stats()
        fault = Fault(time.time(), kind, str(victim))
        self.details[id(fault)] = detail
        if kind == "stall_broker":
            self._allow(victim, False)
        proxy.mode(*mode)
        self._touch(fault, {f"b{victim}"})

        def heal() -> None:
            try:
                during = proxy.stats()
            finally:
                proxy.mode("pass")
            self.proxy_stats.append((fault, before, during))
            note = f"{detail}; {during['open']} links, {during['held']} B held at the heal"
            if kind == "stall_broker":
                note += f", {during['stalled_bytes'] - before['stalled_bytes']} B read while stalled"
            elif kind == "stuck_links":
                note += (f", {during['stuck']} of them stuck, {during['stalled_bytes'] - before['stalled_bytes']} B "
                         f"read on those, {during['accepted'] - before['accepted']} new links")
            self.details[id(fault)] = note
        hold = rng.uniform(*s.cut_s)
        if kind == "stuck_links":  # long enough that clients give the stuck links up and connect again
            from testkit.kafka_member import SOCKET_TIMEOUT_MS
            hold += SOCKET_TIMEOUT_MS / 1000
        self._later(hold, self._end, fault, heal, True, [victim] if kind == "stall_broker" else [])
        return fault

    def _clock(self, kind: str) -> str:
        session_s = max(self.s.member_session_ms, self.s.broker_zk_session_ms) / 1000
        # "+0 x2", not "x2": libfaketime leaves a bare "x2" clock at real speed (checked with a timed child)
        return f"+{int(2 * session_s + 30)}s" if kind.endswith("offset") else f"+0 x{FAST_CLOCK_RATE:g}"

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
            self._later(hold, self._end, fault, lambda: [net.heal(node, o) for o in list(net.nodes)], False, (),
                        [m.name])
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
        offset, _, speed = clock.partition(" ")
        offset, rate = float(offset.rstrip("s")), float(speed[1:]) if speed else 1.0
        fault = Fault(time.time(), kind, m.name)
        self.details[id(fault)] = f"FAKETIME={clock}"
        self.deaths[m.name] = time.time()
        m.kill()
        self._next_clock[slot] = (clock, offset, rate)
        new = self._member(slot)
        self._touch(fault, {node})
        hold = rng.uniform(*s.clock_s)

        def back() -> None:
            if self.current.get(slot) is not new:
                return  # replaced meanwhile (a member_kill's restart), and on the real clock
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
        return plan(s, self.rng)

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
        from testkit.chaos import _first_deliveries, _log_offsets

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
        result = jepsen_checks.check(acked, log_recs, journals, seen, log_ends, self._leader_away())
        first = _first_deliveries(journals)
        by_kind: dict[str, dict] = {}
        anomalies = result.violations + chaos.violations
        hit = self.fault_nodes + [(f, set()) for f in self.faults if f.kind in PROCESS_KINDS]
        redelivered, redelivered_outside = attribute_to_faults(
            invariants.redelivery_times(journals), [(f.at, (f.until or f.at) + s_window(self.s)) for f, _ in hit])
        for (fault, nodes), again in zip(hit, redelivered):
            d = by_kind.setdefault(fault.kind, {"injected": 0, "combined": 0, "stall_max_s": None, "stalls": [],
                                                "alone_max_s": None, "alone": [], "anomalies": 0,
                                                "redelivered": 0})
            d["injected"] += 1
            d["redelivered"] += again
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
        settings = {"seed": self.s.seed, "faults": self.s.faults, "duration_s": self.s.duration_s,
                    "kinds": list(self.kinds), "session_ms": self.s.kafka_session_ms or self.s.member_session_ms,
                    "redelivered_outside_faults": redelivered_outside}
        return NemesisReport(chaos=chaos, prefix=self.net.prefix, jepsen=result.to_dict(), by_kind=by_kind,
                             clock="libfaketime" if self.clock_ok else "none", skipped=self.skipped, faults=faults,
                             settings=settings)

    def _share_leaders_hit(self, f: Fault) -> dict[int, list[float]]:
        """As ``ChaosRun``'s, plus the brokers a link fault cut from their share members or slowed past
        their request timeouts (a share member whose connection to the leader broke opens a new share
        session, and the leader releases what the old one held), or that a clock fault restarted -- at its
        start and again at its end (the broker is restarted with the real clock)."""
        hit = ChaosRun._share_leaders_hit(self, f)
        if f.kind in SHARE_LEADER_KINDS:
            for fault, nodes in self.fault_nodes:
                if fault is f:
                    hit.update({int(n[1:]): [f.at, f.until or f.at] for n in nodes
                                if n[:1] == "b" and n[1:].isdigit()})
        return hit

    def _leader_away(self) -> dict[tuple[str, int], list[tuple[float, float]]]:
        """partition -> windows when its clients could not reach its leader: the leader's broker down,
        paused or restarted (``broker_down``), or cut from its clients or stalled (``LEADER_AWAY_KINDS``)."""
        out: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for p, leader in self.leaders.items():
            windows = list(self.broker_down.get(leader, ()))
            windows += [(f.at, f.until or time.time()) for f, nodes in self.fault_nodes
                        if f.kind in LEADER_AWAY_KINDS and f"b{leader}" in nodes]
            out[(self.topic, p)] = windows
        return out

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

    def _waiting_members(self, journals=None) -> dict[str, list[tuple[float, float]]]:
        """As ``ChaosRun``'s, plus: Kafka members wait while the coordinator is cut off or restarted
        under a false clock (librdkafka's reconnect backoff), or moves (a split of the ensemble, a broker
        joining or leaving takes or hands over coordinator shards), every member while it was cut off,
        and thin members while a broker's open links were stuck (``stuck_links``)."""
        out = ChaosRun._waiting_members(self, journals)
        coordinator_faults = [(f.at, (f.until or f.at) + 15.0) for f in self.faults if f.kind in (
            "isolate_broker", "coordinator_zk_cut", "flap", "bridge", "clock_coordinator_offset",
            "clock_coordinator_fast", "broker_clients_cut", "zk_split", "broker_add", "broker_remove", "stall_broker",
            "stuck_links")]
        # a link left open but passing nothing is given up only when the client's own request times out
        # (its socket timeout), whatever it fetched on it: thin members' fetches wait as Kafka members' do
        stuck = [(f.at, (f.until or f.at) + 15.0) for f in self.faults if f.kind == "stuck_links"]
        for name, m in self.members.items():
            if getattr(m, "kind", "thin") != "thin":
                out.setdefault(name, []).extend(coordinator_faults)
            else:
                out.setdefault(name, []).extend(stuck)
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


def plan(s: NemesisSettings, rng) -> list[tuple[float, str]]:
    """``s.faults`` (seconds from the start, kind) at uniform random times of the fault window, kinds
    drawn by ``s.weights``; with ``s.every_kind`` and at least as many faults as kinds of weight > 0,
    each such kind is drawn once (in a random order) before the rest are drawn by weight."""
    window = max(1.0, s.duration_s - s.warmup_s - s.cooldown_s)
    kinds = [k for k, w in s.weights.items() if w > 0]
    if not kinds or s.faults <= 0:
        return []
    drawn = rng.sample(kinds, len(kinds)) if s.every_kind and s.faults >= len(kinds) else []
    drawn += rng.choices(kinds, weights=[s.weights[k] for k in kinds], k=s.faults - len(drawn))
    rng.shuffle(drawn)
    times = sorted(s.warmup_s + rng.uniform(0, window) for _ in drawn)
    return list(zip(times, drawn))


def s_window(s: NemesisSettings) -> float:
    return s.stall_window_s + s.member_session_ms / 1000


def attribute_to_faults(times: Sequence[float], windows: Sequence[tuple[float, float]]) -> tuple[list[int], int]:
    """Each of ``times`` to the fault that began last at or before it and whose window (start, end)
    still covers it: the count per window (in ``windows``' order) and the count no window covers.
    Windows overlap when faults stack; a time goes to one fault only, the latest begun."""
    order = sorted(range(len(windows)), key=lambda i: windows[i][0])
    starts = [windows[i][0] for i in order]
    counts = [0] * len(windows)
    outside = 0
    for t in times:
        k = bisect.bisect_right(starts, t) - 1
        while k >= 0 and windows[order[k]][1] < t:
            k -= 1
        if k < 0:
            outside += 1
        else:
            counts[order[k]] += 1
    return counts, outside


def _mentions_window(violation: str, a: float, b: float) -> bool:
    """Whether a violation message names a time (epoch seconds with decimals) inside [a, b]."""
    import re

    for m in re.finditer(r"\b(1\d{9}\.\d+)", violation):
        if a <= float(m.group(1)) <= b:
            return True
    return False
