"""The compiled decode of compressed record sets batch by batch (each batch decompressed into one
reused buffer and decoded at once) against the compiled decode of one arena of every batch and
against the Python decoder, on batches other clients wrote: librdkafka (confluent-kafka) through a
real broker with every codec, keys, null values and headers; kafka-python's transactional batches
between commit and abort markers.  All three must give the same Arrow, for whole record sets and for
offset ranges that cut batches; and the outputs grow when a batch inflates beyond the guess."""

from __future__ import annotations

import pyarrow as pa
import pytest
from records_samples import build, restamp, sample_records

from spark_coord.records import arrow, arrow_jit, compression
from spark_coord.records.header import CONTROL_MASK, TRANSACTIONAL_MASK
from spark_coord.records.reader import iter_batches


def test_the_compiled_decoder_is_available():
    """numba is a dependency (pyproject.toml): without it these comparisons would test nothing."""
    assert arrow_jit.AVAILABLE, f"numba unavailable: {arrow_jit.WHY_NOT}"

WAYS = {"batchwise": (True, True), "arena": (True, False), "python": (False, True)}


def decode(way: str, buf, strict: bool = False, **kw) -> pa.RecordBatch:
    """``buf`` decoded one way; ``strict``: fail if the batch-by-batch decode leaves for the arena path
    (a fallback would hide a slow path)."""
    saved = arrow._USE_JIT, arrow._BATCHWISE, arrow._plan, arrow.BATCHWISE_MIN_BYTES
    arrow._USE_JIT, arrow._BATCHWISE = WAYS[way]
    arrow.BATCHWISE_MIN_BYTES = 0  # batch by batch however small the batches (they are, here)
    if strict:
        arrow._plan = _refuse
    try:
        return arrow.decode_to_arrow(buf, "topic-b", 2, **kw)
    finally:
        arrow._USE_JIT, arrow._BATCHWISE, arrow._plan, arrow.BATCHWISE_MIN_BYTES = saved


def _refuse(*a, **kw):
    raise AssertionError("the arena path ran")


def assert_all_ways_equal(buf, ranges=((0, None),), scratch=None, strict: bool = True) -> pa.RecordBatch:
    for include_headers in (False, True):
        for start, end in ranges:
            kw = {"start_offset": start, "end_offset": end, "include_headers": include_headers}
            got = decode("batchwise", buf, strict, scratch=scratch, **kw)
            got.validate(full=True)
            for other in ("arena", "python"):
                expected = decode(other, buf, **kw)
                assert got.schema.equals(expected.schema)
                assert got.equals(expected), (other, kw, got.to_pylist()[:2], expected.to_pylist()[:2])
    return decode("batchwise", buf, include_headers=True, scratch=scratch)


