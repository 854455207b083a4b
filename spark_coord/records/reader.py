"""Read record batches v2: split a record set into batches, decode their records.

A fetched record set is batches back to back and may end with a partial batch (the
broker cuts at ``max_bytes``); ``iter_batches`` stops silently there.  Everything else
is treated as hostile: each varint is bounded to 10 bytes, each length is checked
against the bytes that remain in its record, every record must end exactly where its
length says and the batch exactly after its ``recordsCount`` records.  Failures raise
``InvalidBatch`` (a ``ValueError``) saying what and where; ``DecompressedTooLarge``
(also a ``ValueError``) when a compressed batch inflates beyond the limit.

Control batches (transaction markers) are skipped, whatever the isolation level.  Records of
aborted transactions are returned unless the caller passes the Fetch answer's
``aborted_transactions`` (read_committed): ``aborted_batches`` then finds the data batches to
drop as Kafka's Java consumer does (``CompletedFetch``): walking the batches in offset order, a
producer id becomes *aborted* once a batch of that producer reaches the ``first_offset`` of one of
its aborted transactions, and stays so until that producer's ABORT marker; its transactional
batches in between are dropped.  A transaction still open is never in the list (the broker only
returns data below the last stable offset in read_committed), and a committed one never.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Literal, NamedTuple, overload

from spark_coord.records import compression, varint
from spark_coord.records.header import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidBatch,
    crc32c,
)

log = logging.getLogger(__name__)

class Record(NamedTuple):
    """One decoded record.  ``timestamp_type``: 0 CreateTime, 1 LogAppendTime."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def iter_batches(buf) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, view_of_whole_batch)`` for each complete batch in ``buf``.

    Stops silently at a partial trailing batch.  Raises ``InvalidBatch`` for a batch
    that cannot be one (magic other than 2, a length shorter than a header).  The CRC
    is not checked here (see ``check_crc``).
    """
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    pos, end = 0, len(mv)
    while end - pos >= LOG_OVERHEAD:
        batch_length = int.from_bytes(mv[pos + 8:pos + 12], "big", signed=True)
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            if batch_length >= 0 and pos + LOG_OVERHEAD + batch_length > end:
                return  # partial trailing batch that is shorter than a header anyway
            raise InvalidBatch(f"batchLength {batch_length} at byte {pos} is shorter than a batch header")
        size = LOG_OVERHEAD + batch_length
        if pos + size > end:
            return  # partial trailing batch
        if mv[pos + MAGIC_OFFSET] != MAGIC_V2:
            raise InvalidBatch(f"unsupported magic {mv[pos + MAGIC_OFFSET]} at byte {pos} (only record batch v2)")
        header = BatchHeader._make(HEADER.unpack_from(mv, pos))
        if header.records_count < 0 or header.last_offset_delta < 0:
            raise InvalidBatch(f"negative recordsCount/lastOffsetDelta in batch at offset {header.base_offset}")
        yield header, mv[pos:pos + size]
        pos += size


def next_offset(records) -> int | None:
    """The offset after the last complete batch of a fetched record set (None when it holds no
    complete batch): where the next fetch starts, even when the batches' records were all
    skipped (control batches, records below the fetch offset)."""
    if records is None or not len(records):
        return None
    last = None
    for header, _ in iter_batches(records):
        last = header.next_offset
    return last


def check_crc(header: BatchHeader, batch: memoryview) -> None:
    """Raise ``InvalidBatch`` unless the CRC-32C over bytes [21, end) matches."""
    actual = crc32c(batch[ATTRIBUTES_OFFSET:])
    if actual != header.crc:
        raise InvalidBatch(f"CRC mismatch in batch at offset {header.base_offset}: "
                           f"stored {header.crc:#010x}, computed {actual:#010x}")


def batch_records(header: BatchHeader, batch: memoryview, max_decompressed_bytes: int):
    """The batch's records section, decompressed if needed (a bytes-like object)."""
    payload = batch[HEADER_SIZE:]
    if not header.codec:
        return payload
    try:
        return compression.decompress_view(header.codec, payload, max_decompressed_bytes)
    except compression.DecompressedTooLarge:
        raise
    except ValueError as e:
        raise InvalidBatch(f"batch at offset {header.base_offset}: {e}") from None


