"""Group membership for a streaming query: the coordinator decides what it plans.

``GroupPartitionSource`` registers one group member per Spark executor (the
``members`` option; one by default, as in local mode) with the coordinator, each
through its own ``ConsumerCoordinatorConnector`` thread.  Those threads live in
the driver-side Python process that hosts the stream reader for the whole query,
so they keep answering the coordinator's pings between Spark's calls.

The mapping (DESIGN.md section 8):

- **StartFetcher** hands a member its partitions and their start offsets (the
  group's committed offsets; -1 when the group has none, resolved here by the
  query's ``startingOffsets``: earliest -> smallest, otherwise largest).  Only
  partitions currently started are returned by ``assigned()``, so only they are
  planned; the reader applies a handed-out offset once and records it in the
  batch's offset JSON, so replays stay exact.
- **Spark confirms a batch** (``commit(end)``, or the start of the next
  ``latestOffset``, which Spark calls only after the previous batch was
  committed): its end offsets are committed actively -- a background thread sends
  CommitOffsets for what changed, answered once in ZooKeeper -- and reported in
  Ping answers as before.  ``flush()`` waits for that (the end of a
  Trigger.AvailableNow run does).
- **StopFetcher** (v1: just the partitions that move): the member stops offering
  those partitions at once, waits for the batch in flight on them to commit
  (bounded by half the session timeout), then answers with their committed
  offsets -- so the next owner starts exactly where this query stopped.  The
  query's other partitions are planned on as before: a batch in flight on them
  is not disturbed.  StartFetcher gives the complete assignment; only partitions
  new to the member start at the offsets it carries.
- **Coordinator lost** (connection gone or silent): the members keep planning
  their partitions while they find the next coordinator, until half their session
  timeout is left of the time a coordinator last confirmed them for (the lease: a
  session from its last request), so that a batch planned then has that half to be
  read and written before anyone else may be given the partitions; at the lease's end
  the partitions are withdrawn until a coordinator takes the member back or starts it
  again.  (Pings come every third of a session, so a confirmed member always has more
  than half of it left.)
- **stop()**: each member leaves with a final CommitOffsets of what Spark
  confirmed (``leave``), so the group's offsets equal what the query processed and
  the others take over at once.  The members close in parallel, so stopping is
  bounded by one session timeout.
- **Kafka 4's consumer group protocol** (``kafka.group.protocol``, ``spark.group_protocol``):
  the same members are driven by KIP-848 heartbeat threads (``Kip848Member``) instead of
  connectors, so the query is a member of a group on any Kafka 4 cluster.  A heartbeat
  answer's assignment is the StartFetcher above; partitions it revokes are the StopFetcher
  above: the heartbeat thread waits (bounded as above) for the batch in flight on them to
  commit, commits their offsets (OffsetCommit with the member epoch) and only then
  acknowledges, so the next owner starts where the query stopped.  An answered heartbeat
  renews the lease; the active commits are OffsetCommits with the member's epoch, and a
  member Kafka refuses for good (``Kip848Member.error``) fails the query.

Testing hook: when the environment variable ``SPARK_COORD_MEMBER_JOURNAL`` names a
file, the members append to it, as JSON lines in the journal format of
``testkit.member``, what the coordinator made them do -- ``assign``
(StartFetcher, the complete assignment), ``stop`` (once partitions were given up;
``parts`` when only some were), ``lost`` (the lease ran out: ``lease_end``),
``resume`` (taken back) -- and each active commit's outcome (``commit`` /
``commit_failed``), each line naming its ``member``.  The chaos harness's Spark
member (``testkit.spark_member``) sets it, so its checks see the
query's ownership; unset, nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid

from spark_coord.client.admin import EARLIEST, LATEST
from spark_coord.client.metadata import parse_bootstrap
from spark_coord.common import LARGEST, SMALLEST, TopicPartition
from spark_coord.consumer.connector import ConsumerCoordinatorConnector, Registration
from spark_coord.consumer.kip848 import Kip848Member, make_member_id
from spark_coord.spark.group_protocol import check_protocol_settings, kip848_member, resolve_group_protocol
from spark_coord.spark.options import GROUP_PROTOCOL_CONSUMER, SourceOptions

log = logging.getLogger(__name__)

#: The testing hook's environment variable (see the module docstring).
MEMBER_JOURNAL_ENV = "SPARK_COORD_MEMBER_JOURNAL"


class _MemberJournal:
    """The testing hook's JSON-lines file: one ``write`` per line on an ``O_APPEND`` descriptor, so
    the lines of the members' threads (and of other processes appending to it) never interleave."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, ev: str, **fields) -> None:
        line = json.dumps({"ts": time.time(), "ev": ev, **fields}, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())


