"""A chaos run: real brokers, real member processes, real faults, every invariant checked.

``ChaosRun(settings, workdir, zk_connect).run()`` starts a cluster of broker
processes on a ZooKeeper, a topic, an ``AckingProducer`` and journaling member
processes (``testing.member``), then injects faults at random moments:

- ``member_kill``: SIGKILL of a member, restarted (same consumer id) after a delay;
- ``member_stop``: SIGSTOP of a member for a while (sometimes past its session), SIGCONT;
- ``coordinator_kill``: SIGKILL of the coordinator's broker, restarted after a delay;
- ``broker_kill``: SIGKILL of another broker, restarted after a delay;
- ``coordinator_expiry``: SIGSTOP of the coordinator's broker past its ZooKeeper
  session (ZooKeeper expires it, another broker is elected), then SIGCONT.

At most one broker is down or paused at a time.  At the end everything is healed,
the producer stops, the members catch up and close cleanly, and the report
(``ChaosReport``) carries the checks of ``testing.invariants`` -- nothing
acknowledged lost, committed offsets never backwards, one owner per partition at
a time, no delivery outside ownership, no owned partition left unfetched, final
offsets at the log end -- plus duplicates and, for every coordinator SIGKILL, how
long consumption of the live partitions stalled (against the same measure taken
at quiet moments of the same run).
"""

from __future__ import annotations

import json
import logging
import random
import signal
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spark_coord.testing import invariants
from spark_coord.testing.member import MemberProcess
from spark_coord.testing.producer import AckingProducer, LogEndSampler, read_values

log = logging.getLogger(__name__)

KINDS = ("member_kill", "member_stop", "coordinator_kill", "broker_kill", "coordinator_expiry")
BROKER_KINDS = ("coordinator_kill", "broker_kill", "coordinator_expiry")


@dataclass
class ChaosSettings:
    brokers: int = 3
    partitions: int = 12
    members: int = 4
    member_session_ms: int = 6000
    broker_zk_session_ms: int = 4000
    duration_s: float = 180.0
    faults: int = 14
    seed: int = 1
    #: records per partition per producer round, and the pause between rounds
    batch: int = 5
    interval_s: float = 0.1
    #: relative weights of the fault kinds
    weights: dict[str, float] = field(default_factory=lambda: {
        "member_kill": 2, "member_stop": 2, "coordinator_kill": 3, "broker_kill": 1, "coordinator_expiry": 1})
    restart_delay_s: tuple[float, float] = (0.5, 3.0)
    liveness_bound_s: float = 12.0
    warmup_s: float = 15.0
    cooldown_s: float = 15.0


@dataclass
class Fault:
    at: float          # epoch seconds when injected
    kind: str
    target: str        # member name or broker id
    until: float | None = None   # recovered (restarted, SIGCONT) at


@dataclass
class ChaosReport:
    settings: dict
    faults: list[dict]
    produced: int
    acked: int
    consumed: int
    duplicates: dict
    lost: list[str]
    not_consumed: list[str]
    regressions: list[str]
    overlaps: list[str]
    outside_ownership: list[str]
    liveness: list[str]
    final_offsets: list[str]
    coordinator_kill_stalls: list[float]
    baseline_stalls: list[float]
    wall_s: float

    @property
    def duplicate_pct(self) -> float:
        return 100.0 * self.duplicates["extra"] / max(1, self.consumed)

    @property
    def violations(self) -> list[str]:
        return (self.lost + self.not_consumed + self.regressions + self.overlaps + self.outside_ownership
                + self.liveness + self.final_offsets)

    def summary(self) -> str:
        stalls = self.coordinator_kill_stalls
        kinds = {k: sum(1 for f in self.faults if f["kind"] == k) for k in KINDS}
        lines = [
            f"faults: {len(self.faults)} ({', '.join(f'{k} {n}' for k, n in kinds.items() if n)}) in {self.wall_s:.0f} s",
            f"records: {self.acked} acknowledged, {self.consumed} consumed; lost {len(self.lost)}, "
            f"unconsumed {len(self.not_consumed)}",
            f"duplicates: {self.duplicates['extra']} extra deliveries = {self.duplicate_pct:.2f}% of records "
            f"({self.duplicates['same_member']} to the member that had read them)",
            f"offset regressions {len(self.regressions)}, ownership overlaps {len(self.overlaps)}, deliveries "
            f"outside ownership {len(self.outside_ownership)}, liveness violations {len(self.liveness)}, "
            f"final offsets off the log end {len(self.final_offsets)}",
            "stall after coordinator SIGKILL (s): "
            + (f"median {statistics.median(stalls):.2f}, max {max(stalls):.2f}, all {[round(x, 2) for x in stalls]}"
               if stalls else "no coordinator SIGKILL"),
            "same measure at quiet moments (s): "
            + (f"median {statistics.median(self.baseline_stalls):.2f}" if self.baseline_stalls else "none"),
        ]
        return "\n".join(lines)


