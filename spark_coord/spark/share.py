"""``spark.readStream.format("coordkafka").option("kafka.share.group.id", g)``: Spark reads a queue.

A share group (KIP-932) hands out records, not partitions, so the query's parallelism is not
bounded by the partition count, and a record is accepted only when the micro-batch holding it is
committed.  The argument (DESIGN.md, "Spark reading a share group"), using only Kafka's own share
APIs and plain Fetch, so the same query reads a share group on any Kafka 4.2 cluster:

* The process that learns a batch committed is the driver's reader -- never an executor -- so
  the share session that acknowledges is the reader's.  The reader joins the group as one member
  (``_DriverMember``: ShareGroupHeartbeat on a thread, one share session per leader).
* ``latestOffset(start)``: Spark calls it only once the batch ending at ``start`` is in its commit
  log, so ``start``'s records are accepted (piggybacked on the ShareFetch that follows; marks that
  ``foreachBatch`` helpers left turn some into RELEASE or REJECT, ``share_acks``).  Then ShareFetch
  acquires records; the batch's offset is ``{"$share": {member, batch, ranges}}``: the acquired
  offset ranges with their delivery counts, so the offset log says what each batch holds.
* ``partitions(start, end)`` cuts the ranges into ``kafka.share.parallelism`` input partitions,
  whatever the partition count; an executor reads its ranges with a plain Fetch from the leader
  (``spark.partition``'s range reader) and adds ``deliveryCount``.  Executors hold no session.
* ``commit(end)`` accepts ``end`` if ``latestOffset`` did not already.  A batch still running
  after a third of its lock has its locks renewed (ShareAcknowledge v2, Renew) until it commits.
* ``stop()`` (a query stopped, or SIGTERM) closes the sessions: records acquired and not accepted
  go back to the group at once.  A query killed leaves them to their locks.  A restarted query
  finds in its offset log a batch of a session that is gone: it plans that batch empty (its
  records come back to the group, counted) -- so a record accepted by a committed batch is never
  read again, and one not accepted is read again only through the group.

The one window: a batch whose commit-log entry was written but whose acceptance was not yet
sent when the query died is read again (at least once).
"""

from __future__ import annotations

import logging
import threading
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from spark_coord.common import TopicPartition
from spark_coord.spark.options import SourceOptions

log = logging.getLogger(__name__)

SHARE_KEY = "$share"
#: A batch running longer than this part of its acquisition lock has the lock renewed, and again
#: as often (the lock's length comes with every ShareFetch answer).
RENEW_AT = 1 / 3
#: Records one ShareFetch asks for when the query sets no maxOffsetsPerTrigger.
CHUNK_RECORDS = 100_000
#: Acquisition rounds per micro-batch at most (each without waiting, after the first).
MAX_ROUNDS = 64

#: ``{(topic, partition): [(first, last, delivery count), ...]}``
Ranges = dict[TopicPartition, list[tuple[int, int, int]]]


def to_json(member: str, batch: int, ranges: Ranges) -> dict:
    out: dict = {}
    for (t, p) in sorted(ranges):
        out.setdefault(t, {})[str(p)] = [list(r) for r in sorted(ranges[(t, p)])]
    return {SHARE_KEY: {"member": member, "batch": batch, "ranges": out}}


def from_json(value: dict | None) -> tuple[str | None, int, Ranges]:
    """``(member, batch, ranges)`` of a share offset; ValueError for anything else (for instance the
    offsets of a query that read the topic without a share group: a checkpoint is not reusable)."""
    share = (value or {}).get(SHARE_KEY)
    if not isinstance(share, dict):
        raise ValueError(f"offset {value!r} is not a share group offset: the checkpoint belongs to a query that "
                         "read partitions by offset; a share group query needs a checkpoint of its own")
    ranges: Ranges = {}
    for t, parts in (share.get("ranges") or {}).items():
        for p, rs in parts.items():
            ranges[(t, int(p))] = [(int(a), int(b), int(c)) for a, b, c in rs]
    return share.get("member"), int(share.get("batch", 0)), ranges


