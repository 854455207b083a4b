"""One nemesis run's network: a Linux bridge, a network namespace per process, cuts between them.

``Net`` makes, for one run, a Linux bridge and one network namespace per process (ZooKeeper,
each broker, each member, and ``client`` for the producer and the run's own readers), each
joined to the bridge by a veth pair and given an address in a private /24 (10.77.0.0/24 by
default) that exists only inside the run's namespaces: no address on the host, no traffic
leaves the bridge.  Names start with a short prefix unique to the run (``nm`` + 4 hex
digits); ``cleanup(prefix)`` removes the leftovers of a run that died (its processes,
namespaces, veths and bridge), and a run removes its own on exit, on an exception and from
an ``atexit`` hook.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

STATE_DIR = Path("/run/spark-coord-nemesis")
CLONE_NEWNET = 0x40000000


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
