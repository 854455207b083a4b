"""Consumer-group lag, read from the coordinator's state at scrape time, and its recent history.

Threads.  The coordinator's state belongs to the broker's event loop thread; the metrics
endpoint answers on threads of its own.  A scrape therefore asks the loop for a *snapshot*
(``on_loop``: one call posted to the loop, plain tuples and dict copies back, a few
milliseconds for thousands of members) and does everything slow -- asking other brokers
for their log ends, computing lag, formatting -- on its own thread.  The loop never waits
for the endpoint, and the endpoint never reads a structure the loop is changing.

What is read (``snapshot_coordinator``, the one function that knows the coordinator's
fields): every group's state, generation, members (with the protocol each came through,
``coordinator.metrics.member_protocol``) and the partitions each holds now, and the
committed offsets.  The snapshot is taken before the log ends are read, so a partition's
log end is never older than its committed offset and lag never comes out negative
(it is clamped at 0 anyway, for a log that was truncated under its group).

Log ends (``LogEnds``): partitions this process leads come from its own logs; the others
from their leaders with ListOffsets (one request per leader, connections kept), on the
brokers' inter-broker listener with the broker's own credentials for it, whatever it speaks
(``inter_broker_security``: what its transaction markers use) -- a standalone coordinator:
the data cluster's brokers as its Metadata names them, with its client security settings for
the data cluster.  A leader that cannot be reached leaves its partitions' lag out of that
scrape, as kafka_exporter does, with a warning at most once a minute.

Share groups (KIP-932): the snapshot carries their membership (``snapshot_share_groups``);
where each stands on its partitions is not in the coordinator's memory but in ZooKeeper, so
the sampler reads each group's share-partition znodes (``share_states``, blocking, on its own
thread) and computes the lag of each partition as DescribeShareGroupOffsets does: log end -
start offset - records already acknowledged or archived.

``LagTracker`` takes a sample every ``metrics.lag.sample.ms`` from a thread of its own and
keeps each group's total lag over the last ``metrics.lag.history.ms`` for the status page;
scrapes format the latest sample (so what they show is at most one sampling interval old,
and they never wait for the loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from spark_coord.coordinator.core.metrics import member_protocol

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: How long a scrape waits for the event loop to hand over a snapshot.
SNAPSHOT_TIMEOUT_S = 5.0
#: Timeout of one ListOffsets round trip to another broker.
LOG_END_TIMEOUT_S = 3.0


class Unavailable(RuntimeError):
    """No snapshot could be taken (the loop is gone or did not answer in time)."""


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any], timeout: float = SNAPSHOT_TIMEOUT_S) -> Any:
    """``fn()`` run on ``loop``'s thread, its result handed back to this thread (directly when
    called on that thread).  ``Unavailable`` when the loop is closed or too busy to answer."""
    try:
        if asyncio.get_running_loop() is loop:
            return fn()
    except RuntimeError:
        pass  # no loop runs in this thread: the usual case
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn())
        except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread, which raises it
            fut.set_exception(e)

    try:
        loop.call_soon_threadsafe(run)
    except RuntimeError as e:  # closed
        raise Unavailable(f"the event loop is gone ({e})") from None
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise Unavailable(f"the event loop did not answer within {timeout:.0f} s") from None


# ---------------------------------------------------------------------- snapshots (loop thread)
class MemberView(NamedTuple):  # tuples: thousands are made on the loop thread per snapshot
    consumer_id: str
    protocol: str
    peer: str
    connected: bool
    partitions: tuple[TopicPartition, ...]


class ShareMemberView(NamedTuple):
    member_id: str
    client_id: str
    host: str
    partitions: tuple[TopicPartition, ...]


class ShareGroupView(NamedTuple):
    """A share group (KIP-932) as its coordinator holds it: membership only (where the group stands
    on each partition is in ZooKeeper, read by the sampler: ``share_states``)."""

    group_id: str
    state: str
    epoch: int
    members: tuple[ShareMemberView, ...]


class GroupView(NamedTuple):
    group_id: str
    state: str
    generation: int
    members: tuple[MemberView, ...]
    #: Committed offsets (next offset to consume) per partition.
    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class ClusterSnapshot:
    """What a scrape needs from the loop thread, copied out of live structures."""

    taken: float = field(default_factory=time.time)
    #: When it was taken, on the monotonic clock (how old its data is).
    taken_monotonic: float = field(default_factory=time.monotonic)
    #: This process's coordinator is the elected, active one: it exports its groups.
    coordinating: bool = False
    epoch: int = -1
    groups: tuple[GroupView, ...] = ()
    #: Partition count per topic, as the coordinator (or else the cluster view) knows them.
    topics: Mapping[str, int] = field(default_factory=dict)
    #: Leader broker of each partition, and the (host, port) to ask each broker for log ends.
    leaders: Mapping[TopicPartition, int] = field(default_factory=dict)
    endpoints: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    #: This broker exports the cluster-wide topic and broker counts (the controller: lowest live id).
    controller: bool = False
    live_brokers: int = 0
    #: The share groups this process coordinates.
    share_groups: tuple[ShareGroupView, ...] = ()


def snapshot_coordinator(coordinator: Any) -> tuple[bool, int, tuple[GroupView, ...], dict[str, int]]:
    """(active, epoch, groups, topics) of a ``Coordinator`` -- on its loop thread.  The only
    function that reads the coordinator's fields; members' partitions are what each holds
    now (its assignment), offsets the committed ones."""
    if coordinator is None or not coordinator.active:
        return False, -1, (), {}
    groups = []
    for group in coordinator.groups.values():
        members = tuple(
            MemberView(m.consumer_id, member_protocol(m.channel, m.consumer_id, m.kind), m.peer, m.channel is not None,
                       tuple(tp for tps in m.assignment.values() for tp in tps) if m.assignment else ())
            for m in group.members.values())
        groups.append(GroupView(group.group_id, group.state.value, group.generation_id, members,
                                dict(group.offsets)))
    epoch = coordinator.epoch if coordinator.epoch is not None else -1
    return True, epoch, tuple(groups), dict(coordinator.topics)


def snapshot_share_groups(coordination: Any) -> tuple[ShareGroupView, ...]:
    """The share groups of every active shard of a process (``Coordinator.share_groups``) -- on its loop thread."""
    out = []
    for coordinator in (coordination.coordinators_active() if coordination is not None else []):
        for group in getattr(coordinator, "share_groups", {}).values():
            members = tuple(ShareMemberView(m.member_id, m.client_id, m.client_host,
                                            tuple((t, p) for t, ps in sorted(m.assignment.items()) for p in ps))
                            for m in sorted(group.members.values(), key=lambda m: m.member_id))
            out.append(ShareGroupView(group.group_id, group.state, group.epoch, members))
    return tuple(sorted(out))


def snapshot_coordination(coordination: Any) -> tuple[bool, int, tuple[GroupView, ...], dict[str, int]]:
    """(active, epoch, groups, topics) over every coordinator shard a process serves (epoch: the
    newest of its shards')."""
    active, epoch, groups, topics = False, -1, [], {}
    for coordinator in (coordination.coordinators_active() if coordination is not None else []):
        a, e, g, t = snapshot_coordinator(coordinator)
        if a:
            active, epoch = True, max(epoch, e)
            groups.extend(g)
            topics.update(t)
    return active, epoch, tuple(groups), topics


def broker_snapshot(broker: Any) -> ClusterSnapshot:
    """A broker's snapshot (its ``ClusterView`` and, when it coordinates, its groups)."""
    coordination = broker.coordination
    active, epoch, groups, topics = snapshot_coordination(coordination)
    view = broker.view
    listener = broker.security.listener_config.inter_broker
    endpoints = {}
    for b in view.brokers.values():
        ep = b.endpoint_for(listener)
        if ep is not None:
            endpoints[b.id] = (ep.host, ep.port)
    leaders = {(t, p): replicas[0] for t, assignment in view.topics.items()
               for p, replicas in assignment.items() if replicas} if groups else {}
    if not topics:
        topics = {t: len(a) for t, a in view.topics.items()}
    shares = snapshot_share_groups(coordination)
    if shares and not leaders:
        leaders = {(t, p): replicas[0] for t, assignment in view.topics.items()
                   for p, replicas in assignment.items() if replicas}
    return ClusterSnapshot(coordinating=active, epoch=epoch, groups=groups, topics=topics, leaders=leaders,
                           endpoints=endpoints,
                           controller=bool(view.brokers) and view.controller_id == broker.broker_id,
                           live_brokers=len(view.brokers), share_groups=shares)


def standalone_snapshot(process: Any) -> ClusterSnapshot:
    """A standalone coordinator's snapshot: its groups, and the data cluster as its Metadata names it."""
    coordination = process.coordination
    active, epoch, groups, topics = snapshot_coordination(coordination)
    view = process.view
    if view is None:
        return ClusterSnapshot(coordinating=active, epoch=epoch, groups=groups, topics=topics)
    endpoints = {b.id: (b.host, b.port) for b in view.brokers.values()}
    shares = snapshot_share_groups(coordination)
    leaders = {(t, p): replicas[0] for t, assignment in view.topics.items()
               for p, replicas in assignment.items() if replicas} if groups or shares else {}
    return ClusterSnapshot(coordinating=active, epoch=epoch, groups=groups, topics=topics, leaders=leaders,
                           endpoints=endpoints, share_groups=shares)


# ---------------------------------------------------------------------- log ends (endpoint threads)
class LogEnds:
    """Log end offsets: ``local(tp)`` for partitions this process holds, ListOffsets for the rest.

    ``local_id``: this broker's id (None: a standalone coordinator, everything is remote).
    ``security``: the client security of the connections to the others (a broker's own on its
    inter-broker listener, ``inter_broker_security``; a standalone coordinator's for its data
    cluster; None: PLAINTEXT).  ``local_only``: why other brokers are not asked at all (a broker
    without credentials for its SASL inter-broker listener), None when they are.
    Used by one thread at a time."""

    def __init__(self, local: Callable[[TopicPartition], int | None] | None = None, local_id: int | None = None,
                 local_only: str | None = None, client_id: str = "spark-coord-metrics",
                 timeout: float = LOG_END_TIMEOUT_S, security: Any = None):
        self.local = local
        self.security = security
        self.local_id = local_id
        self.local_only = local_only
        self.client_id = client_id
        self.timeout = timeout
        self._conns: dict[int, tuple[tuple[str, int], Any]] = {}
        self._warned: dict[Any, float] = {}

    def read(self, partitions: Iterable[TopicPartition], leaders: Mapping[TopicPartition, int],
             endpoints: Mapping[int, tuple[str, int]]) -> dict[TopicPartition, int]:
        from spark_coord.errors import KafkaError
        from spark_coord.wire.types import ProtocolError

        ends: dict[TopicPartition, int] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            leader = leaders.get(tp)
            if self.local is not None and (leader is None or leader == self.local_id):
                end = self.local(tp)
                if end is not None:
                    ends[tp] = end
                    continue
            if leader is not None and leader != self.local_id:
                by_leader.setdefault(leader, []).append(tp)
        if by_leader and self.local_only is not None:
            self._warn("remote", f"log ends of partitions other brokers lead are not read ({self.local_only}): "
                                 "their lag is left out")
            return ends
        for leader, tps in by_leader.items():
            address = endpoints.get(leader)
            if address is None:
                self._warn(leader, f"broker {leader} has no endpoint to ask for log ends")
                continue
            try:
                ends.update(self._list_offsets(leader, address, tps))
            except (KafkaError, OSError, ProtocolError) as e:  # a broker down or unreachable: its partitions left out
                self._drop(leader)
                self._warn(leader, f"reading log ends from broker {leader} at {address[0]}:{address[1]} failed: {e}")
        return ends

    def _list_offsets(self, leader: int, address: tuple[str, int], tps: list[TopicPartition]) -> dict:
        from spark_coord.common import LATEST
        from spark_coord.wire.registry import ApiKey

        conn = self._connection(leader, address)
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                       "timestamp": LATEST, "max_num_offsets": 1} for p in ps]}
                           for t, ps in by_topic.items()]}
        resp = conn.request(ApiKey.LIST_OFFSETS, body, timeout=self.timeout)
        old_style = conn.version_for(ApiKey.LIST_OFFSETS) == 0
        out = {}
        for t in resp.get("topics") or []:
            for p in t.get("partitions") or []:
                if p.get("error_code"):
                    continue
                offset = (p.get("old_style_offsets") or [-1])[0] if old_style else p.get("offset", -1)
                if offset >= 0:
                    out[(t["name"], p["partition_index"])] = offset
        return out

    def _connection(self, leader: int, address: tuple[str, int]) -> Any:
        from spark_coord.client.connection import BrokerConnection

        known = self._conns.get(leader)
        if known is not None and known[0] == address and not known[1].closed:
            return known[1]
        self._drop(leader)
        conn = BrokerConnection(address[0], address[1], client_id=self.client_id, timeout=self.timeout,
                                security=self.security)
        self._conns[leader] = (address, conn)
        return conn

    def _drop(self, leader: int) -> None:
        known = self._conns.pop(leader, None)
        if known is not None:
            try:
                known[1].close()
            except OSError:  # closing is best effort
                pass

    def _warn(self, key: Any, message: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(key, -1e9) >= 60:
            self._warned[key] = now
            log.warning("metrics: %s", message)

    def close(self) -> None:
        for leader in list(self._conns):
            self._drop(leader)


def inter_broker_security(broker: Any) -> tuple[Any, str | None]:
    """(security, None): the ``ClientSecurity`` a broker asks the others for their log ends with, on its
    inter-broker listener as Kafka's brokers reach each other (``security.client.inter_broker``, what
    its transaction markers use: the listener's protocol, over SASL the credentials of
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, over TLS its trust store and key
    store); (None, why) when a SASL listener has no credentials for the broker, which then reads
    only its own partitions' log ends (the markers fail alike: a setting missing is no reason to
    refuse the broker's start)."""
    from spark_coord.config import ConfigError
    from spark_coord.security.client import inter_broker

    listeners = broker.security.listener_config
    try:
        return inter_broker(broker.config, listeners.listener(listeners.inter_broker)), None
    except ConfigError as e:
        return None, f"no credentials for the inter-broker listener: {e}"


# ---------------------------------------------------------------------- lag
class PartitionLag(NamedTuple):
    topic: str
    partition: int
    owner: str | None
    committed: int | None
    log_end: int | None
    #: Records between the committed offset and the log end (None when either is unknown).
    lag: int | None


def partition_lag(topic: str, partition: int, owner: str | None, committed: int | None,
                  log_end: int | None) -> PartitionLag:
    lag = None if committed is None or log_end is None else max(0, log_end - committed)
    return PartitionLag(topic, partition, owner, committed, log_end, lag)


@dataclass(frozen=True)
class GroupLag:
    view: GroupView
    partitions: tuple[PartitionLag, ...]
    #: Topics with at least one committed offset (kafka_exporter exports only those).
    consumed_topics: frozenset[str]

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None)


