"""A chaos run: real brokers, real member processes, real faults, every invariant checked.

``ChaosRun(settings, workdir, zk_connect).run()`` starts a cluster of broker
processes on a ZooKeeper, a topic, an ``AckingProducer`` and journaling member
processes (``testkit.member``), then injects faults at random moments:

- ``member_kill``: SIGKILL of a member, restarted (same consumer id) after a delay;
- ``member_stop``: SIGSTOP of a member for a while (sometimes past its session), SIGCONT;
- ``coordinator_kill``: SIGKILL of the coordinator's broker, restarted after a delay;
- ``broker_kill``: SIGKILL of another broker, restarted after a delay;
- ``coordinator_expiry``: SIGSTOP of the coordinator's broker past its ZooKeeper
  session (ZooKeeper expires it, another broker is elected), then SIGCONT.

At most one broker is down or paused at a time.  At the end everything is healed,
the producer stops, the members catch up and close cleanly, and the report
(``ChaosReport``) carries the checks of ``testkit.invariants``, which ``testkit.analysis``
runs over the run's record -- nothing acknowledged lost, committed offsets never
backwards, one owner per partition at a time, no delivery outside ownership, no owned
partition left unfetched, final offsets at the log end -- plus duplicates and, for
every coordinator SIGKILL, how long consumption of the live partitions stalled
(against the same measure taken at quiet moments of the same run).

Members may be of several kinds (``ChaosSettings.kinds``), each its own process
journaling in one format: ``thin`` (our consumer, ``testkit.member``), ``eager``
(confluent-kafka with librdkafka's default assignors), ``cooperative``
(confluent-kafka with ``partition.assignment.strategy=cooperative-sticky``) and
``kip848`` (confluent-kafka with ``group.protocol=consumer``), see
``testkit.kafka_member``; every one of them commits synchronously after every batch.
``spark`` is a Spark structured-streaming query (``testkit.spark_member``: local Spark,
a ``coordkafka`` source with the group's id, a ``foreachBatch`` journaling the records)
whose source commits the group's offsets as Spark confirms its batches; a killed one
is restarted on the same checkpoint and first replays the batch it had planned and not
confirmed (journaled ``replay``: at-least-once, whoever owns those partitions by then,
so those deliveries count for every check but the two of ownership).  The run waits
for every Spark member's first delivered batch (its JVM's start and its query's first
batch, 15 s and more on a loaded machine) before the warm-up begins, and for its first
assignment again after healing.
The brokers' ``group.consumer.session.timeout.ms`` (the KIP-848 members' session, set
broker-side) is the run's Kafka session, ``kafka_session_ms`` or ``member_session_ms``.

``share`` members are not in the consumer group: they are confluent-kafka
``ShareConsumer``s of one share group (KIP-932, ``ChaosRun.share_group``, an id on the
same coordinator shard as the consumer group, so coordinator faults hit both) reading the
same topic, each its own process (``testkit.share_member``): explicit acknowledgement,
every record journaled with its delivery count, accepted, ``commit_sync``, and the
broker's answer per partition journaled.  The brokers then run with short share-group
timeouts (record lock ``share_lock_ms``, heartbeat 500 ms, session ``member_session_ms``)
and the group's ``share.auto.offset.reset`` is set to ``earliest`` before its members
start.  The same faults hit them (a killed one is restarted as a new process).  The
checks of the consumer group read only the group members' journals; the share group's
(``invariants.share_*``) are added to the report: every record in the log delivered to
the share group at least once (after healing the share members run until it has been,
within the run's deadline), no record with two lock holders at once, no record whose
acceptance the broker confirmed acquired again, and every redelivery explained by a fault
that caught the record in flight (of its holder, of its partition's leader) -- or else
by a reassignment of the share group; the rest are counted as unexplained.
The report also gives, per member (incarnation), the records delivered to it that
had been delivered before (and how many of those it had delivered itself) and the
faults that hit it; for every member SIGKILL, the longest wait of a record on the
partitions of the *other* members (from its appearance in the log to its first
delivery) over the following session timeout and rebalance, against the same
measure at quiet moments; and every run of failed commits of a member lasting
``commit_failure_report_s`` or more.

Diagnostics (``testkit.diagnostics``): while a member's commits keep failing for
``diagnose_after_s`` although another member's commits succeed meanwhile (so a
coordinator is there), the run asks it for a dump of every thread's stack (SIGUSR1:
``faulthandler``, into the member's log), and, when ``py-spy`` is installed, dumps the
coordinator broker's threads into ``<workdir>/diagnostics/``.
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

from testkit import invariants
from testkit.analysis import (
    GROUP_KINDS,
    MEMBER_KINDS,
    Fault,
    RunAnalysis,
    commit_failure_runs,
    first_deliveries,
    without_replays,
)
from testkit.diagnostics import CommitWatcher
from testkit.kafka_member import KafkaMemberProcess
from testkit.member import MemberProcess
from testkit.producer import AckingProducer, LogEndSampler, read_values
from testkit.share_member import ShareMemberProcess, set_share_group_config
from testkit.spark_member import SparkMemberProcess

log = logging.getLogger(__name__)

#: The fault kinds (the member kinds, ``MEMBER_KINDS`` and its parts, are ``testkit.analysis``'s: its
#: checks tell them apart).
KINDS = ("member_kill", "member_stop", "coordinator_kill", "broker_kill", "coordinator_expiry")
BROKER_KINDS = ("coordinator_kill", "broker_kill", "coordinator_expiry")
#: How long a Spark member may take to start (its JVM, then its query's first assignment or batch).
SPARK_START_S = 180.0


def parse_kinds(text: str) -> tuple[str, ...]:
    """``"thin,thin,eager,cooperative"`` -> the member kinds, one per member (checked)."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in MEMBER_KINDS]
    if bad or not kinds:
        raise ValueError(f"member kinds must be a comma-separated list of {', '.join(MEMBER_KINDS)}; got {text!r}")
    return kinds


