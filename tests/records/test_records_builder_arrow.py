"""Record batches built from Arrow columns (the Arrow sink's encoder): the compiled encoder and
the row-by-row Python one (``BatchBuilder``) produce records that decode to the same rows, in
batches within ``batch_bytes``; keys partition as Kafka's murmur2."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_coord.records import arrow_jit, builder
from spark_coord.records.arrow import HEADERS_TYPE, decode_to_arrow
from spark_coord.records.header import validate_batches
from spark_coord.records.reader import iter_batches

header_kv = st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=9)))
row = st.tuples(st.one_of(st.none(), st.binary(max_size=30)), st.one_of(st.none(), st.binary(max_size=400)),
                st.one_of(st.none(), st.lists(header_kv, max_size=3)))


def columns(rows, start: int):
    keys = pa.array([r[0] for r in rows], pa.binary())
    values = pa.array([r[1] for r in rows], pa.binary())
    headers = pa.array([None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]] for r in rows],
                       HEADERS_TYPE)
    return keys.slice(start), values.slice(start), headers.slice(start)


def decoded(batches):
    rb = decode_to_arrow(b"".join(b for b, _ in batches), "t", 0, include_headers=True)
    return [(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in rb.to_pylist()]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(row, min_size=1, max_size=40), start=st.integers(0, 3), batch_bytes=st.integers(1, 3000),
       codec=st.sampled_from([0, 3, 4]), reverse=st.booleans())
def test_compiled_and_python_encoders_agree(rows, start, batch_bytes, codec, reverse):
    keys, values, headers = columns(rows, min(start, len(rows) - 1))
    cols = builder.ArrowColumns(keys, values, headers)
    order = np.arange(cols.rows)[::-1] if reverse else np.arange(cols.rows)
    want = [(keys[i].as_py(), values[i].as_py(), [(h["key"], h["value"]) for h in (headers[i].as_py() or [])])
            for i in order]
    compiled = builder.arrow_batches(cols, order, codec, batch_bytes, 1_700_000_000_000)
    python = builder._arrow_batches_python(cols, np.asarray(order), codec, batch_bytes, 1_700_000_000_000, None)
    assert decoded(compiled) == decoded(python) == want
    assert sum(c for _, c in compiled) == len(order)
    if codec == 0:
        for batch, count in compiled:
            header = next(iter_batches(batch))[0]
            assert header.records_count == count and header.last_offset_delta == count - 1
            assert count == 1 or header.size - 61 <= batch_bytes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(row, min_size=1, max_size=40), start=st.integers(0, 3), batch_bytes=st.integers(1, 3000),
       codec=st.sampled_from([0, 3]), partitions=st.integers(1, 5), data=st.data())
def test_one_pass_over_all_partitions_equals_one_pass_per_partition(rows, start, batch_bytes, codec, partitions,
                                                                   data):
    """The sink's encoder writes each row into its partition's region in one pass over the rows:
    every partition's batches are byte for byte those of encoding its rows alone."""
    keys, values, headers = columns(rows, min(start, len(rows) - 1))
    cols = builder.ArrowColumns(keys, values, headers)
    order = np.asarray(data.draw(st.permutations(range(cols.rows))), np.int64)
    parts = np.asarray(data.draw(st.lists(st.integers(0, partitions - 1), min_size=len(order), max_size=len(order))),
                       np.int64)
    arena = builder.BatchArena()
    together = builder.arrow_batches_by_partition(cols, order, parts, partitions, codec, batch_bytes, 7, arena=arena)
    assert sorted(together) == sorted(set(parts.tolist()))
    for q in range(partitions):
        alone = builder.arrow_batches(cols, order[parts == q], codec, batch_bytes, 7)
        assert [(bytes(b), n) for b, n in together.get(q, [])] == [(bytes(b), n) for b, n in alone]


def test_by_partition_without_the_compiled_encoder_gives_the_same_records(monkeypatch):
    keys = pa.array([None if i % 7 == 0 else b"k%d" % i for i in range(300)], pa.binary())
    cols = builder.ArrowColumns(keys, pa.array([b"v" * (i % 50) for i in range(300)], pa.binary()))
    order = np.arange(299, -1, -1)
    parts = order % 3
    compiled = builder.arrow_batches_by_partition(cols, order, parts, 3, 0, 900, 7)
    monkeypatch.setattr(arrow_jit, "AVAILABLE", False)
    python = builder.arrow_batches_by_partition(cols, order, parts, 3, 0, 900, 7)
    assert sorted(python) == sorted(compiled) == [0, 1, 2]
    for q in range(3):
        assert decoded(python[q]) == decoded(compiled[q])
        assert [r[1] for r in decoded(python[q])] == [b"v" * (i % 50) for i in order if i % 3 == q]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("codec", [0, 3])
