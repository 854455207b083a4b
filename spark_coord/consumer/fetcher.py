"""The member's fetchers: one thread per leader broker, plus a leader finder.

The shape of Kafka 0.8's ConsumerFetcherManager: ``FetcherManager.start()`` hands
every assigned partition to the *leader finder* thread, which refreshes metadata,
resolves start offsets of -1 (auto.offset.reset, via ListOffsets) and gives each
partition to the ``FetcherThread`` of its leader.  A fetcher thread sends Kafka
Fetch for all its partitions, decodes each answer straight to a pyarrow
RecordBatch (``records.arrow.decode_to_arrow``) and puts it into the
``PartitionBuffer``.  Per partition:

- OFFSET_OUT_OF_RANGE: auto offset reset (smallest -> earliest, largest -> latest);
- NOT_LEADER_OR_FOLLOWER and other retriable errors, a broken connection, or a
  record set that fails to decode: the partition goes back to the leader finder,
  which refreshes metadata and hands it to the right leader.  While a leader
  stays unreachable its fetcher waits longer and longer before it gives its
  partitions back (``retry_backoff_ms`` doubling up to ``MAX_RETRY_BACKOFF``; the
  first retry comes at once, for a stale pooled connection) and logs one warning
  per outage, not one per attempt.

No partition is ever dropped on the way (the chaos runs check that no owned partition is
left unfetched): the finder takes
its orphans out of the shared table before placing them and puts back only those
it could not place, so a fetcher that fails at once and hands a partition back
while the finder is still placing cannot lose it; and an audit every
``AUDIT_INTERVAL`` seconds re-places any assigned partition that no fetcher and no
finder holds (logged as an error: it would be a bug).

The lease (see ``connector``): fetchers fetch only while the member's lease is
valid (``set_lease``); the connector stops them when it runs out.

``stop()`` stops every thread and joins it for at most ``STOP_JOIN_TIMEOUT``
seconds: a fetch blocked on a hung leader (a paused broker still accepts TCP) must
not hold up a StopFetcher answer for a whole socket timeout.  A thread left behind
can do no harm: what it fetches carries a stale buffer token and is dropped, and
the partitions it gives back belong to a finished run and are ignored.  Positions
of the fetchers (read-ahead) are discarded, the consumed positions live in the buffer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED, fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.common import LARGEST, OFFSET_RESETS, SMALLEST, TopicPartition
from spark_coord.consumer.buffer import Item, PartitionBuffer
from spark_coord.errors import ErrorCode, KafkaError, is_retriable
from spark_coord.records.header import InvalidBatch
from spark_coord.records.reader import next_offset
from spark_coord.wire.types import ProtocolError

log = logging.getLogger(__name__)

__all__ = ["FetchSettings", "FetcherManager", "FetcherThread"]

_NETWORK_ERRORS = (BrokerConnectionError, ProtocolError, OSError, KafkaError)
#: Longest ``FetcherManager.stop()`` waits for its threads (seconds).
STOP_JOIN_TIMEOUT = 1.0
#: Longest wait between two placements of a partition whose leader keeps failing (seconds).
MAX_RETRY_BACKOFF = 2.0
#: How often the leader finder checks that every assigned partition is held by someone (seconds).
AUDIT_INTERVAL = 1.0


class FetchSettings:
    """Fetch sizes and waits (the consumer's fetch.* keys), the reset policy and the isolation level
    (``client.fetcher.READ_UNCOMMITTED`` or ``READ_COMMITTED``: fetches and the latest offset of a reset
    stop at the last stable offset, and the records of aborted transactions are dropped)."""

    def __init__(self, auto_offset_reset: str = LARGEST, max_wait_ms: int = 500, min_bytes: int = 1,
                 max_bytes: int = 52428800, partition_max_bytes: int = 1048576, include_headers: bool = False,
                 retry_backoff_ms: int = 200, isolation_level: int = READ_UNCOMMITTED):
        if auto_offset_reset not in OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be 'smallest' or 'largest', got {auto_offset_reset!r}")
        if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise ValueError(f"isolation_level must be {READ_UNCOMMITTED} (read_uncommitted) or {READ_COMMITTED} "
                             f"(read_committed), got {isolation_level!r}")
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.include_headers = include_headers
        self.retry_backoff = retry_backoff_ms / 1000


class FetcherThread(threading.Thread):
    """Fetch loop for the partitions one broker leads."""

    def __init__(self, manager: "FetcherManager", leader: int, token: int):
        super().__init__(name=f"fetcher-{leader}", daemon=True)
        self.manager = manager
        self.leader = leader
        self.token = token
        self.run_halt = manager._halt  # the run this fetcher belongs to
        self._cond = threading.Condition()
        self._positions: dict[TopicPartition, int] = {}
        self._incarnations: dict[TopicPartition, int] = {}
        self._halt = threading.Event()

    def add(self, tp: TopicPartition, offset: int, incarnation: int = 0) -> None:
        with self._cond:
            self._positions[tp] = offset
            self._incarnations[tp] = incarnation
            self._cond.notify_all()

    def take_all(self) -> dict[TopicPartition, int]:
        with self._cond:
            out, self._positions = self._positions, {}
            self._incarnations = {}
            return out

    def stop(self) -> None:
        self._halt.set()
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        m = self.manager
        s = m.settings
        while not self._halt.is_set():
            with self._cond:
                self._cond.wait_for(lambda: self._positions or self._halt.is_set())
                offsets = dict(self._positions)
            if self._halt.is_set():
                break
            if not m.lease_valid():  # no coordinator confirmed the assignment lately: do not fetch
                self._halt.wait(0.05)
                continue
            try:
                conn = m.cluster.connection(self.leader)
                answer = fetch(conn, offsets, max_wait_ms=s.max_wait_ms, min_bytes=s.min_bytes,
                               max_bytes=s.max_bytes, partition_max_bytes=s.partition_max_bytes,
                               isolation_level=s.isolation_level)
            except _NETWORK_ERRORS as e:
                if self._halt.is_set():
                    break
                failures = m.leader_failed(self.leader, e)
                m.cluster.drop_connection(self.leader)
                if self._halt.wait(m.retry_delay(failures)):  # a dead leader is not hammered
                    break
                m.orphan(self.take_all(), run=self.run_halt)
                continue
            m.leader_ok(self.leader)
            for pd in answer:
                if self._halt.is_set():
                    break
                self._handle(pd, offsets)
        log.debug("%s stopped", self.name)

    def _still(self, tp: TopicPartition, offset: int) -> bool:
        with self._cond:
            return self._positions.get(tp) == offset

    def _advance(self, tp: TopicPartition, old: int, new: int) -> None:
        with self._cond:
            if self._positions.get(tp) == old:
                self._positions[tp] = new

    def _remove(self, tp: TopicPartition) -> int | None:
        with self._cond:
            self._incarnations.pop(tp, None)
            return self._positions.pop(tp, None)

    def incarnation(self, tp: TopicPartition) -> int:
        with self._cond:
            return self._incarnations.get(tp, 0)

    def _handle(self, pd, offsets: dict[TopicPartition, int]) -> None:
        m = self.manager
        tp = (pd.topic, pd.partition)
        offset = offsets.get(tp)
        if offset is None or not self._still(tp, offset):
            return
        if pd.error == ErrorCode.NONE:
            records = pd.records
            if records is None or len(records) == 0:
                return
            try:
                batch = m.decode(records, pd.topic, pd.partition, offset, pd.aborted_transactions)
                after = next_offset(records)
            except (InvalidBatch, ValueError) as e:
                log.error("bad record set for %s-%d at offset %d from broker %d: %s", pd.topic, pd.partition,
                          offset, self.leader, e)
                m.cluster.drop_connection(self.leader)
                if self._remove(tp) is not None:
                    m.orphan({tp: offset}, backoff=True, run=self.run_halt)
                return
            if after is None:
                log.warning("%s-%d: fetch at %d returned no complete batch (raise max.partition.fetch.bytes?)",
                            pd.topic, pd.partition, offset)
                return
            # the consumed position goes past the records and any control batches or aborted transactions
            # after them (a fetch of nothing else is an empty item), as Kafka's Java consumer's position does:
            # a group that read to the end commits the log end, not the offset of a transaction marker
            if batch.num_rows or after > offset:
                last = batch.column(4)[batch.num_rows - 1].as_py() if batch.num_rows else offset - 1
                item = Item(self.token, pd.topic, pd.partition, batch, max(last + 1, after), self.incarnation(tp))
                if not m.buffer.put(item, self._halt):
                    return
            self._advance(tp, offset, max(after, offset))
        elif pd.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            new = m.reset_offset(tp)
            log.warning("%s-%d: offset %d out of range; auto.offset.reset=%s -> %s", pd.topic, pd.partition, offset,
                        m.settings.auto_offset_reset, new)
            if new is None:
                if self._remove(tp) is not None:
                    m.orphan({tp: offset}, backoff=True, run=self.run_halt)
                return
            m.buffer.set_position(self.token, tp, new, only_if_idle=True, incarnation=self.incarnation(tp) or None)
            self._advance(tp, offset, new)
        else:
            level = logging.INFO if is_retriable(pd.error) else logging.WARNING
            log.log(level, "%s-%d: %s from broker %d; finding the leader again", pd.topic, pd.partition,
                    ErrorCode.name_of(pd.error), self.leader)
            if self._remove(tp) is not None:
                m.orphan({tp: offset}, run=self.run_halt)


class FetcherManager:
    """The fetcher threads of one member and their leader finder (start/stop per assignment)."""

    def __init__(self, cluster: ClusterClient, buffer: PartitionBuffer, settings: FetchSettings):
        self.cluster = cluster
        self.admin = AdminClient(cluster)
        self.buffer = buffer
        self.settings = settings
        self._lock = threading.Condition()
        self._life = threading.Lock()   # start() and stop() one at a time (a close races a StartFetcher)
        self._closed = False
        self._orphans: dict[TopicPartition, int] = {}
        self._fetchers: dict[int, FetcherThread] = {}
        self._finder: threading.Thread | None = None
        self._halt = threading.Event()
        self._token = -1
        self._backoff_pending = False
        self._assigned: dict[TopicPartition, int] = {}
        self._incarnations: dict[TopicPartition, int] = {}
        self._lease_until = float("inf")
        self._leader_failures: dict[int, int] = {}

    # ---------------------------------------------------------------------- lease
    def set_lease(self, until: float) -> None:
        """Fetch only until ``until`` (``time.monotonic()``), unless renewed."""
        self._lease_until = until

    def lease_valid(self) -> bool:
        return time.monotonic() < self._lease_until

    def leader_failed(self, leader: int, error: Exception) -> int:
        """A fetch from ``leader`` failed: warn once per outage, then quietly; returns the failures
        in a row."""
        with self._lock:
            n = self._leader_failures[leader] = self._leader_failures.get(leader, 0) + 1
        if n == 1:
            log.warning("fetch from broker %d failed: %s (retrying with backoff)", leader, error)
        else:
            log.debug("fetch from broker %d failed again (%d in a row): %s", leader, n, error)
        return n

    def retry_delay(self, failures: int) -> float:
        """Wait before retrying after ``failures`` in a row: ``retry_backoff_ms`` doubling, at most
        ``MAX_RETRY_BACKOFF`` (the first retry comes at once: a stale pooled connection)."""
        if failures <= 1:
            return 0.0
        return min(MAX_RETRY_BACKOFF, self.settings.retry_backoff * 2 ** min(failures - 2, 8))

    def leader_ok(self, leader: int) -> None:
        if self._leader_failures.get(leader):
            with self._lock:
                n = self._leader_failures.pop(leader, 0)
            if n > 1:
                log.info("broker %d answers fetches again (after %d failures)", leader, n)

    # ------------------------------------------------------------------- decoding
    def decode(self, records, topic: str, partition: int, offset: int, aborted_transactions=None):
        """A fetched record set as Arrow from ``offset`` on: control batches skipped, and with a read_committed
        answer's ``aborted_transactions``, the batches of aborted transactions dropped."""
        from spark_coord.records.arrow import decode_to_arrow

        if self.settings.isolation_level != READ_COMMITTED:
            aborted_transactions = None
        return decode_to_arrow(records, topic, partition, start_offset=offset,
                               include_headers=self.settings.include_headers,
                               aborted_transactions=aborted_transactions)

    # ------------------------------------------------------------------ lifecycle
    @property
    def running(self) -> bool:
        return self._finder is not None

    def start(self, assignment: dict[TopicPartition, int], token: int) -> None:
        """Fetch ``assignment`` ({tp: start offset, -1 = apply the reset}) for buffer token ``token``.

        Call ``stop()`` first, then ``buffer.assign()`` for the token: stopping clears the buffer,
        which would make the token stale."""
        with self._life:
            if self._closed:
                return  # the member closed while this assignment was on its way
            if self.running:
                raise RuntimeError("FetcherManager.start() while running: stop() first")
            self._halt = threading.Event()
            self._token = token
            with self._lock:
                self._orphans = dict(assignment)
                self._assigned = dict(assignment)
                self._incarnations = self.buffer.incarnations()
            self._finder = threading.Thread(target=self._find_leaders, args=(self._halt, token),
                                            name="leader-finder", daemon=True)
            self._finder.start()

    def add(self, partitions: dict[TopicPartition, int], incarnations: dict[TopicPartition, int]) -> None:
        """Fetch more partitions ({tp: start offset}, -1 = apply the reset; their buffer incarnations),
        the others going on undisturbed.  ``start()`` must have run."""
        if not partitions:
            return
        with self._lock:
            self._assigned.update(partitions)
            self._incarnations.update(incarnations)
            self._orphans.update(partitions)
            self._lock.notify_all()

    def remove(self, partitions) -> None:
        """Stop fetching these partitions; the others go on undisturbed.  A fetch of them in flight
        is dropped when it returns (the buffer has revoked them)."""
        gone = set(partitions)
        with self._lock:
            for tp in gone:
                self._assigned.pop(tp, None)
                self._orphans.pop(tp, None)
                self._incarnations.pop(tp, None)
            fetchers = list(self._fetchers.values())
        for f in fetchers:
            for tp in gone:
                f._remove(tp)

    def stop(self) -> None:
        """Stop and join every thread (a fetch in flight ends within max_wait_ms + the socket timeout).
        A ``start()`` under way finishes first, and what it started is stopped."""
        with self._life:
            self._halt.set()
            with self._lock:
                fetchers = list(self._fetchers.values())
                self._fetchers.clear()
                self._orphans.clear()
                self._lock.notify_all()
            for f in fetchers:
                f.stop()
            self.buffer.clear()  # wakes fetchers blocked on a full buffer
            deadline = time.monotonic() + STOP_JOIN_TIMEOUT
            threads = fetchers + ([self._finder] if self._finder is not None else [])
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    log.info("%s is still in a request; leaving it behind (its results are dropped)", t.name)
            self._finder = None

    def close(self) -> None:
        """``stop()`` for good: a ``start()`` after this (a StartFetcher answered late) starts nothing."""
        with self._life:
            self._closed = True
        self.stop()

    # ---------------------------------------------------------------- leader finder
    def orphan(self, partitions: dict[TopicPartition, int], backoff: bool = False,
               run: threading.Event | None = None) -> None:
        """Give partitions back to the leader finder (leader moved, connection broke...);
        ignored when the fetcher's ``run`` is not the current one."""
        if not partitions:
            return
        with self._lock:
            if self._halt.is_set() or (run is not None and run is not self._halt):
                return
            self._orphans.update({tp: o for tp, o in partitions.items() if tp in self._assigned})
            self._backoff_pending = self._backoff_pending or backoff
            self._lock.notify_all()

    def _find_leaders(self, stop: threading.Event, token: int) -> None:
        failed_rounds = 0  # rounds in a row that could not place everything
        missing: set[TopicPartition] = set()
        while not stop.is_set():
            with self._lock:
                self._lock.wait_for(lambda: self._orphans or stop.is_set(), AUDIT_INTERVAL)
                if stop.is_set():
                    break
                if not self._orphans:
                    missing = self._audit(missing, token)
                    continue
                if self._backoff_pending:
                    self._backoff_pending = False
                    self._lock.wait(self.settings.retry_backoff)
                    if stop.is_set():
                        break
                # take them out: a fetcher that fails at once hands its partition back to the
                # (now empty) table while we are still placing, and it must stay there
                orphans, self._orphans = self._orphans, {}
                incarnations = {tp: self._incarnations.get(tp) for tp in orphans}
            placed = set(self._place(orphans, stop, token, incarnations))
            with self._lock:
                if stop.is_set():  # a finished run: the orphans belong to the next one now
                    break
                for tp, offset in orphans.items():
                    # one removed meanwhile is forgotten; one given back meanwhile is in the table
                    # again with its new start offset: the old one must not come back
                    if tp not in placed and self._current(tp, incarnations[tp]):
                        self._orphans.setdefault(tp, offset)
                failed_rounds = failed_rounds + 1 if len(placed) < len(orphans) else 0
                if self._orphans and not stop.is_set():
                    self._lock.wait(self.retry_delay(failed_rounds + 1))
        log.debug("leader finder stopped")

    def _audit(self, missing: set[TopicPartition], token: int) -> set[TopicPartition]:
        """(Lock held.)  Assigned partitions that no fetcher and no orphan entry holds; those
        missing twice in a row are placed again (from the consumed position)."""
        held = set(self._orphans)
        for f in self._fetchers.values():
            with f._cond:
                held.update(f._positions)
        now_missing = set(self._assigned) - held
        lost = now_missing & missing
        if lost:
            positions = self.buffer.positions()
            for tp in sorted(lost):
                log.error("%s-%d is assigned but no fetcher holds it; fetching it again from %s", tp[0], tp[1],
                          positions.get(tp, self._assigned[tp]))
                self._orphans[tp] = positions.get(tp, self._assigned[tp])
            self._lock.notify_all()
        return now_missing - lost

    def _current(self, tp: TopicPartition, incarnation: int | None) -> bool:
        """(Lock held.)  Is ``tp`` still assigned, as the same incarnation?  A partition removed
        (StopFetcher v1) and maybe added again (StartFetcher v1) since is not."""
        return tp in self._assigned and self._incarnations.get(tp) == incarnation

    def _place(self, orphans: dict[TopicPartition, int], stop: threading.Event, token: int,
               incarnations: dict[TopicPartition, int | None] | None = None) -> list[TopicPartition]:
        """Hand each orphan to its leader's fetcher; returns the partitions placed.  ``incarnations``:
        each orphan's incarnation when it was taken out of the table; an orphan whose partition was
        removed or given back since is stale (its offset belongs to the earlier holding) and skipped."""
        if incarnations is None:
            with self._lock:
                incarnations = {tp: self._incarnations.get(tp) for tp in orphans}
        try:
            self.cluster.refresh(sorted({t for t, _ in orphans}))
        except _NETWORK_ERRORS as e:
            log.warning("metadata refresh failed: %s", e)
            return []
        placed = []
        by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        for tp, offset in orphans.items():
            info = self.cluster.topics.get(tp[0])
            part = info.partitions.get(tp[1]) if info is not None and not info.error else None
            if part is None or part.leader < 0:
                log.info("%s-%d: no leader yet", *tp)
                continue
            by_leader[part.leader][tp] = offset
        for leader, parts in by_leader.items():
            for tp, offset in parts.items():
                if stop.is_set():
                    return placed
                incarnation = incarnations.get(tp)
                with self._lock:
                    if not self._current(tp, incarnation):
                        continue  # removed (and maybe given back) meanwhile
                if offset < 0:
                    resolved = self.reset_offset(tp)
                    if resolved is None:
                        continue
                    # the buffer refuses it if tp was given back meanwhile: the new holding starts
                    # where the coordinator said, not where this reset of the earlier one found
                    if not self.buffer.set_position(token, tp, resolved, incarnation=incarnation):
                        log.info("%s-%d: taken away while its auto.offset.reset was resolved; dropped", *tp)
                        continue
                    log.info("%s-%d: no committed offset; auto.offset.reset=%s -> %d", tp[0], tp[1],
                             self.settings.auto_offset_reset, resolved)
                    offset = resolved
                with self._lock:
                    if stop.is_set():
                        return placed
                    if not self._current(tp, incarnation):
                        continue  # removed (and maybe given back) meanwhile
                    fetcher = self._fetchers.get(leader)
                    if fetcher is None:
                        fetcher = FetcherThread(self, leader, token)
                        self._fetchers[leader] = fetcher
                        fetcher.start()
                    fetcher.add(tp, offset, self._incarnations.get(tp, 0))
                placed.append(tp)
        return placed

    def reset_offset(self, tp: TopicPartition) -> int | None:
        """auto.offset.reset for ``tp`` via ListOffsets (None if the leader could not answer); read_committed:
        latest is the last stable offset, as Kafka's Java consumer resets."""
        when = EARLIEST if self.settings.auto_offset_reset == SMALLEST else LATEST
        try:
            return self.admin.list_offsets(tp[0], [tp[1]], when, self.settings.isolation_level)[tp[1]]
        except (*_NETWORK_ERRORS, KeyError) as e:
            log.warning("ListOffsets for %s-%d failed: %s", tp[0], tp[1], e)
            return None