@dataclass
class ChaosSettings:
    brokers: int = 3
    partitions: int = 12
    members: int = 4
    #: One kind per member (``MEMBER_KINDS``); empty: ``members`` thin consumers.
    kinds: tuple[str, ...] = ()
    member_session_ms: int = 6000
    broker_zk_session_ms: int = 4000
    #: The brokers' ``group.consumer.heartbeat.interval.ms`` for KIP-848 members.  librdkafka gives
    #: each ConsumerGroupHeartbeat this long to be answered and drops the connection after a miss: a
    #: coordinator link whose round trip is longer fences the member however long its session.
    kip848_heartbeat_ms: int = 500
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
    #: Dump a member's threads (and the coordinator's) once its commits failed for this long (0: never).
    diagnose_after_s: float = 5.0
    #: Runs of failed commits at least this long are listed in the report.
    commit_failure_report_s: float = 10.0
    #: Thin members journal their connector's state this often (0: never).
    state_every_s: float = 1.0
    #: Kafka members' session.timeout.ms (None: ``member_session_ms``; librdkafka's default is 45000).
    kafka_session_ms: int | None = None
    #: Leave the coordinator's offset commit interval and rebalance backoff at their defaults
    #: (1000 ms, 500 ms) instead of the run's quicker 200 ms.
    coordinator_defaults: bool = False
    #: Share members: the brokers' acquisition lock (group.share.record.lock.duration.ms), how long
    #: a member holds each poll's records before accepting them, max.poll.records (0: the client's).
    share_lock_ms: int = 5000
    share_hold_s: float = 0.0
    share_max_poll_records: int = 0
    #: Share checks: how long before a member's previous poll a record it is handed may have been
    #: acquired, and the slack around a fault that explains a redelivery.
    share_slack_s: float = 1.0
    share_margin_s: float = 2.0

    def member_kinds(self) -> tuple[str, ...]:
        return tuple(self.kinds) if self.kinds else ("thin",) * self.members

    def has_share(self) -> bool:
        return "share" in self.member_kinds()

    def has_group(self) -> bool:
        return any(k in GROUP_KINDS for k in self.member_kinds())


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
    #: Epoch seconds when the members were started (times below are relative to it).
    t0: float = 0.0
    #: Per member incarnation: kind, records, extra (duplicates handed to it), same_member, faults.
    members: list[dict] = field(default_factory=list)
    #: Per member SIGKILL: victim, at, stall of the other members' partitions, whether another fault
    #: fell in its window (``clean``: none did).
    member_kill_stalls: list[dict] = field(default_factory=list)
    #: The same measure over quiet windows of the run.
    baseline_latency: list[float] = field(default_factory=list)
    #: Runs of consecutive failed commits of one member lasting ``commit_failure_report_s`` or more.
    commit_failure_runs: list[dict] = field(default_factory=list)
    #: Stack dumps taken (member, at, where).
    diagnostics: list[dict] = field(default_factory=list)
    #: The share group's figures (empty without share members): group, records, deliveries,
    #: redeliveries and what explains them, acceptances confirmed, acknowledgement errors.
    share: dict = field(default_factory=dict)
    #: Share-group violations: records in the log never delivered to it; records with two lock
    #: holders; records acquired again after a confirmed acceptance; unexplained redeliveries.
    share_lost: list[str] = field(default_factory=list)
    share_lock_overlaps: list[str] = field(default_factory=list)
    share_confirmed_again: list[str] = field(default_factory=list)
    share_unexplained: list[str] = field(default_factory=list)
    #: Moments with two owners that only a fenced zombie made: a Kafka member delivering what it had
    #: fetched after its coordinator fenced it (no commit of it accepted since), before it heard so.
    #: Kafka's guarantee: its commits fail; not violations, listed to be seen.
    fenced_overlaps: list[str] = field(default_factory=list)
    #: Owners that began below an offset whose commit had been acknowledged (a commit answered,
    #: then lost).
    commits_lost: list[str] = field(default_factory=list)
    #: Deliveries outside ownership by a Spark member's batch in flight when it was paused (SIGSTOP)
    #: past its lease: planned while it owned the partitions, written once it ran again -- a zombie as
    #: a paused Kafka consumer's; not violations, listed to be seen.
    paused_batches: list[str] = field(default_factory=list)

    @property
    def duplicate_pct(self) -> float:
        return 100.0 * self.duplicates["extra"] / max(1, self.consumed)

    @property
    def violations(self) -> list[str]:
        return (self.lost + self.not_consumed + self.regressions + self.overlaps + self.outside_ownership
                + self.liveness + self.final_offsets + self.share_lost + self.share_lock_overlaps
                + self.share_confirmed_again + self.share_unexplained + self.commits_lost)

    def summary(self) -> str:
        stalls = self.coordinator_kill_stalls
        kinds = {k: sum(1 for f in self.faults if f["kind"] == k) for k in KINDS}
        lines = [
            f"faults: {len(self.faults)} ({', '.join(f'{k} {n}' for k, n in kinds.items() if n)}) "
            f"in {self.wall_s:.0f} s",
            f"records: {self.acked} acknowledged, {self.consumed} consumed; lost {len(self.lost)}, "
            f"unconsumed {len(self.not_consumed)}",
            f"duplicates: {self.duplicates['extra']} extra deliveries = {self.duplicate_pct:.2f}% of records "
            f"({self.duplicates['same_member']} to the member that had read them)"
            + ("; by cause: " + ", ".join(f"{k} {v}" for k, v in self.duplicates["causes"].items())
               if "causes" in self.duplicates else ""),
            f"offset regressions {len(self.regressions)}, ownership overlaps {len(self.overlaps)}, deliveries "
            f"outside ownership {len(self.outside_ownership)}, liveness violations {len(self.liveness)}, "
            f"final offsets off the log end {len(self.final_offsets)}, acknowledged commits read past again "
            f"{len(self.commits_lost)}; two owners only by a fenced zombie "
            f"{len(self.fenced_overlaps)}, deliveries outside ownership by a paused Spark member's batch in "
            f"flight {len(self.paused_batches)} (not violations)",
            "stall after coordinator SIGKILL (s): "
            + (f"median {statistics.median(stalls):.2f}, max {max(stalls):.2f}, all {[round(x, 2) for x in stalls]}"
               if stalls else "no coordinator SIGKILL"),
            "same measure at quiet moments (s): "
            + (f"median {statistics.median(self.baseline_stalls):.2f}" if self.baseline_stalls else "none"),
        ]
        kills = self.member_kill_stalls
        clean = [k["stall"] for k in kills if k["clean"]]
        base = self.baseline_latency
        lines.append("longest wait of a record on the other members' partitions after a member SIGKILL (s): "
                     + (", ".join(f"{k['victim']} ({k['kind']}) at +{k['at']:.0f}: {k['stall']:.2f}"
                                  + ("" if k["clean"] else " (another fault in its window)") for k in kills)
                        if kills else "no member SIGKILL"))
        if clean:
            lines.append(f"  without another fault in the window: median {statistics.median(clean):.2f}, "
                         f"max {max(clean):.2f}")
        lines.append("same measure over quiet windows (s): "
                     + (f"median {statistics.median(base):.2f}, max {max(base):.2f}" if base else "none"))
        lines.append("per member: delivered again (of which it had read itself) / records; faults that hit it")
        for m in self.members:
            faults = ", ".join(f"{f['kind']} at +{f['at']:.0f}" for f in m["faults"]) or "none"
            lines.append(f"  {m['name']:<6} {m['kind']:<11} {m['extra']:>7} ({m['same_member']:>6}) / "
                         f"{m['records']:>8}; commit failures {m['commit_failed']}; faults: {faults}")
        if self.commit_failure_runs:
            lines.append("runs of failed commits:")
            for r in self.commit_failure_runs:
                msgs = "; ".join(f"{n}x {m[:60]}" for m, n in sorted(r.get("messages", {}).items(),
                                                                      key=lambda x: -x[1])[:3])
                lines.append(f"  {r['member']} ({r['kind']}): {r['count']} failed from +{r['start']:.1f} to "
                             f"+{r['end']:.1f} ({r['end'] - r['start']:.1f} s), codes {r['codes']}"
                             + (f" ({msgs})" if msgs else ""))
        for d in self.diagnostics:
            lines.append(f"stack dump of {d['target']} at +{d['at']:.1f}: {d['where']}")
        sh = self.share
        if sh:
            lines.append(
                f"share group {sh['group']} ({sh['members']} members, lock {sh['lock_s']:.1f} s): "
                f"{sh['records']} records delivered of {sh['expected']} in the log ({sh['acked_expected']} "
                f"acknowledged to the producer), {sh['deliveries']} deliveries; never delivered {len(self.share_lost)}")
            lines.append(
                f"  redeliveries: {sh['redeliveries']} ({sh['redelivered_pct']:.3f}% of records, "
                f"{sh['redelivered_records']} records; highest delivery count {sh['max_count']}): "
                f"explained by a fault of the holder {sh['by_holder']}, of the partition's leader {sh['by_leader']}, "
                f"by a reassignment only {sh['by_reassignment']}; unexplained {len(self.share_unexplained)}; "
                "records whose first delivery had a count above 1 (acquired by a member that died before handing "
                f"them out) {sh.get('first_count_above_1', 0)}")
            lines.append(
                f"  acceptances confirmed {sh['confirmed']} of {sh['accepted']} sent; answers with an error "
                f"{sh['ack_errors']} ({', '.join(f'{k} x{v}' for k, v in sh['ack_error_codes'].items()) or 'none'}), "
                f"unknown {sh['ack_unknown']}")
            lines.append(
                f"  two lock holders {len(self.share_lock_overlaps)}, acquired again after a confirmed acceptance "
                f"{len(self.share_confirmed_again)}")
        return "\n".join(lines)