class _QueryMember:
    """One registered member (one executor's share of the query's partitions)."""

    def __init__(self, source: "GroupPartitionSource", consumer_id: str):
        self.source = source
        self.consumer_id = consumer_id
        self.owned: dict[TopicPartition, int | None] = {}   # started partitions -> handed-out start offset
        self.generation = -1
        self.started = threading.Event()
        self.lease_until = 0.0      # plan the partitions only until then (time.monotonic())
        self.suspended = False      # the lease ran out: partitions dormant until taken back
        self.sent: dict[TopicPartition, int] = {}  # offsets committed actively so far
        #: Held while an active commit of this member is taken and sent.  A KIP-848 member's revocation takes it
        #: before it commits the revoked offsets, so an older active commit never lands after that commit (Kafka
        #: keeps the last commit, even one going backwards, and the next owner would start there)
        self.commit_lock = threading.Lock()
        self.kip848 = False

    def plannable(self) -> bool:
        """Its partitions may go into a new batch: not suspended, and more than the planning margin
        (half a session) left of its lease, for the batch to finish in (module docstring)."""
        return not self.suspended and time.monotonic() < self.lease_until - self.source.plan_margin

    def journal(self, ev: str, **fields) -> None:
        """The testing hook (module docstring): nothing unless it is on."""
        if self.source.journal is not None:
            self.source.journal.write(ev, member=self.consumer_id, **fields)

    # -- the connector's Member protocol (called on the connector thread) --------------------
    def report_offsets(self) -> list[dict]:
        with self.source.lock:
            committed = self.source.committed
            return [{"topic": t, "partition": p, "offset": committed[(t, p)]}
                    for (t, p) in sorted(self.owned) if (t, p) in committed]

    def stop_fetchers(self, partitions: set[TopicPartition] | None = None) -> list[dict] | None:
        """Stop offering ``partitions`` (None: all of them), wait for the batch in flight on them to
        commit (bounded), and give them up; a batch in flight on the others is not disturbed.
        Returns the committed offsets of what it gave up (None when it gave up everything:
        ``report_offsets`` answers then)."""
        src = self.source
        with src.lock:
            revoked = {tp: o for tp, o in self.owned.items() if partitions is None or tp in partitions}
            src.stopping.update(revoked)
        deadline = time.monotonic() + src.stop_timeout
        with src.changed:  # wait for the batch in flight on these partitions to commit
            while any(src.in_flight(tp) for tp in revoked):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("%s: batch on %s still uncommitted after %.1fs; answering StopFetcher with "
                                "the last committed offsets (the next owner re-reads the rest)", self.consumer_id,
                                sorted(tp for tp in revoked if src.in_flight(tp)), src.stop_timeout)
                    break
                src.changed.wait(left)
        with self.commit_lock if self.kip848 else contextlib.nullcontext(), src.lock:
            offsets = [{"topic": t, "partition": p, "offset": src.committed[(t, p)]}
                       for (t, p) in sorted(revoked) if (t, p) in src.committed]
            for tp in revoked:
                self.owned.pop(tp, None)
                self.sent.pop(tp, None)
            src.stopping.difference_update(revoked)
            if partitions is None:
                self.started.clear()
                self.journal("stop", gen=self.generation)
            else:
                self.journal("stop", gen=self.generation, parts=[[t, p] for t, p in sorted(revoked)])
        if partitions is not None:
            log.info("%s: gave up %d partition(s): %s", self.consumer_id, len(revoked),
                     ", ".join(f"{t}-{p}" for t, p in sorted(revoked)))
            return offsets
        return None

    def start_fetchers(self, generation_id: int, assignment: dict, threads: dict, brokers: dict) -> None:
        """The complete assignment: partitions already planned go on as they are (their handed-out
        offset was applied already), new ones start at the offsets given."""
        with self.source.lock:
            kept = {tp: off for tp, off in self.owned.items() if tp in assignment}
        resolved = self.source.resolve_resets({tp: off for tp, off in assignment.items() if tp not in kept})
        with self.source.lock:
            self.owned = {**kept, **resolved}
            self.generation = generation_id
            self.suspended = False
            self.sent = {tp: o for tp, o in self.sent.items() if tp in kept}
            for tp, off in resolved.items():
                if off is None:
                    continue
                # a batch planned or confirmed before this ownership (one Spark replayed on restart, or ours
                # from an earlier ownership) ends below where the group is now: not an offset to report
                for known in (self.source.committed, self.source.planned):
                    if known.get(tp, -1) < off:
                        known.pop(tp, None)
            self.journal("assign", gen=generation_id,
                         parts=[[t, p, -1 if o is None else o] for (t, p), o in sorted(self.owned.items())])
        self.started.set()
        log.info("%s: epoch %d, %d partition(s)%s", self.consumer_id, generation_id, len(self.owned),
                 f"; new: {', '.join(f'{t}-{p}@{o}' for (t, p), o in sorted(resolved.items()))}" if resolved else "")

    def connection_lost(self) -> None:
        with self.source.lock:
            if self.owned and not self.suspended:
                log.info("%s: no coordinator confirms our %d partition(s); planning none of them until one does",
                         self.consumer_id, len(self.owned))
            self.suspended = True
            self.journal("lost", gen=self.generation, lease_end=time.time() + self.lease_until - time.monotonic())

    def resume_fetchers(self) -> None:
        with self.source.lock:
            self.suspended = False
            self.journal("resume", gen=self.generation, parts=[[t, p, -1] for t, p in sorted(self.owned)])
        log.info("%s: taken back into generation %d; planning its partitions again", self.consumer_id,
                 self.generation)

    def renew_lease(self, until: float) -> None:
        with self.source.lock:
            self.lease_until = until


