"""Interoperability with kafka-python's record batch v2 code (written by others):
batches it builds are read by ours, batches we build are read by it, for every codec;
keys, values, headers and timestamps compared exactly."""

from __future__ import annotations

import pytest
from records_samples import CODEC_IDS, CODECS, build, sample_records

from spark_coord.records.arrow import decode_to_arrow
from spark_coord.records.header import validate_batches
from spark_coord.records.reader import iter_records


def kp_build(dr, records, codec: int, **kw) -> bytes:
    """A batch built by kafka-python (base offset 0, as a producer sends it)."""
    b = dr.DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=kw.get("txn", False),
                                     producer_id=kw.get("pid", -1), producer_epoch=kw.get("epoch", -1),
                                     base_sequence=kw.get("seq", -1), batch_size=1 << 24)
    for i, (key, value, headers, ts) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value,
                 headers=[(k, v) for k, v in headers])
    return bytes(b.build())


def as_tuples(records):
    return [(k, v, [(hk, hv) for hk, hv in h], ts) for k, v, h, ts in records]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_read_kafka_python_batches(kafka_python, codec):
    records = sample_records(40)
    batch = kp_build(kafka_python, records, codec)
    (header,) = validate_batches(batch)
    assert header.codec == codec, "kafka-python kept the batch uncompressed: sample data not compressible"
    got = list(iter_records(batch))
    assert [r.offset for r in got] == list(range(len(records)))
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in got] == as_tuples(records)
    assert {r.timestamp_type for r in got} == {0}

    rb = decode_to_arrow(batch, "golden", 7, include_headers=True)
    rows = rb.to_pydict()
    assert rows["key"] == [k for k, _, _, _ in records]
    assert rows["value"] == [v for _, v, _, _ in records]
    assert [[(h["key"], h["value"]) for h in hs] for hs in rows["headers"]] == [h for _, _, h, _ in records]
    assert rb.column("timestamp").cast("int64").to_pylist() == [ts * 1000 for *_, ts in records]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_reads_ours(kafka_python, codec):
    records = sample_records(40)
    batch = build(records, codec, base_offset=1000, producer_id=42, producer_epoch=3, base_sequence=17)
    kb = kafka_python.DefaultRecordBatch(batch)
    assert kb.validate_crc()
    assert (kb.base_offset, kb.compression_type, kb.producer_id, kb.producer_epoch, kb.base_sequence) == (
        1000, codec, 42, 3, 17)
    assert kb.last_offset_delta == len(records) - 1
    assert kb.first_timestamp == records[0][3]
    assert kb.max_timestamp == max(ts for *_, ts in records)
    got = list(kb)
    assert [m.offset for m in got] == list(range(1000, 1000 + len(records)))
    assert [(m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp) for m in got] == as_tuples(records)


def test_uncompressed_batch_is_byte_identical_to_kafka_python(kafka_python):
    """Same records and producer fields: the same bytes, header and CRC included."""
    records = [(k, v, h, ts) for k, v, h, ts in sample_records(25) if ts >= 0]
    records.sort(key=lambda r: r[3])  # kafka-python tracks maxTimestamp only for ordered input
    ours = build(records, 0, partition_leader_epoch=0)
    theirs = kp_build(kafka_python, records, 0)
    assert ours == theirs


def test_transactional_flag_round_trips(kafka_python):
    records = sample_records(3)
    batch = build(records, 0, producer_id=5, producer_epoch=1, base_sequence=0, is_transactional=True)
    kb = kafka_python.DefaultRecordBatch(batch)
    assert kb.is_transactional and not kb.is_control_batch
    assert len(list(iter_records(kp_build(kafka_python, records, 0, txn=True, pid=5, epoch=1, seq=0)))) == 3
