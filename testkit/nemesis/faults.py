"""The nemesis run: ``NemesisSettings``, the fault kinds (listed in ``testkit.nemesis``) and
``NemesisRun``, which draws them (``plan``), injects and heals each, and gives each kind what
happened in its windows: the stall of the partitions it did not touch, the anomalies, the
records delivered again (``attribute_to_faults``).
"""

from __future__ import annotations

import bisect
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from testkit import invariants, jepsen_checks
from testkit.analysis import first_deliveries
from testkit.chaos import BROKER_KINDS, ChaosReport, ChaosRun, ChaosSettings, Fault, log_offsets
from testkit.nemesis import zk as nemesis_zk
from testkit.nemesis.cluster import (
    LogTail,
    clock_unavailable_reason,
    faketime_lib,
    net_cluster,
    process_start,
    real_time,
    spawn_env,
)
from testkit.nemesis.netns import HostNamespace, Net
from testkit.nemesis.report import NemesisReport

log = logging.getLogger(__name__)

#: The transactional workload's topic.
TXN_TOPIC = "txn"

NET_KINDS = ("isolate_broker", "coordinator_zk_cut", "member_coordinator_cut", "broker_clients_cut", "bridge",
             "flap", "isolate_member", "zk_split")
CLOCK_KINDS = ("clock_member_offset", "clock_member_fast", "clock_coordinator_offset", "clock_coordinator_fast")
PROCESS_KINDS = ("member_kill", "member_stop", "coordinator_kill", "broker_kill", "coordinator_expiry")
#: A broker joins for good, a broker leaves for good (``testkit.nemesis.zk``).
MEMBERSHIP_KINDS = ("broker_add", "broker_remove")
#: A broker's client links made slow, narrow or stuck by its proxy (``testkit.linkproxy``; ``proxied`` runs).
PROXY_KINDS = ("slow_broker", "throttle_broker", "stall_broker", "stuck_links")
#: The share nemesis (issue 46), each on a broker leading partitions of the topic (a share partition's
#: leader) but the last: ZooKeeper cut from it for longer than a record lock; its wall clock stepped
#: forward (a restart under ``FAKETIME="+<n>s"``) and back (a restart on the real clock); SIGKILL while
#: the producer and the share members write to it; SIGKILL, the tail of one of its partitions' last
#: segment cut off, restart; a share member SIGSTOPped for longer than its lock, then SIGCONT.
SHARE_KINDS = ("share_leader_zk_cut", "share_leader_clock_step", "share_leader_kill", "truncated_restart",
               "share_member_stop")
SHARE_SERVER_KINDS = SHARE_KINDS[:4]
#: A transactional writer (``txn_writers``) SIGKILLed, maybe inside a transaction, restarted after a delay:
#: its next ``init_transactions`` fences the dead one's epoch (and aborts its open transaction).
TXN_KINDS = ("txn_writer_kill",)
ALL_KINDS = NET_KINDS + CLOCK_KINDS + PROCESS_KINDS + MEMBERSHIP_KINDS + PROXY_KINDS + SHARE_KINDS + TXN_KINDS
#: Fault kinds that take a broker (at most one at a time, as in ``ChaosRun``).
SERVER_KINDS = ("isolate_broker", "coordinator_zk_cut", "broker_clients_cut", "bridge", "flap",
                "clock_coordinator_offset", "clock_coordinator_fast", "zk_split") + BROKER_KINDS + MEMBERSHIP_KINDS \
    + PROXY_KINDS + SHARE_SERVER_KINDS
#: Faults that leave the brokers among their nodes unreachable to clients (the reachable lag leaves them out).
LEADER_AWAY_KINDS = ("isolate_broker", "broker_clients_cut", "stall_broker")
#: Faults after which a share member may find what it held released (``_share_leaders_hit``).
SHARE_LEADER_KINDS = LEADER_AWAY_KINDS + ("slow_broker", "throttle_broker", "stuck_links", "clock_coordinator_offset",
                                          "clock_coordinator_fast")