class GroupPartitionSource:
    """A ``PartitionSource`` whose partitions come from the coordinator (see the module docstring)."""

    def __init__(self, opts: SourceOptions) -> None:
        if opts.group_id is None:
            raise ValueError("group.id is required for group membership")
        self.opts = opts
        self.resolver = None  # its own (connector threads use it while the reader uses the reader's)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.committed: dict[TopicPartition, int] = {}
        self.planned: dict[TopicPartition, int] = {}
        self.stopping: set[TopicPartition] = set()
        self.stop_timeout = opts.session_timeout_ms / 2000
        self.plan_margin = opts.session_timeout_ms / 2000   # of the lease, left for a batch planned last
        token = uuid.uuid4().hex[:8]
        host = socket.gethostname()
        n = opts.members or 1
        self.members = [_QueryMember(self, f"coordkafka-{host}-{os.getpid()}-{token}-executor-{i}") for i in range(n)]
        self.connectors: list[ConsumerCoordinatorConnector | Kip848Member] = []
        self.protocol: str | None = None   # the members' kafka.group.protocol, resolved at start()
        self._commit_wanted = threading.Condition(self.lock)
        self._committer: threading.Thread | None = None
        self._stopping = False
        path = os.environ.get(MEMBER_JOURNAL_ENV)
        self.journal = _MemberJournal(path) if path else None

    # -- PartitionSource ---------------------------------------------------------------------
    def start(self) -> None:
        from spark_coord.spark.offsets import OffsetResolver

        self.resolver = OffsetResolver(self.opts)
        self.protocol = resolve_group_protocol(self.opts, self.resolver.cluster)
        check_protocol_settings(self.opts, self.protocol)
        reset = SMALLEST if self.opts.starting == "earliest" else LARGEST
        registration = dict(group_id=self.opts.group_id, auto_commit=True, auto_offset_reset=reset,
                            session_timeout_ms=self.opts.session_timeout_ms)
        if self.opts.subscribe_pattern is not None:
            registration["pattern"] = self.opts.subscribe_pattern
        else:
            registration["topics"] = {t: 1 for t in self.opts.subscribe or ()}
        for index, m in enumerate(self.members):
            conn: ConsumerCoordinatorConnector | Kip848Member
            if self.protocol == GROUP_PROTOCOL_CONSUMER:  # Kafka 4's protocol: ids as Kafka's clients make them
                m.consumer_id = make_member_id()
                m.kip848 = True
                conn = kip848_member(self.opts, m, m.consumer_id, index)
            else:
                conn = ConsumerCoordinatorConnector(
                    parse_bootstrap(self.opts.coordinator_bootstrap or self.opts.bootstrap),
                    Registration(consumer_id=m.consumer_id, **registration), m, client_id=self.opts.client_id,
                    security=self.opts.security)
            conn.start()
            self.connectors.append(conn)
        self._committer = threading.Thread(target=self._commit_loop, name="coordkafka-committer", daemon=True)
        self._committer.start()
        # Let the first rebalance finish so the initial offsets see the assignment (bounded).
        deadline = time.monotonic() + max(self.opts.session_timeout_ms / 1000, 5.0)
        for m in self.members:
            if not m.started.wait(max(0.0, deadline - time.monotonic())):
                log.warning("%s: no assignment yet from the coordinator; planning starts when it arrives",
                            m.consumer_id)
                break

    def assigned(self) -> dict[TopicPartition, int | None]:
        for conn in self.connectors:  # a KIP-848 member the coordinator refused for good fails the query
            error = getattr(conn, "error", None)
            if error is not None:
                raise error
        with self.lock:
            out: dict[TopicPartition, int | None] = {}
            for m in self.members:
                if not m.plannable():
                    continue
                for tp, off in m.owned.items():
                    if tp not in self.stopping:
                        out[tp] = off
            return out

    def on_batch_planned(self, end: dict[TopicPartition, int]) -> set[TopicPartition]:
        """Record a batch's plan (its end offsets) and return the partitions it may read: those still
        plannable now.  Checked under the lock a revocation takes to look for a batch in flight, so a
        partition is either left out of the batch or its revocation waits for the batch to commit --
        never handed over below a batch that reads it."""
        with self.lock:
            plannable = self.assigned()
            accepted = {tp for tp in end if tp in plannable}
            self.planned.update({tp: end[tp] for tp in accepted})
            return accepted

    def on_batch_committed(self, end: dict[TopicPartition, int]) -> None:
        """Record Spark's confirmation of a batch ending at ``end``.  An end below the start offset the
        coordinator handed out with a partition is left out: it is a batch an earlier run of the query
        planned and Spark replayed on restart, and the group's offset is already past it (committing
        it would move the group's offset backwards)."""
        with self.changed:
            moved = False
            for tp, off in end.items():
                floor = max((m.owned.get(tp) or -1 for m in self.members), default=-1)
                if off > self.committed.get(tp, -1) and off >= floor:
                    self.committed[tp] = off
                    moved = True
            self.changed.notify_all()
            if moved:
                self._commit_wanted.notify_all()

    def _unsent(self, m: _QueryMember) -> list[dict]:
        """(lock held) Committed offsets of ``m``'s partitions not yet committed actively."""
        return [{"topic": t, "partition": p, "offset": self.committed[(t, p)]} for (t, p) in sorted(m.owned)
                if (t, p) in self.committed and m.sent.get((t, p)) != self.committed[(t, p)]]

    def _commit_now(self, timeout: float | None = None) -> bool:
        """Commit what Spark confirmed and was not committed yet, member by member; True when
        nothing is left (or nothing could be: no coordinator right now)."""
        from spark_coord.consumer.connector import CommitFailed

        done = True
        for m, conn in zip(self.members, self.connectors, strict=False):
            with m.commit_lock:  # taken and sent before a revocation's commit, never after it
                with self.lock:
                    offsets = self._unsent(m)
                if not offsets:
                    continue
                try:
                    codes = _commit(conn, offsets, timeout)
                except CommitFailed as e:  # kept: reported with the next ping, claim or the final commit
                    log.debug("%s: commit not confirmed now (%s)", m.consumer_id, e)
                    for o in offsets:
                        m.journal("commit_failed", t=o["topic"], p=o["partition"], off=o["offset"], code=e.code)
                    done = False
                    continue
                with self.lock:
                    for o in offsets:
                        code = codes.get((o["topic"], o["partition"]))
                        if code == 0:
                            m.sent[(o["topic"], o["partition"])] = o["offset"]
                        m.journal("commit" if code == 0 else "commit_failed", t=o["topic"], p=o["partition"],
                                  off=o["offset"], code=code)
        return done

    def _commit_loop(self) -> None:
        """Commit what Spark confirms as it is confirmed (coalesced), off Spark's call path."""
        while True:
            with self._commit_wanted:
                self._commit_wanted.wait_for(lambda: self._stopping or any(self._unsent(m) for m in self.members),
                                             timeout=1.0)
                if self._stopping:
                    return
                if not any(self._unsent(m) for m in self.members):
                    continue
            if not self._commit_now():
                time.sleep(0.2)  # no coordinator right now: do not spin

    def flush(self, timeout: float | None = None) -> None:
        """Commit everything Spark confirmed so far, now (bounded by ``timeout``, default the
        session timeout)."""
        deadline = time.monotonic() + (self.opts.session_timeout_ms / 1000 if timeout is None else timeout)
        while not self._commit_now(max(0.1, deadline - time.monotonic())) and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        """Leave the group: each member's final CommitOffsets carries what Spark confirmed."""
        with self._commit_wanted:
            self._stopping = True
            self._commit_wanted.notify_all()
            for m in self.members:  # the end of planning, before the leave hands the partitions on
                m.journal("stop", gen=m.generation)
        timeout = self.opts.session_timeout_ms / 1000
        if self._committer is not None and self.protocol == GROUP_PROTOCOL_CONSUMER:
            self._committer.join(timeout)  # an active commit under way lands before the members' last ones
        closers = [threading.Thread(target=conn.close, args=(timeout,), name=f"close-{conn.name}", daemon=True)
                   for conn in self.connectors]
        for t in closers:
            t.start()
        for t in closers:
            t.join(timeout + 1)
        self.connectors = []
        if self.resolver is not None:
            self.resolver.close()
            self.resolver = None

    # -- helpers -----------------------------------------------------------------------------
    def in_flight(self, tp: TopicPartition) -> bool:
        """A planned end offset on ``tp`` that has not been committed yet."""
        planned = self.planned.get(tp)
        return planned is not None and planned > self.committed.get(tp, -1)

    def resolve_resets(self, assignment: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """StartFetcher's -1 (no committed offset) becomes the startingOffsets policy's offset."""
        missing = [tp for tp, off in assignment.items() if off is None or off < 0]
        out: dict[TopicPartition, int | None] = {tp: off for tp, off in assignment.items()
                                                  if off is not None and off >= 0}
        if missing:
            which = EARLIEST if self.opts.starting == "earliest" else LATEST
            try:
                out.update(self.resolver.list_offsets(missing, which))
            except Exception:  # the reader falls back to its own policy for these partitions
                log.warning("could not resolve start offsets of %s; the reader applies startingOffsets",
                            missing, exc_info=True)
                out.update({tp: None for tp in missing})
        return out


def _commit(conn: ConsumerCoordinatorConnector | Kip848Member, offsets: list[dict],
            timeout: float | None) -> dict[TopicPartition, int]:
    """An active commit: CommitOffsets on the coordinator's channel, or a KIP-848 member's OffsetCommit with
    its id and current epoch, sent at once rather than behind a reconciliation holding the member (whose
    revocation waits for this commit: ``_QueryMember.commit_lock``).  Raises ``CommitFailed``."""
    from spark_coord.client.connection import BrokerConnectionError
    from spark_coord.consumer.connector import CommitFailed
    from spark_coord.errors import ErrorCode, KafkaError
    from spark_coord.wire.types import ProtocolError

    if not isinstance(conn, Kip848Member):
        return conn.commit(offsets, timeout)
    member_id, epoch, error = conn.member_id, conn.epoch, conn.error
    if error is not None:
        raise CommitFailed(error.code, str(error))
    if epoch < 1:
        raise CommitFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE, "not in the group right now")
    wanted = {(o["topic"], o["partition"]): o["offset"] for o in offsets}
    try:
        conn.io.commit(wanted, member_id, epoch)  # STALE_MEMBER_EPOCH: retried with the next epoch
    except KafkaError as e:
        raise CommitFailed(e.code, str(e)) from None
    except (BrokerConnectionError, ProtocolError, OSError) as e:
        raise CommitFailed(ErrorCode.NETWORK_EXCEPTION, str(e)) from None
    return {tp: 0 for tp in wanted}
