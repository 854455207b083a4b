"""How far one coordinator scales: pings, CPU, memory, rebalance time and offset commits.

Run:  .venv/bin/python bench/bench_coordinator.py [--baseline 100] [--big 1000] [--small-groups 400]
      (about 3 minutes on 2 cores; ``--quick`` runs 50 / 300 / +70 members in about a minute)
      .venv/bin/python bench/bench_coordinator.py --members 19800 [--coordinators 3] [--gc both|frozen|python]
      (scale mode: one steady-state window over groups of ``--group-size``, members spread over
      ``--sims`` simulator processes, figures per coordinator; ``--gc both`` measures Python's own
      collection schedule first as the same-run baseline; see ``run_scale``)

Set-up: one broker (so its coordinator is the elected one) and an embedded ZooKeeper
in a ``LocalCluster``; light simulated members in a separate process
(``bench/coord_sim.py``: asyncio, one real TCP connection per member, our wire
codec, answers every coordinator request at once, Ping answers carry advancing
offsets for the member's partitions).  Every member uses a 30 s session timeout,
so the coordinator pings each one every 10 s.

Phases, cumulative in one run (one broker process throughout):

1. baseline: the big group ``bench-big`` with ``--baseline`` members;
2. the big group grown to ``--big`` members (1,000 by default);
3. plus ``--small-groups`` groups of ``--small-size`` members (400 x 10: ~5,000 members).

Topics: ``bench-big`` (``--big-partitions``, 1,000) for the big group, ``bench-small``
(``--small-partitions``, 10) consumed by every small group.  Each phase: register its
new members, wait until every group is Stable (DescribeGroups) with every member
started in its generation, measure for ``--window`` seconds, then one new member
joins the big group and the time until every member of it has its StartFetcher is
taken.

How each figure is measured:

* ping lateness: member side, the gap between consecutive pings of a member minus
  the scheduled interval (session timeout / 3); it catches every delay between the
  coordinator's timer and the member (the coordinator re-arms the timer when it fires).
* probe RTT: some members (every ``--probe-every``-th) follow each Ping answer with a
  ClusterMetadata request on the same connection; the broker reads one connection in
  order, so the answer to the probe proves the coordinator read the ping answer:
  time from answer sent to probe answered = the coordinator's answer-side latency
  plus one round trip.  Together with the lateness this bounds the ping round trip.
* coordinator CPU: broker process CPU time (/proc/<pid>/stat) over wall time of the
  window; RSS: VmRSS at the end of the window (and its peak over the whole run).
* join time: from just before the new member connects until it received its
  StartFetcher (member-side CLOCK_MONOTONIC, shared by all processes), and until the
  coordinator reports the group Stable again (owners written to ZooKeeper); the
  members that were stopped or started on the way (members register with
  RegisterConsumer v2 and hand partitions over incrementally, unless
  ``--register-version`` says otherwise), and the partitions that moved.
* offsets written to ZooKeeper: the sum of the version increments of every
  ``/consumers/<g>/offsets/<t>/<p>`` znode over the window (a create counts 1),
  against the expected rate (every owned partition advances once per ping
  interval); ZooKeeper's own write transactions from its zxid (``srvr``).

The ratio columns compare each phase with the baseline of the same run.  The machine
is shared (ZooKeeper, the broker and the simulator all run here): the ZooKeeper and
simulator CPU and the simulator's own loop lag are printed so that a saturated
machine is not mistaken for a slow coordinator.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import RssSampler, cpu_seconds, rss_mb  # noqa: E402

from spark_coord.client.admin import AdminClient  # noqa: E402
from spark_coord.client.metadata import ClusterClient  # noqa: E402
from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.consumer.channel import CoordinatorChannel  # noqa: E402
from spark_coord.wire import coordinator as api  # noqa: E402
from spark_coord.zk import client as zk_client  # noqa: E402
from spark_coord.zk import paths
from spark_coord.zk.embedded import four_letter_word  # noqa: E402

log = logging.getLogger("bench_coordinator")

BIG_GROUP, BIG_TOPIC, SMALL_TOPIC = "bench-big", "bench-big", "bench-small"
SIM = Path(__file__).resolve().parent / "coord_sim.py"


class BenchError(RuntimeError):
    """The run could not reach a state it needs to measure (the message says which)."""


# ---------------------------------------------------------------------- the simulator process
class Simulator:
    """The member-simulator subprocess, driven by JSON lines."""

    def __init__(self, log_path: Path):
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, str(SIM)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, start_new_session=True)
        self._ids = 0
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, op: str, **args) -> dict:
        with self._lock:
            self._ids += 1
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write((json.dumps({"op": op, "id": self._ids, **args}) + "\n").encode())
            self.proc.stdin.flush()
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    raise BenchError(f"the member simulator exited (code {self.proc.poll()}); see its log")
                reply = json.loads(line)
                if reply.get("id") == self._ids:
                    break
        if not reply.get("ok"):
            raise BenchError(f"simulator {op} failed: {reply.get('error')}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit")
                self.proc.wait(10)
            except (BenchError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def admin_request(host: str, port: int, api_key: int, body: dict) -> dict:
    """One coordinator-protocol request on a fresh connection."""
    ch = CoordinatorChannel(host, port, "bench-admin", timeout=60)
    try:
        return ch.request(api_key, body)
    finally:
        ch.close()


# ---------------------------------------------------------------------- ZooKeeper figures
def offset_paths(groups: dict[str, tuple[str, int]]) -> list[str]:
    """Every offset znode the groups ``{group: (topic, partitions)}`` can have."""
    return [paths.offset(g, t, p) for g, (t, n) in groups.items() for p in range(n)]


def offset_versions(zk, znodes: list[str]) -> dict[str, int]:
    """znode -> data version (-1: absent), read with pipelined async calls."""
    out: dict[str, int] = {}
    for start in range(0, len(znodes), 2000):
        chunk = znodes[start:start + 2000]
        pending = [(p, zk.exists_async(p)) for p in chunk]
        for p, res in pending:
            stat = res.get(timeout=30)
            out[p] = -1 if stat is None else stat.version
    return out


def offset_writes(before: dict[str, int], after: dict[str, int]) -> int:
    """Writes between two snapshots: version increments, a create counting one."""
    return sum(v - before.get(p, -1) for p, v in after.items() if v >= 0)


def zk_packets(zk_host: str, zk_port: int) -> int:
    """Requests ZooKeeper has received so far (``mntr`` zk_packets_received): reads and writes alike."""
    for line in four_letter_word(zk_host, zk_port, "mntr").splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_packets_received":
            return int(value)
    raise BenchError("ZooKeeper's mntr answer carries no zk_packets_received")


def zxid(zk_host: str, zk_port: int) -> int:
    """ZooKeeper's last zxid (its counter part): one per write transaction (a multi counts once)."""
    for line in four_letter_word(zk_host, zk_port, "srvr").splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16) & 0xFFFFFFFF
    raise BenchError("ZooKeeper's srvr answer carries no Zxid")


