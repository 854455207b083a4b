"""Log compaction: keep the last record of each key in the closed segments of compacted topics (Kafka's LogCleaner).

A log is *compacted* when its ``cleanup.policy`` has ``compact``.  Its closed segments are
split by the cleaner checkpoint (``swap.CLEANER_CHECKPOINT``, the first offset not yet
cleaned) into a clean head and a dirty tail.  The cleaner picks the log with the highest
dirty ratio (dirty bytes / closed bytes) at or above ``min.cleanable.dirty.ratio`` -- or any
log whose oldest dirty record is older than ``max.compaction.lag.ms`` -- and in one pass:

1. builds an ``OffsetMap`` of key -> last offset over the dirty segments (never the active
   one; not the segments whose newest record is younger than ``min.compaction.lag.ms``), in
   memory bounded by ``log.cleaner.dedupe.buffer.size`` (16 bytes a key: a 64-bit hash and
   the offset, at most 3/4 full).  When the keys do not all fit, the map ends at the batch
   where it filled (``map_end``) and the next pass goes on from there;
2. rewrites the closed segments below ``map_end`` in groups of adjacent segments that fit in
   ``segment.bytes``: a record is kept when no later record of its key is in the map (and
   always when its offset is at or above ``map_end``); a tombstone (null value) is dropped
   once it is older than ``delete.retention.ms`` (counted from its batch's timestamp); a
   record without a key is dropped (a compacted topic cannot hold one); control batches are
   kept as they are; the batches of aborted transactions (the log's aborted-transaction index,
   ``txn``) are dropped whole, and never count in the map (an aborted record does not supersede a
   committed one of its key);
3. swaps each cleaned group in (``swap``: ``.cleaned`` then ``.swap``, crash-safe) and moves
   the checkpoint to ``map_end``.

Transactions: only closed segments wholly below the last stable offset are cleaned (as Kafka
cleans up to its first unstable offset), so a transaction not yet decided is never judged; the
markers stay (Kafka drops a marker ``delete.retention.ms`` after its transaction has no data left;
ours are kept, one small batch per transaction), so a ``read_committed`` reader of a cleaned log sees
exactly the committed records, and the ``.txnindex`` files stay as they are (their entries name
offsets whose data is gone: harmless to a reader).

Batches keep their offsets, as Kafka's cleaner keeps them: a batch whose records all stay is
copied byte for byte; one that loses some is rebuilt with the kept records' bytes unchanged
(their offset and timestamp deltas are relative to the batch's base, which stays), the same
baseOffset, baseTimestamp, maxTimestamp, producer id, epoch and base sequence, the same
compression codec, and -- as Kafka's ``MemoryRecords.filterTo`` does -- the original
lastOffsetDelta, so the batch still ends at its original last offset (the producer's last
sequence is not lost and consumers move past the whole batch); recordsCount is the number
kept and the CRC-32C is computed anew.  A batch that loses every record is dropped.  So a
compacted log has gaps: offsets still increase and none repeats, and a fetch at an offset in
a gap gets the next batch.

I/O is throttled to ``log.cleaner.io.max.bytes.per.second`` (bytes read plus written).  The
cleaner runs on its own thread (``LogCleaner``); ``clean_log`` is the single-pass entry point
that tests and the benchmark call.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..records import compression
from ..records.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
    BatchHeader,
    crc32c,
)
from ..records.reader import batch_records, read_varint
from .checkpoint import fsync_dir, read_offset, write_offset
from .config import INT32_MAX
from .index import ENTRY_SIZE
from .names import segment_index_name, segment_log_name
from .segment import LogSegment
from .swap import CLEANER_CHECKPOINT, cleaned_name, crash_point, swap_name

log = logging.getLogger(__name__)

#: Bytes of offset map per key: a 64-bit key hash and a 64-bit offset (Kafka's SkimpyOffsetMap uses 24
#: with an MD5 hash).
BYTES_PER_ENTRY = 16
MAP_LOAD_FACTOR = 0.75
READ_CHUNK = 1 << 20


class OffsetMap:
    """Key hash -> last offset, open addressing over two ``array('q')`` (linear probing), fixed size.

    Keys are hashed with Python's 64-bit ``hash`` of bytes (SipHash): two keys sharing a hash in
    one pass would count as one key (Kafka accepts the same for its MD5-based map)."""

    def __init__(self, memory_bytes: int, expected_keys: int):
        most = max(memory_bytes // BYTES_PER_ENTRY, 16)
        slots = 16
        while slots < expected_keys / MAP_LOAD_FACTOR and slots * 2 <= most:
            slots *= 2
        self.slots = slots
        self.limit = int(slots * MAP_LOAD_FACTOR)
        self._mask = slots - 1
        self._hashes = array("q", bytes(8 * slots))  # 0 = empty slot
        self._offsets = array("q", bytes(8 * slots))
        self.size = 0

    @property
    def memory_bytes(self) -> int:
        return self.slots * BYTES_PER_ENTRY

    @property
    def full(self) -> bool:
        return self.size >= self.limit

    def put(self, key: bytes, offset: int) -> None:
        h = hash(key) or 1
        mask, hashes = self._mask, self._hashes
        i = h & mask
        while True:
            found = hashes[i]
            if found == h:
                self._offsets[i] = offset
                return
            if found == 0:
                hashes[i] = h
                self._offsets[i] = offset
                self.size += 1
                return
            i = (i + 1) & mask

    def get(self, key: bytes) -> int:
        """The last offset of ``key``, -1 when the map does not have it."""
        h = hash(key) or 1
        mask, hashes = self._mask, self._hashes
        i = h & mask
        while True:
            found = hashes[i]
            if found == h:
                return self._offsets[i]
            if found == 0:
                return -1
            i = (i + 1) & mask


class Throttler:
    """At most ``rate`` bytes per second, averaged over windows of about a second (Kafka's ``Throttler``)."""

    def __init__(self, rate: int, stop: threading.Event | None = None, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self._stop = stop or threading.Event()
        self._clock = clock
        self._start = clock()
        self._bytes = 0

    def account(self, nbytes: int) -> None:
        if self.rate <= 0 or self.rate >= 2**62:
            return
        self._bytes += nbytes
        elapsed = self._clock() - self._start
        wanted = self._bytes / self.rate
        if wanted > elapsed:
            self._stop.wait(wanted - elapsed)
        if self._clock() - self._start > 1.0:
            self._start, self._bytes = self._clock(), 0


class CleanerStopped(Exception):
    """The cleaner is shutting down: the pass is abandoned (its ``.cleaned`` files removed)."""


@dataclass
class CleanerSettings:
    """The broker's ``log.cleaner.*`` settings (dynamic ones included)."""

    dedupe_buffer_size: int = 134217728
    io_max_bytes_per_second: int = 2**63 - 1
    backoff_ms: int = 15000
    enable: bool = True

    @classmethod
    def from_broker_config(cls, cfg) -> "CleanerSettings":
        d = cls()
        return cls(dedupe_buffer_size=int(cfg.get("log.cleaner.dedupe.buffer.size", d.dedupe_buffer_size)),
                   io_max_bytes_per_second=int(cfg.get("log.cleaner.io.max.bytes.per.second",
                                                       d.io_max_bytes_per_second)),
                   backoff_ms=int(cfg.get("log.cleaner.backoff.ms", d.backoff_ms)),
                   enable=bool(cfg.get("log.cleaner.enable", d.enable)))


@dataclass
class CleanStats:
    """What one pass over one log did."""

    log: str = ""
    bytes_read: int = 0
    bytes_written: int = 0
    dirty_bytes: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_entries: int = 0
    map_bytes: int = 0
    first_dirty: int = 0
    map_end: int = 0
    segments_before: int = 0
    segments_after: int = 0
    seconds: float = 0.0
    groups: list[tuple[int, int]] = field(default_factory=list)  # (base, bytes written) per swapped group


# ---------------------------------------------------------------------- records

def _records(header: BatchHeader, data) -> Iterable[tuple[int, int, int, bytes | None, bool]]:
    """(start, end, offset delta, key, value is null) of each record of a batch's records section,
    positions of the whole record (length prefix included) within ``data``."""
    p = 0
    for _ in range(header.records_count):
        start = p
        length, p = read_varint(data, p)
        end = p + length
        p += 1  # attributes
        _, p = read_varint(data, p)  # timestamp delta
        delta, p = read_varint(data, p)
        klen, p = read_varint(data, p)
        if klen >= 0:
            key = bytes(data[p:p + klen])
            p += klen
        else:
            key = None
        vlen, _ = read_varint(data, p)
        yield start, end, delta, key, vlen < 0
        p = end


def _rebuild(header: BatchHeader, raw, parts: list, count: int) -> bytes:
    """A batch with the kept records (``parts``: their encoded bytes), the original base offset, last
    offset delta, timestamps, producer fields and codec, and a new CRC."""
    payload = b"".join(parts)
    if header.codec:
        payload = compression.compress(header.codec, payload)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
                     header.partition_leader_epoch, header.magic, 0, header.attributes, header.last_offset_delta,
                     header.base_timestamp, header.max_timestamp, header.producer_id, header.producer_epoch,
                     header.base_sequence, count)
    out += payload
    out[CRC_OFFSET:CRC_OFFSET + 4] = crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(out)


def _batches(seg: LogSegment, size: int, throttler: Throttler, stop: threading.Event):
    """(header, whole batch bytes) of every batch of a segment, read in large chunks."""
    fd = seg.file.fileno()
    pos = 0
    buf, buf_start = b"", 0
    while pos < size:
        if stop.is_set():
            raise CleanerStopped()
        if pos + HEADER_SIZE > buf_start + len(buf):
            buf, buf_start = os.pread(fd, min(READ_CHUNK, size - pos), pos), pos
            throttler.account(len(buf))
        h = HEADER.unpack_from(buf, pos - buf_start)
        header = BatchHeader._make(h)
        end = pos + header.size
        if end > buf_start + len(buf):
            buf, buf_start = os.pread(fd, max(READ_CHUNK, header.size), pos), pos
            throttler.account(len(buf))
        yield header, memoryview(buf)[pos - buf_start:end - buf_start]
        pos = end


# ---------------------------------------------------------------------- one pass

def read_checkpoint(plog) -> int:
    return read_offset(plog.directory / CLEANER_CHECKPOINT) or 0


def dirty_state(plog, now_ms: int) -> tuple[float, list[tuple[LogSegment, int]], int, bool]:
    """(dirty ratio, cleanable closed segments, first dirty offset, whether max.compaction.lag.ms forces a
    pass) of a compacted log."""
    cfg = plog.config
    closed = plog.closed_segments()
    cleanable = []
    lso = plog.last_stable_offset
    for seg, size in closed:
        if seg.next_offset > lso:
            break  # an open transaction: nothing from its first offset on is cleaned yet
        if cfg.min_compaction_lag_ms > 0 and seg.max_timestamp(size) > now_ms - cfg.min_compaction_lag_ms:
            break  # this one and later ones hold records too young to compact
        cleanable.append((seg, size))
    first_dirty = max(read_checkpoint(plog), plog.log_start_offset)
    dirty = [(s, n) for s, n in cleanable if s.next_offset > first_dirty and n > 0]
    dirty_bytes = sum(n for _, n in dirty)
    total = sum(n for _, n in cleanable)
    ratio = dirty_bytes / total if total else 0.0
    overdue = False
    if dirty and cfg.max_compaction_lag_ms < 2**63 - 1:
        first = next(iter(dirty[0][0].headers(dirty[0][1])), None)
        overdue = first is not None and 0 <= first[1].max_timestamp < now_ms - cfg.max_compaction_lag_ms
    return ratio, cleanable, first_dirty, overdue


def clean_log(plog, settings: CleanerSettings, now_ms: int | None = None, stop: threading.Event | None = None,
              force: bool = False) -> CleanStats | None:
    """One cleaning pass over ``plog`` if it is due (``force``: whatever its dirty ratio); None if there was
    nothing to do.  Blocking (reads and writes whole segments)."""
    stop = stop or threading.Event()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cfg = plog.config
    if not cfg.compact:
        return None
    ratio, cleanable, first_dirty, overdue = dirty_state(plog, now_ms)
    dirty = [(s, n) for s, n in cleanable if s.next_offset > first_dirty and n > 0]
    if not dirty or not (force or overdue or ratio >= cfg.min_cleanable_dirty_ratio):
        return None
    started = time.monotonic()
    throttler = Throttler(settings.io_max_bytes_per_second, stop)
    stats = CleanStats(log=f"{plog.topic}-{plog.partition}", first_dirty=first_dirty,
                       dirty_bytes=sum(n for _, n in dirty), segments_before=len(cleanable))
    expected = sum(h.records_count for s, n in dirty for _, h in s.headers(n))
    offsets = OffsetMap(settings.dedupe_buffer_size, expected)
    aborted = _aborted_test(plog.aborted_ranges())
    map_end = _build_map(dirty, first_dirty, offsets, throttler, stop, stats, aborted)
    stats.map_entries, stats.map_bytes, stats.map_end = offsets.size, offsets.memory_bytes, map_end
    to_clean = [(s, n) for s, n in cleanable if s.base_offset < map_end]
    for group in _groups(to_clean, cfg.segment_bytes):
        written = _clean_group(plog, group, offsets, map_end, now_ms, cfg.delete_retention_ms, throttler, stop,
                               stats, aborted)
        if written is None:
            log.info("%s: the log changed during cleaning; the pass stops here", plog)
            break
        stats.groups.append((group[0][0].base_offset, written))
    else:
        crash_point("checkpoint")
        write_offset(plog.directory / CLEANER_CHECKPOINT, map_end)
    stats.segments_after = len(plog.closed_segments())
    stats.seconds = time.monotonic() - started
    log.info("%s: cleaned offsets [%d, %d): %d -> %d bytes, %d of %d records kept, %d keys in %.1f MiB of map, "
             "%.2f s", plog, first_dirty, map_end, stats.bytes_read, stats.bytes_written, stats.records_kept,
             stats.records_read, stats.map_entries, stats.map_bytes / 2**20, stats.seconds)
    return stats


def _aborted_test(ranges: dict[int, list[tuple[int, int]]]) -> Callable[[BatchHeader], bool]:
    """Whether a batch belongs to an aborted transaction (a transactional data batch of a producer inside
    one of its aborted transactions' offsets)."""
    def aborted(h: BatchHeader) -> bool:
        spans = ranges.get(h.producer_id) if h.attributes & TRANSACTIONAL_MASK and not h.is_control else None
        return bool(spans) and any(first <= h.base_offset <= last for first, last in spans or ())
    return aborted


def _build_map(dirty, first_dirty: int, offsets: OffsetMap, throttler: Throttler, stop: threading.Event,
               stats: CleanStats, aborted: Callable[[BatchHeader], bool] = lambda h: False) -> int:
    """Fill the map from the dirty segments; returns the offset it covers up to (exclusive)."""
    end = first_dirty
    for seg, size in dirty:
        for header, raw in _batches(seg, size, throttler, stop):
            if header.next_offset <= first_dirty:
                continue
            if header.is_control or aborted(header):
                end = header.next_offset
                continue
            if offsets.size + header.records_count > offsets.limit and offsets.size:
                return end  # the map is full: this pass cleans up to here
            data = batch_records(header, raw, 2**31 - 1)
            base = header.base_offset
            for _, _, delta, key, _ in _records(header, data):
                if key is not None and base + delta >= first_dirty:
                    if offsets.full:
                        return base + delta  # a batch larger than the whole map: stop inside it
                    offsets.put(key, base + delta)
            end = header.next_offset
    return end


def _groups(segments: list[tuple[LogSegment, int]], max_bytes: int) -> list[list[tuple[LogSegment, int]]]:
    """Adjacent segments whose bytes together fit one segment (the cleaned one can only be smaller)."""
    groups: list[list[tuple[LogSegment, int]]] = []
    for seg, size in segments:
        if groups:
            last = groups[-1]
            total = sum(n for _, n in last) + size
            if total <= max_bytes and seg.next_offset - 1 - last[0][0].base_offset <= INT32_MAX:
                last.append((seg, size))
                continue
        groups.append([(seg, size)])
    return groups


def _clean_group(plog, group, offsets: OffsetMap, map_end: int, now_ms: int, delete_retention_ms: int,
                 throttler: Throttler, stop: threading.Event, stats: CleanStats,
                 aborted: Callable[[BatchHeader], bool] = lambda h: False) -> int | None:
    """Write the cleaned form of ``group`` and swap it in; returns the bytes written, None when the log
    changed meanwhile (nothing swapped)."""
    directory: Path = plog.directory
    base = group[0][0].base_offset
    log_name, index_name = segment_log_name(base), segment_index_name(base)
    cleaned_log, cleaned_index = directory / cleaned_name(log_name), directory / cleaned_name(index_name)
    interval = plog.config.index_interval_bytes
    entries: list[tuple[int, int]] = []
    pos, since_index = 0, 0
    try:
        with open(cleaned_log, "xb") as out:
            for seg, size in group:
                for header, raw in _batches(seg, size, throttler, stop):
                    stats.bytes_read += header.size
                    if aborted(header):
                        stats.records_read += header.records_count
                        continue
                    kept = _filter(header, raw, offsets, map_end, now_ms, delete_retention_ms, stats)
                    if kept is None:
                        continue
                    if since_index >= interval:
                        entries.append((header.base_offset - base, pos))
                        since_index = 0
                    out.write(kept)
                    throttler.account(len(kept))
                    pos += len(kept)
                    since_index += len(kept)
            out.flush()
            os.fsync(out.fileno())
        latest = max(os.stat(seg.log_path).st_mtime for seg, _ in group)
        os.utime(cleaned_log, (latest, latest))  # retention by time sees the group's age, not the pass's
        index = array("i")
        for rel, p in entries:
            index.extend((rel, p))
        if sys.byteorder == "little":
            index.byteswap()
        with open(cleaned_index, "wb") as f:
            f.write(index.tobytes())
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        cleaned_log.unlink(missing_ok=True)
        cleaned_index.unlink(missing_ok=True)
        raise
    assert len(index) * 4 == len(entries) * ENTRY_SIZE

    crash_point("cleaned")

    def commit() -> LogSegment:
        os.replace(cleaned_index, directory / swap_name(index_name))
        crash_point("index-swap")
        os.replace(cleaned_log, directory / swap_name(log_name))
        fsync_dir(directory)  # committed: a crash from here on finishes the swap at start
        crash_point("committed")
        for seg, _ in group[1:]:
            seg.log_path.unlink(missing_ok=True)
            seg.index_path.unlink(missing_ok=True)
        crash_point("unlinked")
        os.replace(directory / swap_name(index_name), directory / index_name)
        crash_point("index-renamed")
        os.replace(directory / swap_name(log_name), directory / log_name)
        fsync_dir(directory)
        crash_point("renamed")
        return LogSegment.open(directory, base, interval, full_scan=False)

    if not plog.replace_segments([seg for seg, _ in group], commit):
        cleaned_log.unlink(missing_ok=True)
        cleaned_index.unlink(missing_ok=True)
        return None
    stats.bytes_written += pos
    return pos


def _filter(header: BatchHeader, raw, offsets: OffsetMap, map_end: int, now_ms: int, delete_retention_ms: int,
            stats: CleanStats) -> bytes | memoryview | None:
    """The batch as the cleaned log holds it: unchanged, rebuilt with fewer records, or None (dropped)."""
    if header.is_control or header.base_offset >= map_end:
        return raw
    data = batch_records(header, raw, 2**31 - 1)
    base = header.base_offset
    tombstones_expire = now_ms - header.max_timestamp > delete_retention_ms
    parts = []
    total = 0
    for start, end, delta, key, null_value in _records(header, data):
        total += 1
        offset = base + delta
        if offset < map_end:
            if key is None:
                continue
            if offsets.get(key) > offset:
                continue  # a later record of this key is in the map
            if null_value and tombstones_expire:
                continue
        parts.append(data[start:end])
    stats.records_read += total
    stats.records_kept += len(parts)
    if len(parts) == total:
        return raw
    if not parts:
        return None
    return _rebuild(header, raw, parts, len(parts))


# ---------------------------------------------------------------------- the thread

class LogCleaner:
    """The broker's cleaner thread: cleans the dirtiest compacted log, sleeps ``log.cleaner.backoff.ms``
    when none is due (``wake()`` cuts the sleep short: a topic's configs changed)."""

    def __init__(self, logs, settings: Callable[[], CleanerSettings], clock: Callable[[], float] = time.time):
        self.logs = logs
        self.settings = settings
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last_stats: CleanStats | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _candidates(self, now_ms: int) -> list[tuple[float, object]]:
        out = []
        for plog in self.logs.logs():
            try:
                if not plog.config.compact:
                    continue
                ratio, cleanable, first_dirty, overdue = dirty_state(plog, now_ms)
            except Exception:  # noqa: BLE001 -- a closed or deleted log
                continue
            if overdue or (ratio > 0 and ratio >= plog.config.min_cleanable_dirty_ratio):
                out.append((2.0 if overdue else ratio, plog))
        out.sort(key=lambda c: -c[0])
        return out

    def clean_once(self) -> CleanStats | None:
        """Clean the dirtiest log that is due; None when none is."""
        settings = self.settings()
        now_ms = int(self._clock() * 1000)
        for _, plog in self._candidates(now_ms):
            stats = clean_log(plog, settings, now_ms, self._stop)
            if stats is not None:
                self.passes += 1
                self.last_stats = stats
                return stats
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            settings = self.settings()
            stats = None
            if settings.enable:
                try:
                    stats = self.clean_once()
                except CleanerStopped:
                    return
                except Exception:  # noqa: BLE001 -- one bad log must not stop cleaning
                    log.exception("log cleaner pass failed")
            if stats is None:
                self._wake.wait(settings.backoff_ms / 1000)
                self._wake.clear()
