"""Records/s of ``decode_to_arrow`` against baselines measured in the same run.

Data: 100-byte values, 8-byte keys, no headers, batches of ``--batch`` records (a
producer's batch), joined into one fetched record set of ``--records`` records;
uncompressed and lz4.

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


def make_record_set(records: int, batch: int, codec: int) -> bytes:
    value = bytes(range(100))
    out, offset, ts = [], 0, 1_700_000_000_000
    while offset < records:
        b = BatchBuilder(codec=codec)
        for i in range(min(batch, records - offset)):
            b.append(value, key=b"key%05d" % ((offset + i) % 100000), timestamp_ms=ts + offset + i)
        out.append(b.build(base_offset=offset))
        offset += len(b)
    return b"".join(out)


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
        for rec in batch:
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
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    _ensure_kafka_python_lz4()
    print(f"{args.records} records of 100 bytes, batches of {args.batch}, best of {args.repeat}")
    print(f"{'codec':<6} {'method':<26} {'records/s':>12} {'vs kafka-python':>16}")
    for codec, name in ((0, "none"), (3, "lz4")):
        buf = make_record_set(args.records, args.batch, codec)
        rb = decode_to_arrow(buf, "t", 0)
        assert rb.num_rows == args.records, rb.num_rows
        assert kafka_python_iterate(buf) == args.records
        results = {
            "kafka-python iterate": bench(lambda: kafka_python_iterate(buf), args.repeat),
            "kafka-python + pyarrow": bench(lambda: kafka_python_arrow(buf), args.repeat),
            "spark_coord iter_records": bench(lambda: sum(1 for _ in iter_records(buf)), args.repeat),
            "spark_coord decode_to_arrow": bench(lambda: decode_to_arrow(buf, "t", 0), args.repeat),
        }
        base = args.records / results["kafka-python iterate"]
        for method, secs in results.items():
            rate = args.records / secs
            print(f"{name:<6} {method:<26} {rate:>12,.0f} {rate / base:>15.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
