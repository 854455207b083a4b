"""Record batch v2 header: one annotated ``struct.Struct`` with named offsets.

Layout (Kafka's ``DefaultRecordBatch``), all big-endian::

    offset  size  field
    0       8     baseOffset             (rewritten by the broker on append)
    8       4     batchLength            (bytes after this field: total = 12 + batchLength)
    12      4     partitionLeaderEpoch   (not covered by the CRC)
    16      1     magic                  (2)
    17      4     crc                    (CRC-32C of bytes [21, end))
    21      2     attributes             (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control)
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61            records...
"""

from __future__ import annotations

import struct
from typing import NamedTuple


class _FirstUse:
    """Stands for the ``crc32c`` module until a checksum is first computed, which imports it and puts
    it in its place (no cost after that).  Importing it takes tens of milliseconds (it reads package
    metadata), which every Python process importing this module paid -- among them the driver-side
    reader process Spark starts for each streaming query, which never checks a CRC."""

    def __getattr__(self, name: str):
        global _crc32c
        import crc32c

        _crc32c = crc32c
        return getattr(crc32c, name)


_crc32c = _FirstUse()

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57

MAGIC_V2 = 2
# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount: one byte each at least
MIN_RECORD_SIZE = 7

CODEC_MASK = 0x07
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
TIMESTAMP_TYPE_MASK = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire and on disk."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


class InvalidBatch(ValueError):
    """A record batch that fails validation; ``reason`` names what is wrong."""


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; raises ``InvalidBatch`` if fewer bytes remain."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch(f"truncated batch header: {len(buf) - pos} bytes, need {HEADER_SIZE}")
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of what came before it)."""
    return _crc32c.crc32c(data, value)


def validate_batches(buf, max_batch_bytes: int | None = None) -> list[BatchHeader]:
    """Check every batch in ``buf`` (one or more v2 batches back to back).

    Checks, per batch: header present, magic 2, batchLength consistent with the bytes
    present, CRC-32C, recordsCount >= 1 with lastOffsetDelta = recordsCount - 1 (as every
    producer writes them), and for uncompressed batches a recordsCount the bytes can hold,
    so a hostile count cannot push the log end offset far ahead.  Raises
    ``InvalidBatch`` (reason in the message) or ``BatchTooLarge``.  Nothing is copied.
    """
    mv = memoryview(buf)
    headers = []
    pos, end = 0, len(mv)
    if end == 0:
        raise InvalidBatch("empty record set")
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise InvalidBatch(f"truncated batch at byte {pos}: {end - pos} bytes left")
        h = parse_header(mv, pos)
        if h.magic != MAGIC_V2:
            raise InvalidBatch(f"unsupported magic {h.magic} at byte {pos} (only record batch v2)")
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > end:
            raise InvalidBatch(f"batchLength {h.batch_length} at byte {pos} inconsistent with {end - pos} "
                               "bytes present")
        if max_batch_bytes is not None and h.size > max_batch_bytes:
            raise BatchTooLarge(f"batch of {h.size} bytes exceeds message.max.bytes={max_batch_bytes}")
        if h.records_count < 1 or h.last_offset_delta != h.records_count - 1:
            raise InvalidBatch(f"recordsCount {h.records_count} and lastOffsetDelta {h.last_offset_delta} "
                               f"at byte {pos} do not describe a produced batch")
        if h.attributes & CODEC_MASK == CODEC_NONE and h.records_count * MIN_RECORD_SIZE > h.size - HEADER_SIZE:
            raise InvalidBatch(f"recordsCount {h.records_count} at byte {pos} cannot fit in "
                               f"{h.size - HEADER_SIZE} bytes")
        actual = _crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET: pos + h.size])
        if actual != h.crc:
            raise InvalidBatch(f"CRC mismatch at byte {pos}: stored {h.crc:#010x}, computed {actual:#010x}")
        headers.append(h)
        pos += h.size
    return headers


class BatchTooLarge(InvalidBatch):
    """A batch above ``message.max.bytes`` (MESSAGE_TOO_LARGE)."""


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (not covered by the CRC)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (not covered by the CRC)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


_ATTRS = struct.Struct(">h")


def stamp_log_append_time(buf: bytearray, headers: list[BatchHeader], now_ms: int) -> list[BatchHeader]:
    """LogAppendTime (``message.timestamp.type``): mark every batch in ``buf`` as timestamped by the log
    (attributes bit 3) with maxTimestamp = ``now_ms`` and a new CRC-32C, as Kafka's broker does
    (``setMaxTimestamp(LOG_APPEND_TIME, now)``); readers then give every record that timestamp.
    Returns the updated headers."""
    out = []
    pos = 0
    for h in headers:
        attributes = h.attributes | TIMESTAMP_TYPE_MASK
        _ATTRS.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
        _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
        crc = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET: pos + h.size])
        struct.pack_into(">I", buf, pos + CRC_OFFSET, crc)
        out.append(h._replace(attributes=attributes, max_timestamp=now_ms, crc=crc))
        pos += h.size
    return out