def read_uvarint(d, p: int) -> tuple[int, int]:
    """Unsigned varint at ``d[p]`` (at most 10 bytes) -> (value, next position).

    ``IndexError`` if ``d`` ends inside it (callers turn that into ``InvalidBatch``),
    ``InvalidBatch`` if it is longer than 10 bytes.
    """
    try:
        return varint.read_uvarint(d, p)
    except varint.VarintError as e:
        raise InvalidBatch(str(e)) from None


def read_varint(d, p: int) -> tuple[int, int]:
    """Zigzag (signed) varint at ``d[p]`` -> (value, next position)."""
    v, p = read_uvarint(d, p)
    return (v >> 1) ^ -(v & 1), p


@overload
def _bytes_field(d, p: int, limit: int, what: str, nullable: Literal[False]) -> tuple[bytes, int]: ...


@overload
def _bytes_field(d, p: int, limit: int, what: str, nullable: bool = True) -> tuple[bytes | None, int]: ...


def _bytes_field(d, p: int, limit: int, what: str, nullable: bool = True) -> tuple[bytes | None, int]:
    n, p = read_varint(d, p)
    if n < 0:
        if n == -1 and nullable:
            return None, p
        raise InvalidBatch(f"invalid {what} length {n} at byte {p}")
    if n > limit - p:
        raise InvalidBatch(f"{what} length {n} at byte {p} exceeds the {limit - p} bytes left in the record")
    return bytes(d[p:p + n]), p + n


def decode_records(header: BatchHeader, data, min_offset: int = 0) -> Iterator[Record]:
    """Decode the ``header.records_count`` records in ``data`` (the records section)."""
    end = len(data)
    p = 0
    ts_type = 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0
    base_offset, base_ts = header.base_offset, header.base_timestamp
    try:
        for _ in range(header.records_count):
            length, p = read_varint(data, p)
            if length < 0 or length > end - p:
                raise InvalidBatch(f"record length {length} at byte {p} exceeds the {end - p} bytes left")
            rend = p + length
            p += 1  # record attributes: unused
            ts_delta, p = read_varint(data, p)
            off_delta, p = read_varint(data, p)
            key, p = _bytes_field(data, p, rend, "key")
            value, p = _bytes_field(data, p, rend, "value")
            count, p = read_varint(data, p)
            if count < 0 or count > rend - p:
                raise InvalidBatch(f"header count {count} at byte {p} is impossible in {rend - p} bytes")
            headers = []
            for _ in range(count):
                hkey, p = _bytes_field(data, p, rend, "header key", nullable=False)
                hvalue, p = _bytes_field(data, p, rend, "header value")
                try:
                    headers.append((hkey.decode("utf-8"), hvalue))
                except UnicodeDecodeError:
                    raise InvalidBatch(f"header key {hkey[:40]!r} is not UTF-8") from None
            if p != rend:
                raise InvalidBatch(f"record ends at byte {p}, its length says {rend}")
            offset = base_offset + off_delta
            if offset < min_offset:
                continue
            timestamp = header.max_timestamp if ts_type else base_ts + ts_delta
            yield Record(offset, timestamp, ts_type, key, value, tuple(headers))
    except IndexError:
        raise InvalidBatch(f"record data of batch at offset {base_offset} ends inside a field "
                           f"(byte {p} of {end})") from None
    if p != end:
        raise InvalidBatch(f"batch at offset {base_offset} has {end - p} bytes after its "
                           f"{header.records_count} records")


