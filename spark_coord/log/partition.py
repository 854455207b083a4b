"""The log of one partition: an ordered list of segments in ``<log.dirs>/<topic>-<partition>/``.

Batches are stored exactly as produced; ``append`` rewrites only baseOffset and
partitionLeaderEpoch (0), neither covered by the CRC, so a fetch can send the file's
bytes unchanged.

Threads.  ``append_deferred`` and ``read`` run on the broker's event-loop thread
(a ``pwrite`` into the page cache, a few header reads); ``flush`` (fsync),
``offset_for_timestamp`` and ``max_timestamp`` (segment scans),
``maybe_flush_by_time`` and ``apply_retention`` on worker threads.  Two locks:

* ``_lock`` guards the segment list and the offsets; every section under it is
  short (``append`` holds it for the ``pwrite`` into the page cache, nothing slower).
* ``_io_lock`` serialises the slow maintenance work (fsync, retention's file
  deletion, close, delete) without blocking appends: ``fsync`` runs under it only.

Readers take a ``(segment, committed size)`` snapshot under ``_lock`` and read
outside it, so they never see bytes of an append that has not completed.

Recovery happens in ``__init__``: the last segment is scanned batch by batch, others
get an index sanity check plus a scan of their tail (see ``segment.LogSegment.open``).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Sequence

from ..records.builder import control_batch
from ..records.header import (
    BatchHeader,
    InvalidBatch,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
    stamp_log_append_time,
)
from ..records.reader import iter_records
from ..records.region import FileRegion
from .checkpoint import fsync_dir, read_offset, write_offset
from .config import INT32_MAX, LOG_APPEND_TIME, LogConfig
from .errors import LogClosed, OffsetOutOfRange
from .names import (
    LOG_START_CHECKPOINT,
    TMP_SUFFIX,
    deletion_name,
    parse_partition_dir,
    parse_segment_name,
    segment_index_name,
)
from .segment import LogSegment
from .swap import CLEANER_CHECKPOINT, recover_cleaner_files
from .txn import (
    SNAPSHOT_SUFFIX,
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    TxnState,
    encode_entries,
    is_transactional,
    parse_marker,
    parse_txn_file,
    read_txn_index,
    snapshot_name,
    txn_index_name,
    write_file_atomically,
)

log = logging.getLogger(__name__)

Clock = Callable[[], float]  # seconds since the epoch, like time.time

#: Transaction snapshots kept (``txn``): the newest is what recovery reads; an older one stands in when a
#: crash damaged it.
KEPT_SNAPSHOTS = 2

#: Idempotent batches kept per producer in ``idempotent_tail``: the most an idempotent producer
#: has in flight (Kafka's rule), so every batch it may retry.
PRODUCER_TAIL = 5


class PartitionLog:
    """Append-only log of record batches for one topic partition (one replica: end = high watermark)."""

    def __init__(self, directory: Path, config: LogConfig, clock: Clock = time.time):
        self.directory = Path(directory)
        self.topic, self.partition = parse_partition_dir(self.directory.name)
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._closed = False
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start = 0
        self._unflushed_messages = 0
        self._dir_dirty = False
        self._last_flush_ms = self._now_ms()
        #: When the last append happened (its LogAppendTime, what Produce answers as log_append_time_ms).
        self.last_append_time_ms = -1
        self._open()
        #: The log end this log recovered to when this process opened it: a share group's state saved by an
        #: earlier process about offsets at or past it is about records a crash cut off (share.manager).
        self.opened_end_offset = self.log_end_offset

    def __repr__(self) -> str:
        end = self._segments[-1].next_offset if self._segments else "?"
        return f"PartitionLog({self.topic}-{self.partition}, [{self._log_start}, {end}))"

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------ recovery

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        recover_cleaner_files(self.directory)  # finish or discard a log cleaner's swap cut short
        logs, indexes = set(), set()
        txn_files: dict[str, set[int]] = {TXN_INDEX_SUFFIX: set(), SNAPSHOT_SUFFIX: set()}
        for entry in os.scandir(self.directory):
            if entry.name.endswith(TMP_SUFFIX):
                log.info("%s: removing leftover temp file %s", self.directory, entry.name)
                os.unlink(entry.path)
                continue
            parsed = parse_segment_name(entry.name)
            txn_file = parse_txn_file(entry.name)
            if txn_file is not None:
                txn_files[txn_file[1]].add(txn_file[0])
            elif parsed is None:
                if entry.name not in (LOG_START_CHECKPOINT, CLEANER_CHECKPOINT):
                    log.warning("%s: ignoring unexpected file %s", self.directory, entry.name)
            elif parsed[1] == "log":
                logs.add(parsed[0])
            else:
                indexes.add(parsed[0])
        for base in indexes - logs:
            log.info("%s: removing index without a log, base %d", self.directory, base)
            os.unlink(self.directory / segment_index_name(base))
        bases = sorted(logs)
        checkpoint = read_offset(self.directory / LOG_START_CHECKPOINT)
        try:
            for i, base in enumerate(bases):
                seg = LogSegment.open(self.directory, base, self.config.index_interval_bytes,
                                      full_scan=i == len(bases) - 1)
                if self._segments and self._segments[-1].next_offset > base:
                    log.error("%s: segment %d overlaps the previous one (ends at %d)",
                              self.directory, base, self._segments[-1].next_offset)
                self._segments.append(seg)
            if not self._segments:
                start = checkpoint or 0
                self._segments.append(LogSegment.create(self.directory, start, self.config.index_interval_bytes,
                                                        self._now_ms()))
                self._dir_dirty = True
        except BaseException:
            for seg in self._segments:
                seg.close()
            raise
        self._bases = [s.base_offset for s in self._segments]
        self._log_start = min(max(checkpoint or 0, self._bases[0]), self.log_end_offset)
        self.idempotent_tail = self._idempotent_tail(self._segments[-1])
        self.txns = TxnState()
        self._recover_txns(txn_files[TXN_INDEX_SUFFIX], txn_files[SNAPSHOT_SUFFIX])
        log.info("opened %s: %d segment(s), offsets [%d, %d)", self.directory, len(self._segments),
                 self._log_start, self.log_end_offset)

    @staticmethod
    def _idempotent_tail(seg: LogSegment) -> list[BatchHeader]:
        """Headers of the idempotent batches (producer id >= 0) of ``seg`` (the last segment), the
        newest ``PRODUCER_TAIL`` of each producer, in log order: a broker rebuilds its producers'
        sequence state from them when it starts, so a producer retrying a batch appended just before
        a restart gets the duplicate's answer instead of a second copy.  Producers whose last batches
        are in older segments are not found (Kafka keeps snapshots of that state; we do not)."""
        newest: dict[int, deque] = {}
        for _, h in seg.headers(seg.size):
            if h.producer_id >= 0:
                newest.setdefault(h.producer_id, deque(maxlen=PRODUCER_TAIL)).append(h)
        return sorted((h for batches in newest.values() for h in batches), key=lambda h: h.base_offset)

    def _recover_txns(self, index_bases: set[int], snapshot_bases: set[int]) -> None:
        """Rebuild the transactions (``txn.TxnState``): the newest usable snapshot, then the batch headers
        after it (and the values of the markers there); the aborted entries of that range are computed
        again and the ``.txnindex`` files holding them rewritten."""
        start = self._segments[0].base_offset
        for base in sorted(snapshot_bases, reverse=True):
            if base > self.log_end_offset:
                continue
            try:
                parsed = TxnState.parse_snapshot((self.directory / snapshot_name(base)).read_bytes())
            except OSError:
                parsed = None
            if parsed is not None and parsed[0] == base:
                self.txns.load(parsed[1])
                start = max(base, start)
                break
            log.warning("%s: ignoring a damaged transaction snapshot at %d", self.directory, base)
        kept: list[AbortedTxn] = []
        for base in sorted(index_bases):
            kept.extend(e for e in read_txn_index(self.directory / txn_index_name(base)) if e.last_offset < start)
        self.txns.aborted = sorted(set(kept), key=lambda e: e.last_offset)
        rewrite = bool([b for b in index_bases if b >= start])
        for seg in self._segments:
            if seg.next_offset <= start or not seg.size:
                continue
            for pos, h in seg.headers(seg.size):
                if h.base_offset < start:
                    continue
                if h.is_control and is_transactional(h):
                    marker, coordinator_epoch = self._read_marker(seg, pos, h)
                    if self.txns.on_marker(h.producer_id, h.producer_epoch, marker, coordinator_epoch,
                                           h.base_offset, h.next_offset) is not None:
                        rewrite = True
                else:
                    self.txns.on_batch(h, h.base_offset)
        if rewrite:
            self._rewrite_txn_indexes(start, index_bases)
        opened = self.txns.open_transactions()
        if opened or self.txns.aborted:
            log.info("%s: %d open transaction(s), %d aborted, last stable offset %d", self.directory, len(opened),
                     len(self.txns.aborted), self.last_stable_offset)

    def _read_marker(self, seg: LogSegment, pos: int, h: BatchHeader) -> tuple[int, int]:
        """(marker type, coordinator epoch) of the control batch at ``pos``; (ABORT, -1) if undecodable."""
        try:
            return parse_marker(os.pread(seg.file.fileno(), h.size, pos))
        except (ValueError, IndexError, OSError) as e:
            log.warning("%s: cannot decode the control batch at offset %d: %s", self, h.base_offset, e)
        return 0, -1

    def _rewrite_txn_indexes(self, start: int, index_bases: set[int]) -> None:
        """Write each segment's ``.txnindex`` from ``txns.aborted`` for the segments holding offsets >= ``start``;
        remove the files of that range that belong to no segment (a cleaner merged theirs)."""
        bases = [s.base_offset for s in self._segments]
        by_segment: dict[int, list[AbortedTxn]] = {}
        for e in self.txns.aborted:
            by_segment.setdefault(bases[max(bisect.bisect_right(bases, e.last_offset) - 1, 0)], []).append(e)
        for seg in self._segments:
            if seg.next_offset > start or seg.base_offset >= start:
                entries = by_segment.get(seg.base_offset, [])
                if entries or seg.base_offset in index_bases:
                    write_file_atomically(self.directory / txn_index_name(seg.base_offset), encode_entries(entries))
        for base in index_bases:
            if base >= start and base not in bases:
                (self.directory / txn_index_name(base)).unlink(missing_ok=True)

    # ------------------------------------------------------------------ offsets

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned (with one replica, also the high watermark)."""
        return self._segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark (KIP-98's LSO); never
        below the log start (DeleteRecords or retention may have taken a transaction's first batches)."""
        with self._lock:
            return max(self.txns.lso(self.log_end_offset), self._log_start)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start, upper)`` (Kafka's ``collectAbortedTxns``)."""
        with self._lock:
            return self.txns.aborted_between(start, upper)

    def aborted_ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Producer id -> the (first, last offset) of each of its aborted transactions (the cleaner drops
        their batches)."""
        with self._lock:
            out: dict[int, list[tuple[int, int]]] = {}
            for e in self.txns.aborted:
                out.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
            return out

    def transaction_info(self, producer_id: int) -> tuple[int, int, int]:
        """(epoch, last coordinator epoch, first offset of its open transaction or -1) of ``producer_id``;
        (-1, -1, -1) for a producer with no transactional state here."""
        with self._lock:
            p = self.txns.producers.get(producer_id)
            return (p.epoch, p.coordinator_epoch, p.first_offset) if p is not None else (-1, -1, -1)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        """Records appended since the last completed flush."""
        return self._unflushed_messages

    def segment_bases(self) -> list[int]:
        """Base offsets of the segments, oldest first (for tests and tools)."""
        with self._lock:
            return list(self._bases)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"log of {self.topic}-{self.partition} is closed")

    # ------------------------------------------------------------------ append

    def append(self, records, headers: Sequence[BatchHeader]) -> int:
        """``append_deferred``, then the fsync it asks for (if any) in this thread; returns the base offset."""
        first, flush_now = self.append_deferred(records, headers)
        if flush_now:
            self.flush()
        return first

    def append_deferred(self, records, headers: Sequence[BatchHeader]) -> tuple[int, bool]:
        """Append validated batches without any fsync; returns (offset given to the first one,
        whether the flush policy wants an fsync now).

        ``records`` holds one or more batches already checked by
        ``records.header.validate_batches``; ``headers`` is what it returned.  Offsets
        are assigned from the log end; the bytes are copied once into a bytearray to
        rewrite baseOffset and partitionLeaderEpoch.  All batches of one call go into
        the same segment (rolled first if they would not fit).  When the record count
        reached ``log.flush.interval.messages``, the caller must ``flush()`` (off the
        event loop) before it acknowledges the append: any ``flush()`` started after
        this call returned covers these bytes.
        Raises ``InvalidBatch`` for a batch whose lastOffsetDelta is not recordsCount - 1,
        ``LogClosed``, or ``OSError`` from the disk.
        """
        return self._append(records, headers)

    def _append(self, records, headers: Sequence[BatchHeader],
                marker: tuple[int, int, int, int] | None = None) -> tuple[int, bool]:
        """``append_deferred``; with ``marker`` (producer id, epoch, type, coordinator epoch) ``records``
        is that marker's control batch, applied to the transactions under the same lock."""
        if not headers:
            raise ValueError("append needs at least one batch")
        total = 0
        span = 0
        records_count = 0
        for h in headers:
            if h.records_count < 1 or h.last_offset_delta != h.records_count - 1:
                raise InvalidBatch(f"batch with recordsCount {h.records_count} and lastOffsetDelta "
                                   f"{h.last_offset_delta}: offsets must be contiguous and non-empty")
            total += h.size
            span += h.last_offset_delta + 1
            records_count += h.records_count
        if total != len(records):
            raise ValueError(f"headers describe {total} bytes but {len(records)} were given")
        if total > INT32_MAX - 1:
            raise ValueError(f"an append of {total} bytes cannot fit in one segment")
        if span - 1 > INT32_MAX:
            raise InvalidBatch(f"an append spanning {span} offsets cannot fit in one segment")
        buf = bytearray(records)
        with self._lock:
            self._check_open()
            cfg = self.config
            now_ms = self._now_ms()
            first = self.log_end_offset
            seg = self._segments[-1]
            if seg.size and (seg.size + total > cfg.segment_bytes
                             or first + span - 1 - seg.base_offset > INT32_MAX
                             or now_ms - seg.created_ms >= cfg.roll_ms):
                seg = self._roll(first)
            if cfg.message_timestamp_type == LOG_APPEND_TIME:
                headers = stamp_log_append_time(buf, headers, now_ms)
            self.last_append_time_ms = now_ms
            pos, offset = 0, first
            for h in headers:
                set_base_offset(buf, pos, offset)
                set_partition_leader_epoch(buf, pos, 0)
                offset += h.last_offset_delta + 1
                pos += h.size
            seg.append(buf, headers, first, now_ms)
            if marker is None:
                pos = first
                for h in headers:
                    self.txns.on_batch(h, pos)
                    pos += h.last_offset_delta + 1
            else:
                entry = self.txns.on_marker(*marker, first, self.log_end_offset)
                if entry is not None:
                    with open(self.directory / txn_index_name(seg.base_offset), "ab") as f:
                        f.write(encode_entries([entry]))
            self._unflushed_messages += records_count
            flush_now = self._unflushed_messages >= self.config.flush_interval_messages
        return first, flush_now

    def append_marker(self, producer_id: int, producer_epoch: int, marker: int,
                      coordinator_epoch: int) -> tuple[int, bool]:
        """Append a transaction marker (a control batch, Kafka's ``EndTransactionMarker``) for ``producer_id``
        and close its open transaction; an ABORT of an open transaction gets its entry in the active segment's
        ``.txnindex``.  Returns (the marker's offset, whether the flush policy wants an fsync now).
        Raises ``LogClosed`` or ``OSError``."""
        raw = control_batch(marker, producer_id, producer_epoch, coordinator_epoch=coordinator_epoch,
                            timestamp_ms=self._now_ms())
        return self._append(raw, [parse_header(raw)], (producer_id, producer_epoch, marker, coordinator_epoch))

    def _roll(self, base_offset: int) -> LogSegment:
        """Start a new active segment at ``base_offset`` (under ``_lock``: two file creations and the
        transaction snapshot at that offset)."""
        try:
            write_file_atomically(self.directory / snapshot_name(base_offset), self.txns.snapshot_bytes(base_offset))
            older = sorted(parsed[0] for parsed in map(parse_txn_file, os.listdir(self.directory))
                           if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and parsed[0] < base_offset)
            for base in older[:max(len(older) - (KEPT_SNAPSHOTS - 1), 0)]:  # the newest are enough for recovery
                (self.directory / snapshot_name(base)).unlink(missing_ok=True)
        except OSError as e:  # recovery then starts from an older snapshot: slower, not wrong
            log.warning("%s: cannot write the transaction snapshot at %d: %s", self, base_offset, e)
        old = self._segments[-1]
        seg = LogSegment.create(self.directory, base_offset, self.config.index_interval_bytes, self._now_ms())
        old.seal()
        self._segments.append(seg)
        self._bases.append(base_offset)
        self._dir_dirty = True
        log.debug("%s: rolled segment %d -> %d", self, old.base_offset, base_offset)
        return seg

    # ------------------------------------------------------------------ read

    def read(self, offset: int, max_bytes: int, upper_offset: int | None = None) -> FileRegion | None:
        """The log's bytes from the batch containing ``offset``, as one region of one segment.

        The region starts at the batch containing ``offset`` (the client skips records
        below its offset) and is cut at a batch boundary: it holds the most whole
        batches that fit in ``max_bytes`` -- but at least the first batch, however large
        (KIP-74; also when ``max_bytes`` <= 0).  It never crosses a segment boundary;
        the next read continues.
        ``offset == log_end_offset`` -> None; below the log start or above the end ->
        ``OffsetOutOfRange``.  ``upper_offset`` (a batch boundary: read_committed's last stable offset)
        keeps the region below it; a read at or above it -> None.
        """
        with self._lock:
            self._check_open()
            start, end = self._log_start, self.log_end_offset
            if offset < start or offset > end:
                raise OffsetOutOfRange(offset, start, end)
            if offset == end or (upper_offset is not None and offset >= upper_offset):
                return None
            # The segment holding ``offset``, plus (across a gap left by recovery or by the
            # log cleaner) the following ones up to the first that has data at or after it.
            snapshot = []
            for i in range(max(bisect.bisect_right(self._bases, offset) - 1, 0), len(self._segments)):
                seg = self._segments[i]
                snapshot.append((seg, seg.size))
                if seg.size and seg.next_offset > offset:  # (a segment the cleaner emptied holds nothing)
                    break
        for seg, size in snapshot:
            found = seg.find_batch(offset, size)
            if found is None:
                continue  # a gap left by recovery; the next segment holds the offset
            pos, h = found
            if upper_offset is not None and upper_offset < seg.next_offset:
                stop = seg.find_batch(upper_offset, size)
                if stop is not None:
                    if stop[0] <= pos:
                        return None
                    size = stop[0]
            limit = min(pos + max(max_bytes, 0), size)
            if pos + h.size >= limit:
                return FileRegion(seg.file, pos, h.size)
            return FileRegion(seg.file, pos, seg.batch_boundary(pos, limit) - pos)
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= ``timestamp_ms``, as Kafka's
        ListOffsets answers it (what ``KafkaConsumer.offsetsForTimes`` and Spark's timestamp
        options rely on).

        The first batch whose maxTimestamp is recent enough is found from the headers, and
        that one batch is decoded to find the record (its first records may be older).
        Whole segments whose largest timestamp is too old are skipped (an old segment's
        largest timestamp is computed on first use by walking its headers, so the first
        call after a restart may read a lot): run it off the event loop.
        None if no record is that recent.
        """
        with self._lock:
            self._check_open()
            start = self._log_start
            snapshot = [(s, s.size) for s in self._segments]
        for seg, size in snapshot:
            if seg.max_timestamp(size) < timestamp_ms:
                continue
            for pos, h in seg.headers(size):
                if h.last_offset >= start and h.max_timestamp >= timestamp_ms:
                    return self._first_record_since(seg, pos, h, start, timestamp_ms)
        return None

    def _first_record_since(self, seg: LogSegment, pos: int, h: BatchHeader, start: int,
                            timestamp_ms: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record of the batch at ``pos`` at or after ``timestamp_ms``
        (an undecodable batch answers with its base offset and maxTimestamp)."""
        try:
            raw = os.pread(seg.file.fileno(), h.size, pos)
            for record in iter_records(raw, start, verify_crc=False):
                if record.timestamp >= timestamp_ms:
                    return record.offset, record.timestamp
        except (ValueError, OSError) as e:
            log.warning("%s: cannot decode the batch at offset %d: %s", self, h.base_offset, e)
        return max(h.base_offset, start), h.max_timestamp

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the log's largest timestamp
        (ListOffsets timestamp -3, KIP-734); None when no record has a timestamp >= 0.

        Segments whose largest timestamp cannot beat the best found so far are skipped
        (their largest timestamp is cached); the others' batch headers are read, and the
        one winning batch is decoded to find the record.  Control batches do not count.
        Reads files: run it off the event loop.
        """
        with self._lock:
            self._check_open()
            start = self._log_start
            snapshot = [(s, s.size) for s in self._segments]
        best: tuple[int, LogSegment, int, BatchHeader] | None = None  # (timestamp, segment, position, header)
        for seg, size in snapshot:
            if seg.max_timestamp(size) <= (best[0] if best else -1):
                continue
            for pos, h in seg.headers(size):
                if h.last_offset >= start and not h.is_control and h.max_timestamp > (best[0] if best else -1):
                    best = (h.max_timestamp, seg, pos, h)
        if best is None:
            return None
        ts, seg, pos, h = best
        try:
            raw = os.pread(seg.file.fileno(), h.size, pos)
            for record in iter_records(raw, start, verify_crc=False):
                if record.timestamp == ts:
                    return record.offset, ts
        except (ValueError, OSError) as e:  # undecodable batch: answer at batch granularity
            log.warning("%s: cannot decode the batch at offset %d: %s", self, h.base_offset, e)
        return max(h.base_offset, start), ts

    # ------------------------------------------------------------------ flush

    def flush(self) -> None:
        """fsync every segment with unflushed bytes (and the directory after a roll).

        Safe from any thread; appends continue while the fsync runs.
        """
        with self._io_lock:
            with self._lock:
                if self._closed:
                    return
                dirty = [(s, s.size) for s in self._segments if s.size > s.flushed_size]
                messages = self._unflushed_messages
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for seg, _ in dirty:
                    seg.fsync()
                    self._fsync_if_present(txn_index_name(seg.base_offset))
                if dir_dirty:
                    for seg, _ in dirty:
                        self._fsync_if_present(snapshot_name(seg.base_offset))
                    fsync_dir(self.directory)
            except BaseException:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            with self._lock:
                for seg, size in dirty:
                    seg.flushed_size = max(seg.flushed_size, size)
                self._unflushed_messages -= messages
                self._last_flush_ms = self._now_ms()

    def _fsync_if_present(self, name: str) -> None:
        """fsync a transaction file beside the segments (``.txnindex``, ``.txnsnapshot``) if there is one."""
        try:
            fd = os.open(self.directory / name, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def maybe_flush_by_time(self) -> None:
        """Flush if ``log.flush.interval.ms`` has passed since the last flush and data is unflushed."""
        interval = self.config.flush_interval_ms
        if interval < 0:
            return
        with self._lock:
            due = (not self._closed and self._now_ms() - self._last_flush_ms >= interval
                   and (self._dir_dirty or any(s.size > s.flushed_size for s in self._segments)))
        if due:
            self.flush()

    # ------------------------------------------------------------------ delete records

    def advance_log_start(self, offset: int) -> int:
        """DeleteRecords: move the log start offset forward to ``offset`` (never back) and return
        the log start offset.  Durable before it returns (the log start checkpoint is written, so a
        restart keeps it); reads below it raise ``OffsetOutOfRange`` from now on, and whole
        segments below it go at the next retention run.  ``offset`` below 0 or above the log end
        raises ``OffsetOutOfRange``.  Blocking (fsync): call it off the event loop.
        """
        with self._io_lock:
            with self._lock:
                self._check_open()
                start, end = self._log_start, self.log_end_offset
                if offset < 0 or offset > end:
                    raise OffsetOutOfRange(offset, start, end)
                if offset <= start:
                    return start
                self._log_start = offset
            write_offset(self.directory / LOG_START_CHECKPOINT, offset)
        log.info("%s: records before %d deleted; log start offset now %d", self, offset, offset)
        return offset

    # ------------------------------------------------------------------ compaction (``cleaner``)

    def closed_segments(self) -> list[tuple[LogSegment, int]]:
        """(segment, size) of every segment but the active one, oldest first: what the cleaner may rewrite."""
        with self._lock:
            self._check_open()
            return [(s, s.size) for s in self._segments[:-1]]

    def replace_segments(self, old: list[LogSegment], commit) -> bool:
        """Swap the cleaner's output in for the adjacent closed segments ``old`` (``swap``'s steps 2-3):
        under the maintenance lock (so retention cannot delete them meanwhile), checks they are still
        this log's, runs ``commit()`` (the renames; it returns the new segment, opened) and puts that
        segment in their place.  False (nothing committed) when the log changed underneath."""
        with self._io_lock:
            with self._lock:
                if self._closed:
                    return False
                try:
                    i = self._segments.index(old[0])
                except ValueError:
                    return False
                if self._segments[i:i + len(old)] != old or i + len(old) >= len(self._segments):
                    return False
            new = commit()
            with self._lock:
                self._segments[i:i + len(old)] = [new]
                self._bases[i:i + len(old)] = [new.base_offset]
        for seg in old:
            seg.index.close()  # the log file stays open for regions being sent; garbage closes it
        return True

    # ------------------------------------------------------------------ retention

    def apply_retention(self) -> int:
        """Delete old segments by ``log.retention.ms`` and ``log.retention.bytes``; returns how many.

        Only whole segments, oldest first, never the active one.  By time, a segment
        goes when its largest batch timestamp (or, if it has none, its last write
        time) is more than retention.ms old.  By size, oldest segments go while the
        rest would still be at least retention.bytes.  The log start offset moves to
        the first remaining segment and is checkpointed.  Regions already handed out
        stay readable (the files are unlinked, not closed).
        """
        cfg = self.config
        with self._io_lock:
            with self._lock:
                if self._closed:
                    return 0
                # each closed segment with the base of the one after it: a segment the cleaner emptied
                # has no offsets of its own, and only the next base says where its range ends
                candidates = [(s, s.size, after.base_offset)
                              for s, after in zip(self._segments, self._segments[1:], strict=False)]
                total = sum(s.size for s in self._segments)
                start = self._log_start
            if not candidates:
                return 0
            now_ms = self._now_ms()
            doomed = 0
            for seg, size, next_base in candidates:
                expired = False
                if cfg.retention_ms >= 0:
                    ts = seg.max_timestamp(size)
                    expired = now_ms - (ts if ts >= 0 else seg.last_modified_ms) > cfg.retention_ms
                expired = expired and cfg.delete  # a compact-only topic keeps its segments (the cleaner prunes)
                oversize = cfg.delete and cfg.retention_bytes >= 0 and total - size >= cfg.retention_bytes
                below_start = next_base <= start
                if not (expired or oversize or below_start):
                    break
                total -= size
                doomed += 1
            if not doomed:
                return 0
            with self._lock:
                if self._closed:
                    return 0
                victims = self._segments[:doomed]
                del self._segments[:doomed]
                del self._bases[:doomed]
                self._log_start = max(self._log_start, self._bases[0])
                new_start = self._log_start
            write_offset(self.directory / LOG_START_CHECKPOINT, new_start)
            for seg in victims:
                seg.unlink()
            self._drop_txn_files_below(new_start)
            fsync_dir(self.directory)
        log.info("%s: retention deleted %d segment(s); log start offset now %d", self, doomed, new_start)
        return doomed

    def _drop_txn_files_below(self, first_base: int) -> None:
        """Retention took the segments below ``first_base``: their aborted entries and snapshots go too."""
        with self._lock:
            self.txns.drop_below(first_base)
        for entry in os.scandir(self.directory):
            parsed = parse_txn_file(entry.name)
            if parsed is not None and parsed[0] < first_base:
                os.unlink(entry.path)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush, then close every file.  Regions handed out earlier become unreadable."""
        try:
            self.flush()
        except OSError as e:
            log.error("%s: flush at close failed: %s", self, e)
        with self._io_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Remove the partition directory (topic deletion).

        The directory is first renamed to ``<name>.<uuid>-delete`` (atomic, so a crash
        never leaves a half-deleted partition that looks live; ``LogManager`` removes
        leftovers at start), then removed.  Open descriptors are left to the garbage
        collector so that regions being sent stay readable.
        """
        with self._io_lock:
            with self._lock:
                if self._closed and not self.directory.exists():
                    return
                self._closed = True
                for seg in self._segments:
                    seg.index.close()
            target = deletion_name(self.directory)
            try:
                os.rename(self.directory, target)
            except FileNotFoundError:
                return
            shutil.rmtree(target, ignore_errors=True)
        log.info("deleted log %s", self.directory)

    truncate_all = delete  # the same operation under the name the broker's topic deletion uses