def _librdkafka_record_set(broker, codec: str, count: int) -> bytes:
    """``count`` records that confluent-kafka's Producer wrote with ``codec``, fetched raw from the broker."""
    from confluent_kafka import Producer

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.connection import BrokerConnection
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient

    host, port = broker.address
    topic = f"rdkafka-{codec}"
    with ClusterClient(f"{host}:{port}") as cc:
        AdminClient(cc).create_topic(topic, 1)
        cc.topic(topic, refresh=True, wait=10)
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "compression.type": codec, "linger.ms": 20,
                         "batch.num.messages": 700, "acks": "all", "enable.idempotence": False})
    errors = []
    for i in range(count):
        key = None if i % 5 == 0 else b"user-%06d" % i
        value = None if i % 97 == 3 else (b'{"i":%d,"note":"%s"}' % (i, b"word " * (i % 60)))
        headers = [("trace", b"t%d" % i), ("none", None)] if i % 3 else [("clé", bytes(range(i % 50)))]
        producer.produce(topic, key=key, value=value, headers=headers, partition=0,
                         timestamp=1_700_000_000_000 + i, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(30) == 0 and errors == []
    with BrokerConnection(host, port) as conn:
        data = fetch(conn, {(topic, 0): 0}, partition_max_bytes=64 << 20, max_bytes=64 << 20)[0]
    assert data.error == 0
    return bytes(data.records)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_batches_decode_alike(broker_factory, codec):
    buf = _librdkafka_record_set(broker_factory(0), codec, 3000)
    batches = [h for h, _ in iter_batches(buf)]
    assert len(batches) > 2 and {h.codec for h in batches} == {compression.CODEC_IDS[codec]}
    rb = assert_all_ways_equal(buf, ranges=((0, None), (350, 2222), (1, 2)))
    assert rb.num_rows == 3000 and rb.column("offset").to_pylist() == list(range(3000))
    assert rb.column("headers")[1].as_py() == [{"key": "trace", "value": b"t1"}, {"key": "none", "value": None}]


def test_transactional_batches_between_markers(kafka_python):
    """kafka-python's transactional batches (read uncommitted: the records of the aborted one are rows
    too) between control batches of commit and abort markers, which are skipped."""
    def txn_batch(records, codec, base):
        b = kafka_python.DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=True,
                                                   producer_id=9, producer_epoch=0, base_sequence=base,
                                                   batch_size=1 << 24)
        for i, (key, value, headers, ts) in enumerate(records):
            b.append(i, timestamp=ts, key=key, value=value, headers=headers)
        out = bytearray(b.build())
        out[0:8] = base.to_bytes(8, "big")
        return bytes(out)

    def marker(kind: int, base: int):  # ControlRecordType: 0 abort, 1 commit
        batch = build([(b"\x00\x00\x00" + bytes([kind]), b"\x00\x00\x00\x00\x00\x00", [], 1)], base_offset=base)
        return restamp(batch, attributes=CONTROL_MASK | TRANSACTIONAL_MASK)

    records = sample_records(30)
    parts, base = [], 0
    for codec in (1, 2, 3, 4):
        parts.append(txn_batch(records, codec, base))
        parts.append(marker(codec % 2, base + 30))
        base += 31
    buf = b"".join(parts)
    rb = assert_all_ways_equal(buf, ranges=((0, None), (12, 100), (31, 62)))
    assert rb.num_rows == 120
    assert rb.column("value").to_pylist()[:30] == [v for _, v, _, _ in records]


def test_outputs_grow_when_batches_inflate_beyond_the_guess():
    """A scratch that learnt a small ratio from one record set, then a record set of lz4 batches (no
    declared sizes) that inflate far more, with many records and headers: rows, bytes and headers all
    grow beyond the first guess."""
    scratch = compression.Scratch()
    scratch.ratio = 1.0
    tiny = [(None, b"", [("h", b"")] * 8, 1_700_000_000_000)] * 1000  # 8 headers in 18 bytes, repeated
    large = [(b"k%d" % i, b"a" * (i % 700), [("h%d" % j, b"x" * j) for j in range(i % 9)], 1_700_000_000_000)
             for i in range(1000)]
    for records in (tiny + tiny, tiny + large):
        scratch.ratio = 1.0
        buf = b"".join(build(records[i:i + 500], 3, base_offset=i) for i in range(0, 2000, 500))
        rb = assert_all_ways_equal(buf, ranges=((0, None), (499, 1501)), scratch=scratch)
        assert rb.num_rows == 2000 and scratch.ratio > 5


def test_corrupt_batch_still_explained():
    """A compressed batch that does not decompress leaves the batch-by-batch path: the error names it."""
    good = build(sample_records(10), 4, base_offset=0)
    bad = bytearray(build(sample_records(10), 4, base_offset=10))
    bad[-8:] = b"\xff" * 8
    buf = good + restamp(bytes(bad))
    with pytest.raises(ValueError, match="zstd") as caught:
        decode("batchwise", buf)
    with pytest.raises(ValueError) as expected:
        decode("python", buf)
    assert str(caught.value) == str(expected.value)