def iter_records(buf, min_offset: int = 0, *, verify_crc: bool = True,
                 max_decompressed_bytes: int = compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
                 aborted_transactions: AbortedTransactions | None = None) -> Iterator[Record]:
    """Every record of every complete batch in ``buf`` with offset >= ``min_offset``.

    Decompresses as needed, skips control batches, and skips records below
    ``min_offset`` (a fetch may start in the middle of a batch).  With ``aborted_transactions``
    (a read_committed Fetch answer's list, None for read_uncommitted), the batches of aborted
    transactions are skipped too (``aborted_batches``).
    """
    dropped = aborted_batches(buf, aborted_transactions) if aborted_transactions else ()
    for header, batch in iter_batches(buf):
        if header.next_offset <= min_offset or header.is_control or header.base_offset in dropped:
            continue
        if verify_crc:
            check_crc(header, batch)
        data = batch_records(header, batch, max_decompressed_bytes)
        yield from decode_records(header, data, min_offset)


#: The type of a transaction marker (a control record's key: ``version int16 | type int16``).
ABORT_MARKER, COMMIT_MARKER = 0, 1

#: A Fetch answer's aborted transactions: ``(producer_id, first_offset)`` pairs.
AbortedTransactions = Iterable[tuple[int, int]]


def control_marker(header: BatchHeader, batch: memoryview,
                   max_decompressed_bytes: int = compression.DEFAULT_MAX_DECOMPRESSED_BYTES) -> int:
    """The marker type of a control batch (``ABORT_MARKER``, ``COMMIT_MARKER``, or another value
    a later Kafka may write): the type in its first record's key.  ``InvalidBatch`` when it has
    none."""
    data = batch_records(header, batch, max_decompressed_bytes)
    for record in decode_records(header, data):
        key = record.key
        if key is None or len(key) < 4:
            raise InvalidBatch(f"control batch at offset {header.base_offset} has a record key of "
                               f"{'no' if key is None else len(key)} bytes, not version and type")
        return int.from_bytes(key[2:4], "big", signed=True)
    raise InvalidBatch(f"control batch at offset {header.base_offset} has no record")


def aborted_batches(buf, aborted_transactions: AbortedTransactions | None) -> set[int]:
    """Base offsets of the complete data batches of ``buf`` that belong to aborted transactions,
    given a read_committed Fetch answer's ``aborted_transactions``, as Kafka's Java consumer
    decides (``CompletedFetch.nextFetchedBatch``): for each batch with a producer id, in offset
    order, every aborted transaction whose ``first_offset`` is at or below the batch's last offset
    marks its producer aborted; an ABORT control batch of an aborted producer unmarks it; a
    transactional data batch of a marked producer is dropped.  Control batches are never returned
    as data anyway, so they are not in the set."""
    pending = sorted((first, pid) for pid, first in aborted_transactions or ())
    if not pending:
        return set()
    at = 0
    aborted: set[int] = set()
    dropped: set[int] = set()
    for header, batch in iter_batches(buf):
        pid = header.producer_id
        if pid < 0:
            continue
        while at < len(pending) and pending[at][0] <= header.last_offset:
            aborted.add(pending[at][1])
            at += 1
        if header.is_control:
            if pid in aborted and control_marker(header, batch) == ABORT_MARKER:
                aborted.discard(pid)
        elif header.attributes & TRANSACTIONAL_MASK and pid in aborted:
            dropped.add(header.base_offset)
    return dropped


def drop_aborted(buf, aborted_transactions: AbortedTransactions | None):
    """``buf`` without the batches of aborted transactions (``aborted_batches``): ``buf`` itself when
    there are none, else its other complete batches joined (a copy; only a fetch that met an aborted
    transaction pays it).  The offset after the record set (``next_offset``) is the original's."""
    dropped = aborted_batches(buf, aborted_transactions) if aborted_transactions else None
    if not dropped:
        return buf
    return b"".join(batch for header, batch in iter_batches(buf) if header.base_offset not in dropped)
