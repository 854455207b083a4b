"""Walking the record batches of a segment file.

Two walks:

* ``scan_batches`` -- recovery: reads the file in large chunks, checks every batch
  (header present, magic 2, length within the file, counts >= 0, offsets increasing,
  CRC-32C) and stops at the first one that fails, saying why.  It also rebuilds the
  sparse index entries and the segment's max timestamp on the way.
* ``iter_headers`` -- lookups in committed data: one 61-byte ``pread`` per batch,
  no CRC (the bytes were checked when appended or recovered).

Both read with ``os.pread`` so they never move a file position that someone else
(``loop.sendfile``) may rely on.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Iterator

from ..records.header import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    crc32c,
    parse_header,
)
from .config import INT32_MAX

log = logging.getLogger(__name__)

SCAN_CHUNK_BYTES = 1 << 20


@dataclass
class ScanResult:
    """What a recovery scan found between ``start`` and the first bad byte."""

    valid_bytes: int  # file position just after the last good batch
    next_offset: int  # offset after the last good batch (``min_offset`` if none)
    max_timestamp: int = -1
    batches: int = 0
    index_entries: list[tuple[int, int]] = field(default_factory=list)
    bytes_since_index: int = 0
    error: str | None = None  # why the scan stopped before ``end``; None if it reached it


def _problem(h: BatchHeader, pos: int, end: int, base_offset: int, min_offset: int) -> str | None:
    if h.magic != MAGIC_V2:
        return f"magic {h.magic} at byte {pos}"
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return f"batchLength {h.batch_length} too small at byte {pos}"
    if pos + h.size > end:
        return f"batch at byte {pos} claims {h.size} bytes but only {end - pos} remain (torn write)"
    if h.records_count < 0 or h.last_offset_delta < 0:
        return f"negative recordsCount/lastOffsetDelta at byte {pos}"
    if h.base_offset < min_offset:
        return f"baseOffset {h.base_offset} at byte {pos} is below the expected {min_offset}"
    if h.last_offset - base_offset > INT32_MAX:
        return f"offset {h.last_offset} at byte {pos} does not fit the segment based at {base_offset}"
    return None


def scan_batches(fileobj, base_offset: int, start: int, end: int, *, min_offset: int,
                 index_interval_bytes: int, bytes_since_index: int = 0,
                 expect_first_offset: int | None = None,
                 chunk_bytes: int = SCAN_CHUNK_BYTES) -> ScanResult:
    """Validate batches in ``[start, end)`` of a segment whose first offset is ``base_offset``.

    ``min_offset`` is the lowest base offset the first batch may have (offsets only
    grow); ``expect_first_offset``, when given, is the exact base offset the batch at
    ``start`` must carry (an index entry points there).  Index entries are collected
    with the appender's rule, continuing from ``bytes_since_index``.
    """
    fd = fileobj.fileno()
    result = ScanResult(valid_bytes=start, next_offset=min_offset, bytes_since_index=bytes_since_index)
    buf = b""
    buf_start = start
    pos = start

    def window(need: int) -> memoryview | None:
        """``need`` bytes at ``pos`` from the chunk buffer, refilling it; None at end of data."""
        nonlocal buf, buf_start
        if pos + need > end:
            return None
        if pos < buf_start or pos + need > buf_start + len(buf):
            buf = os.pread(fd, min(max(chunk_bytes, need), end - pos), pos)
            buf_start = pos
            if len(buf) < need:
                return None
        return memoryview(buf)[pos - buf_start: pos - buf_start + need]

    while pos < end:
        head = window(HEADER_SIZE)
        if head is None:
            result.error = f"{end - pos} trailing bytes at {pos} are less than a batch header"
            break
        h = parse_header(head)
        problem = _problem(h, pos, end, base_offset, result.next_offset)
        if (problem is None and expect_first_offset is not None and pos == start
                and h.base_offset != expect_first_offset):
            problem = f"index says offset {expect_first_offset} at byte {pos}, the batch there has {h.base_offset}"
        if problem is None:
            whole = window(h.size)
            if whole is None:
                problem = f"batch at byte {pos} could not be read in full"
            else:
                actual = crc32c(whole[ATTRIBUTES_OFFSET:])
                if actual != h.crc:
                    problem = f"CRC mismatch at byte {pos}: stored {h.crc:#010x}, computed {actual:#010x}"
        if problem is not None:
            result.error = problem
            break
        if result.bytes_since_index >= index_interval_bytes:
            result.index_entries.append((h.base_offset - base_offset, pos))
            result.bytes_since_index = 0
        result.bytes_since_index += h.size
        result.max_timestamp = max(result.max_timestamp, h.max_timestamp)
        result.batches += 1
        result.next_offset = h.next_offset
        pos += h.size
        result.valid_bytes = pos
    return result


def iter_headers(fileobj, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each committed batch in ``[start, end)``."""
    pos = start
    while pos < end:
        raw = os.pread(fileobj.fileno(), HEADER_SIZE, pos)
        if len(raw) < HEADER_SIZE:
            log.error("segment %s: short header read at byte %d (file shrank underneath the log?)",
                      getattr(fileobj, "name", fileobj), pos)
            return
        h = parse_header(raw)
        if h.magic != MAGIC_V2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            log.error("segment %s: unreadable batch header at byte %d in committed data",
                      getattr(fileobj, "name", fileobj), pos)
            return
        yield pos, h
        pos += h.size