def merged(ranges: Ranges) -> Ranges:
    """The same offsets with adjacent ranges of one delivery count joined: consecutive ShareFetch
    rounds acquire consecutive pieces of a partition, which an executor then reads as one range
    (one pipelined fetch loop instead of a fresh one per piece)."""
    out: Ranges = {}
    for tp, rs in ranges.items():
        joined: list[tuple[int, int, int]] = []
        for a, b, dc in sorted(rs):
            if joined and joined[-1][1] + 1 == a and joined[-1][2] == dc:
                joined[-1] = (joined[-1][0], b, dc)
            else:
                joined.append((a, b, dc))
        out[tp] = joined
    return out


def count(ranges: Ranges) -> int:
    return sum(b - a + 1 for rs in ranges.values() for a, b, _ in rs)


def cut(ranges: Ranges, pieces: int) -> list[list[tuple[TopicPartition, int, int, int]]]:
    """The ranges as ``pieces`` groups of ``(tp, first, until, delivery count)`` holding about the
    same number of offsets each (a range is cut where a group fills).  Deterministic."""
    flat = [(tp, a, b + 1, dc) for tp in sorted(ranges) for a, b, dc in sorted(ranges[tp])]
    total = sum(u - a for _, a, u, _ in flat)
    if not total:
        return []
    pieces = max(1, min(pieces, total))
    out: list[list] = [[] for _ in range(pieces)]
    size, extra = divmod(total, pieces)
    i, room = 0, size + (1 if extra > 0 else 0)
    for tp, a, u, dc in flat:
        while a < u:
            take = min(room, u - a)
            out[i].append((tp, a, a + take, dc))
            a += take
            room -= take
            if room == 0 and i + 1 < pieces:
                i += 1
                room = size + (1 if i < extra else 0)
    return [g for g in out if g]


class ShareStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the records a share group hands the query's driver-side member.

    ``Trigger.AvailableNow`` reads until the group hands the query nothing more (a queue has no
    end offset to pin): the run ends at the first trigger that acquires nothing, after accepting
    the last batch."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._member: _DriverMember | None = None
        self._resolver = None
        self._accepted_upto = -1  # this member's batches up to here are acknowledged

    def __getstate__(self) -> dict:
        return {"opts": self.opts}

    def __setstate__(self, state: dict) -> None:
        self.opts = state["opts"]
        self._reset_runtime()

    def _ensure_started(self) -> "_DriverMember":
        if self._member is None:
            from spark_coord.spark.offsets import OffsetResolver
            from spark_coord.spark.stream import _exit_cleanly_on_sigterm

            self._resolver = OffsetResolver(self.opts)
            self._member = _DriverMember(self.opts)
            _exit_cleanly_on_sigterm()
            log.info("share group %s: reading %s as member %s", self.opts.share_group_id,
                     ", ".join(self.opts.subscribe or ()), self._member.member_id)
        return self._member

    # ------------------------------------------------------------- offsets
    def initialOffset(self) -> dict:
        member = self._ensure_started()
        return to_json(member.member_id, 0, {})

    def prepareForTriggerAvailableNow(self) -> None:
        self._ensure_started()
        log.info("share group %s: Trigger.AvailableNow reads until the group hands out nothing more",
                 self.opts.share_group_id)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        member = self._ensure_started()
        owner, batch, held = from_json(start)
        if held and owner == member.member_id:
            self._accept(batch, held, now=False)  # confirmed: piggybacked on the fetch below
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ranges = member.acquire(cap, self.opts.fetch_max_wait_ms)
        if not ranges:
            member.flush()  # nothing acquired, so nothing carried the acknowledgements: send them now
            return start
        end = batch + 1
        member.holding(end, ranges)
        log.debug("share group %s: batch %d holds %d record(s)", self.opts.share_group_id, end, count(ranges))
        return to_json(member.member_id, end, ranges)

    def partitions(self, start: dict, end: dict):
        from spark_coord.spark.offsets import make_partition
        from spark_coord.spark.share_partition import ShareInputPartition

        member = self._ensure_started()
        owner, batch, ranges = from_json(end)
        if owner != member.member_id:
            if ranges:
                log.info("share group %s: batch %d was acquired by member %s, a run of this query that is gone; "
                         "planned empty: its %d record(s) go back to the group when their locks run out, and are "
                         "read again (delivery count + 1) by this query or another member", self.opts.share_group_id,
                         batch, owner, count(ranges))
            return []
        pieces = self.opts.share_parallelism or max(1, len(ranges))
        leaders = self._resolver.leaders(sorted(ranges))
        out = []
        for group in cut(ranges, pieces):
            out.append(ShareInputPartition([
                (make_partition(self.opts, tp, a, u, leaders.get(tp)), dc) for tp, a, u, dc in group]))
        return out

    def read(self, partition):
        from spark_coord.spark.share_partition import read_share_partition

        return read_share_partition(partition)

    # ------------------------------------------------------------ lifecycle
    def _accept(self, batch: int, ranges: Ranges, now: bool) -> None:
        """Acknowledge a committed batch of this member: ACCEPT, or what foreachBatch marked."""
        from spark_coord.spark.share_acks import split_ranges, take_marks

        if batch <= self._accepted_upto:
            return
        member = self._member

        def holds(t: str, p: int, o: int) -> bool:
            return any(a <= o <= b for a, b, _ in ranges.get((t, p), ()))

        marks = take_marks(self.opts.share_group_id, self.opts.share_acknowledgements_path, holds)
        by_tp: dict[TopicPartition, list[tuple[int, str]]] = {}
        for (t, p, o), kind in marks.items():
            by_tp.setdefault((t, p), []).append((o, kind))
        for tp, rs in ranges.items():
            for a, b, _ in rs:
                for first, last, kind in split_ranges(a, b, by_tp.get(tp, ())):
                    member.acknowledge(tp, first, last, kind)
        member.settled(batch)
        if marks:
            log.info("share group %s: batch %d: %d record(s) released or rejected as foreachBatch marked them",
                     self.opts.share_group_id, batch, len(marks))
        self._accepted_upto = batch
        if now:
            member.flush()

    def commit(self, end: dict) -> None:
        if self._member is None:
            return
        owner, batch, ranges = from_json(end)
        if ranges and owner == self._member.member_id:
            self._accept(batch, ranges, now=True)

    def stop(self) -> None:
        if self._member is not None:
            self._member.close()
        if self._resolver is not None:
            self._resolver.close()
        self._reset_runtime()


