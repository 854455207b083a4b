"""How the thin share consumer turns a ShareFetch partition answer into records
(``consumer.share.acquired_records``): the record set decoded once into columns and the acquired
ranges cut out of them gives, record for record, what decoding each record in Python
(``records.reader.iter_records``) and keeping those inside an acquired range gives -- keys and values
(null ones too), headers, CreateTime and LogAppendTime timestamps, compressed batches, control
batches skipped, ranges that start or end inside a batch, gaps between ranges, each range's delivery
count -- and a malformed record set is refused the same way.  Each test runs on both decoders: the
compiled one (loaded, whatever ran before) and the Python one."""

from __future__ import annotations

import pytest

from spark_coord.consumer.share import ShareRecord, acquired_records
from spark_coord.records import arrow, arrow_jit
from spark_coord.records.builder import BatchBuilder, assemble_batch, control_batch, encode_varint
from spark_coord.records.header import CRC_OFFSET, InvalidBatch, stamp_log_append_time, validate_batches
from spark_coord.records.reader import COMMIT_MARKER, iter_records

TOPIC = "share-records"
T0 = 1_700_000_000_000


@pytest.fixture(autouse=True, params=["compiled", "python"])
def decoder(request, monkeypatch):
    """The decoder ``decode_to_arrow`` takes: the compiled kernel loaded (a record set this small would
    otherwise be decoded in Python until something loads it), or the Python one."""
    if request.param == "compiled":
        assert arrow_jit.AVAILABLE, f"numba unavailable: {arrow_jit.WHY_NOT}"
        monkeypatch.setattr(arrow, "arrow_jit", arrow_jit)
    else:
        monkeypatch.setattr(arrow, "_USE_JIT", False)
    return request.param


def _record_set(log_append_ms: int | None = None) -> bytes:
    """Offsets 0-29 in four batches (the second gzip-compressed), a commit marker at 30, offsets 31-39
    in a fifth: null keys and values, headers (one with a null value) on some records."""
    out = bytearray()
    offset = 0
    for size, codec in ((8, 0), (10, "gzip"), (7, 0), (5, 0)):
        builder = BatchBuilder(codec)
        for i in range(offset, offset + size):
            headers = [("h", b"%d" % i), ("n", None)] if i % 3 == 0 else []
            builder.append(None if i % 7 == 0 else b"v%d" % i, key=None if i % 5 == 0 else b"k%d" % i,
                           headers=headers, timestamp_ms=T0 + 10 * i)
        out += builder.build(offset)
        offset += size
    out += control_batch(COMMIT_MARKER, producer_id=7, producer_epoch=0, base_offset=offset, timestamp_ms=T0)
    offset += 1
    builder = BatchBuilder()
    for i in range(offset, offset + 9):
        builder.append(b"v%d" % i, key=b"k%d" % i, headers=[("last", b"")], timestamp_ms=T0 + 10 * i)
    out += builder.build(offset)
    if log_append_ms is not None:
        stamp_log_append_time(out, validate_batches(out), log_append_ms)
    return bytes(out)


def _oracle(topic: str, p: dict) -> list[ShareRecord]:
    """Every record decoded in Python, those inside an acquired range kept, in the ranges' order."""
    by_offset = {r.offset: r for r in iter_records(p["records"])}
    return [ShareRecord(topic, p["partition_index"], o, r.timestamp, r.timestamp_type, r.key, r.value, r.headers,
                        a["delivery_count"])
            for a in p["acquired_records"] for o in range(a["first_offset"], a["last_offset"] + 1)
            if (r := by_offset.get(o)) is not None]


def _answer(records: bytes, *ranges: tuple[int, int, int]) -> dict:
    return {"partition_index": 3, "records": records,
            "acquired_records": [{"first_offset": f, "last_offset": la, "delivery_count": c} for f, la, c in ranges]}


@pytest.mark.parametrize("ranges", [
    [(0, 39, 1)],                          # everything, the marker's offset inside
    [(2, 5, 1)],                           # inside the first batch
    [(3, 12, 2), (14, 14, 1), (20, 33, 4)],  # across batches (compressed ones too), gaps, the marker skipped
    [(30, 30, 1)],                         # only the marker: no record
    [(35, 60, 1)],                         # past the record set's end
    [(0, 0, 1), (1, 1, 2), (39, 39, 5)],   # single offsets, each its own count
], ids=["all", "in-batch", "across", "marker", "past-end", "singles"])
def test_acquired_ranges_give_what_per_record_decoding_gives(ranges):
    p = _answer(_record_set(), *ranges)
    got = acquired_records(TOPIC, p)
    assert got == _oracle(TOPIC, p)
    assert [r.offset for r in got] == [o for f, la, _ in ranges for o in range(f, min(la, 39) + 1) if o != 30]
    assert all(type(r) is ShareRecord for r in got)


def test_fields_of_each_record():
    got = {r.offset: r for r in acquired_records(TOPIC, _answer(_record_set(), (0, 39, 3)))}
    assert got[0] == ShareRecord(TOPIC, 3, 0, T0, 0, None, None, (("h", b"0"), ("n", None)), 3)
    assert got[8] == ShareRecord(TOPIC, 3, 8, T0 + 80, 0, b"k8", b"v8", (), 3)  # in the gzip batch
    assert got[14] == ShareRecord(TOPIC, 3, 14, T0 + 140, 0, b"k14", None, (), 3)
    assert got[35] == ShareRecord(TOPIC, 3, 35, T0 + 350, 0, b"k35", b"v35", (("last", b""),), 3)
    assert 30 not in got  # the commit marker


def test_log_append_time_is_the_batch_timestamp():
    p = _answer(_record_set(log_append_ms=T0 + 5), (0, 39, 1))
    got = acquired_records(TOPIC, p)
    assert got == _oracle(TOPIC, p)
    assert {(r.timestamp, r.timestamp_type) for r in got} == {(T0 + 5, 1)}


def test_nothing_acquired_or_no_records():
    assert acquired_records(TOPIC, _answer(_record_set())) == []
    assert acquired_records(TOPIC, _answer(b"", (0, 10, 1))) == []


def test_a_corrupt_record_set_is_refused():
    data = bytearray(_record_set())
    data[CRC_OFFSET] ^= 0xFF
    with pytest.raises(InvalidBatch):
        list(iter_records(bytes(data)))
    with pytest.raises(InvalidBatch):
        acquired_records(TOPIC, _answer(bytes(data), (0, 39, 1)))


def test_a_header_key_that_is_not_utf8_is_refused():
    """A header key is a string: bytes that are not UTF-8 make the record set invalid, as per record."""
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(1) + b"v" \
        + encode_varint(1) + encode_varint(1) + b"\xff" + encode_varint(1) + b"x"
    data = assemble_batch(encode_varint(len(body)) + body, 1, 0, T0, T0)
    with pytest.raises(InvalidBatch, match="UTF-8"):
        list(iter_records(data))
    with pytest.raises(InvalidBatch, match="UTF8"):
        acquired_records(TOPIC, _answer(data, (0, 0, 1)))
