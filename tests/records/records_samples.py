"""Sample records and batch helpers for the record batch tests."""

from __future__ import annotations

from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, crc32c

BASE_TS = 1_700_000_000_000
CODECS = [0, 1, 2, 3, 4]
CODEC_IDS = ["none", "gzip", "snappy", "lz4", "zstd"]


def sample_records(n: int = 30) -> list[tuple[bytes | None, bytes | None, list, int]]:
    """(key, value, headers, timestamp_ms): null keys and values, empty and large
    values, headers with null values, non-ASCII header keys, timestamps going back."""
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % i
        if i % 7 == 5:
            value = None
        elif i % 11 == 4:
            value = b""
        else:
            value = (b"value %d " % i) * (1 + (i * 13) % 40)
        headers = []
        if i % 4 == 1:
            headers = [("trace", b"t%d" % i), ("empty", b""), ("none", None)]
        elif i % 4 == 2:
            headers = [("clé-ü", bytes(range(200)))]
        ts = BASE_TS + i * 1000 - (5000 if i == 7 else 0)
        out.append((key, value, headers, ts))
    return out


def build(records, codec: int = 0, base_offset: int = 0, **kw) -> bytes:
    b = BatchBuilder(codec=codec, **kw)
    for key, value, headers, ts in records:
        b.append(value, key=key, headers=headers, timestamp_ms=ts)
    return b.build(base_offset=base_offset)


def restamp(batch: bytes | bytearray, *, attributes: int | None = None) -> bytes:
    """``batch`` with new attributes (if given) and a recomputed CRC."""
    buf = bytearray(batch)
    if attributes is not None:
        buf[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big")
    buf[CRC_OFFSET:CRC_OFFSET + 4] = crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(buf)


def with_records_section(batch: bytes, records: bytes, count: int | None = None) -> bytes:
    """An uncompressed ``batch`` whose records section is replaced by ``records``."""
    buf = bytearray(batch[:HEADER_SIZE]) + records
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big", signed=True)
    if count is not None:
        buf[57:61] = count.to_bytes(4, "big", signed=True)
    return restamp(buf)
