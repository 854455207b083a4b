"""decode_to_arrow: Spark's schema, values, offset ranges, headers, mid-batch starts,
agreement with iter_records."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_samples import CODEC_IDS, CODECS, build, restamp, sample_records

from spark_coord.records.arrow import decode_to_arrow, kafka_schema
from spark_coord.records.header import CONTROL_MASK, TIMESTAMP_TYPE_MASK
from spark_coord.records.reader import iter_records


def spark_schema(include_headers: bool) -> pa.Schema:
    """The schema Spark's Python data source path demands for the Kafka source's rows."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return to_arrow_schema(StructType(fields), timezone="UTC")


@pytest.mark.parametrize("include_headers", [False, True])
def test_schema_is_what_spark_accepts(include_headers):
    ours = kafka_schema(include_headers)
    assert ours.equals(spark_schema(include_headers))
    assert ours.names[:7] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rb = decode_to_arrow(build(sample_records(3)), "t", 0, include_headers=include_headers)
    assert rb.schema.equals(spark_schema(include_headers))


@pytest.fixture
def record_set() -> bytes:
    """Five batches of ten records, one per codec, offsets 100..149."""
    return b"".join(build(sample_records(10), codec, base_offset=100 + 10 * codec) for codec in CODECS)


def expected_rows(offsets, include_headers=True):
    samples = sample_records(10)
    rows = []
    for off in offsets:
        key, value, headers, ts = samples[(off - 100) % 10]
        row = {"key": key, "value": value, "topic": "events", "partition": 4, "offset": off,
               "timestamp": ts * 1000, "timestampType": 0}
        if include_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in headers]
        rows.append(row)
    return rows


def rows_of(rb: pa.RecordBatch) -> list[dict]:
    rb.validate(full=True)
    rows = rb.to_pylist()
    ts = rb.column("timestamp").cast("int64").to_pylist()
    for row, t in zip(rows, ts, strict=True):
        row["timestamp"] = t
    return rows


@pytest.mark.parametrize("include_headers", [False, True])
def test_values_across_codecs(record_set, include_headers):
    rb = decode_to_arrow(record_set, "events", 4, include_headers=include_headers)
    assert rows_of(rb) == expected_rows(range(100, 150), include_headers)


@pytest.mark.parametrize("start, end", [(100, None), (103, None), (117, 134), (120, 130), (149, 150),
                                        (0, 100), (150, None), (125, 126), (0, 10**12)])
def test_offset_range(record_set, start, end):
    rb = decode_to_arrow(record_set, "events", 4, start_offset=start, end_offset=end, include_headers=True)
    lo, hi = max(start, 100), min(150, end if end is not None else 150)
    assert rows_of(rb) == expected_rows(range(lo, hi))


def test_partial_trailing_batch_and_control_batches(record_set):
    control = restamp(build([(b"\x00\x00\x00\x00", b"\x00" * 6, [], 0)], 0, base_offset=150,
                            producer_id=1, producer_epoch=0), attributes=CONTROL_MASK | 0x10)
    tail = build(sample_records(10), 0, base_offset=151)
    rb = decode_to_arrow(record_set + control + tail + tail[:40], "events", 4)
    assert rb.column("offset").to_pylist() == list(range(100, 150)) + list(range(151, 161))


def test_empty_and_all_filtered():
    for buf in (b"", b"\x00" * 11):
        rb = decode_to_arrow(buf, "t", 0, include_headers=True)
        assert rb.num_rows == 0 and rb.schema.equals(kafka_schema(True))
    rb = decode_to_arrow(build(sample_records(5)), "t", 0, start_offset=5)
    assert rb.num_rows == 0


def test_log_append_time_and_mixed_timestamp_types():
    a = build(sample_records(3), 0, base_offset=0)
    b = restamp(build(sample_records(3), 0, base_offset=3), attributes=TIMESTAMP_TYPE_MASK)
    rb = decode_to_arrow(a + b, "t", 0)
    max_ts = max(s[3] for s in sample_records(3))
    assert rb.column("timestampType").to_pylist() == [0, 0, 0, 1, 1, 1]
    assert rb.column("timestamp").cast("int64").to_pylist()[3:] == [max_ts * 1000] * 3


def test_all_null_keys_and_values():
    records = [(None, None, [], 1), (None, None, [("h", None)], 2)]
    rb = decode_to_arrow(build(records), "t", 1, include_headers=True)
    assert rb.column("key").null_count == 2 and rb.column("value").null_count == 2
    assert rb.column("headers").to_pylist() == [[], [{"key": "h", "value": None}]]


def test_invalid_utf8_header_key_is_refused():
    from spark_coord.records.header import InvalidBatch

    batch = build([(None, b"v", [(b"\xff\xfe", b"x")], 1)])
    assert decode_to_arrow(batch, "t", 0).num_rows == 1  # headers not asked for: not decoded
    with pytest.raises(InvalidBatch, match="UTF-8|utf8|Invalid"):
        decode_to_arrow(batch, "t", 0, include_headers=True)


record_strategy = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
    st.integers(min_value=0, max_value=2**41),
)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(st.lists(record_strategy, min_size=1, max_size=20), st.sampled_from(CODECS)),
                        min_size=1, max_size=4),
       start=st.integers(0, 60), length=st.one_of(st.none(), st.integers(0, 60)))
def test_agrees_with_iter_records(batches, start, length):
    buf, base = b"", 0
    for records, codec in batches:
        buf += build(records, codec, base_offset=base)
        base += len(records) + 2  # gaps between batches, as after compaction
    end = None if length is None else start + length
    rb = decode_to_arrow(buf, "h", 9, start_offset=start, end_offset=end, include_headers=True)
    want = [r for r in iter_records(buf, min_offset=start) if end is None or r.offset < end]
    got = rows_of(rb)
    assert [(r["offset"], r["key"], r["value"], r["timestamp"] // 1000, [(h["key"], h["value"]) for h in r["headers"]])
            for r in got] == [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in want]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_large_set_round_trip(codec):
    value = bytes(range(100))
    buf = b"".join(build([(b"k%d" % i, value, [], 1000 + i) for i in range(500)], codec, base_offset=500 * j)
                   for j in range(4))
    rb = decode_to_arrow(buf, "big", 0, start_offset=250, end_offset=1750)
    assert rb.num_rows == 1500
    assert rb.column("offset").to_pylist() == list(range(250, 1750))
    assert set(rb.column("value").to_pylist()) == {value}
    assert rb.column("key").to_pylist()[:2] == [b"k250", b"k251"]
