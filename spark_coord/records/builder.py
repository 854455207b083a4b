"""Build one record batch v2 (what a producer sends in Produce).

Each ``append`` encodes one record (Kafka's ``DefaultRecord``)::

    length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | (headerKeyLength varint | key utf-8 | headerValueLength varint | value)*

with zigzag varints, -1 meaning null.  ``build`` compresses the records (codec in
attributes bits 0-2), fills the 61-byte header (``records.header.HEADER``), and stamps
the CRC-32C over bytes [21, end).  Timestamps are CreateTime: ``baseTimestamp`` is the
first record's, ``maxTimestamp`` the largest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from spark_coord.records import compression
from spark_coord.records.varint import encode_varint
from spark_coord.records.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    crc32c,
)

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


_NULL = encode_varint(-1)


def _as_bytes(what: str, data) -> bytes | memoryview | None:
    if data is None or isinstance(data, (bytes, bytearray, memoryview)):
        return data
    raise TypeError(f"record {what} must be bytes-like or None, not {type(data).__name__}")


def encode_record(offset_delta: int, timestamp_delta: int, key, value,
                  headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """One encoded record, its length prefix included."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    for data in (key, value):
        if data is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(data)))
            parts.append(data)
    parts.append(encode_varint(len(headers)))
    for hkey, hvalue in headers:
        if isinstance(hkey, str):
            hkey = hkey.encode("utf-8")
        elif not isinstance(hkey, (bytes, bytearray, memoryview)):
            raise TypeError(f"header key must be str, not {type(hkey).__name__}")
        parts.append(encode_varint(len(hkey)))
        parts.append(hkey)
        hvalue = _as_bytes("header value", hvalue)
        if hvalue is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


class BatchBuilder:
    """Accumulates records and builds one v2 batch.

    ``codec`` is a Kafka codec id (0-4) or a ``compression.type`` name.  Producer id,
    epoch and base sequence default to -1 (not idempotent), as a plain producer sends.
    ``build`` does not consume the builder: it can be called again (for example with
    another base offset) and more records can be appended afterwards.
    """

    def __init__(self, codec: int | str = 0, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, is_transactional: bool = False,
                 partition_leader_epoch: int = -1, compression_level: int | None = None) -> None:
        self.codec = compression.codec_id(codec)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.partition_leader_epoch = partition_leader_epoch
        self.compression_level = compression_level
        self._records: list[bytes] = []
        self._size = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = -1

    def __len__(self) -> int:
        return len(self._records)

    @property
    def size_estimate(self) -> int:
        """Bytes of the batch if built now, before compression (an upper bound in practice)."""
        return HEADER_SIZE + self._size

    def append(self, value, key=None, headers: Sequence[tuple[str, bytes | None]] = (),
               timestamp_ms: int | None = None) -> int:
        """Add one record; returns its offset delta within the batch.

        ``value``/``key``: bytes-like or None.  ``headers``: (str, bytes or None) pairs.
        ``timestamp_ms``: CreateTime in ms since the epoch (now when omitted).
        """
        value = _as_bytes("value", value)
        key = _as_bytes("key", key)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        base = timestamp_ms if self._base_timestamp is None else self._base_timestamp
        delta = len(self._records)
        if delta >= _INT32_MAX:
            raise ValueError("a batch holds at most 2**31-1 records")
        rec = encode_record(delta, timestamp_ms - base, key, value, headers)
        self._base_timestamp = base
        self._records.append(rec)
        self._size += len(rec)
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return delta

    def build(self, base_offset: int = 0) -> bytes:
        """The complete batch: header, (compressed) records, CRC-32C."""
        if not self._records:
            raise ValueError("cannot build an empty record batch")
        payload = b"".join(self._records)
        if self.codec:
            payload = compression.compress(self.codec, payload, self.compression_level)
        attributes = self.codec | (TRANSACTIONAL_MASK if self.is_transactional else 0)
        batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
        if batch_length > _INT32_MAX:
            raise ValueError(f"batch of {batch_length} bytes does not fit Kafka's int32 length")
        buf = bytearray(HEADER_SIZE + len(payload))
        HEADER.pack_into(buf, 0, base_offset, batch_length, self.partition_leader_epoch, MAGIC_V2, 0,
                         attributes, len(self._records) - 1, self._base_timestamp, self._max_timestamp,
                         self.producer_id, self.producer_epoch, self.base_sequence, len(self._records))
        buf[HEADER_SIZE:] = payload
        crc = crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
        buf[CRC_OFFSET:CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        return bytes(buf)
