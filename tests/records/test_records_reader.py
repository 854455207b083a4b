"""iter_batches / iter_records: partial tails, mid-batch starts, control batches,
LogAppendTime, and clear errors on malformed records; BatchBuilder edge cases."""

from __future__ import annotations

import pytest
from records_samples import build, restamp, sample_records, with_records_section

from spark_coord.records.builder import BatchBuilder, encode_record, encode_varint
from spark_coord.records.header import CONTROL_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, InvalidBatch
from spark_coord.records.reader import Record, iter_batches, iter_records, read_varint


@pytest.fixture
def record_set() -> bytes:
    return b"".join(build(sample_records(10), codec, base_offset=10 * codec) for codec in range(5))


def test_iter_batches_stops_at_partial_trailing_batch(record_set):
    full = [h.base_offset for h, _ in iter_batches(record_set)]
    assert full == [0, 10, 20, 30, 40]
    for cut in (1, 11, 12, 30, 61, 200):
        got = [(h.base_offset, len(mv)) for h, mv in iter_batches(record_set[:-cut])]
        assert [o for o, _ in got] == [0, 10, 20, 30]
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(record_set[:5])) == []


def test_iter_batches_yields_whole_batch_views(record_set):
    for h, mv in iter_batches(record_set):
        assert isinstance(mv, memoryview) and len(mv) == h.size
        assert int.from_bytes(mv[:8], "big") == h.base_offset


def test_iter_batches_refuses_non_v2(record_set):
    buf = bytearray(record_set)
    buf[16] = 1
    with pytest.raises(InvalidBatch, match="magic 1"):
        list(iter_batches(buf))
    buf = bytearray(record_set)
    buf[8:12] = (20).to_bytes(4, "big")
    with pytest.raises(InvalidBatch, match="shorter than a batch header"):
        list(iter_batches(buf))


def test_iter_records_all_codecs(record_set):
    recs = list(iter_records(record_set))
    expected = sample_records(10)
    assert [r.offset for r in recs] == list(range(50))
    for i, r in enumerate(recs):
        key, value, headers, ts = expected[i % 10]
        assert r == Record(i, ts, 0, key, value, tuple(headers))


def test_iter_records_starts_mid_batch(record_set):
    assert [r.offset for r in iter_records(record_set, min_offset=17)] == list(range(17, 50))
    assert list(iter_records(record_set, min_offset=50)) == []


def test_control_batches_are_skipped(record_set):
    marker = build([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 5)], 0, base_offset=50,
                   producer_id=9, producer_epoch=0, is_transactional=True)
    control = restamp(marker, attributes=CONTROL_MASK | 0x10)
    tail = build(sample_records(2), 0, base_offset=51)
    assert [r.offset for r in iter_records(record_set + control + tail)][-3:] == [49, 51, 52]


def test_log_append_time_uses_max_timestamp():
    batch = restamp(build(sample_records(5), 0), attributes=TIMESTAMP_TYPE_MASK)
    recs = list(iter_records(batch))
    assert {(r.timestamp, r.timestamp_type) for r in recs} == {(max(s[3] for s in sample_records(5)), 1)}


def test_bad_crc_is_detected_unless_disabled(record_set):
    buf = bytearray(record_set)
    buf[HEADER_SIZE + 2] ^= 0x40
    with pytest.raises(InvalidBatch, match="CRC mismatch"):
        list(iter_records(buf))
    assert [r.offset for r in iter_records(buf, verify_crc=False)] == list(range(50))  # a value byte flipped


RECORD = encode_record(0, 0, b"k", b"value")


def rec(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("records, count, message", [
    (RECORD + b"\x00", 1, "bytes after"),                                   # trailing byte
    (RECORD, 2, "ends inside a field"),                                     # count too high
    (encode_varint(500) + RECORD[1:], 1, "record length 500"),              # length overruns
    (encode_varint(3) + RECORD[1:], 1, "exceeds the -1 bytes"),             # length too short
    (encode_varint(-5) + RECORD[1:], 1, "record length -5"),                # negative length
    (rec(b"\x00\x00\x00" + encode_varint(-7) + b"\x00\x00"), 1, "invalid key length -7"),
    (rec(b"\x00\x00\x00\x02k" + encode_varint(99) + b"\x00"), 1, "value length 99"),
    (rec(b"\x00\x00\x00\x01\x01\x02\x01\x01"), 1, "invalid header key length -1"),
    (rec(b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"), 1, "not UTF-8"),
    (rec(b"\x00\x00\x00\x01\x01" + encode_varint(-3)), 1, "header count -3"),
    (b"\xff" * 12, 1, "longer than 10 bytes"),
])
def test_malformed_records_raise_clear_errors(records, count, message):
    batch = with_records_section(build([(None, b"x", [], 0)]), records, count)
    with pytest.raises(InvalidBatch, match=message):
        list(iter_records(batch))


def test_read_varint_matches_encode():
    for n in (0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -2**31, 2**63 - 1, -2**63):
        enc = encode_varint(n)
        assert read_varint(enc, 0) == (n, len(enc))


def test_builder_edge_cases():
    b = BatchBuilder()
    with pytest.raises(ValueError, match="empty"):
        b.build()
    with pytest.raises(TypeError, match="bytes-like"):
        b.append("text")
    with pytest.raises(TypeError, match="header key"):
        b.append(b"v", headers=[(1, b"x")])
    assert b.append(b"a", timestamp_ms=10) == 0
    assert b.append(None, key=memoryview(b"k"), timestamp_ms=5) == 1
    size = b.size_estimate
    batch = b.build(base_offset=3)
    assert len(batch) <= size
    assert b.build(base_offset=3) == batch
    (h, _), = iter_batches(batch)
    assert (h.base_timestamp, h.max_timestamp, h.records_count, h.last_offset_delta) == (10, 10, 2, 1)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(batch)] == [
        (3, 10, None, b"a"), (4, 5, b"k", None)]
    with pytest.raises(ValueError, match="unknown compression"):
        BatchBuilder(codec="brotli")
    assert BatchBuilder(codec="zstd").codec == 4


def test_one_varint_module_serves_wire_and_records():
    """The wire Reader and the record reader read varints with the same code and the same bounds."""
    from spark_coord.records import varint
    from spark_coord.wire.types import ProtocolError, Reader

    for n in (0, 1, -1, 63, -64, 300, 2**31 - 1, -(2**31), 2**62):
        enc = varint.encode_varint(n)
        assert varint.read_varint(enc, 0) == (n, len(enc)) == read_varint(enc, 0)
        assert Reader(enc).varlong() == n
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        Reader(b"\xff" * 6).uvarint()
    with pytest.raises(ProtocolError, match="truncated varint"):
        Reader(b"\x80\x80").uvarint()
    with pytest.raises(varint.VarintError, match="truncated"):
        varint.read_uvarint(b"\x80\x80\x01", 0, end=2)
    with pytest.raises(ValueError):
        varint.encode_uvarint(-1)