#: How fast the clock of a ``clock_*_fast`` fault runs.
FAST_CLOCK_RATE = 2
MEMBER_NET_KINDS = ("member_coordinator_cut", "isolate_member", "clock_member_offset", "clock_member_fast")


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
    #: Share members release / reject each record with this chance instead of accepting it
    #: (``testkit.share_member --release/--reject``).
    share_release: float = 0.0
    share_reject: float = 0.0
    #: The brokers' ``group.share.delivery.count.limit`` (0: their default).
    share_count_limit: int = 0
    #: ``share_member_stop``: the pause beyond the record lock (seconds, drawn uniformly).
    share_stop_past_lock_s: tuple[float, float] = (1.0, 4.0)
    #: ``truncated_restart``: bytes cut off the tail of the partition's last segment (drawn uniformly).
    truncate_bytes: tuple[int, int] = (1, 4096)
    #: How long to wait at the end for the share group's state to settle (every record accepted or archived).
    share_settle_s: float = 120.0
    #: The transactional workload (``testkit.txn_member``, checked by ``testkit.txn_checks``): writers, each
    #: in a namespace ``w<i>`` of its own with its own transactional id, running transactions over 2-4 of
    #: ``txn_partitions`` partitions of topic ``txn`` (aborting with the chance ``txn_abort``);
    #: ``txn_readers`` read_committed readers (``r<i>``) and, with any writer, one read_uncommitted
    #: (``u0``), each a thin consumer of a group of its own.  0 writers: none of it.
    txn_writers: int = 0
    txn_readers: int = 2
    txn_partitions: int = 6
    txn_abort: float = 0.2
    #: The writers' transaction.timeout.ms: how long a transaction a dead writer left open holds the LSO.
    txn_timeout_ms: int = 15000


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
        #: Per ``truncated_restart``: partition, when, the log end before and after, bytes cut, the boundary.
        self.truncations: list[dict] = []
        #: Share state read from ZooKeeper during the run: partition -> [(ts, start, znode version)].
        self.share_starts: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
        #: partition -> znode versions of its share state when its log was truncated (stale until reloaded).
        self.share_stale: dict[tuple[str, int], set[int]] = {}
        self._share_sampler: threading.Thread | None = None
        self._share_sampling = threading.Event()
        self.drain_members: list[Any] = []
        #: The transactional workload's processes: writer slot -> running incarnation; every reader;
        #: every writer incarnation (name -> process).
        self.txn_writers: dict[int, Any] = {}
        self.txn_readers: list[Any] = []
        self.txn_incarnations: dict[str, Any] = {}

    # ------------------------------------------------------------------ network and processes
    def run(self) -> NemesisReport:  # type: ignore[override]
        self.net = Net(self.prefix)
        self.prefix = self.net.prefix
        try:
            for name in self.zk_nodes + ["client"] + [f"b{i}" for i in range(self.next_broker_id)] + \
                        [f"m{i}" for i in range(len(self.kinds))] + self._txn_nodes():
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
        self.cluster = net_cluster(self.net, self.s.brokers + self.s.spare_brokers, self.workdir / "cluster",
                                    self.zk_connect, self._broker_overrides(), proxied=self.s.proxied)
        self.cluster.start()
        self.zk = connect(self.zk_connect, session_timeout_ms=20000, connection_timeout_ms=10000)
        self.tail = LogTail(self.cluster.bootstrap, self.topic)
        self.tail.start()

    def _create_topic(self) -> None:
        """The run's topic on the original brokers only (explicit assignment): the spare brokers, and
        those ``broker_add`` starts, lead none of its partitions, so ``broker_remove`` may take them for
        good (one replica per partition: a removed leader's partitions would be gone for ever).  So is
        the transactional workload's topic ``txn``."""
        nemesis_zk.create_topic(self.cluster.bootstrap, self.topic,
                                nemesis_zk.topic_assignment(self.s.partitions, list(range(self.s.brokers))))
        if self.s.txn_writers:
            nemesis_zk.create_topic(self.cluster.bootstrap, TXN_TOPIC,
                                    nemesis_zk.topic_assignment(self.s.txn_partitions, list(range(self.s.brokers))))

    def _broker_overrides(self) -> dict[str, object]:
        overrides = ChaosRun._broker_overrides(self)
        if self.s.has_share() and self.s.share_count_limit:
            overrides["group.share.delivery.count.limit"] = self.s.share_count_limit
        return overrides

    def _make_member(self, slot: int):
        """``ChaosRun._member``; a share member with the run's release and reject chances."""
        if self.kinds[slot] != "share" or not (self.s.share_release or self.s.share_reject):
            return ChaosRun._member(self, slot)
        from testkit.share_member import ShareMemberProcess

        base = f"m{slot}"
        n = sum(1 for name in self.members if name == base or name.startswith(base + "."))
        name = base if n == 0 else f"{base}.{n}"
        m = ShareMemberProcess(name, self.workdir / "members", self.cluster.bootstrap, self.share_group,
                               topics=[self.topic], consumer_id=name, max_poll_records=self.s.share_max_poll_records,
                               hold_s=self.s.share_hold_s, release=self.s.share_release, reject=self.s.share_reject,
                               seed=self.s.seed)
        m.kind = "share"  # type: ignore[attr-defined]
        self.members[name] = m
        self.current[slot] = m
        return m

    def _member(self, slot: int):
        clock = self._next_clock.pop(slot, None)
        with spawn_env(clock[0] if clock else None):
            m = self.net.call(f"m{slot}", self._make_member, slot)
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

    def _share_journals(self) -> dict[str, list[dict]]:
        """The share members' journals, times mapped back to real time as ``_journals``, and the lines of
        records a ``truncated_restart`` cut off (on its partition, at or past the log end it left, written
        before the restart) moved to a topic of their own, ``<topic>~<n>``: the offsets were written
        again with other records, which are other records to the checks.  Read again only when a
        journal grew (the checks and the wait for the share group read them many times)."""
        key = (len(self.truncations), tuple(sorted(self.clocks)),
               tuple((name, _size(m.journal_path)) for name, m in sorted(self.members.items())
                     if self._kind_of(name) == "share"))
        cached = getattr(self, "_share_cache", None)
        if cached is not None and cached[0] == key:
            return dict(cached[1])
        out = ChaosRun._share_journals(self)
        for name, (start, offset, rate) in self.clocks.items():
            if name in out:
                out[name] = [dict(e, **{k: real_time(e[k], start, offset, rate) for k in ("ts", "sent")
                                        if isinstance(e.get(k), (int, float))}) for e in out[name]]
        for k, tr in enumerate(self.truncations):
            moved = f"{self.topic}~{k}"
            for name, events in out.items():
                out[name] = [x for e in events for x in _split_truncated(e, self.topic, tr["partition"],
                                                                         tr["new_end"], tr["restarted"], moved)]
        self._share_cache = (key, out)
        return dict(out)

    # ------------------------------------------------------------------ the share nemesis (SHARE_KINDS)
    def _share_leader(self) -> int | None:
        """A running broker leading partitions of the topic (a share partition's leader)."""
        procs = self.cluster.procs
        leaders = sorted({b for b in self.leaders.values() if b in procs and procs[b].poll() is None})
        return self.rng.choice(leaders) if leaders else None

    def _share_fault(self, kind: str) -> Fault | None:
        s, rng = self.s, self.rng
        lock_s = s.share_lock_ms / 1000
        if kind == "share_member_stop":
            slots = [i for i, m in sorted(self.current.items()) if self.kinds[i] == "share" and m.alive()]
            if not slots:
                self.note_skipped("share_member_stop: no running share member")
                return None
            m = self.current[rng.choice(slots)]
            pause = lock_s + rng.uniform(*s.share_stop_past_lock_s)
            m.signal(signal.SIGSTOP)
            fault = Fault(time.time(), kind, m.name)
            self.details[id(fault)] = f"SIGSTOP {pause:.1f} s (lock {lock_s:.1f} s)"
            self._touch(fault, {self._node_of_member(m.name)})
            self._later(pause, self._resume_member, m, fault)
            return fault
        if self._broker_busy.is_set():
            return None
        victim = self._share_leader()
        if victim is None:
            return None
        self._broker_busy.set()
        try:
            return self._share_server_fault(kind, victim, lock_s)
        except Exception:
            self._broker_busy.clear()
            raise

    def _share_server_fault(self, kind: str, victim: int, lock_s: float) -> Fault:
        s, rng, cluster = self.s, self.rng, self.cluster
        node = f"b{victim}"
        fault = Fault(time.time(), kind, str(victim))
        if kind == "share_leader_zk_cut":
            hold = rng.uniform(lock_s + 2.0, max(lock_s + 4.0, s.cut_s[1]))
            self.details[id(fault)] = f"{hold:.1f} s (lock {lock_s:.1f} s)"
            self._cut_zk(node)
            self._touch(fault, {node})
            self._later(hold, self._end, fault, lambda: self._heal_zk(node), True)
        elif kind == "share_leader_clock_step":
            clock = self._clock("clock_coordinator_offset")
            hold = rng.uniform(*s.clock_s)
            self.details[id(fault)] = f"FAKETIME={clock} for {hold:.1f} s, then the real clock"
            self._allow(victim, False)
            cluster.kill_broker(victim, signal.SIGKILL)
            cluster.clocks[victim] = clock
            try:
                cluster.start_broker(victim)
            finally:
                cluster.clocks.pop(victim, None)
            self._allow(victim, True)
            self._touch(fault, {node})

            def back() -> None:
                self._allow(victim, False)
                cluster.kill_broker(victim, signal.SIGKILL)
                cluster.start_broker(victim)
                self._allow(victim, True)
            self._later(hold, self._end, fault, back, True, [victim])
        elif kind == "share_leader_kill":
            delay = rng.uniform(*s.restart_delay_s)
            self.details[id(fault)] = f"restarted after {delay:.1f} s"
            self._allow(victim, False)
            cluster.kill_broker(victim, signal.SIGKILL)
            fault.at = time.time()
            self._touch(fault, {node})
            self._later(delay, self._restart_broker, victim, fault, fault.at)
        else:  # truncated_restart
            parts = sorted(p for p, b in self.leaders.items() if b == victim)
            part = rng.choice(parts)
            cut = rng.randint(*s.truncate_bytes)
            self._allow(victim, False)
            cluster.kill_broker(victim, signal.SIGKILL)
            fault.at = time.time()
            self._touch(fault, {node})
            stale = self._share_znode_version(part)
            if stale is not None:
                self.share_stale.setdefault((self.topic, part), set()).add(stale)
            segment, before, after = _truncate_tail(cluster.data_dir / f"broker-{victim}" / f"{self.topic}-{part}",
                                                    cut)
            self.details[id(fault)] = f"{self.topic}-{part}: {segment} cut from {before} to {after} bytes"
            delay = rng.uniform(*s.restart_delay_s)

            def restart() -> None:
                try:
                    cluster.start_broker(victim)
                except Exception:
                    log.exception("restarting broker %d on a truncated log failed", victim)
                restarted = time.time()
                seq_next = self.producer._seq[part]   # the producer sends nothing to the partition while it is down
                new_end, boundary = self._partition_tail(part)
                self.tail.truncated(part, new_end)
                self.truncations.append(dict(partition=part, broker=victim, at=fault.at, restarted=restarted,
                                             new_end=new_end, boundary_seq=boundary, seq_next=seq_next,
                                             segment=segment, bytes_before=before, bytes_after=after))
                self.details[id(fault)] += f"; the log ends at {new_end} after the restart"
                fault.until = time.time()
                self.broker_down.setdefault(victim, []).append((fault.at, fault.until))
                self._allow(victim, True)
                self._broker_busy.clear()
            self._later(delay, restart)
        return fault

    def _share_znode_version(self, partition: int) -> int | None:
        from spark_coord.zk import paths

        try:
            _, stat = self.zk.get(paths.share_partition(self.share_group, self.topic, partition))
            return stat.version
        except Exception:  # noqa: BLE001 -- no state yet
            return None

    def _partition_tail(self, partition: int) -> tuple[int, int]:
        """(log end, the producer's sequence number of the record just below it; -1: none) of a partition."""
        from spark_coord.client.admin import LATEST, AdminClient
        from spark_coord.client.fetcher import fetch
        from spark_coord.client.metadata import ClusterClient
        from spark_coord.records.reader import iter_records

        deadline = time.monotonic() + 30
        while True:
            try:
                with ClusterClient(self.cluster.bootstrap, timeout=5.0) as cc:
                    end = AdminClient(cc).list_offsets(self.topic, [partition], LATEST)[partition]
                    if end == 0:
                        return 0, -1
                    pos = max(0, end - 50)
                    last = -1
                    for pd in fetch(cc.connection(cc.leader(self.topic, partition)), {(self.topic, partition): pos},
                                    max_wait_ms=100):
                        for rec in iter_records(pd.records or b"", min_offset=pos):
                            if rec.offset < end:
                                last = int((rec.value or b"-1:-1").split(b":")[1])
                    return end, last
            except Exception:  # noqa: BLE001 -- the broker is still starting
                if time.monotonic() > deadline:
                    log.exception("reading the tail of %s-%d failed", self.topic, partition)
                    return -1, -1
                time.sleep(0.5)

    def _sample_share_state(self) -> None:
        """Read every partition's share state from ZooKeeper every 0.5 s: its start offset and znode version."""
        import json as _json

        from spark_coord.zk import paths

        while not self._share_sampling.wait(0.5):
            for part in range(self.s.partitions):
                try:
                    data, stat = self.zk.get(paths.share_partition(self.share_group, self.topic, part))
                    start = int(_json.loads(data)["start"])
                except Exception:  # noqa: BLE001 -- no state yet, or ZooKeeper busy: the next round
                    continue
                samples = self.share_starts.setdefault((self.topic, part), [])
                if not samples or samples[-1][1:] != (start, stat.version):
                    samples.append((time.time(), start, stat.version))

    def _share_state(self) -> dict[tuple[str, int], dict | None]:
        import json as _json

        from spark_coord.zk import paths

        out: dict[tuple[str, int], dict | None] = {}
        for part in range(self.s.partitions):
            try:
                data, _ = self.zk.get(paths.share_partition(self.share_group, self.topic, part))
                out[(self.topic, part)] = _json.loads(data)
            except Exception:  # noqa: BLE001 -- no state
                out[(self.topic, part)] = None
        return out

    def _drain_share_group(self) -> None:
        """After the run's members closed: share members that accept everything, in the members'
        namespaces, until the share group's stored state has every record below the log end accepted
        or archived (``s.share_settle_s`` at most), then closed."""
        from testkit.share_member import ShareMemberProcess

        ends = self._log_ends()
        n = max(1, self.kinds.count("share"))
        slots = [i for i, k in enumerate(self.kinds) if k == "share"][:n]
        for i, slot in enumerate(slots):
            name = f"drain{i}"
            m = self.net.call(f"m{slot}", lambda name=name: ShareMemberProcess(
                name, self.workdir / "members", self.cluster.bootstrap, self.share_group, topics=[self.topic],
                consumer_id=name))
            m.kind = "share"  # type: ignore[attr-defined]
            self.drain_members.append(m)
        deadline = time.monotonic() + self.s.share_settle_s
        while time.monotonic() < deadline:
            state = self._share_state()
            if not invariants.share_final_state(state, ends):
                break
            time.sleep(1.0)
        for m in self.drain_members:
            m.stop(60)

    def _share_nemesis_checks(self) -> dict:
        """The share nemesis's checks (issue 46) over every share journal (the drain members' too) and
        the group's state at the end; figures and violations."""
        s = self.s
        ends = self._log_ends()
        self._drain_share_group()
        final = self._share_state()
        self._share_sampling.set()
        if self._share_sampler is not None:
            self._share_sampler.join(5)
        journals = self._share_journals()
        for m in self.drain_members:
            journals[m.name] = m.events()
        deliveries = invariants.share_deliveries(journals, s.share_slack_s)
        limit = s.share_count_limit or 5
        expected = {tp: range(end) for tp, end in ends.items()}
        checks = {
            "accepted_again": invariants.share_confirmed_again(journals, s.share_slack_s, deliveries=deliveries),
            "rejected_again": invariants.share_rejected_again(journals, s.share_slack_s, deliveries=deliveries),
            "beyond_count_limit": invariants.share_count_limit(journals, limit, deliveries=deliveries),
            "unsettled_by_journals": invariants.share_settled(journals, expected, limit, deliveries=deliveries),
            "unsettled_by_state": invariants.share_final_state(final, ends),
            "start_past_log_end": invariants.share_start_within_log(
                self.share_starts, self.sampler.samples, self.share_stale,
                cuts={(self.topic, tr["partition"]): [tr["at"]] for tr in self.truncations}),
        }
        evs = [e for events in journals.values() for e in events]

        def n(ev: str, code=...) -> int:
            return sum(len(e["offs"]) for e in evs if e["ev"] == ev and (code is ... or e.get("code") == code))
        counts = [d.count for v in deliveries.values() for d in v]
        figures = {
            "records": sum(ends.values()), "records_delivered": len(deliveries), "deliveries": len(counts),
            "redeliveries": len(counts) - len(deliveries), "count_limit": limit,
            "records_at_limit": sum(1 for v in deliveries.values() if max(d.count for d in v) >= limit),
            "max_count": max(counts, default=0),
            "accepted": n("ack"), "accepted_confirmed": n("ack", 0), "rejected": n("reject"),
            "rejected_confirmed": n("reject", 0), "released": n("release"), "released_confirmed": n("release", 0),
            "drain_deliveries": sum(1 for v in deliveries.values() for d in v if d.member.startswith("drain")),
            "start_samples": sum(len(v) for v in self.share_starts.values()),
            "final_start_at_log_end": sum(1 for tp, end in ends.items()
                                          if final.get(tp) and int(final[tp]["start"]) == end),
            "partitions": len(ends), "truncations": self.truncations,
            "truncated_records": len(self.truncated_records),
            "violations": {k: len(v) for k, v in checks.items()},
        }
        return {"figures": figures, "violations": [f"{k}: {v}" for k, vs in checks.items() for v in vs]}

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
        if kind in TXN_KINDS:
            if not self.txn_writers:
                self.note_skipped(f"{kind}: the run has no transactional writers")
                return None
            return self._txn_writer_kill()
        if kind in SHARE_KINDS:
            if not self.s.has_share():
                self.note_skipped(f"{kind}: the run has no share members")
                return None
            if kind == "share_leader_clock_step" and not self.clock_ok:
                self.note_skipped(f"{kind}: {clock_unavailable_reason()}")
                return None
            return self._share_fault(kind)
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
        clients = ["client"] + self._member_nodes() + self._txn_nodes()
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

    # ------------------------------------------------------------------ the transactional workload
    def _txn_nodes(self) -> list[str]:
        s = self.s
        if not s.txn_writers:
            return []
        return [f"w{i}" for i in range(s.txn_writers)] + [f"r{i}" for i in range(s.txn_readers)] + ["u0"]

    def _txn_writer(self, slot: int):
        from testkit.txn_member import TxnProcess

        base = f"w{slot}"
        n = sum(1 for name in self.txn_incarnations if name.split(".")[0] == base)
        name = base if n == 0 else f"{base}.{n}"
        proc = self.net.call(base, TxnProcess, "writer", name, self.workdir / "members", self.cluster.bootstrap,
                             TXN_TOPIC, partitions=self.s.txn_partitions, transactional_id=f"txn-{base}",
                             abort=self.s.txn_abort, seed=self.s.seed, transaction_timeout_ms=self.s.txn_timeout_ms)
        self.txn_incarnations[name] = proc
        self.txn_writers[slot] = proc
        return proc

    def _start_txn(self) -> None:
        """The writers and readers of the transactional workload, each in its namespace."""
        from testkit.txn_member import TxnProcess

        s = self.s
        if not s.txn_writers:
            return
        for i in range(s.txn_writers):
            self._txn_writer(i)
        for node, level in [(f"r{i}", "read_committed") for i in range(s.txn_readers)] + [("u0", "read_uncommitted")]:
            self.txn_readers.append(self.net.call(
                node, TxnProcess, "reader", node, self.workdir / "members", self.cluster.bootstrap, TXN_TOPIC,
                group=f"txn-reader-{node}", isolation=level, session_timeout_ms=s.member_session_ms))
        log.info("transactional workload: %d writers, %d readers on %s", s.txn_writers, len(self.txn_readers),
                 TXN_TOPIC)

    def _txn_writer_kill(self) -> Fault | None:
        slot = self.rng.choice(sorted(self.txn_writers))
        proc = self.txn_writers[slot]
        if not proc.alive():
            return None
        fault = Fault(time.time(), "txn_writer_kill", proc.name)
        proc.kill()
        self._touch(fault, {f"w{slot}"})

        def restart() -> None:
            if self.txn_writers.get(slot) is proc:
                self._txn_writer(slot)
        self._later(self.rng.uniform(*self.s.restart_delay_s), self._end, fault, restart, False)
        return fault

    def _txn_checks(self):
        """Stop the writers (each ends its transaction), wait until no transaction is open on the topic
        (a SIGKILLed writer's last one is aborted by its successor's fencing or its timeout), read the
        log at both isolation levels, let the readers catch up with it, stop them, and check."""
        from testkit import txn_checks
        from testkit.txn_member import read_log, stable

        s = self.s
        stoppers = [threading.Thread(target=w.stop, args=(60,)) for w in self.txn_writers.values() if w.alive()]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(90)
        deadline = time.monotonic() + s.txn_timeout_ms / 1000 + 60
        while time.monotonic() < deadline:
            try:
                if stable(self.cluster.bootstrap, TXN_TOPIC):
                    break
            except Exception as e:  # noqa: BLE001 -- a leader still coming back
                log.info("txn: last stable offsets not read yet: %s", e)
            time.sleep(0.5)
        else:
            log.warning("txn: transactions still open on %s after the writers stopped", TXN_TOPIC)
        committed = read_log(self.cluster.bootstrap, TXN_TOPIC, "read_committed")
        uncommitted = read_log(self.cluster.bootstrap, TXN_TOPIC, "read_uncommitted")
        want = {"read_committed": {v for recs in committed.values() for _, v in recs},
                "read_uncommitted": {v for recs in uncommitted.values() for _, v in recs}}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(
                want[r.isolation] - {v for e in r.events("recs") for v in e["vals"]} for r in self.txn_readers):
            time.sleep(0.5)
        for r in self.txn_readers:
            r.stop(60)
        txns = txn_checks.transactions({name: p.events() for name, p in self.txn_incarnations.items()})
        readers = {r.name: (r.isolation, txn_checks.reads({r.name: r.events()})) for r in self.txn_readers}
        result = txn_checks.check(txns, committed, uncommitted, readers)
        # a reader that never caught up with the log is a liveness violation of read_committed
        for r in self.txn_readers:
            behind = want[r.isolation] - {v for e in r.events("recs") for v in e["vals"]}
            if behind:
                result.unread.append(f"{r.name} ({r.isolation}) never read {len(behind)} values of the final log, "
                                     f"e.g. {sorted(behind)[:3]}")
        return result

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
        self._start_txn()
        if s.has_share():
            self._share_sampler = threading.Thread(target=self._sample_share_state, daemon=True,
                                                   name="share-state")
            self._share_sampler.start()
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
        for proc in list(self.txn_writers.values()) + self.txn_readers:
            if proc.alive():
                proc.kill()
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
        self.truncated_records = self._truncated_records()
        if self.truncated_records:   # acknowledged records a truncated_restart cut off: lost by the fault
            keep = [x for x in report.lost if not any(x == f"{self.topic}-{p}: acknowledged record {n} is not in the "
                                                           f"log" for p, n in self.truncated_records)]
            report.lost = keep
        share = self._share_nemesis_checks() if self.s.has_share() else {}
        txn = self._txn_checks() if self.txn_writers else None
        self._nemesis_report = self._nemesis(report)
        if txn is not None:
            self._nemesis_report.txn = txn.to_dict()
            self._nemesis_report.txn_violations = txn.violations
        self._nemesis_report.share = share.get("figures", {})
        self._nemesis_report.share_violations = share.get("violations", [])
        return report

    def _truncated_records(self) -> set[tuple[int, int]]:
        """Acknowledged records a ``truncated_restart`` cut off: of its partition, missing from the log at
        the end, above the record just below the log end it left and sent before its restart."""
        if not self.truncations:
            return set()
        present = set(log_offsets(self.cluster.bootstrap, self.topic))
        out = set()
        for tr in self.truncations:
            out |= {(p, n) for p, n in self.producer.acked - present
                    if p == tr["partition"] and tr["boundary_seq"] < n < tr["seq_next"]}
        return out

    # ------------------------------------------------------------------ checks
    def _nemesis(self, chaos: ChaosReport) -> NemesisReport:
        journals = self._journals()
        seen = self.tail.stop()
        offsets = log_offsets(self.cluster.bootstrap, self.topic)   # (partition, seq) -> offset
        log_recs: dict[tuple[str, int], dict[int, bytes]] = {}
        for (p, n), off in offsets.items():
            log_recs.setdefault((self.topic, p), {})[off] = f"{p}:{n}".encode()
        acked: dict[tuple[str, int], set[bytes]] = {}
        for p, n in self.producer.acked - getattr(self, "truncated_records", set()):
            acked.setdefault((self.topic, p), set()).add(f"{p}:{n}".encode())
        log_ends = self.sampler.samples
        result = jepsen_checks.check(acked, log_recs, journals, seen, log_ends, self._leader_away())
        if not self.s.has_group() and hasattr(result, "unseen"):
            result.unseen = []   # no consumer group member polls (share members are checked apart)
        first = first_deliveries(journals)
        by_kind: dict[str, dict] = {}
        anomalies = result.violations + chaos.violations
        hit = self.fault_nodes + [(f, set()) for f in self.faults if f.kind in PROCESS_KINDS]
        redelivered, redelivered_outside = attribute_to_faults(
            invariants.redelivery_times(journals), [(f.at, (f.until or f.at) + s_window(self.s)) for f, _ in hit])
        for (fault, nodes), again in zip(hit, redelivered, strict=True):
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
        if f.kind in ("share_leader_kill", "truncated_restart"):
            return {int(f.target): [f.at]}
        if f.kind == "share_leader_clock_step":
            return {int(f.target): [f.at, f.until or f.at]}
        if f.kind == "share_leader_zk_cut":   # a fault of the leader (redeliveries), its memory kept
            return {int(f.target): []}
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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _split_truncated(e: dict, topic: str, partition: int, new_end: int, restarted: float, moved: str) -> list[dict]:
    """A share journal line, its offsets of ``topic``-``partition`` at or past ``new_end`` moved to topic
    ``moved`` when it was written (sent, for an acknowledgement) before ``restarted``."""
    if e.get("t") != topic or e.get("p") != partition or "offs" not in e or e.get("sent", e["ts"]) >= restarted:
        return [e]
    offs = e["offs"]
    counts = e.get("counts")
    keep = [i for i, o in enumerate(offs) if o < new_end]
    gone = [i for i, o in enumerate(offs) if o >= new_end]
    if not gone:
        return [e]
    out = []
    for idx, t in ((keep, topic), (gone, moved)):
        if idx:
            x = dict(e, t=t, offs=[offs[i] for i in idx])
            if counts is not None:
                x["counts"] = [counts[i] for i in idx]
            out.append(x)
    return out


def _truncate_tail(directory: Path, cut: int) -> tuple[str, int, int]:
    """Cut ``cut`` bytes (at most all) off the end of the last non-empty segment file (``*.log``) of a
    partition's directory: (its name, size before, size after)."""
    segments = sorted((f for f in directory.glob("*.log") if f.stat().st_size > 0), key=lambda f: f.name)
    if not segments:
        return "(no segment)", 0, 0
    seg = segments[-1]
    before = seg.stat().st_size
    after = max(0, before - cut)
    with open(seg, "r+b") as fh:
        fh.truncate(after)
    return seg.name, before, after


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
    return list(zip(times, drawn, strict=True))


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