class ChaosRun(RunAnalysis):
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
        self.kinds = settings.member_kinds()
        self.t0 = time.time()
        self.diagnostics: list[dict] = []
        #: The share group of the ``share`` members (picked once the cluster is up).
        self.share_group = "chaos-share"

    # ---------------------------------------------------------------- setup
    def _broker_overrides(self) -> dict[str, object]:
        """The brokers' settings for the run: short ZooKeeper sessions, quick commits and rebalance retries,
        and the share and KIP-848 timeouts of the members' settings."""
        overrides = {"zookeeper.session.timeout.ms": self.s.broker_zk_session_ms,
                     **({} if self.s.coordinator_defaults else {
                         "coordinator.offsets.commit.interval.ms": 200, "coordinator.rebalance.backoff.ms": 200}),
                     "coordinator.min.session.timeout.ms": 1000}
        if self.s.has_share():
            overrides.update(share_overrides(self.s))
        overrides.update(kip848_overrides(self.s))
        return overrides

    def _start_cluster(self):
        from spark_coord.cluster import LocalCluster
        from spark_coord.zk.client import connect

        self.cluster = LocalCluster(self.s.brokers, self.workdir / "cluster", zk_connect=self.zk_connect,
                                    overrides=self._broker_overrides())
        self.cluster.start()
        self.zk = connect(self.zk_connect, session_timeout_ms=20000, connection_timeout_ms=10000)

    def _member(self, slot: int) -> MemberProcess:
        base = f"m{slot}"
        n = sum(1 for name in self.members if name == base or name.startswith(base + "."))
        name = base if n == 0 else f"{base}.{n}"
        kind = self.kinds[slot]
        if kind == "share":
            m = ShareMemberProcess(name, self.workdir / "members", self.cluster.bootstrap, self.share_group,
                                   topics=[self.topic], consumer_id=name,
                                   max_poll_records=self.s.share_max_poll_records, hold_s=self.s.share_hold_s)
        elif kind == "spark":
            m = SparkMemberProcess(name, self.workdir / "members", self.cluster.bootstrap, self.group,
                                   topics=[self.topic], checkpoint=self.workdir / "members" / f"{base}.checkpoint",
                                   session_timeout_ms=self.s.member_session_ms, consumer_id=base)
        elif kind == "thin":
            m = MemberProcess(name, self.workdir / "members", self.cluster.bootstrap, self.group,
                              topics=[self.topic], session_timeout_ms=self.s.member_session_ms, consumer_id=base,
                              state_every=self.s.state_every_s)
        else:
            m = KafkaMemberProcess(name, self.workdir / "members", self.cluster.bootstrap, self.group,
                                   topics=[self.topic], strategy=kind,
                                   session_timeout_ms=self.s.kafka_session_ms or self.s.member_session_ms,
                                   consumer_id=base)
        m.kind = kind  # type: ignore[attr-defined]
        self.members[name] = m
        self.current[slot] = m
        return m

    def _create_topic(self) -> None:
        """The run's topic, ``s.partitions`` partitions spread by the brokers."""
        from spark_coord.client.admin import AdminClient
        from spark_coord.client.metadata import ClusterClient

        with ClusterClient(self.cluster.bootstrap) as cc:
            AdminClient(cc).create_topic(self.topic, self.s.partitions)

    def _await_spark_members(self, ev: str = "assign") -> None:
        """Wait (at most ``SPARK_START_S``) until every running Spark member journaled its first
        ``ev``: a JVM's start is no part of the warm-up, nor of the catching up after healing.  Before
        the warm-up that is its first batch delivered (``recs``): a query's first batch starts its
        Python workers and reads cold, over 15 s on a loaded 2-core machine, and a fault meant for a
        running member would find one that never delivered."""
        spark = [m for m in self.current.values() if getattr(m, "kind", "") == "spark"]
        deadline = time.monotonic() + SPARK_START_S
        while spark and time.monotonic() < deadline:
            spark = [m for m in spark if m.alive() and not m.events(ev)]
            time.sleep(0.5)
        if spark:
            log.warning("Spark members without %s after %.0f s: %s", ev, SPARK_START_S, spark)

    def _leaders(self) -> dict[int, int]:
        from spark_coord.client.metadata import ClusterClient

        with ClusterClient(self.cluster.bootstrap) as cc:
            return {p: info.leader for p, info in cc.topic(self.topic, refresh=True, wait=10).partitions.items()}

    def _pick_share_group(self) -> str:
        """A share group id on the consumer group's coordinator shard (so the coordinator faults,
        drawn on the consumer group's coordinator, hit the share group's too)."""
        from spark_coord.coordinator.core.shards import shard_of
        from testkit.zk_history import read_shard_count

        deadline = time.monotonic() + 30
        count = None
        while count is None and time.monotonic() < deadline:
            try:
                count = read_shard_count(self.zk)
            except Exception:  # noqa: BLE001 -- not written yet
                count = None
            if count is None:
                time.sleep(0.2)
        if not count:
            return "chaos-share"
        target = shard_of(self.group, count)
        return next(g for g in ("chaos-share" if i == 0 else f"chaos-share-{i}" for i in range(100000))
                    if shard_of(g, count) == target)

    def _coordinator(self) -> int | None:
        from testkit.zk_history import read_coordinator

        try:
            return read_coordinator(self.zk, self.group)
        except Exception:  # noqa: BLE001 -- a probe: unknown while ZooKeeper is cut off or its node half written
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

    def _restart_member(self, slot: int, fault: Fault, killed: MemberProcess | None = None) -> None:
        """Start the slot's next incarnation, unless one replaced ``killed`` meanwhile (a clock fault's
        heal): two incarnations of one member at once would be two members (two Spark queries on
        one checkpoint)."""
        if killed is None or self.current.get(slot) is killed:
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
            self._later(delay, self._restart_member, slot, fault, m)
            return fault
        pause = self.rng.uniform(1.0, 1.6 * s.member_session_ms / 1000)
        m.signal(signal.SIGSTOP)
        fault = Fault(time.time(), "member_stop", m.name)
        self._later(pause, self._resume_member, m, fault)
        return fault

    # ---------------------------------------------------------------- run
    def run(self) -> ChaosReport:
        from testkit.zk_history import ZkHistory

        s = self.s
        started = time.monotonic()
        (self.workdir / "members").mkdir(parents=True, exist_ok=True)
        self._start_cluster()
        try:
            self._create_topic()
            self.leaders = self._leaders()
            if s.has_share():
                self.share_group = self._pick_share_group()
                set_share_group_config(self.cluster.bootstrap, self.share_group,
                                       {"share.auto.offset.reset": "earliest"})
                log.info("share group %s: share.auto.offset.reset=earliest", self.share_group)
            self.history = ZkHistory(self.zk, self.group, interval=0.25)
            self.history.start()
            self.sampler = LogEndSampler(self.cluster.bootstrap, self.topic)
            self.sampler.start()
            self.producer = AckingProducer(self.cluster.bootstrap, self.topic, s.partitions, s.batch, s.interval_s)
            self.producer.start()
            self.t0 = time.time()
            for slot in range(len(self.kinds)):
                self._member(slot)
            self._await_spark_members("recs")
            self.watcher = CommitWatcher(self) if s.diagnose_after_s > 0 else None
            if self.watcher is not None:
                self.watcher.start()
            self._fault_loop(time.time())
            return self._finish(started)
        finally:
            self._teardown()

    def _fault_loop(self, t0: float) -> None:
        """Inject ``s.faults`` faults at random moments between the warm-up and the cool-down,
        then wait out the run's duration (from ``t0``)."""
        s = self.s
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

    def _heal(self) -> None:
        for t in self._recoveries:
            t.join(60)
        deadline = time.monotonic() + 60
        while self._broker_busy.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
        for m in self.current.values():
            m.signal(signal.SIGCONT)
        self._await_spark_members()  # a Spark member restarted late is still starting its JVM

    def _finish(self, started: float) -> ChaosReport:
        from testkit.zk_history import read_partitions

        s = self.s
        self._heal()
        self.producer.stop()
        ends = self._log_ends()
        in_log = {tp: range(end) for tp, end in ends.items()}

        def pending() -> bool:
            """Records in the log not consumed by the group, or not delivered to the share group."""
            return bool((s.has_group() and invariants.at_least_once(self._journals(), ends))
                        or (s.has_share() and invariants.share_at_least_once(self._share_journals(), in_log)))

        deadline = time.monotonic() + 120 + (s.share_lock_ms / 1000 if s.has_share() else 0)
        while pending() and time.monotonic() < deadline:
            time.sleep(0.5)
        closers = [threading.Thread(target=m.stop, args=(60,)) for m in self.current.values() if m.alive()]
        for t in closers:
            t.start()
        for t in closers:
            t.join(90)
        stopped = time.time()  # where the ownership of a member that journaled no close ends
        if getattr(self, "watcher", None) is not None:
            self.watcher.stop()
        journals = self._journals()
        samples = self.history.stop()
        log_ends = self.sampler.stop()
        committed = read_partitions(self.zk, self.group, "offsets")
        values = read_values(self.cluster.bootstrap, self.topic)
        present = {(p, int(v.split(b":")[1])) for p, vs in values.items() for v in vs}
        lost = sorted(self.producer.acked - present)
        intervals = invariants.ownership_intervals(journals, self.deaths, end_of_run=stopped)
        kept = without_replays(journals)  # a restarted Spark member's replays: delivered again by design
        leader_down = {(self.topic, p): self.broker_down.get(b, []) for p, b in self.leaders.items()}
        dups = dict(invariants.duplicates(journals), causes=invariants.duplicate_causes(journals, intervals))
        self._owners = intervals
        stalls = [self._stall(f.at, int(f.target), journals, log_ends) for f in self.faults
                  if f.kind == "coordinator_kill" and s.has_group()]
        first = first_deliveries(journals)
        kill_stalls = [self._member_kill_stall(f, first, log_ends) for f in self.faults
                       if f.kind == "member_kill" and self._kind_of(f.target) != "share"]
        share = (self._share_checks(ends, self.producer.acked, log_offsets(self.cluster.bootstrap, self.topic))
                 if s.has_share() else {})
        overlaps, unfenced = self._overlaps(journals, intervals)
        outside = invariants.delivered_outside_ownership(self._without_paused_batches(kept), intervals)
        if not s.has_group():  # no consumer group: its checks have nothing to look at
            not_consumed, final_offsets = [], []
        else:
            not_consumed = invariants.at_least_once(journals, ends)
            final_offsets = invariants.committed_at_log_end(committed, ends)  # type: ignore[arg-type]
        return ChaosReport(
            settings=asdict(s), faults=[asdict(f) for f in self.faults],
            produced=self.producer.sent, acked=len(self.producer.acked), consumed=dups["records"], duplicates=dups,
            lost=[f"{self.topic}-{p}: acknowledged record {n} is not in the log" for p, n in lost],
            not_consumed=not_consumed,
            regressions=invariants.offsets_monotonic(samples)
            + invariants.offset_regressions_across_generations(samples),
            overlaps=overlaps, fenced_overlaps=sorted(set(unfenced) - set(overlaps)),
            outside_ownership=outside,
            paused_batches=sorted(set(invariants.delivered_outside_ownership(kept, intervals)) - set(outside)),
            liveness=invariants.liveness(journals, intervals, log_ends, s.liveness_bound_s, leader_down,
                                         self._waiting_members(journals), unknown_start=0),
            final_offsets=final_offsets,
            coordinator_kill_stalls=stalls,
            baseline_stalls=self._baseline(journals, log_ends) if s.has_group() else [],
            wall_s=time.monotonic() - started, t0=self.t0, members=self._member_figures(journals),
            member_kill_stalls=kill_stalls,
            baseline_latency=self._latency_baseline(first, log_ends) if s.has_group() else [],
            commit_failure_runs=[dict(r, kind=self._kind_of(r["member"]), start=r["start"] - self.t0,
                                      end=r["end"] - self.t0)
                                 for r in commit_failure_runs(journals, s.commit_failure_report_s)],
            diagnostics=[dict(d, at=d["at"] - self.t0) for d in self.diagnostics],
            share=share.get("figures", {}), share_lost=share.get("lost", []),
            share_lock_overlaps=share.get("lock_overlaps", []), share_confirmed_again=share.get("confirmed_again", []),
            share_unexplained=share.get("unexplained", []),
            commits_lost=invariants.acknowledged_commits_kept(kept, intervals))

    # ---------------------------------------------------------------- what the checks read
    def _share_leaders_hit(self, f: Fault) -> dict[int, list[float]]:
        """Brokers whose share partitions a fault may have redelivered from -> when it may have lost what
        their members held (a crash; none for a pause, which only delays lock expiry)."""
        if f.kind in BROKER_KINDS:
            return {int(f.target): [] if f.kind == "coordinator_expiry" else [f.at]}
        return {}

    def _journals(self) -> dict[str, list[dict]]:
        """The consumer group members' journals (what the group's checks read)."""
        return {name: m.events() for name, m in self.members.items() if self._kind_of(name) != "share"}

    def _share_journals(self) -> dict[str, list[dict]]:
        """The share members' journals."""
        return {name: m.events() for name, m in self.members.items() if self._kind_of(name) == "share"}

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

    # ---------------------------------------------------------------- teardown
    def _teardown(self) -> None:
        if getattr(self, "watcher", None) is not None:
            self.watcher.stop()
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