class SharePartitionLag(NamedTuple):
    topic: str
    partition: int
    #: The share-partition start offset (None: no state yet).
    start: int | None
    log_end: int | None
    #: Records from the start offset to the log end not acknowledged or archived (None: unknown).
    lag: int | None


@dataclass(frozen=True)
class ShareGroupLag:
    view: ShareGroupView
    partitions: tuple[SharePartitionLag, ...]

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None)


#: ``share_states(group) -> {(topic, partition): state}`` (``coordinator.share_admin.ShareState``),
#: blocking: read from ZooKeeper on the sampler's thread.
ShareStates = Callable[[str], Mapping[TopicPartition, Any]]


@dataclass(frozen=True)
class LagSample:
    snapshot: ClusterSnapshot
    groups: tuple[GroupLag, ...]
    #: Wall time the sample took (snapshot + log ends + lag), seconds.
    took: float = 0.0
    share_groups: tuple[ShareGroupLag, ...] = ()


def partitions_of(group: GroupView, topics: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions a group's lag covers: every partition of each topic it has committed an
    offset for (kafka_exporter's rule), and every partition a member holds."""
    consumed = {t for t, _ in group.offsets}
    wanted = {(t, p) for t in consumed for p in range(topics.get(t, 0))}
    wanted.update(group.offsets)
    for m in group.members:
        wanted.update(m.partitions)
    return sorted(wanted)


def compute_lag(snapshot: ClusterSnapshot, log_ends: Mapping[TopicPartition, int]) -> tuple[GroupLag, ...]:
    out = []
    for g in snapshot.groups:
        owners = {tp: m.consumer_id for m in g.members for tp in m.partitions}
        rows = tuple(partition_lag(t, p, owners.get((t, p)), g.offsets.get((t, p)), log_ends.get((t, p)))
                     for t, p in partitions_of(g, snapshot.topics))
        out.append(GroupLag(g, rows, frozenset(t for t, _ in g.offsets)))
    return tuple(sorted(out, key=lambda gl: gl.view.group_id))


def read_share_states(snapshot: ClusterSnapshot, share_states: ShareStates | None) -> dict[str, Mapping]:
    """Each share group's stored states (a group whose state cannot be read is left out, once logged)."""
    from kazoo.exceptions import KazooException

    out: dict[str, Mapping] = {}
    if share_states is None:
        return out
    for g in snapshot.share_groups:
        try:
            out[g.group_id] = share_states(g.group_id)
        except (KazooException, OSError) as e:  # ZooKeeper unreachable: this sample shows the group without lag
            log.debug("metrics: share state of %s not read: %s", g.group_id, e)
    return out


def compute_share_lag(snapshot: ClusterSnapshot, states: Mapping[str, Mapping],
                      log_ends: Mapping[TopicPartition, int]) -> tuple[ShareGroupLag, ...]:
    """Per share group, every partition it has state for or a member is assigned."""
    out = []
    for g in snapshot.share_groups:
        stored = states.get(g.group_id, {})
        wanted = set(stored) | {tp for m in g.members for tp in m.partitions}
        rows = []
        for t, p in sorted(wanted):
            state, end = stored.get((t, p)), log_ends.get((t, p))
            rows.append(SharePartitionLag(t, p, state.start if state is not None else None, end,
                                          state.lag(end) if state is not None and end is not None else None))
        out.append(ShareGroupLag(g, tuple(rows)))
    return tuple(out)


def sample_lag(snapshot: ClusterSnapshot, log_ends: LogEnds, share_states: ShareStates | None = None) -> LagSample:
    started = time.monotonic()
    wanted: set[TopicPartition] = set()
    for g in snapshot.groups:
        wanted.update(partitions_of(g, snapshot.topics))
    states = read_share_states(snapshot, share_states)
    for g in snapshot.share_groups:
        wanted.update(states.get(g.group_id, {}))
        wanted.update(tp for m in g.members for tp in m.partitions)
    ends = log_ends.read(sorted(wanted), snapshot.leaders, snapshot.endpoints) if wanted else {}
    groups = compute_lag(snapshot, ends)
    return LagSample(snapshot, groups, time.monotonic() - started, compute_share_lag(snapshot, states, ends))


class LagTracker:
    """The latest ``LagSample`` and each group's total lag over time.

    A thread of its own takes a sample every ``sample_ms`` (the only regular caller of the
    event loop) and keeps ``history_ms`` of totals per group.  ``current()`` hands out the
    latest sample without waiting for anything while it is at most two sampling intervals
    old (scrapes and the status page: they never wait for the loop, and any number of them
    cost the loop nothing), and takes a sample itself only when there is none that recent
    (before the first, or while the sampler is stuck)."""

    def __init__(self, snapshot: Callable[[], ClusterSnapshot], log_ends: LogEnds, history_ms: int = 900_000,
                 sample_ms: int = 5_000, share_states: ShareStates | None = None):
        self._snapshot = snapshot
        self.log_ends = log_ends
        self.share_states = share_states
        self.history_ms = history_ms
        self.sample_ms = sample_ms
        self._lock = threading.Lock()  # one sampling at a time
        self._latest: LagSample | None = None
        self._history: dict[str, deque[tuple[float, int]]] = {}
        self._history_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def max_age(self) -> float:
        return 2 * self.sample_ms / 1000

    def current(self, max_age: float | None = None) -> LagSample:
        """A sample whose data is at most ``max_age`` seconds old (default: two sampling intervals)."""
        limit = self.max_age if max_age is None else max_age
        latest = self._latest  # one reference read: no lock needed
        if latest is not None and time.monotonic() - latest.snapshot.taken_monotonic <= limit:
            return latest
        with self._lock:
            latest = self._latest
            if latest is not None and time.monotonic() - latest.snapshot.taken_monotonic <= limit:
                return latest  # taken by another thread meanwhile
            return self._take()

    def _take(self) -> LagSample:
        sample = sample_lag(self._snapshot(), self.log_ends, self.share_states)
        self._latest = sample
        self.record(sample)
        return sample

    def sample_now(self) -> LagSample | None:
        """Take a sample now (the sampler's round); None when the loop did not hand one over."""
        try:
            with self._lock:
                return self._take()
        except Unavailable as e:
            log.debug("metrics: no lag sample: %s", e)
            return None

    def history(self) -> dict[str, list[tuple[float, int]]]:
        """group -> [(unix time, total lag)], oldest first."""
        with self._history_lock:
            return {g: list(points) for g, points in self._history.items()}

    def record(self, sample: LagSample) -> None:
        """Add a sample's totals to the history (groups not coordinated here get no point)."""
        now = sample.snapshot.taken
        horizon = now - self.history_ms / 1000
        with self._history_lock:
            for gl in sample.groups:
                points = self._history.setdefault(gl.view.group_id, deque())
                if not points or points[-1][0] < now:  # a sample recorded once
                    points.append((now, gl.total))
            for sl in sample.share_groups:  # a group id is of one type at a time: the keys do not clash
                points = self._history.setdefault(sl.view.group_id, deque())
                if not points or points[-1][0] < now:
                    points.append((now, sl.total))
            for group in list(self._history):
                points = self._history[group]
                while points and points[0][0] < horizon:
                    points.popleft()
                if not points:
                    del self._history[group]

    def _run(self) -> None:
        interval = self.sample_ms / 1000
        due = time.monotonic()
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.sample_now()
            except Exception:  # a bug must not end the sampling
                log.exception("metrics: lag sampling failed")
            due = max(due + interval, time.monotonic() + interval / 10)  # a slow round does not pile up

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-lag-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self.log_ends.close()