class _DriverMember:
    """The query's member of the share group: a ``ShareConsumer`` that keeps acquired offset ranges
    instead of records, acknowledges ranges, and renews the locks of batches still running."""

    def __init__(self, opts: SourceOptions) -> None:
        from spark_coord.consumer.share import ShareConsumer

        class RangeConsumer(ShareConsumer):
            def _records(self, topic: str, p: dict) -> list:
                return [(topic, p["partition_index"], a["first_offset"], a["last_offset"], a["delivery_count"])
                        for a in p["acquired_records"]]

            def _hold(self, records) -> None:
                pass

            def assigned_now(self) -> set:
                # one acquisition asks for the partitions assigned when it began, in every round: a
                # partition that left the assignment meanwhile (another member joined) would leave
                # the share session in the next round, and the broker would release what the
                # earlier rounds of this very batch acquired there
                return set(self.pinned) if self.pinned is not None else super().assigned_now()

        self.opts = opts
        self.consumer = RangeConsumer(opts.bootstrap, opts.share_group_id, opts.subscribe,
                                      acknowledgement_mode="explicit", max_wait_ms=opts.fetch_max_wait_ms,
                                      client_id=opts.client_id, timeout=opts.socket_timeout_ms / 1000)
        self.consumer.pinned = None
        self.member_id = self.consumer.member_id
        self._io = threading.Lock()
        #: batches acquired and not yet acknowledged: number -> (ranges, last acquired or renewed)
        self._held: dict[int, tuple[Ranges, float]] = {}
        #: the newest batch whose acknowledgements are queued (its locks renewed until they are sent)
        self._settling = 0
        #: renewal rounds sent (each renews every batch then due)
        self.renewals = 0
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, name="coordkafka-share-renew", daemon=True)
        self._renewer.start()

    def acquire(self, cap: int | None, wait_ms: int) -> Ranges:
        """Acquire records until ``cap`` (or what one round of fetches brings, ``CHUNK_RECORDS`` at a
        time): the first round waits up to ``wait_ms`` for records, later ones not at all.  Every
        round asks for the partitions assigned when the first began (``RangeConsumer.assigned_now``)."""
        ranges: Ranges = {}
        got = 0
        with self._io:
            c = self.consumer
            if not c.joined.wait(wait_ms / 1000):
                return {}
            c.pinned = c.assigned_now()
            try:
                for round_ in range(MAX_ROUNDS):
                    want = CHUNK_RECORDS if cap is None else min(CHUNK_RECORDS, cap - got)
                    if want <= 0:
                        break
                    c.max_poll_records = want
                    out = c.fetch_round(wait_ms if round_ == 0 else 0)
                    for t, p, a, b, dc in out:
                        ranges.setdefault((t, p), []).append((a, b, dc))
                        got += b - a + 1
                    if not out:
                        break
            finally:
                c.pinned = None
            self._settle_sent()  # the first round carried the queued acknowledgements
        return merged(ranges)

    def holding(self, batch: int, ranges: Ranges) -> None:
        with self._io:
            self._held[batch] = (ranges, time.monotonic())

    def settled(self, batch: int) -> None:
        """The acknowledgements of batches up to ``batch`` are queued: their locks are renewed until
        those are sent (with the next fetch or ``flush``), never left to run out before."""
        with self._io:
            self._settling = max(self._settling, batch)
            self._settle_sent()

    def _settle_sent(self) -> None:
        """(under ``_io``) Stop renewing the settled batches once nothing waits to be sent."""
        if self._settling and not self.consumer.acknowledgements_unsent():
            for b in [b for b in self._held if b <= self._settling]:
                del self._held[b]

    def acknowledge(self, tp: TopicPartition, first: int, last: int, kind: str) -> None:
        with self._io:
            self.consumer.acknowledge_range(tp[0], tp[1], first, last, kind)

    def flush(self) -> None:
        """Send the waiting acknowledgements now and wait for the answers."""
        with self._io:
            results = self.consumer.commit()
            self._settle_sent()
        failed = {tp: code for tp, code in results.items() if code}
        if failed:
            from spark_coord.errors import ErrorCode

            log.warning("share group %s: acknowledgements not taken (%s); those records come back to the group "
                        "when their locks run out", self.opts.share_group_id,
                        ", ".join(f"{t}-{p}: {ErrorCode.name_of(c)}" for (t, p), c in sorted(failed.items())))

    def _renew_loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._renew_due()
            except Exception as e:  # noqa: BLE001 -- renewal is best effort; locks run out otherwise
                log.info("share group %s: renewing locks failed: %r", self.opts.share_group_id, e)

    def _renew_due(self) -> None:
        now = time.monotonic()
        with self._io:
            every = max(self.consumer.lock_timeout_ms * RENEW_AT / 1000, 0.2)
            due = {b: r for b, (r, at) in self._held.items() if now - at >= every}
            if not due:
                return
            c = self.consumer
            by_leader: dict[int, dict[TopicPartition, list[dict]]] = {}
            for ranges in due.values():
                for tp, rs in ranges.items():
                    batches = by_leader.setdefault(c.cluster.leader(*tp), {}).setdefault(tp, [])
                    batches.extend({"first_offset": a, "last_offset": b, "acknowledge_types": [4]} for a, b, _ in rs)
            for leader, acks in by_leader.items():
                results = c.acknowledge_at(leader, acks, final=False, renew=True)
                bad = {tp: code for tp, code in results.items() if code}
                if bad:
                    log.warning("share group %s: renewing locks at broker %d: %s", self.opts.share_group_id, leader,
                                bad)
            for b in due:
                self._held[b] = (self._held[b][0], now)
            self.renewals += 1
            log.info("share group %s: renewed the locks of batch(es) %s", self.opts.share_group_id, sorted(due))

    def close(self) -> None:
        self._stop.set()
        with self._io:
            self.consumer.close()
