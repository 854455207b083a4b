"""validate_batches and the header helpers on good and damaged batches."""

from __future__ import annotations

import pytest
from records_samples import build, restamp, sample_records

from spark_coord.records.header import (
    CRC_OFFSET,
    HEADER_SIZE,
    BatchTooLarge,
    InvalidBatch,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batches,
)


@pytest.fixture
def two_batches() -> bytes:
    return build(sample_records(10), 0, base_offset=0) + build(sample_records(5), 3, base_offset=10)


def test_good_batches_validate(two_batches):
    headers = validate_batches(two_batches)
    assert [(h.base_offset, h.records_count, h.last_offset_delta, h.codec) for h in headers] == [
        (0, 10, 9, 0), (10, 5, 4, 3)]
    assert sum(h.size for h in headers) == len(two_batches)


def test_bad_crc_is_refused(two_batches):
    buf = bytearray(two_batches)
    buf[HEADER_SIZE + 3] ^= 0x01  # a record byte of the first batch
    with pytest.raises(InvalidBatch, match="CRC mismatch at byte 0"):
        validate_batches(buf)
    buf = bytearray(two_batches)
    buf[CRC_OFFSET] ^= 0x80
    with pytest.raises(InvalidBatch, match="CRC mismatch"):
        validate_batches(buf)


def test_wrong_magic_is_refused(two_batches):
    buf = bytearray(two_batches)
    buf[16] = 1
    with pytest.raises(InvalidBatch, match="unsupported magic 1"):
        validate_batches(buf)


@pytest.mark.parametrize("cut", [1, 12, 60, 61, 100])
def test_truncated_batch_is_refused(two_batches, cut):
    first = parse_header(two_batches).size
    with pytest.raises(InvalidBatch, match="truncated|inconsistent"):
        validate_batches(two_batches[:first + cut])


def test_inconsistent_length_is_refused(two_batches):
    buf = bytearray(two_batches)
    buf[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(InvalidBatch, match="batchLength 10"):
        validate_batches(buf)
    with pytest.raises(InvalidBatch, match="empty"):
        validate_batches(b"")


def test_batch_too_large(two_batches):
    with pytest.raises(BatchTooLarge):
        validate_batches(two_batches, max_batch_bytes=100)


def test_broker_rewrites_keep_the_crc_valid(two_batches):
    """baseOffset and partitionLeaderEpoch are outside the CRC: the broker may stamp them."""
    buf = bytearray(two_batches)
    set_base_offset(buf, 0, 123456789)
    set_partition_leader_epoch(buf, 0, 7)
    h = validate_batches(buf)[0]
    assert (h.base_offset, h.partition_leader_epoch) == (123456789, 7)


def test_restamped_attributes_change_the_crc(two_batches):
    first = two_batches[:parse_header(two_batches).size]
    assert validate_batches(restamp(first, attributes=0x20))[0].is_control