def test_idempotent_batches_carry_the_producer_and_consecutive_sequences(monkeypatch, compiled, codec):
    """Each partition's batches get the producer id and epoch and base sequences that follow on from
    ``sequences`` (which moves past them, wrapping at 2**31), in the CRC-checked header."""
    if not compiled:
        monkeypatch.setattr(arrow_jit, "AVAILABLE", False)
    elif not arrow_jit.AVAILABLE:
        pytest.skip("numba unavailable")
    cols = builder.ArrowColumns(None, pa.array([b"v" * (i % 40) for i in range(400)], pa.binary()))
    rows = np.arange(400)
    sequences = {1: 2**31 - 5}
    batches = builder.arrow_batches_by_partition(cols, rows, rows % 2, 2, codec, 600, 7, producer=(42, 3),
                                                 sequences=sequences)
    for q, start in ((0, 0), (1, 2**31 - 5)):
        expected, seen = start, 0
        for data, count in batches[q]:
            header, = validate_batches(bytes(data))  # the CRC covers the producer fields
            assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, expected)
            expected = (expected + count) % 2**31
            seen += count
        assert seen == 200 and sequences[q] == expected
    plain = builder.arrow_batches_by_partition(cols, rows, rows % 2, 2, codec, 600, 7)
    (header, _), = iter_batches(bytes(plain[0][0][0]))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)


def test_partitions_out_of_range_are_refused():
    cols = builder.ArrowColumns(None, pa.array([b"a", b"b"], pa.binary()))
    for parts in ([0, 2], [-1, 0]):
        with pytest.raises(ValueError, match="is not one of 0..1"):
            builder.arrow_batches_by_partition(cols, [0, 1], parts, 2, 0, 1000, 7)
    with pytest.raises(ValueError, match="1 partitions given for 2 rows"):
        builder.arrow_batches_by_partition(cols, [0, 1], [0], 2, 0, 1000, 7)


@pytest.mark.skipif(not arrow_jit.AVAILABLE, reason="numba unavailable")
def test_key_partitions_match_the_producer():
    import random

    from spark_coord.records.partitioner import partition_for_key

    rnd = random.Random(5)
    keys = [None if i % 9 == 0 else bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(40))) for i in range(3000)]
    cols = builder.ArrowColumns(pa.array(keys, pa.binary()), pa.array([b"v"] * len(keys), pa.binary()))
    for n in (1, 3, 12):
        assert cols.key_partitions(n).tolist() == [-1 if k is None else partition_for_key(k, n) for k in keys]


def test_null_header_key_is_refused():
    headers = pa.array([[{"key": None, "value": b"x"}]], HEADERS_TYPE)
    with pytest.raises(ValueError, match="header key is null"):
        builder.ArrowColumns(None, pa.array([b"v"], pa.binary()), headers)


def test_batch_arena_hands_out_its_memory_again_after_reset():
    from spark_coord.records.builder import BatchArena

    arena = BatchArena()
    a, b = arena.take(1000), arena.take(3000)
    assert len(a) == 1000 and len(b) == 3000
    assert not np.shares_memory(a, b)
    a[:] = 1
    b[:] = 2
    assert (a == 1).all()  # distinct regions of one block
    first = arena.nbytes
    arena.reset()
    c = arena.take(1000)
    assert np.shares_memory(a, c) and arena.nbytes == first  # the same memory, nothing new
    arena.reset()
    big = [arena.take(first // 2 + 1) for _ in range(3)]  # more than one block holds
    assert arena.nbytes > first
    held = arena.nbytes
    arena.reset()
    whole = arena.take(held)  # one block of the round's total now
    assert arena.nbytes == held and not any(np.shares_memory(whole, x) for x in big)
    small = BatchArena(max_block=first + (first >> 1))
    small.take(1000)
    small.reset()
    assert small.nbytes == first  # within max_block: kept
    small.take(1000)
    small.take(first)
    small.reset()
    assert small.nbytes == 0  # a round above max_block: nothing kept


def test_uncompressed_batches_from_an_arena_equal_fresh_ones():
    import pyarrow as pa

    from spark_coord.records.builder import ArrowColumns, BatchArena

    cols = ArrowColumns(pa.array([b"k%d" % i for i in range(500)], pa.binary()),
                        pa.array([b"v" * (i % 40) for i in range(500)], pa.binary()))
    arena = BatchArena()
    for rows in (np.arange(500), np.arange(0, 500, 3)):
        fresh = builder.arrow_batches(cols, rows, 0, 2048, 1_700_000_000_000)
        reused = builder.arrow_batches(cols, rows, 0, 2048, 1_700_000_000_000, arena=arena)
        assert [(bytes(b), n) for b, n in reused] == [(bytes(b), n) for b, n in fresh]
        arena.reset()