# ---------------------------------------------------------------------- the benchmark
@dataclass
class Phase:
    """Figures of one phase."""

    label: str
    members: int
    big_size: int = 0
    settle_s: float = 0.0
    register_s: float = 0.0
    window: dict = field(default_factory=dict)
    join: dict = field(default_factory=dict)


class Bench:
    def __init__(self, args: argparse.Namespace, cluster: LocalCluster, sim: Simulator):
        self.args = args
        self.cluster = cluster
        self.sim = sim
        self.host, self.port = next(iter(cluster.brokers.values()))
        self.broker_pid = cluster.procs[0].pid
        self.zk_pid = cluster.zookeeper.pid
        zk_host, zk_port = cluster.zk_connect.split(",")[0].rsplit(":", 1)
        self.zk_addr = (zk_host, int(zk_port))
        self.zk = zk_client.connect(cluster.zk_connect)
        self.groups: dict[str, tuple[str, int]] = {}     # group -> (topic, partitions)
        self.sizes: dict[str, int] = {}                  # group -> members
        self.joins = 0

    def close(self) -> None:
        zk_client.close(self.zk)

    # ------------------------------------------------------------------ members
    def add(self, group: str, topic: str, partitions: int, consumers: list[str]) -> float:
        """Register ``consumers`` in ``group``; returns the seconds it took."""
        a = self.args
        specs = [{"group": group, "consumer": c, "topic": topic, "version": a.register_version,
                  "probe": (sum(self.sizes.values()) + i) % a.probe_every == 0} for i, c in enumerate(consumers)]
        self.groups[group] = (topic, partitions)
        self.sizes[group] = self.sizes.get(group, 0) + len(consumers)
        reply = self.sim.call("add", host=self.host, port=self.port, session_ms=a.session_ms, rate=a.rate,
                              concurrency=a.concurrency, members=specs)
        if reply["failures"]:
            raise BenchError(f"{len(specs) - reply['registered']} registrations failed, e.g. {reply['failures'][:3]}")
        return reply["t1"] - reply["t0"]

    def describe(self, group_ids: list[str]) -> dict[str, dict]:
        resp = admin_request(self.host, self.port, api.DESCRIBE_GROUPS, {"group_ids": group_ids})
        if resp["error_code"]:
            raise BenchError(f"DescribeGroups answered error {resp['error_code']}")
        return {g["group_id"]: g for g in resp["groups"]}

    def wait_settled(self, timeout: float) -> float:
        """Wait until every group is Stable with every member started (each in its own epoch)."""
        start = time.monotonic()
        deadline = start + timeout
        pending = set(self.sizes)
        last: dict = {}
        while True:
            sim_groups = self.sim.call("groups")["groups"]
            ready = [g for g in pending if sim_groups.get(g, {}).get("settled")
                     and sim_groups[g]["members"] == self.sizes[g]]
            if ready:
                described = self.describe(sorted(ready))
                for g in ready:
                    d = described.get(g)
                    last[g] = d and (d["state"], d["generation_id"], len(d["members"]))
                    if d and d["state"] == "Stable" and len(d["members"]) == self.sizes[g]:
                        pending.discard(g)
            if not pending:
                return time.monotonic() - start
            if time.monotonic() > deadline:
                sample = sorted(pending)[:5]
                raise BenchError(f"{len(pending)} groups not settled after {timeout:.0f} s, e.g. "
                                 + "; ".join(f"{g}: members side {sim_groups.get(g)}, coordinator {last.get(g)}"
                                             for g in sample))
            time.sleep(0.25)

    # ------------------------------------------------------------------ measurements
    def measure_window(self) -> dict:
        """Ping, CPU, memory and ZooKeeper figures over ``--window`` seconds of steady state."""
        znodes = offset_paths(self.groups)
        v0 = offset_versions(self.zk, znodes)
        t0 = time.monotonic()
        self.sim.call("reset")
        cpu0 = {k: cpu_seconds(pid) for k, pid in self.pids().items()}
        z0, q0 = zxid(*self.zk_addr), zk_packets(*self.zk_addr)
        time.sleep(self.args.window)  # the measurement window itself, not a wait for a condition
        cpu1 = {k: cpu_seconds(pid) for k, pid in self.pids().items()}
        z1, q1 = zxid(*self.zk_addr), zk_packets(*self.zk_addr)
        stats = self.sim.call("stats")
        t1 = time.monotonic()
        v1 = offset_versions(self.zk, znodes)
        wall = t1 - t0
        owned = sum(n for _, n in self.groups.values())  # every group owns all partitions of its topic
        return {"wall": wall, "cpu": {k: (cpu1[k] - cpu0[k]) / wall for k in cpu0},
                "rss_mb": rss_mb(self.broker_pid), "stats": stats,
                "offset_writes_s": offset_writes(v0, v1) / wall,
                "offset_writes_expected_s": owned / (self.args.session_ms // 3 / 1000),
                "offsets_reported_s": stats["offsets_reported"] / stats["window_s"],
                "zk_txn_s": (z1 - z0) / wall, "zk_requests_s": (q1 - q0) / wall}

    def pids(self) -> dict[str, int]:
        return {"coordinator": self.broker_pid, "zookeeper": self.zk_pid, "simulator": self.sim.pid}

    def measure_join(self, timeout: float) -> dict:
        """One member joins the big group: time until it has its StartFetcher and until the group is
        Stable again, and which members were stopped or started on the way."""
        self.joins += 1
        consumer = f"join-{self.joins:02d}"
        self.sim.call("mark", group=BIG_GROUP)
        cpu0 = cpu_seconds(self.broker_pid)
        q0 = zk_packets(*self.zk_addr)
        t0 = time.monotonic()
        self.add(BIG_GROUP, BIG_TOPIC, self.args.big_partitions, [consumer])
        deadline = t0 + timeout
        while True:
            reply = self.sim.call("events", group=BIG_GROUP)
            events = reply["events"]
            joined = [t for kind, t, _, _ in events.get(consumer, []) if kind == "start"]
            if joined:
                d = self.describe([BIG_GROUP]).get(BIG_GROUP)
                if d is not None and d["state"] == "Stable" and len(d["members"]) == self.sizes[BIG_GROUP]:
                    stable = time.monotonic()
                    events = self.sim.call("events", group=BIG_GROUP)["events"]
                    break
            if time.monotonic() > deadline:
                raise BenchError(f"join of {consumer}: no StartFetcher and Stable group after {timeout:.0f} s")
            time.sleep(0.1)
        cpu = cpu_seconds(self.broker_pid) - cpu0
        zk_requests = zk_packets(*self.zk_addr) - q0
        stops = [t for evs in events.values() for kind, t, _, _ in evs if kind == "stop"]
        starts = [t for evs in events.values() for kind, t, _, _ in evs if kind == "start"]
        return {"group_size": len(events), "new_member_started_s": min(joined) - t0, "stable_s": stable - t0,
                "first_stop_s": (min(stops) - t0) if stops else None,
                "last_stop_s": (max(stops) - t0) if stops else None,
                "members_stopped": sum(1 for evs in events.values() if any(e[0] == "stop" for e in evs)),
                "members_started": sum(1 for evs in events.values() if any(e[0] == "start" for e in evs)),
                "partitions_moved": sum(e[3] for c, evs in events.items() for e in evs if e[0] == "start"),
                "first_start_s": (min(starts) - t0) if starts else None, "cpu_s": cpu, "zk_requests": zk_requests}

    # ------------------------------------------------------------------ phases
    def run_phase(self, label: str, adds: list[tuple[str, str, int, list[str]]]) -> Phase:
        t = time.monotonic()
        for group, topic, partitions, consumers in adds:
            self.add(group, topic, partitions, consumers)
        register_s = time.monotonic() - t
        settle_s = self.wait_settled(self.args.settle_timeout) + register_s
        phase = Phase(label, sum(self.sizes.values()), self.sizes.get(BIG_GROUP, 0), settle_s, register_s)
        log.info("%s: %d members registered in %.1f s, all groups stable after %.1f s", label, phase.members,
                 register_s, settle_s)
        phase.window = self.measure_window()
        log.info("%s: window done: %s", label, _brief(phase.window))
        phase.join = self.measure_join(self.args.settle_timeout)
        log.info("%s: join into %d-member group: its StartFetcher after %.2f s, %d member(s) stopped", label,
                 phase.join["group_size"], phase.join["new_member_started_s"], phase.join["members_stopped"])
        self.wait_settled(self.args.settle_timeout)
        return phase


def _brief(w: dict) -> str:
    s = w["stats"]
    return (f"pings {s['pings']}, lateness p99 {s['lateness_ms']['p99']}, probe p99 {s['probe_ms']['p99']}, "
            f"cpu {w['cpu']['coordinator']:.0%}, rss {w['rss_mb']:.0f} MB, offsets/s {w['offset_writes_s']:.0f}")


# ---------------------------------------------------------------------- report
def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def report(phases: list[Phase], idle_rss: float, peak_rss: float, args: argparse.Namespace) -> str:
    base = phases[0]
    rows: list[tuple[str, Callable[[Phase], object], str, bool]] = [
        # (name, value(phase), format, show ratio)
        ("members (in the big group)", lambda p: f"{p.members:,} ({p.big_size:,})", "", False),
        ("pings received in window", lambda p: p.window["stats"]["pings"], ",", False),
        ("ping lateness p50 (ms)", lambda p: p.window["stats"]["lateness_ms"]["p50"], ".1f", True),
        ("ping lateness p99 (ms)", lambda p: p.window["stats"]["lateness_ms"]["p99"], ".1f", True),
        ("ping lateness max (ms)", lambda p: p.window["stats"]["lateness_ms"]["max"], ".1f", True),
        ("probe RTT after answer p50 (ms)", lambda p: p.window["stats"]["probe_ms"]["p50"], ".2f", True),
        ("probe RTT after answer p99 (ms)", lambda p: p.window["stats"]["probe_ms"]["p99"], ".2f", True),
        ("probe samples", lambda p: p.window["stats"]["probe_ms"]["n"], ",", False),
        ("pings re-sent after expiry", lambda p: p.window["stats"]["retried_pings"], ",", False),
        ("members disconnected", lambda p: p.window["stats"]["disconnects"], ",", False),
        ("coordinator CPU (% of a core)", lambda p: 100 * p.window["cpu"]["coordinator"], ".1f", True),
        ("coordinator RSS (MB)", lambda p: p.window["rss_mb"], ".0f", True),
        ("  RSS above idle per member (KB)", lambda p: (p.window["rss_mb"] - idle_rss) * 1024 / p.members, ".0f", True),
        ("join -> its StartFetcher (s)", lambda p: p.join["new_member_started_s"], ".2f", True),
        ("  join -> first StopFetcher (s)", lambda p: p.join["first_stop_s"], ".2f", True),
        ("  join -> last StopFetcher (s)", lambda p: p.join["last_stop_s"], ".2f", True),
        ("  join -> group Stable, owners written (s)", lambda p: p.join["stable_s"], ".2f", True),
        ("  members stopped / started", lambda p: f"{p.join['members_stopped']} / {p.join['members_started']}",
         "", False),
        ("  partitions moved", lambda p: p.join["partitions_moved"], "d", False),
        ("  coordinator CPU join -> Stable (s)", lambda p: p.join["cpu_s"], ".2f", True),
        ("  ZooKeeper requests join -> Stable", lambda p: p.join["zk_requests"], ",", True),
        ("offsets reported in pings /s", lambda p: p.window["offsets_reported_s"], ".0f", True),
        ("offset znode writes /s", lambda p: p.window["offset_writes_s"], ".0f", True),
        ("  writes / offsets reported (%)",
         lambda p: 100 * p.window["offset_writes_s"] / max(p.window["offsets_reported_s"], 1e-9), ".0f", False),
        (f"  expected /s (owned partitions / {args.session_ms // 3 / 1000:g} s)",
         lambda p: p.window["offset_writes_expected_s"], ".0f", True),
        ("ZooKeeper write txns /s", lambda p: p.window["zk_txn_s"], ".1f", True),
        ("ZooKeeper requests /s (reads too)", lambda p: p.window["zk_requests_s"], ",.0f", True),
        ("ZooKeeper CPU (% of a core)", lambda p: 100 * p.window["cpu"]["zookeeper"], ".1f", True),
        ("simulator CPU (% of a core)", lambda p: 100 * p.window["cpu"]["simulator"], ".1f", True),
        ("simulator loop lag p99 (ms)", lambda p: p.window["stats"]["loop_lag_ms"]["p99"], ".1f", True),
        ("register + settle (s)", lambda p: p.settle_s, ".1f", False),
    ]
    head = f"{'':44}" + "".join(f"{p.label:>16}" + ("" if i == 0 else f"{'x base':>8}") for i, p in enumerate(phases))
    lines = [f"\ncoordinator benchmark: one broker, session timeout {args.session_ms} ms "
             f"(ping every {args.session_ms // 3} ms), {args.window:.0f} s windows\n", head]
    for name, fn, spec, ratio in rows:
        line = f"{name:44}"
        b = fn(base)
        for i, p in enumerate(phases):
            v = fn(p)
            line += f"{v if isinstance(v, str) else _fmt(v, spec):>16}"
            if i:
                numeric = isinstance(v, (int, float)) and isinstance(b, (int, float))
                line += f"{format(v / b, '.1f') if ratio and numeric and b > 0 else '-':>8}"
        lines.append(line)
    lines.append(f"\ncoordinator RSS before any member: {idle_rss:.0f} MB; peak over the run: {peak_rss:.0f} MB")
    lines.append("ping lateness: member-side gap between consecutive pings minus the scheduled interval; probe RTT: a"
                 "\nClusterMetadata request sent right after a ping answer on the same connection, answered once the"
                 "\ncoordinator's loop has read that answer.")
    return "\n".join(lines)


# ---------------------------------------------------------------------- scale mode (--members)
#: File descriptors a broker needs besides its members' connections (listeners, ZooKeeper, segments, epoll).
FD_RESERVE = 150


@dataclass
class ScaleRun:
    """Figures of one scale-mode run: one cluster, one collector setting."""

    label: str
    members: int
    groups: int
    sims: int
    settle_s: float = 0.0
    load_before: tuple = ()
    load_after: tuple = ()
    per_coordinator: dict = field(default_factory=dict)   # node id -> figures
    sim: dict = field(default_factory=dict)
    unplaced: str | None = None
    register_retries: int = 0


def _pct(values: list[float]) -> dict:
    from coord_sim import percentiles
    return percentiles(values)


def _log_tail(path: Path, start: int) -> str:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def _fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def run_scale(args: argparse.Namespace, label: str, gc_interval_ms: int | None) -> ScaleRun:
    """``--members`` members in groups of ``--group-size`` over ``--coordinators`` coordinator-enabled brokers."""
    from concurrent.futures import ThreadPoolExecutor

    from spark_coord import config
    from spark_coord.client.groups import GroupClient

    n_groups = -(-args.members // args.group_size)
    groups = [f"bench-g{i:05d}" for i in range(n_groups)]
    overrides: dict = {"coordinator.min.session.timeout.ms": 1000}
    if gc_interval_ms is not None:
        overrides["gc.freeze.interval.ms"] = gc_interval_ms
    if args.coordinators > 1 and "coordinator.shards" in config.BROKER.keys:
        overrides["coordinator.shards"] = args.coordinators
    tmp = tempfile.mkdtemp(prefix="spark-coord-bench-coord-")
    run = ScaleRun(label, args.members, n_groups, args.sims)
    sims: list[Simulator] = []
    try:
        with LocalCluster(args.coordinators, tmp, overrides=overrides) as cluster:
            with ClusterClient(cluster.bootstrap) as c:
                AdminClient(c).create_topic(SMALL_TOPIC, args.small_partitions)
                host, port = next(iter(cluster.brokers.values()))
                deadline = time.monotonic() + 30
                while admin_request(host, port, api.CLUSTER_METADATA, {})["coordinator_id"] < 0:
                    if time.monotonic() > deadline:
                        raise BenchError("no coordinator elected within 30 s")
                    time.sleep(0.1)
                with GroupClient(c, timeout=60) as gcl:
                    found: dict = {}
                    for start in range(0, n_groups, 500):
                        found.update(gcl.coordinators(groups[start:start + 500]))
            addr = {g: (co.host, co.port) for g, co in found.items()}
            node = {g: co.node_id for g, co in found.items()}
            pids = {i: p.pid for i, p in cluster.procs.items()}
            per_node_members: dict[int, int] = {}
            sizes = {g: min(args.group_size, args.members - i * args.group_size) for i, g in enumerate(groups)}
            for g in groups:
                per_node_members[node[g]] = per_node_members.get(node[g], 0) + sizes[g]
            if len(per_node_members) < args.coordinators:
                run.unplaced = (f"all {n_groups:,} groups sit on {len(per_node_members)} of {args.coordinators} "
                                f"coordinator-enabled brokers (node(s) {sorted(per_node_members)}): this cluster "
                                "elects one coordinator")
                log.warning("%s", run.unplaced)
            worst = max(per_node_members.values())
            if worst + FD_RESERVE > _fd_limit():
                raise BenchError(f"coordinator {max(per_node_members, key=per_node_members.get)} would hold {worst:,} "
                                 f"member connections, but a process may open only {_fd_limit():,} files here "
                                 f"(hard RLIMIT_NOFILE; {FD_RESERVE} kept for the broker itself): fewer --members "
                                 "per coordinator, or a higher hard limit")
            idle_rss = {i: rss_mb(pid) for i, pid in pids.items()}
            sims = [Simulator(Path(tmp) / f"simulator-{k}.log") for k in range(args.sims)]
            specs: list[list[dict]] = [[] for _ in sims]
            for gi, g in enumerate(groups):
                h, p = addr[g]
                specs[gi % len(sims)].extend(
                    {"group": g, "consumer": f"{g}-{i:02d}", "topic": SMALL_TOPIC, "version": args.register_version,
                     "probe": i == 0 and gi % 10 == 0, "host": h, "port": p, "tag": str(node[g])}
                    for i in range(sizes[g]))
            t0 = time.monotonic()

            def add(k: int) -> dict:
                return sims[k].call("add", host=host, port=port, session_ms=args.session_ms, rate=args.rate,
                                    concurrency=max(1, args.concurrency // len(sims)), members=specs[k])

            with ThreadPoolExecutor(len(sims)) as pool:
                for reply in pool.map(add, range(len(sims))):
                    if reply["failures"]:
                        raise BenchError(f"registrations failed, e.g. {reply['failures'][:3]}")
                    run.register_retries += reply["retries"]
            log.info("%s: %d members registered in %.1f s (%d registrations refused as NOT_COORDINATOR and sent "
                     "again)", label, args.members, time.monotonic() - t0, run.register_retries)
            _wait_scale_settled(sims, addr, sizes, args.settle_timeout)
            run.settle_s = time.monotonic() - t0
            log.info("%s: every group stable after %.1f s; measuring %.0f s", label, run.settle_s, args.window)
            log_pos = {i: cluster.log_path(i).stat().st_size for i in pids}
            for sim in sims:
                sim.call("reset")
            run.load_before = os.getloadavg()
            cpu0 = {i: cpu_seconds(pid) for i, pid in pids.items()}
            sim_cpu0 = [cpu_seconds(sim.pid) for sim in sims]
            w0 = time.monotonic()
            time.sleep(args.window)  # the measurement window itself, not a wait for a condition
            wall = time.monotonic() - w0
            cpu1 = {i: cpu_seconds(pid) for i, pid in pids.items()}
            sim_cpu = [(cpu_seconds(sim.pid) - c) / wall for sim, c in zip(sims, sim_cpu0, strict=True)]
            run.load_after = os.getloadavg()
            stats = [sim.call("stats", raw=True) for sim in sims]
            late: dict[str, list[float]] = {}
            pings: dict[str, int] = {}
            retried: dict[str, int] = {}
            for st in stats:
                for t, vs in st["samples"]["lateness_ms"].items():
                    late.setdefault(t, []).extend(vs)
                for t, n in st["samples"]["pings"].items():
                    pings[t] = pings.get(t, 0) + n
                for t, n in st["samples"]["retried_pings"].items():
                    retried[t] = retried.get(t, 0) + n
            for i, pid in pids.items():
                text = _log_tail(cluster.log_path(i), log_pos[i])
                members = per_node_members.get(i, 0)
                rss = rss_mb(pid)
                run.per_coordinator[i] = {
                    "groups": sum(1 for g in groups if node[g] == i), "members": members,
                    "pings": pings.get(str(i), 0), "lateness_ms": _pct(late.get(str(i), [])),
                    "expired": text.count("did not answer ping"), "retried": retried.get(str(i), 0),
                    "failed": text.count("pings unanswered"), "cpu": (cpu1[i] - cpu0[i]) / wall,
                    "rss_mb": rss, "idle_rss_mb": idle_rss[i]}
            run.sim = {"cpu": sim_cpu, "loop_lag_ms": _pct([v for st in stats for v in st["samples"]["loop_lag_ms"]]),
                       "disconnects": sum(st["disconnects"] for st in stats),
                       "probe_ms": _pct([v for st in stats for v in st["samples"]["probe_ms"]])}
            log.info("%s: %s", label, "; ".join(
                f"coordinator {i}: {f['members']:,} members, lateness p99 {f['lateness_ms']['p99']}, "
                f"cpu {f['cpu']:.0%}, rss {f['rss_mb']:.0f} MB" for i, f in run.per_coordinator.items()))
            for sim in sims:
                sim.close()
            sims = []
    finally:
        for sim in sims:
            sim.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log.info("logs of %s kept in %s", label, tmp)
    return run


def _wait_scale_settled(sims: list[Simulator], addr: dict, sizes: dict, timeout: float) -> None:
    """Every group Stable at its coordinator with every member started."""
    deadline = time.monotonic() + timeout
    pending = set(sizes)
    while pending:
        sim_groups: dict = {}
        for sim in sims:
            sim_groups.update(sim.call("groups")["groups"])
        ready = sorted(g for g in pending if sim_groups.get(g, {}).get("settled")
                       and sim_groups[g]["members"] == sizes[g])
        by_coordinator: dict = {}
        for g in ready:
            by_coordinator.setdefault(addr[g], []).append(g)
        for (h, p), gs in by_coordinator.items():
            for start in range(0, len(gs), 500):
                resp = admin_request(h, p, api.DESCRIBE_GROUPS, {"group_ids": gs[start:start + 500]})
                for d in resp["groups"]:
                    if d["state"] == "Stable" and len(d["members"]) == sizes.get(d["group_id"], -1):
                        pending.discard(d["group_id"])
        if not pending:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{len(pending)} groups not settled after {timeout:.0f} s, e.g. {sorted(pending)[:3]}")
        time.sleep(0.5)


def report_scale(runs: list[ScaleRun], args: argparse.Namespace) -> str:
    cols = [(r, i) for r in runs for i in sorted(r.per_coordinator)]
    rows: list[tuple[str, Callable[[ScaleRun, dict], object], str]] = [
        ("groups / members", lambda r, f: f"{f['groups']:,} / {f['members']:,}", ""),
        ("pings received in window", lambda r, f: f["pings"], ","),
        ("ping lateness p50 (ms)", lambda r, f: f["lateness_ms"]["p50"], ".1f"),
        ("ping lateness p99 (ms)", lambda r, f: f["lateness_ms"]["p99"], ".1f"),
        ("ping lateness max (ms)", lambda r, f: f["lateness_ms"]["max"], ".1f"),
        ("pings expired / members failed", lambda r, f: f"{f['expired']} / {f['failed']}", ""),
        ("pings re-sent after expiry (members' side)", lambda r, f: f["retried"], ","),
        ("coordinator CPU (% of a core)", lambda r, f: 100 * f["cpu"], ".1f"),
        ("  per 1,000 members", lambda r, f: 100 * f["cpu"] * 1000 / f["members"] if f["members"] else None, ".2f"),
        ("coordinator RSS (MB)", lambda r, f: f["rss_mb"], ".0f"),
        ("  before any member (MB)", lambda r, f: f["idle_rss_mb"], ".0f"),
        ("  above that per 1,000 members (MB)",
         lambda r, f: (f["rss_mb"] - f["idle_rss_mb"]) * 1000 / f["members"] if f["members"] else None, ".1f"),
        ("register + settle, all members (s)", lambda r, f: r.settle_s, ".1f"),
        ("  registrations refused and sent again", lambda r, f: r.register_retries, ","),
        ("members disconnected (all)", lambda r, f: r.sim["disconnects"], ","),
        ("probe RTT after answer p99 (ms, all)", lambda r, f: r.sim["probe_ms"]["p99"], ".1f"),
        ("simulators / their CPU (% of a core each)",
         lambda r, f: f"{r.sims} / " + " ".join(f"{100 * c:.0f}" for c in r.sim["cpu"]), ""),
        ("simulator loop lag p99 / max (ms)",
         lambda r, f: f"{_fmt(r.sim['loop_lag_ms']['p99'], '.1f')} / {_fmt(r.sim['loop_lag_ms']['max'], '.1f')}", ""),
        ("load average before / after window",
         lambda r, f: f"{r.load_before[0]:.1f} / {r.load_after[0]:.1f}", ""),
    ]
    width = 22
    head = f"{'':44}" + "".join(f"{(r.label + ' c' + str(i)):>{width}}" for r, i in cols)
    lines = [f"\ncoordinator scale benchmark: {args.members:,} members in groups of {args.group_size} over "
             f"{args.coordinators} coordinator-enabled broker(s), session timeout {args.session_ms} ms "
             f"(ping every {args.session_ms // 3} ms), {args.window:.0f} s window\n", head]
    for name, fn, spec in rows:
        line = f"{name:44}"
        for r, i in cols:
            v = fn(r, r.per_coordinator[i])
            line += f"{v if isinstance(v, str) else _fmt(v, spec):>{width}}"
        lines.append(line)
    for r in runs:
        if r.unplaced:
            lines.append(f"\n{r.label}: {r.unplaced}.")
    lines.append("\ncolumns: collector setting and coordinator (broker id). python: Python's own collection schedule "
                 "(gc.freeze.interval.ms=0, the earlier code path); frozen: the default (survivors frozen, a full "
                 "collection only when the heap doubled). Pings expired: the coordinator's log over the window.")
    return "\n".join(lines)


def _write_figures(args: argparse.Namespace, columns: list[tuple[str, dict]], label: str,
                   one_coordinator: bool = False) -> None:
    """The lateness against members, as JSON for the docs' plots (bench/figures.py)."""
    import figures

    points = []
    for name, f in columns:
        lateness = f.get("lateness_ms") or {}
        points.append({"column": name, "members_per_coordinator": f.get("members"),
                       "coordinators": 1 if one_coordinator else getattr(args, "coordinators", 1),
                       "p50_ms": lateness.get("p50"), "p99_ms": lateness.get("p99"), "max_ms": lateness.get("max"),
                       "cpu_pct": 100 * f["cpu"] if f.get("cpu") is not None else None})
    figures.write("coordinator", {"points": points}, label=label)


def main_scale(args: argparse.Namespace) -> int:
    variants = {"both": [("python", 0), ("frozen", None)], "frozen": [("frozen", None)],
                "python": [("python", 0)]}[args.gc]
    runs: list[ScaleRun] = []
    failed: list[str] = []
    for label, interval in variants:
        try:
            runs.append(run_scale(args, label, interval))
        except BenchError as e:   # the other setting is still measured (the baseline may be what fails)
            failed.append(f"{label}: {e}")
            log.error("%s run stopped: %s", label, e)
    if runs:
        print(report_scale(runs, args))
        _write_figures(args, [(f"{r.label} c{i}", r.per_coordinator[i])
                              for r in runs for i in sorted(r.per_coordinator)],
                       label=f"{args.members:,} members, {args.coordinators} coordinator(s), gc {args.gc}")
    for f in failed:
        print(f"\nnot measured, {f}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=int, default=100, help="members of the big group in the baseline phase")
    ap.add_argument("--big", type=int, default=1000, help="members of the big group in later phases")
    ap.add_argument("--small-groups", type=int, default=400, help="groups added in the last phase")
    ap.add_argument("--small-size", type=int, default=10, help="members per small group")
    ap.add_argument("--big-partitions", type=int, default=1000)
    ap.add_argument("--small-partitions", type=int, default=10)
    ap.add_argument("--session-ms", type=int, default=30000, help="every member's session timeout")
    ap.add_argument("--window", type=float, default=30.0, help="seconds of steady state measured per phase")
    ap.add_argument("--rate", type=float, default=10.0, help="records/s each owned partition advances")
    ap.add_argument("--probe-every", type=int, default=5, help="every n-th member sends a probe after each ping")
    ap.add_argument("--concurrency", type=int, default=64, help="registrations in flight at once (over all "
                                                                 "simulators)")
    ap.add_argument("--settle-timeout", type=float, default=240.0)
    ap.add_argument("--register-version", type=int, default=2, choices=(0, 1, 2),
                    help="RegisterConsumer version of the members: 2 hands partitions over incrementally, "
                         "0 and 1 stop everything a member holds whenever its assignment changes")
    ap.add_argument("--quick", action="store_true", help="50 / 300 / +70 members, 12 s windows (a smoke run)")
    scale = ap.add_argument_group("scale mode", "one steady-state window over many small groups instead of the phases")
    scale.add_argument("--members", type=int, default=0, help="members in all (scale mode when set)")
    scale.add_argument("--group-size", type=int, default=10, help="members per group (each owns one partition of "
                                                                   "the --small-partitions topic when equal)")
    scale.add_argument("--coordinators", type=int, default=1,
                       help="coordinator-enabled brokers (coordinator.shards set to it where the broker has the "
                            "key); members reach each group's coordinator through FindCoordinator")
    scale.add_argument("--sims", type=int, default=0, help="member-simulator processes (default: one per 5,000)")
    scale.add_argument("--gc", choices=("both", "frozen", "python"), default="both",
                       help="collector setting of the brokers: both runs the same load twice, Python's own "
                            "schedule first (the baseline), then the default")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (broker and simulator logs)")
    args = ap.parse_args()
    if args.members:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
        args.sims = args.sims or max(1, -(-args.members // 5000))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)   # brokers and simulators inherit it
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return main_scale(args)
    if args.quick:
        args.baseline, args.big, args.small_groups, args.big_partitions, args.window = 50, 300, 7, 300, 12.0
        args.session_ms = 15000
    if not 0 < args.baseline < args.big:
        ap.error("--baseline must be positive and below --big")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)   # the broker inherits it: one socket per member
    need = 2 * (args.big + args.small_groups * args.small_size) + args.big_partitions * 4 + 1024
    if soft < min(hard, need):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
        log.warning("open-file limit %d may be too low for %d members", resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                    args.big + args.small_groups * args.small_size)

    tmp = tempfile.mkdtemp(prefix="spark-coord-bench-coord-")
    phases: list[Phase] = []
    failed: str | None = None
    overrides = {"coordinator.min.session.timeout.ms": 1000}
    with LocalCluster(1, tmp, overrides=overrides) as cluster:
        with ClusterClient(cluster.bootstrap) as c:
            AdminClient(c).create_topic(BIG_TOPIC, args.big_partitions)
            if args.small_groups:
                AdminClient(c).create_topic(SMALL_TOPIC, args.small_partitions)
        sim = Simulator(Path(tmp) / "simulator.log")
        bench = Bench(args, cluster, sim)
        sampler = RssSampler(bench.broker_pid)
        sampler.start()
        # the coordinator must be elected before the first RegisterConsumer
        deadline = time.monotonic() + 30
        while True:
            if admin_request(bench.host, bench.port, api.CLUSTER_METADATA, {})["coordinator_id"] >= 0:
                break
            if time.monotonic() > deadline:
                raise BenchError("no coordinator elected within 30 s")
            time.sleep(0.1)
        idle_rss = rss_mb(bench.broker_pid)
        try:
            big = [f"m{i:05d}" for i in range(args.big)]
            phases.append(bench.run_phase(f"{args.baseline:,}", [(BIG_GROUP, BIG_TOPIC, args.big_partitions,
                                                                    big[:args.baseline])]))
            # the baseline's join member stays, so the big group reaches --big with one fewer
            phases.append(bench.run_phase(f"{args.big:,}", [(BIG_GROUP, BIG_TOPIC, args.big_partitions,
                                                               big[args.baseline:args.big - 1])]))
            if args.small_groups:
                smalls = [(f"bench-s{g:04d}", SMALL_TOPIC, args.small_partitions,
                           [f"s{g:04d}-{i:02d}" for i in range(args.small_size)]) for g in range(args.small_groups)]
                total = args.big + 1 + args.small_groups * args.small_size
                phases.append(bench.run_phase(f"{total:,}", smalls))
        except BenchError as e:
            failed = str(e)
            log.error("benchmark stopped: %s", failed)
        finally:
            peak = sampler.stop()
            bench.close()
            sim.close()
    if phases:
        print(report(phases, idle_rss, peak, args))
        _write_figures(args, [(p.label, {"members": p.members, "lateness_ms": p.window["stats"]["lateness_ms"],
                                         "cpu": p.window["cpu"]["coordinator"]}) for p in phases if p.window],
                       label="phases" + (" (quick)" if getattr(args, "quick", False) else ""), one_coordinator=True)
    if failed or args.keep:
        log.info("broker, ZooKeeper and simulator logs kept in %s", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
