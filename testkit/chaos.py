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
(``ChaosReport``) carries the checks of ``testkit.invariants`` -- nothing
acknowledged lost, committed offsets never backwards, one owner per partition at
a time, no delivery outside ownership, no owned partition left unfetched, final
offsets at the log end -- plus duplicates and, for every coordinator SIGKILL, how
long consumption of the live partitions stalled (against the same measure taken
at quiet moments of the same run).

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

Diagnostics: while a member's commits keep failing for ``diagnose_after_s`` although
another member's commits succeed meanwhile (so a coordinator is there), the run
asks it for a dump of every thread's stack (SIGUSR1: ``faulthandler``, into the
member's log), and, when ``py-spy`` is installed, dumps the coordinator broker's
threads into ``<workdir>/diagnostics/``.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

from testkit import invariants
from testkit.kafka_member import KafkaMemberProcess
from testkit.member import MemberProcess
from testkit.producer import AckingProducer, LogEndSampler, read_values
from testkit.share_member import ShareMemberProcess, set_share_group_config
from testkit.spark_member import SparkMemberProcess

log = logging.getLogger(__name__)

KINDS = ("member_kill", "member_stop", "coordinator_kill", "broker_kill", "coordinator_expiry")
BROKER_KINDS = ("coordinator_kill", "broker_kill", "coordinator_expiry")
#: Member kinds: our thin consumer, confluent-kafka with the default (eager) assignors, with
#: cooperative-sticky and with the KIP-848 protocol, a Spark query -- members of the consumer group;
#: and ``share``, a confluent-kafka ShareConsumer of the run's share group.
MEMBER_KINDS = ("thin", "eager", "cooperative", "kip848", "spark", "share")
#: The kinds that are members of the consumer group.
GROUP_KINDS = ("thin", "eager", "cooperative", "kip848", "spark")
#: Member kinds that are librdkafka consumers (testkit.kafka_member).
KAFKA_KINDS = ("eager", "cooperative", "kip848")
#: How long a Spark member may take to start (its JVM, then its query's first assignment or batch).
SPARK_START_S = 180.0
#: How long after SIGCONT a Kafka member paused past its session may still deliver what it fetched
#: before the pause, at most, before it journals the loss (its next poll tells it).
ZOMBIE_GRACE_S = 5.0


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
            f"faults: {len(self.faults)} ({', '.join(f'{k} {n}' for k, n in kinds.items() if n)}) in {self.wall_s:.0f} s",
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
                f"{sh['redelivered_records']} records; highest delivery count {sh['max_count']}): explained by a fault of the holder "
                f"{sh['by_holder']}, of the partition's leader {sh['by_leader']}, by a reassignment only "
                f"{sh['by_reassignment']}; unexplained {len(self.share_unexplained)}; records whose first delivery "
                f"had a count above 1 (acquired by a member that died before handing them out) "
                f"{sh.get('first_count_above_1', 0)}")
            lines.append(
                f"  acceptances confirmed {sh['confirmed']} of {sh['accepted']} sent; answers with an error "
                f"{sh['ack_errors']} ({', '.join(f'{k} x{v}' for k, v in sh['ack_error_codes'].items()) or 'none'}), "
                f"unknown {sh['ack_unknown']}")
            lines.append(
                f"  two lock holders {len(self.share_lock_overlaps)}, acquired again after a confirmed acceptance "
                f"{len(self.share_confirmed_again)}")
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
        kept = _without_replays(journals)  # a restarted Spark member's replays: delivered again by design
        leader_down = {(self.topic, p): self.broker_down.get(b, []) for p, b in self.leaders.items()}
        dups = dict(invariants.duplicates(journals), causes=invariants.duplicate_causes(journals, intervals))
        self._owners = intervals
        stalls = [self._stall(f.at, int(f.target), journals, log_ends) for f in self.faults
                  if f.kind == "coordinator_kill" and s.has_group()]
        first = _first_deliveries(journals)
        kill_stalls = [self._member_kill_stall(f, first, log_ends) for f in self.faults
                       if f.kind == "member_kill" and self._kind_of(f.target) != "share"]
        share = self._share_checks(ends, self.producer.acked) if s.has_share() else {}
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

    # ---------------------------------------------------------------- share group
    def _share_leaders_hit(self, f: Fault) -> dict[int, list[float]]:
        """Brokers whose share partitions a fault may have redelivered from -> when it may have lost what
        their members held (a crash; none for a pause, which only delays lock expiry)."""
        if f.kind in BROKER_KINDS:
            return {int(f.target): [] if f.kind == "coordinator_expiry" else [f.at]}
        return {}

    def _share_checks(self, ends: Mapping[tuple[str, int], int], acked: set[tuple[int, int]]) -> dict:
        """The share group's checks (``invariants.share_*``) over the share members' journals and the
        faults of the run; figures and violations."""
        s = self.s
        journals = self._share_journals()
        lock_s, slack, margin = s.share_lock_ms / 1000, s.share_slack_s, s.share_margin_s
        offsets = _log_offsets(self.cluster.bootstrap, self.topic)     # (partition, seq) -> offset
        acked_in_log: dict = {}
        for key in acked:
            if key in offsets:
                acked_in_log.setdefault((self.topic, key[0]), []).append(offsets[key])
        acked_set = {(tp, o) for tp, offs in acked_in_log.items() for o in offs}
        others = {tp: [o for o in range(end) if (tp, o) not in acked_set] for tp, end in ends.items()}
        lost = (invariants.share_at_least_once(journals, {tp: sorted(v) for tp, v in acked_in_log.items()},
                                               "records acknowledged to the producer")
                + invariants.share_at_least_once(journals, {tp: v for tp, v in others.items() if v},
                                                 "records in the log not acknowledged to the producer"))
        deliveries = invariants.share_deliveries(journals, slack)
        share_names = [n for n in self.members if self._kind_of(n) == "share"]
        released: dict[str, list[float]] = {n: [e["ts"] for e in journals.get(n, ()) if e["ev"] == "closed"]
                                            for n in share_names}
        for n in share_names:
            if n in self.deaths:
                released[n].append(self.deaths[n])
        holder_faults: dict[str, list[tuple[float, float]]] = {}
        leader_faults: dict[tuple[str, int], list[tuple[float, float]]] = {}
        leader_lost: dict[tuple[str, int], list[float]] = {}
        reassigned: list[tuple[float, float]] = []
        session_s = s.member_session_ms / 1000
        for f in self.faults:
            until = f.until or f.at
            hit = self._share_leaders_hit(f)
            if hit:
                for p, b in self.leaders.items():
                    if b in hit:
                        leader_faults.setdefault((self.topic, p), []).append((f.at, until))
                        leader_lost.setdefault((self.topic, p), []).extend(hit[b])
                if f.kind in ("coordinator_kill", "coordinator_expiry"):
                    reassigned.append((f.at, until + 15.0))   # the members join the next coordinator
            elif self._kind_of(f.target) == "share":
                holder_faults.setdefault(f.target, []).append((f.at, until))
                reassigned.append((f.at, (f.at + session_s + 5.0) if f.kind == "member_kill" else until + 5.0))
        for n in share_names:
            for e in journals.get(n, ()):
                if e["ev"] == "start":
                    reassigned.append((e["ts"], e["ts"] + 10.0))
                elif e["ev"] == "closed":
                    reassigned.append((e["ts"] - 1.0, e["ts"] + 3.0))
        redeliveries = invariants.share_redeliveries(
            journals, lock_s, margin, holder_faults=holder_faults, leader_faults=leader_faults,
            reassigned=reassigned, slack=slack, deliveries=deliveries)
        overlaps = invariants.share_lock_overlaps(journals, lock_s, released=released, leader_lost=leader_lost,
                                                  reassigned=reassigned, slack=slack, deliveries=deliveries)
        again = invariants.share_confirmed_again(journals, slack, deliveries=deliveries)
        acks = [e for events in journals.values() for e in events if e["ev"] == "ack"]
        codes: dict[str, int] = {}
        for e in acks:
            if e.get("code") not in (0, None):
                key = str(e["code"])
                codes[key] = codes.get(key, 0) + len(e["offs"])
        n_records = len(deliveries)
        figures = {
            "group": self.share_group, "members": self.kinds.count("share"), "lock_s": lock_s,
            "expected": sum(ends.values()), "acked_expected": len(acked_set), "records": n_records,
            "deliveries": sum(len(v) for v in deliveries.values()),
            "redeliveries": redeliveries["redeliveries"], "redelivered_records": redeliveries["records"],
            "redelivered_pct": 100.0 * redeliveries["redeliveries"] / max(1, n_records),
            "by_holder": redeliveries["holder"], "by_leader": redeliveries["leader"],
            "by_reassignment": redeliveries["reassigned"], "unexplained": redeliveries["unexplained"],
            "max_count": max((d.count for v in deliveries.values() for d in v), default=0),
            # acquired before, by a member that died before journaling them (or by a fetch lost in a crash)
            "first_count_above_1": sum(1 for v in deliveries.values() if v[0].count > 1),
            "accepted": sum(len(e["offs"]) for e in acks),
            "confirmed": sum(len(e["offs"]) for e in acks if e.get("code") == 0),
            "ack_errors": sum(codes.values()), "ack_error_codes": dict(sorted(codes.items())),
            "ack_unknown": sum(len(e["offs"]) for e in acks if e.get("code") is None),
        }
        return {"figures": figures, "lost": lost, "lock_overlaps": overlaps, "confirmed_again": again,
                "unexplained": redeliveries["violations"]}

    def _waiting_members(self, journals: Mapping[str, list[dict]] | None = None) -> dict[str, list[tuple[float, float]]]:
        """Member -> windows in which it could not deliver: paused by a fault; for a Kafka
        member, while the coordinator was down or paused and until librdkafka reconnects (its
        synchronous commit after a batch waits for a coordinator; its reconnect backoff grows
        to 10 s); and for a Spark member, from its start until its first batch (a cold query's
        JVM, Python workers and first reads: 10 to 27 s on a loaded 2-core machine). A Spark
        member that never delivers is not excused."""
        out = {m: list(w) for m, w in self.member_paused.items()}
        stalls = [(f.at, (f.until or f.at) + 15.0) for f in self.faults
                  if f.kind in ("coordinator_kill", "coordinator_expiry")]
        for name, m in self.members.items():
            if getattr(m, "kind", "thin") != "thin":
                out.setdefault(name, []).extend(stalls)
            if getattr(m, "kind", "thin") == "spark":
                events = (journals or {}).get(name, ())
                started = min((e["ts"] for e in events if e["ev"] == "start"), default=None)
                first = min((e["ts"] for e in events if e["ev"] == "recs"), default=None)
                if started is not None and first is not None:
                    out.setdefault(name, []).append((started, first))
        return out

    def _overlaps(self, journals: Mapping[str, list[dict]], intervals) -> tuple[list[str], list[str]]:
        """Moments with two owners of a partition: those that count, and those counted as well when the
        deliveries of fenced zombies (``invariants.fenced_windows``) are not set aside."""
        unleased = [n for n in self.members if self._kind_of(n) != "thin"]
        zombie = self._zombie_windows(journals)
        fenced = invariants.fenced_windows(journals, [n for n in unleased if self._kind_of(n) in KAFKA_KINDS])
        kept = _without_replays(journals)
        return (invariants.one_owner_at_a_time(intervals, unleased=unleased, journals=kept, zombie=zombie,
                                               fenced=fenced),
                invariants.one_owner_at_a_time(intervals, unleased=unleased, journals=kept, zombie=zombie))

    def _zombie_windows(self, journals: Mapping[str, list[dict]]) -> dict[str, list[tuple[float, float]]]:
        """Kafka member -> windows from a pause (SIGSTOP) longer than its session timeout until it
        journaled the loss after SIGCONT (at most ``ZOMBIE_GRACE_S`` later): what it delivers then
        was fetched before the pause, and Kafka's guarantee ends at its session timeout."""
        session_s = (self.s.kafka_session_ms or self.s.member_session_ms) / 1000
        out: dict[str, list[tuple[float, float]]] = {}
        for f in self.faults:
            if f.kind != "member_stop" or f.until is None or self._kind_of(f.target) == "thin" \
                    or f.until - f.at <= session_s:
                continue
            learnt = [e["ts"] for e in journals.get(f.target, ()) if e["ev"] in ("lost", "revoke", "closed")
                      and f.until <= e["ts"] <= f.until + ZOMBIE_GRACE_S]
            out.setdefault(f.target, []).append((f.at, min(learnt, default=f.until + ZOMBIE_GRACE_S)))
        return out

    def _without_paused_batches(self, journals: Mapping[str, list[dict]]) -> dict[str, list[dict]]:
        """The journals without the ``recs`` lines of the batch a Spark member had in flight when it
        was paused (SIGSTOP) for longer than its session: the first batch it delivered after SIGCONT.
        Planned while its lease held, it is read and written once the process runs again, whatever
        the lease says by then -- what a paused Kafka consumer does with what it had fetched."""
        session_s = self.s.member_session_ms / 1000
        paused: dict[str, set] = {}
        for f in self.faults:
            if f.kind != "member_stop" or f.until is None or self._kind_of(f.target) != "spark" \
                    or f.until - f.at <= session_s:
                continue
            after = [e for e in journals.get(f.target, ()) if e["ev"] == "recs" and e["ts"] >= f.until]
            if after and after[0].get("batch") is not None:
                paused.setdefault(f.target, set()).add(after[0]["batch"])
        return {name: [e for e in events if not (e["ev"] == "recs" and e.get("batch") in paused.get(name, ()))]
                for name, events in journals.items()}

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

    # ---------------------------------------------------------------- member figures
    def _kind_of(self, name: str) -> str:
        m = self.members.get(name)
        return getattr(m, "kind", "thin") if m is not None else "?"

    def _member_figures(self, journals) -> list[dict]:
        """Per member incarnation; a share member's ``extra`` counts its deliveries of records delivered
        to the share group before, and its ``commit_failed`` its acknowledgements answered with an error."""
        share = self._share_journals()
        dups = {**invariants.duplicates_by_member(journals), **invariants.duplicates_by_member(share)}
        out = []
        for name in sorted(self.members, key=lambda n: (n.split(".")[0], len(n), n)):
            events = journals.get(name) or share.get(name, [])
            out.append(dict(name=name, kind=self._kind_of(name), **dups.get(name, {}),
                            commit_failed=sum(1 for e in events if e["ev"] == "commit_failed"
                                              or (e["ev"] == "ack" and e.get("code") not in (0, None))),
                            faults=[{"kind": f.kind, "at": f.at - self.t0} for f in self.faults if f.target == name]))
        return out

    # ------------------------------------------------------ member SIGKILL stalls
    def _kill_window_s(self) -> float:
        """After a member SIGKILL: its session timeout (its partitions wait that long) plus a rebalance."""
        return self.s.member_session_ms / 1000 + 15.0

    def _member_kill_stall(self, fault: Fault, first, log_ends) -> dict:
        """The longest wait of a record (from the log end sample that first showed it to its first
        delivery) on partitions owned at the SIGKILL by other members that no fault touched, over
        the victim's session timeout and the rebalance after it."""
        at, window = fault.at, self._kill_window_s()
        parts = []
        for p, leader in self.leaders.items():
            tp = (self.topic, p)
            owners = {m for a, b, m in self._owners.get(tp, ()) if a <= at < b}
            if not owners or fault.target in owners:
                continue
            if any(a < at + window and b > at - 1 for a, b in self.broker_down.get(leader, ())):
                continue
            if self._faulted_member(tp, at, at + window):
                continue
            parts.append(p)
        others = [f for f in self.faults if f is not fault
                  and f.at - 8 < at + window and (f.until or f.at) + 8 > at]
        return {"victim": fault.target, "kind": self._kind_of(fault.target), "at": at - self.t0,
                "window_s": window, "partitions": len(parts),
                "stall": self._max_latency(parts, at, at + window, first, log_ends),
                "clean": not others}

    def _max_latency(self, parts, a: float, b: float, first, log_ends, horizon: float = 120.0) -> float:
        worst = 0.0
        for p in parts:
            for ts, end in log_ends.get((self.topic, p), ()):
                if not a <= ts <= b or end <= 0:
                    continue
                got = first.get((self.topic, p, end - 1))
                worst = max(worst, horizon if got is None else min(horizon, max(0.0, got - ts)))
        return worst

    def _latency_baseline(self, first, log_ends, length: float = 10.0, n: int = 10) -> list[float]:
        """The longest wait of a record over windows of ``length`` seconds away from faults: 8 s
        from a broker fault, and from a member fault until its session timeout and a rebalance
        have passed (what it causes comes then); with fewer than 3 such windows, 8 s from any."""
        samples = [ts for v in log_ends.values() for ts, _ in v]
        if not samples:
            return []
        lo, hi = max(min(samples), self.t0) + self.s.warmup_s * 0.7, max(samples) - 30 - length

        def quiet(busy):
            return [t for t in (lo + i for i in range(int(max(0, hi - lo))))
                    if not any(a <= t + length and b >= t for a, b in busy)]

        after = self._kill_window_s()
        picked = quiet([(f.at - 8, (f.until or f.at) + (after if f.kind.startswith("member") else 8))
                        for f in self.faults])
        if len(picked) < 3:
            picked = quiet([(f.at - 8, (f.until or f.at) + 8) for f in self.faults])
        picked = picked[:: max(1, len(picked) // n)][:n]
        return [self._max_latency(sorted(self.leaders), t, t + length, first, log_ends) for t in picked]

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


def _without_replays(journals: Mapping[str, list[dict]]) -> dict[str, list[dict]]:
    """The journals without the ``recs`` lines of batches a restarted Spark member replayed (planned
    by its killed predecessor: delivered again at least once, whoever owns the partitions now)."""
    return {name: [e for e in events if not (e["ev"] == "recs" and e.get("replay"))]
            for name, events in journals.items()}


def _log_offsets(bootstrap: str, topic: str) -> dict[tuple[int, int], int]:
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


def _first_deliveries(journals) -> dict[tuple[str, int, int], float]:
    """(topic, partition, offset) -> when some member first delivered it."""
    first: dict[tuple[str, int, int], float] = {}
    for events in journals.values():
        for e in events:
            if e["ev"] != "recs":
                continue
            for o in e["offs"]:
                key = (e["t"], e["p"], o)
                if key not in first or e["ts"] < first[key]:
                    first[key] = e["ts"]
    return first


def commit_failure_runs(journals, min_s: float) -> list[dict]:
    """Runs of a member's consecutive ``commit_failed`` lines (no ``commit`` between) spanning
    ``min_s`` seconds or more: member, start, end (epoch s), count, codes, and the distinct
    messages of the thin member's ``commit_error`` lines among them."""
    out = []
    for member, events in journals.items():
        run: list[dict] = []
        msgs: dict[str, int] = {}

        def flush() -> None:
            if run and run[-1]["ts"] - run[0]["ts"] >= min_s:
                out.append({"member": member, "start": run[0]["ts"], "end": run[-1]["ts"], "count": len(run),
                            "codes": sorted({e.get("code") for e in run}, key=str), "messages": dict(msgs)})
            run.clear()
            msgs.clear()

        for e in events:
            if e["ev"] == "commit_failed":
                run.append(e)
                if e.get("msg"):
                    msgs[e["msg"]] = msgs.get(e["msg"], 0) + 1
            elif e["ev"] == "commit_error" and run is not None:
                msgs[e["msg"]] = msgs.get(e["msg"], 0) + 1
            elif e["ev"] in ("commit", "start", "closed"):
                flush()
        flush()
    return sorted(out, key=lambda r: r["start"])


class JournalTail:
    """Reads the lines appended to a journal since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self._pos = 0
        self._rest = b""

    def new_events(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self._pos += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class CommitWatcher(threading.Thread):
    """Watches the members' journals; while a member's commits have kept failing for
    ``diagnose_after_s`` and another member committed meanwhile (a coordinator answers
    others: not an outage), asks it for every thread's stack (SIGUSR1) and dumps the
    coordinator broker's threads with py-spy when it is installed -- every 5 s, at most 4
    times per run of failures."""

    def __init__(self, run: "ChaosRun", every_s: float = 5.0, per_run: int = 4):
        super().__init__(name="commit-watcher", daemon=True)
        self.run_ = run
        self.every = every_s
        self.per_run = per_run
        self._stop_event = threading.Event()
        self._tails: dict[str, JournalTail] = {}
        self._state: dict[str, dict] = {}
        self.dir = run.workdir / "diagnostics"
        self.py_spy = shutil.which("py-spy") or next(
            (str(p) for p in [Path(sys.executable).parent / "py-spy"] if p.exists()), None)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(30)

    def run(self) -> None:
        while not self._stop_event.wait(1.0):
            try:
                self._scan()
            except Exception:
                log.exception("commit watcher failed")

    def _scan(self) -> None:
        r = self.run_
        members = list(r.members.items())   # the fault loop adds incarnations meanwhile: one view per scan
        for name, m in members:
            tail = self._tails.setdefault(name, JournalTail(m.journal_path))
            st = self._state.setdefault(name, {"since": None, "failed": 0.0, "dumps": 0, "last": 0.0,
                                               "started": False, "committed": 0.0})
            for e in tail.new_events():
                if e["ev"] == "start":
                    st["started"] = True
                elif e["ev"] == "commit_failed":
                    if st["since"] is None:
                        st["since"], st["dumps"] = e["ts"], 0
                    st["failed"] = e["ts"]
                elif e["ev"] == "commit":
                    st["since"] = None
                    st["committed"] = e["ts"]
        now = time.time()
        for name, m in members:
            st = self._state[name]
            # commits still failing (the last one lately), for long enough, while another member commits
            if st["since"] is None or not st["started"] or not m.alive() or now - st["failed"] > 2.0 \
                    or st["failed"] - st["since"] < r.s.diagnose_after_s:
                continue
            if not any(o["committed"] > st["since"] + 1.0 for n, o in self._state.items() if n != name):
                continue
            if any(a <= now <= (b or now) for a, b in [(f.at, f.until) for f in r.faults if f.target == name]):
                continue  # paused by a fault: it is not answering anything, and that is expected
            if st["dumps"] >= self.per_run or now - st["last"] < self.every:
                continue
            st["dumps"] += 1
            st["last"] = now
            self._dump(name, m, now, now - st["since"])

    def _dump(self, name: str, m, now: float, failing_s: float) -> None:
        r = self.run_
        log.warning("%s: commits failing for %.1f s; dumping its threads (SIGUSR1 -> %s)", name, failing_s,
                    m.log_path.name)
        m.signal(signal.SIGUSR1)
        r.diagnostics.append({"target": name, "at": now, "where": str(m.log_path.name)})
        coordinator = r._coordinator()
        if self.py_spy is None or coordinator is None:
            return
        proc = r.cluster.procs.get(coordinator)
        if proc is None or proc.poll() is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        out = self.dir / f"broker-{coordinator}-{now - r.t0:.0f}s-for-{name}.txt"
        try:
            res = subprocess.run([self.py_spy, "dump", "--pid", str(proc.pid)], capture_output=True, timeout=30)
            out.write_bytes(res.stdout + res.stderr)
            r.diagnostics.append({"target": f"broker {coordinator}", "at": now, "where": out.name})
        except (OSError, subprocess.TimeoutExpired) as e:
            log.info("py-spy dump of broker %d failed: %s", coordinator, e)


def write_report(report: ChaosReport, path: str | Path) -> None:
    """The report as JSON (violations listed in full)."""
    doc = asdict(report)
    doc["duplicate_pct"] = report.duplicate_pct
    Path(path).write_text(json.dumps(doc, indent=2, default=str))