def share_overrides(s: ChaosSettings) -> dict[str, int]:
    """Broker settings of a run with share members: the acquisition lock ``share_lock_ms``, heartbeats
    every 500 ms, sessions of ``member_session_ms`` (the group.share.min.* bounds lowered to allow them)."""
    return {"group.share.min.record.lock.duration.ms": min(1000, s.share_lock_ms),
            "group.share.record.lock.duration.ms": s.share_lock_ms,
            "group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 500,
            "group.share.min.session.timeout.ms": min(1000, s.member_session_ms),
            "group.share.session.timeout.ms": s.member_session_ms}


def kip848_overrides(s: ChaosSettings) -> dict[str, int]:
    """Broker settings for the KIP-848 members (their session and heartbeat are the brokers'): the
    run's Kafka session, heartbeats every ``kip848_heartbeat_ms``."""
    return {"group.consumer.session.timeout.ms": s.kafka_session_ms or s.member_session_ms,
            "group.consumer.heartbeat.interval.ms": s.kip848_heartbeat_ms}


def log_offsets(bootstrap: str, topic: str) -> dict[tuple[int, int], int]:
    """(partition, seq) -> offset of every record of the producer (value ``<partition>:<seq>``) in the log."""
    from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import KafkaError
    from spark_coord.records.reader import iter_records

    out: dict[tuple[int, int], int] = {}
    with ClusterClient(bootstrap, timeout=10.0) as cc:
        admin = AdminClient(cc)
        parts = sorted(cc.topic(topic, refresh=True, wait=10.0).partitions)
        positions = admin.list_offsets(topic, parts, EARLIEST)
        ends = admin.list_offsets(topic, parts, LATEST)
        while any(positions[p] < ends[p] for p in parts):
            for p in parts:
                if positions[p] >= ends[p]:
                    continue
                for pd in fetch(cc.connection(cc.leader(topic, p)), {(topic, p): positions[p]}, max_wait_ms=100):
                    if pd.error:
                        raise KafkaError(pd.error, f"{topic}-{p}")
                    for rec in iter_records(pd.records or b"", min_offset=positions[p]):
                        if rec.offset >= ends[p]:
                            break
                        try:
                            part, seq = (rec.value or b"").split(b":")
                            out[(int(part), int(seq))] = rec.offset
                        except ValueError:
                            pass
                        positions[p] = rec.offset + 1
    return out


def write_report(report: ChaosReport, path: str | Path) -> None:
    """The report as JSON (violations listed in full)."""
    doc = asdict(report)
    doc["duplicate_pct"] = report.duplicate_pct
    Path(path).write_text(json.dumps(doc, indent=2, default=str))
