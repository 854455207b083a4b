"""What a share partition's acquisition reads of its log (``share.manager`` calls these): the data
batches of a region from their headers alone, which of them belong to aborted transactions
(``share.isolation.level=read_committed``), and acquired ranges cut at batch boundaries as Kafka's
batch-optimized acquisition cuts them."""

from __future__ import annotations

import bisect
import os
from typing import Any, NamedTuple

from spark_coord.records.header import HEADER_SIZE, TRANSACTIONAL_MASK, parse_header
from spark_coord.share.partition import Acquired


class Batch(NamedTuple):
    """A data batch of a region read for an acquisition: its offsets, its bytes in the region, and
    what read_committed needs of it."""

    first: int
    last: int
    start: int
    end: int
    producer_id: int
    transactional: bool


def batch_bounds(region: Any, offset: int, max_records: int) -> tuple[list[Batch], int]:
    """The data batches of ``region`` (whole batches from one segment file), reading only their
    headers, up to the batch that brings the records at or after ``offset`` to ``max_records``;
    and one past the last offset of the last batch read, control batches (transaction markers)
    included (-1 when none was)."""
    out = []
    fd = region.fileobj.fileno()
    pos, n, records, read_end = 0, region.length, 0, -1
    while pos + HEADER_SIZE <= n:
        h = parse_header(os.pread(fd, HEADER_SIZE, region.offset + pos))
        end = pos + h.size
        if end > n:
            break
        read_end = h.last_offset + 1
        if not h.is_control:
            out.append(Batch(h.base_offset, h.last_offset, pos, end, h.producer_id,
                              bool(h.attributes & TRANSACTIONAL_MASK) and h.producer_id >= 0))
            records += h.last_offset - max(h.base_offset, offset) + 1
        pos = end
        if records >= max_records:
            break
    return out, read_end


def aborted_ranges(plog: Any, batches: list[Batch], read_end: int) -> list[tuple[int, int]]:
    """The ``(first, last)`` offsets of the ``batches`` that belong to aborted transactions: a
    transactional batch whose producer has an aborted transaction holding it (from its first offset
    to its ABORT marker), from the log's aborted-transaction index -- what Kafka's
    ``SharePartition.fetchAbortedTransactionRecordBatches`` finds with the fetch's aborted
    transactions."""
    if not any(b.transactional for b in batches):
        return []
    by_producer: dict[int, list[tuple[int, int]]] = {}
    for e in plog.aborted_transactions(batches[0].first, read_end):
        by_producer.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
    return [(b.first, b.last) for b in batches if b.transactional and any(
        first <= b.first <= marker for first, marker in by_producer.get(b.producer_id, ()))]


def split_acquired(acquired: list[Acquired], firsts: list[int], batch_size: int) -> list[Acquired]:
    """``acquired`` cut where Kafka's batch-optimized acquisition starts a new AcquiredRecords: at the
    first record batch (``firsts``: their first offsets, ascending) that starts ``batch_size`` or
    more records after the range's start, so a range holds whole batches and no more of them than it
    takes to reach ``batch_size`` (matching Java's ``SharePartition.createBatches``; a BatchSize
    below 1 counts as 1 -- Kafka answers an empty range there)."""
    size = max(batch_size, 1)
    out = []
    for a in acquired:
        first = a.first_offset
        if a.last_offset - first + 1 > size:
            for base in firsts[bisect.bisect_right(firsts, first):]:
                if base > a.last_offset:
                    break
                if base - first >= size:
                    out.append(Acquired(first, base - 1, a.delivery_count))
                    first = base
        out.append(Acquired(first, a.last_offset, a.delivery_count))
    return out
