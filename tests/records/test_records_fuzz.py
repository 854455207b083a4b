"""Hostile input: random bytes and damaged batches must only ever raise
``InvalidBatch`` / ``ValueError`` (never IndexError, OverflowError, MemoryError...)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from records_samples import build, restamp, sample_records

from spark_coord.records.arrow import decode_to_arrow
from spark_coord.records.header import HEADER_SIZE, validate_batches
from spark_coord.records.reader import iter_records

LIMIT = 1 << 20
VALID = [build(sample_records(8), codec, base_offset=5) for codec in range(5)]


def consume(buf, verify_crc: bool) -> None:
    for include_headers in (False, True):
        try:
            decode_to_arrow(buf, "f", 0, start_offset=6, include_headers=include_headers,
                            verify_crc=verify_crc, max_decompressed_bytes=LIMIT).validate(full=True)
        except ValueError:
            pass
    try:
        for _ in iter_records(buf, verify_crc=verify_crc, max_decompressed_bytes=LIMIT):
            pass
    except ValueError:
        pass
    try:
        validate_batches(buf)
    except ValueError:
        pass


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(buf):
    consume(buf, verify_crc=False)
    consume(buf, verify_crc=True)


@FUZZ
@given(which=st.integers(0, 4), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                               min_size=1, max_size=6),
       cut=st.integers(0, 50), restamp_crc=st.booleans())
def test_damaged_valid_batches(which, edits, cut, restamp_crc):
    """Damage past the length field so the batch stays framed and the decoder runs."""
    buf = bytearray(VALID[which])
    for pos, byte in edits:
        buf[12 + pos % (len(buf) - 12)] = byte
    buf[16] = 2
    buf = bytes(buf[:len(buf) - cut])
    if restamp_crc:
        buf = restamp(buf) if len(buf) > HEADER_SIZE else buf
    consume(buf, verify_crc=not restamp_crc)
    consume(buf + VALID[0], verify_crc=False)


@FUZZ
@given(records=st.binary(max_size=200), count=st.integers(-3, 2**31 - 1), codec=st.integers(0, 7))
def test_arbitrary_records_section(records, count, codec):
    """A well-framed batch with a valid CRC around an arbitrary records section."""
    head = bytearray(VALID[0][:HEADER_SIZE])
    head[21:23] = codec.to_bytes(2, "big")
    head[57:61] = count.to_bytes(4, "big", signed=True)
    buf = bytearray(head + records)
    buf[8:12] = (len(buf) - 12).to_bytes(4, "big")
    consume(restamp(buf), verify_crc=True)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_bomb_inside_a_batch(codec):
    from spark_coord.records import compression
    from spark_coord.records.builder import BatchBuilder

    b = BatchBuilder(codec=codec)
    for _ in range(64):
        b.append(bytes(64 * 1024))
    batch = b.build()
    with pytest.raises(compression.DecompressedTooLarge):
        decode_to_arrow(batch, "t", 0, max_decompressed_bytes=LIMIT)
    with pytest.raises(compression.DecompressedTooLarge):
        list(iter_records(batch, max_decompressed_bytes=LIMIT))
    assert decode_to_arrow(batch, "t", 0).num_rows == 64
