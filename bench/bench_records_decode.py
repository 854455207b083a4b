"""Records/s of ``decode_to_arrow`` against baselines measured in the same run, on one core.

Data: batches of ``--batch`` records (a producer's batch) joined into one fetched
record set of ``--records`` records, in three shapes: ``a`` 100-byte values without
keys, uncompressed (the Spark benchmark's shape a); ``keyed`` 100-byte values with
8-byte keys, uncompressed and lz4; ``json`` 16-byte keys and 300-600 byte JSON-like
values, lz4 and zstd.  ``decode_to_arrow`` runs compiled (numba, the default where
numba is installed) and in Python (its fallback and oracle); for compressed shapes also
compiled with every batch decompressed into one arena first (``compiled, one arena``)
rather than batch by batch.

Baselines:
* ``kafka-python iterate``: kafka-python's ``DefaultRecordBatch`` reader yielding its
  record objects (no Arrow at all);
* ``kafka-python + pyarrow``: the same, collecting columns into lists and building a
  ``pyarrow.RecordBatch`` (what a Python consumer building Arrow tables does).

kafka-python's lz4 support needs the ``lz4`` package; when it is missing, its codec
module is pointed at cramjam's LZ4 frame functions for this benchmark only.

Run: ``python bench/bench_records_decode.py [--records N] [--batch N] [--repeat N]``
"""

from __future__ import annotations

import argparse
import sys
import time

import pyarrow as pa

from spark_coord.records import arrow, arrow_jit, compression
from spark_coord.records.arrow import decode_to_arrow, kafka_schema
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.reader import iter_records


def _ensure_kafka_python_lz4() -> None:
    import cramjam
    import kafka.codec as kc

    if kc.has_lz4():
        return

    class _Lz4Shim:
        @staticmethod
        def decompress(data):
            return bytes(cramjam.lz4.decompress(data))

        @staticmethod
        def compress(data, **_):
            return bytes(cramjam.lz4.compress(data))

    kc.lz4 = _Lz4Shim


def make_record_set(records: int, batch: int, codec: int, shape: str) -> bytes:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_spark_source import json_value, key_of

    value = bytes(range(100))
    out, offset, ts = [], 0, 1_700_000_000_000
    while offset < records:
        b = BatchBuilder(codec=codec)
        for i in range(offset, min(offset + batch, records)):
            if shape == "a":
                b.append(value, timestamp_ms=ts + i)
            elif shape == "keyed":
                b.append(value, key=b"key%05d" % (i % 100000), timestamp_ms=ts + i)
            else:
                b.append(json_value(i), key=key_of(i), timestamp_ms=ts + i)
        out.append(b.build(base_offset=offset))
        offset += len(b)
    return b"".join(out)


_SCRATCH = compression.Scratch()


def decode_with(buf: bytes, compiled: bool, batchwise: bool = True) -> pa.RecordBatch:
    """``decode_to_arrow`` compiled or in Python; compressed batches decompressed batch by batch or all
    into one arena first; into one reused buffer, as the Spark source's reader does."""
    saved = arrow._USE_JIT, arrow._BATCHWISE
    arrow._USE_JIT, arrow._BATCHWISE = compiled, batchwise
    try:
        return decode_to_arrow(buf, "t", 0, scratch=_SCRATCH)
    finally:
        arrow._USE_JIT, arrow._BATCHWISE = saved


def bench(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def kafka_python_iterate(buf: bytes) -> int:
    from kafka.record.memory_records import MemoryRecords

    n = 0
    mr = MemoryRecords(buf)
    while True:
        batch = mr.next_batch()
        if batch is None:
            return n
        for _rec in batch:
            n += 1


def kafka_python_arrow(buf: bytes) -> pa.RecordBatch:
    from kafka.record.memory_records import MemoryRecords

    keys, values, offsets, timestamps, types = [], [], [], [], []
    mr = MemoryRecords(buf)
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        for rec in batch:
            keys.append(rec.key)
            values.append(rec.value)
            offsets.append(rec.offset)
            timestamps.append(rec.timestamp * 1000)
            types.append(rec.timestamp_type)
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.repeat(pa.scalar("t", pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
        pa.array(offsets, pa.int64()), pa.array(timestamps, pa.int64()).view(pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32())], schema=kafka_schema(False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    _ensure_kafka_python_lz4()
    print(f"{args.records} records, batches of {args.batch}, best of {args.repeat}; compiled decoder: "
          f"{'numba' if arrow_jit.AVAILABLE else 'unavailable (' + arrow_jit.WHY_NOT + ')'}")
    print(f"{'shape':<6} {'codec':<6} {'method':<30} {'records/s':>12} {'vs kafka-python':>16}")
    decode_with(make_record_set(1000, 500, 0, "a"), True)  # compile or load the kernel outside the clock
    for shape, codec, name in (("a", 0, "none"), ("keyed", 0, "none"), ("keyed", 3, "lz4"), ("json", 3, "lz4"),
                               ("json", 4, "zstd")):
        buf = make_record_set(args.records, args.batch, codec, shape)
        rb = decode_with(buf, True)
        assert rb.num_rows == args.records, rb.num_rows
        assert rb.equals(decode_with(buf, False))
        results = {"kafka-python iterate": bench(lambda buf=buf: kafka_python_iterate(buf), args.repeat)}
        if shape != "json":  # the slow baselines are enough on the small shapes
            results["kafka-python + pyarrow"] = bench(lambda buf=buf: kafka_python_arrow(buf), args.repeat)
            results["spark_coord iter_records"] = bench(lambda buf=buf: sum(1 for _ in iter_records(buf)), args.repeat)
        results["decode_to_arrow (Python)"] = bench(lambda buf=buf: decode_with(buf, False), args.repeat)
        results["decode_to_arrow (compiled)"] = bench(lambda buf=buf: decode_with(buf, True), args.repeat)
        if codec:
            results["compiled, one arena"] = bench(lambda buf=buf: decode_with(buf, True, False), args.repeat)
        base = args.records / results["kafka-python iterate"]
        for method, secs in results.items():
            rate = args.records / secs
            print(f"{shape:<6} {name:<6} {method:<30} {rate:>12,.0f} {rate / base:>15.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