class ChaosRun:
    def __init__(self, settings: ChaosSettings, workdir: str | Path, zk_connect: str):
        self.s = settings
        self.workdir = Path(workdir)
        self.zk_connect = zk_connect
        self.rng = random.Random(settings.seed)
        self.group = "chaos"
        self.topic = "chaos"
        self.members: dict[str, MemberProcess] = {}        # incarnation name -> process
        self.current: dict[int, MemberProcess] = {}        # member slot -> running incarnation
        self.deaths: dict[str, float] = {}
        self.member_paused: dict[str, list[tuple[float, float]]] = {}
        self.broker_down: dict[int, list[tuple[float, float]]] = {}
        self.faults: list[Fault] = []
        self._owners: dict = {}
        self._recoveries: list[threading.Thread] = []
        self._broker_busy = threading.Event()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- setup
    def _start_cluster(self):
        from spark_coord.cluster import LocalCluster
        from spark_coord.zk.client import connect

        overrides = {"zookeeper.session.timeout.ms": self.s.broker_zk_session_ms,
                     "coordinator.offsets.commit.interval.ms": 200, "coordinator.rebalance.backoff.ms": 200,
                     "coordinator.min.session.timeout.ms": 1000}
        self.cluster = LocalCluster(self.s.brokers, self.workdir / "cluster", zk_connect=self.zk_connect,
                                    overrides=overrides)
        self.cluster.start()
        self.zk = connect(self.zk_connect, session_timeout_ms=20000, connection_timeout_ms=10000)

    def _member(self, slot: int) -> MemberProcess:
        base = f"m{slot}"
        n = sum(1 for name in self.members if name == base or name.startswith(base + "."))
        name = base if n == 0 else f"{base}.{n}"
        m = MemberProcess(name, self.workdir / "members", self.cluster.bootstrap, self.group, topics=[self.topic],
                          session_timeout_ms=self.s.member_session_ms, consumer_id=base)
        self.members[name] = m
        self.current[slot] = m
        return m

    def _leaders(self) -> dict[int, int]:
        from spark_coord.client.metadata import ClusterClient

        with ClusterClient(self.cluster.bootstrap) as cc:
            return {p: info.leader for p, info in cc.topic(self.topic, refresh=True, wait=10).partitions.items()}

    def _coordinator(self) -> int | None:
        from spark_coord.testing.zk_history import read_coordinator

        try:
            return read_coordinator(self.zk)
        except Exception:
            return None

    # ---------------------------------------------------------------- faults
    def _later(self, delay: float, fn, *args) -> None:
        t = threading.Timer(delay, fn, args)
        t.daemon = True
        t.start()
        self._recoveries.append(t)

    def _allow(self, broker: int, up: bool) -> None:
        parts = {p for p, b in self.leaders.items() if b == broker}
        with self._lock:
            if up:
                self.producer.allowed |= parts
            else:
                self.producer.allowed -= parts

    def _restart_broker(self, broker: int, fault: Fault, down_since: float) -> None:
        try:
            self.cluster.start_broker(broker)
        except Exception:
            log.exception("restarting broker %d failed", broker)
        fault.until = time.time()
        self.broker_down.setdefault(broker, []).append((down_since, fault.until))
        self._allow(broker, True)
        self._broker_busy.clear()

    def _resume_broker(self, broker: int, fault: Fault) -> None:
        proc = self.cluster.procs[broker]
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
        fault.until = time.time()
        self.broker_down.setdefault(broker, []).append((fault.at, fault.until))
        self._allow(broker, True)
        self._broker_busy.clear()

    def _restart_member(self, slot: int, fault: Fault) -> None:
        self._member(slot)
        fault.until = time.time()

    def _resume_member(self, m: MemberProcess, fault: Fault) -> None:
        m.signal(signal.SIGCONT)
        fault.until = time.time()
        self.member_paused.setdefault(m.name, []).append((fault.at, fault.until))

    def _inject(self, kind: str) -> Fault | None:
        s = self.s
        delay = self.rng.uniform(*s.restart_delay_s)
        if kind in BROKER_KINDS:
            if self._broker_busy.is_set():
                kind = self.rng.choice(["member_kill", "member_stop"])
            else:
                coordinator = self._coordinator()
                if coordinator is None:
                    kind = self.rng.choice(["member_kill", "member_stop"])
                else:
                    victim = coordinator if kind != "broker_kill" else self.rng.choice(
                        [b for b in self.cluster.ports if b != coordinator])
                    self._broker_busy.set()
                    self._allow(victim, False)
                    fault = Fault(time.time(), kind, str(victim))
                    if kind == "coordinator_expiry":
                        self.cluster.procs[victim].send_signal(signal.SIGSTOP)
                        self._later(s.broker_zk_session_ms / 1000 + 1.5, self._resume_broker, victim, fault)
                    else:
                        self.cluster.kill_broker(victim, signal.SIGKILL)
                        fault.at = time.time()
                        self._later(delay, self._restart_broker, victim, fault, fault.at)
                    return fault
        slot = self.rng.choice(sorted(self.current))
        m = self.current[slot]
        if not m.alive():
            return None
        if kind == "member_kill":
            fault = Fault(time.time(), kind, m.name)
            self.deaths[m.name] = fault.at
            m.kill()
            self._later(delay, self._restart_member, slot, fault)
            return fault
        pause = self.rng.uniform(1.0, 1.6 * s.member_session_ms / 1000)
        m.signal(signal.SIGSTOP)
        fault = Fault(time.time(), "member_stop", m.name)
        self._later(pause, self._resume_member, m, fault)
        return fault

    # ---------------------------------------------------------------- run
    def run(self) -> ChaosReport:
        from spark_coord.client.admin import AdminClient
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.testing.zk_history import ZkHistory

        s = self.s
        started = time.monotonic()
        (self.workdir / "members").mkdir(parents=True, exist_ok=True)
        self._start_cluster()
        try:
            with ClusterClient(self.cluster.bootstrap) as cc:
                AdminClient(cc).create_topic(self.topic, s.partitions)
            self.leaders = self._leaders()
            self.history = ZkHistory(self.zk, self.group, interval=0.25)
            self.history.start()
            self.sampler = LogEndSampler(self.cluster.bootstrap, self.topic)
            self.sampler.start()
            self.producer = AckingProducer(self.cluster.bootstrap, self.topic, s.partitions, s.batch, s.interval_s)
            self.producer.start()
            for slot in range(s.members):
                self._member(slot)
            t0 = time.time()
            window = max(1.0, s.duration_s - s.warmup_s - s.cooldown_s)
            plan = sorted(t0 + s.warmup_s + self.rng.uniform(0, window) for _ in range(s.faults))
            kinds = list(s.weights)
            for at in plan:
                time.sleep(max(0.0, at - time.time()))
                kind = self.rng.choices(kinds, weights=[s.weights[k] for k in kinds])[0]
                fault = self._inject(kind)
                if fault is not None:
                    self.faults.append(fault)
                    log.info("fault %d: %s of %s", len(self.faults), fault.kind, fault.target)
            time.sleep(max(0.0, t0 + s.duration_s - time.time()))
            return self._finish(started)
        finally:
            self._teardown()

    def _heal(self) -> None:
        for t in self._recoveries:
            t.join(60)
        deadline = time.monotonic() + 60
        while self._broker_busy.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
        for m in self.current.values():
            m.signal(signal.SIGCONT)

    def _finish(self, started: float) -> ChaosReport:
        from spark_coord.testing.zk_history import read_partitions

        s = self.s
        self._heal()
        self.producer.stop()
        ends = self._log_ends()
        journals = self._journals()
        deadline = time.monotonic() + 120
        while invariants.at_least_once(journals, ends) and time.monotonic() < deadline:
            time.sleep(0.5)
            journals = self._journals()
        closers = [threading.Thread(target=m.stop, args=(60,)) for m in self.current.values() if m.alive()]
        for t in closers:
            t.start()
        for t in closers:
            t.join(90)
        journals = self._journals()
        samples = self.history.stop()
        log_ends = self.sampler.stop()
        committed = read_partitions(self.zk, self.group, "offsets")
        values = read_values(self.cluster.bootstrap, self.topic)
        present = {(p, int(v.split(b":")[1])) for p, vs in values.items() for v in vs}
        lost = sorted(self.producer.acked - present)
        intervals = invariants.ownership_intervals(journals, self.deaths)
        leader_down = {(self.topic, p): self.broker_down.get(b, []) for p, b in self.leaders.items()}
        dups = invariants.duplicates(journals)
        self._owners = intervals
        stalls = [self._stall(f.at, int(f.target), journals, log_ends) for f in self.faults
                  if f.kind == "coordinator_kill"]
        return ChaosReport(
            settings=asdict(s), faults=[asdict(f) for f in self.faults],
            produced=self.producer.sent, acked=len(self.producer.acked), consumed=dups["records"], duplicates=dups,
            lost=[f"{self.topic}-{p}: acknowledged record {n} is not in the log" for p, n in lost],
            not_consumed=invariants.at_least_once(journals, ends),
            regressions=invariants.offsets_monotonic(samples)
            + invariants.offset_regressions_across_generations(samples),
            overlaps=invariants.one_owner_at_a_time(intervals),
            outside_ownership=invariants.delivered_outside_ownership(journals, intervals),
            liveness=invariants.liveness(journals, intervals, log_ends, s.liveness_bound_s, leader_down,
                                         self.member_paused, unknown_start=0),
            final_offsets=invariants.committed_at_log_end(committed, ends),  # type: ignore[arg-type]
            coordinator_kill_stalls=stalls, baseline_stalls=self._baseline(journals, log_ends),
            wall_s=time.monotonic() - started)

    def _journals(self) -> dict[str, list[dict]]:
        return {name: m.events() for name, m in self.members.items()}

    def _log_ends(self) -> dict[tuple[str, int], int]:
        from spark_coord.client.admin import LATEST, AdminClient
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.errors import KafkaError

        deadline = time.monotonic() + 60
        while True:
            try:
                with ClusterClient(self.cluster.bootstrap, timeout=5.0) as cc:
                    return {(self.topic, p): o for p, o in
                            AdminClient(cc).list_offsets(self.topic, None, LATEST).items()}
            except (KafkaError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    # ---------------------------------------------------------------- stalls
    def _faulted_member(self, tp: tuple[str, int], a: float, b: float) -> bool:
        """Was the owner of ``tp`` at ``a`` paused or killed between ``a`` and ``b``?"""
        owners = {m for s, e, m in self._owners.get(tp, ()) if s <= a < e}
        return any(any(x < b and y > a for x, y in self.member_paused.get(m, ())) or
                   (m in self.deaths and a - 1 <= self.deaths[m] < b) for m in owners)

    def _stall(self, at: float, victim: int | None, journals, log_ends, horizon: float = 120.0) -> float:
        """How long after ``at`` every partition led by a live broker delivered a record produced
        after ``at`` again (the slowest partition; partitions whose owner was itself paused or
        killed meanwhile are left out: that stall is the member fault's, not the coordinator's)."""
        first: dict[int, list[tuple[float, int]]] = {}
        for events in journals.values():
            for e in events:
                if e["ev"] == "recs" and at < e["ts"] < at + horizon:
                    first.setdefault(e["p"], []).append((e["ts"], max(e["offs"])))
        worst = 0.0
        for p, leader in self.leaders.items():
            if leader == victim or any(a < at + 30 and b > at for a, b in self.broker_down.get(leader, ())):
                continue
            if self._faulted_member((self.topic, p), at, at + 10):
                continue
            after = [end for ts, end in log_ends.get((self.topic, p), ()) if ts >= at]
            if not after:
                continue
            threshold = after[0]
            got = sorted(ts for ts, top in first.get(p, ()) if top >= threshold)
            worst = max(worst, (got[0] - at) if got else horizon)
        return worst

    def _baseline(self, journals, log_ends, n: int = 10) -> list[float]:
        """The stall measure at moments with no fault within 8 s (what "no stall" looks like)."""
        busy = [(f.at - 8, (f.until or f.at) + 8) for f in self.faults]
        samples = [ts for v in log_ends.values() for ts, _ in v]
        if not samples:
            return []
        lo, hi = min(samples) + 5, max(samples) - 30
        quiet = [t for t in (lo + i for i in range(int(max(0, hi - lo)))) if not any(a <= t <= b for a, b in busy)]
        picked = quiet[:: max(1, len(quiet) // n)][:n]
        return [self._stall(t, None, journals, log_ends) for t in picked]

    # ---------------------------------------------------------------- teardown
    def _teardown(self) -> None:
        for m in self.members.values():
            if m.alive():
                m.signal(signal.SIGCONT)
                m.kill()
        for part in ("producer", "sampler", "history"):
            obj = getattr(self, part, None)
            if obj is not None and obj.is_alive():
                obj.stop()
        for proc in self.cluster.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        self.cluster.stop()
        from spark_coord.zk.client import close

        close(self.zk)


def write_report(report: ChaosReport, path: str | Path) -> None:
    """The report as JSON (violations listed in full)."""
    doc = asdict(report)
    doc["duplicate_pct"] = report.duplicate_pct
    Path(path).write_text(json.dumps(doc, indent=2, default=str))
