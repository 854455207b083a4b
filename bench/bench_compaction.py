"""Log cleaner throughput and peak memory, against the time the log takes to write the same data.

Per shape: ``--records`` keyed records over ``--keys`` keys (values of ``--value-bytes``), in producer
batches of ``--batch`` records, uncompressed and lz4.  Each run:

1. *write*: the batches are appended to a fresh ``PartitionLog`` through the broker's append path
   (``validate_batches`` then ``append``: the CRC check, offset assignment, segment files and index;
   segments of ``--segment-bytes``) -- the broker's cost of writing that log, minus the network;
2. *clean*: one forced cleaning pass (``log.cleaner.clean_log``) over every closed segment: offset
   map, rewrite, swap.  Throughput is dirty MB (the closed segments' bytes) per second;
3. *peak*: the same pass again on a fresh copy under ``tracemalloc`` (not timed): the most Python
   memory the pass held at once, offset map included.

Prints the medians over ``--runs`` runs: MB/s of writing and of cleaning, clean/write time ratio,
bytes before/after, the offset map's size and the peak memory.

Run: ``python bench/bench_compaction.py [--runs 3] [--records 200000] [--keys 1000]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from spark_coord.log import LogConfig, PartitionLog
from spark_coord.log.cleaner import CleanerSettings, clean_log
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import validate_batches

NOW_MS = int(time.time() * 1000)


def make_batches(records: int, keys: int, value_bytes: int, batch: int, codec: int) -> list[bytes]:
    out, b = [], BatchBuilder(codec)
    pad = b"x" * max(value_bytes - 16, 0)
    for i in range(records):
        b.append(b"%08d-%06d" % (i, i % 997) + pad, key=b"key-%06d" % (i % keys), timestamp_ms=NOW_MS - 60_000)
        if len(b) == batch:
            out.append(b.build())
            b = BatchBuilder(codec)
    if len(b):
        out.append(b.build())
    return out


def write_log(directory: Path, batches: list[bytes], segment_bytes: int) -> tuple[PartitionLog, float]:
    cfg = LogConfig(segment_bytes=segment_bytes, cleanup_policy=("compact",), delete_retention_ms=0,
                    min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(directory, cfg)
    started = time.perf_counter()
    for data in batches:
        plog.append(data, validate_batches(data))
    plog.flush()
    return plog, time.perf_counter() - started


def one_run(batches: list[bytes], segment_bytes: int, settings: CleanerSettings) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        plog, write_s = write_log(root / "timed-0", batches, segment_bytes)
        total = plog.size_bytes
        stats = clean_log(plog, settings, NOW_MS, force=True)
        after = plog.size_bytes
        plog.close()
        traced, _ = write_log(root / "traced-0", batches, segment_bytes)
        tracemalloc.start()
        clean_log(traced, settings, NOW_MS, force=True)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        traced.close()
        return {"write_s": write_s, "clean_s": stats.seconds, "bytes": total, "dirty": stats.dirty_bytes,
                "after": after, "map": stats.map_bytes, "peak": peak}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    ap.add_argument("--dedupe-buffer-size", type=int, default=134217728)
    args = ap.parse_args()
    settings = CleanerSettings(dedupe_buffer_size=args.dedupe_buffer_size)
    print(f"{args.records} records over {args.keys} keys, {args.value_bytes}-byte values, batches of {args.batch}, "
          f"{args.segment_bytes >> 10} KiB segments; medians of {args.runs} runs")
    header = (f"{'codec':6} {'log MB':>7} {'write MB/s':>10} {'clean MB/s':>10} {'clean/write':>11} "
              f"{'after MB':>8} {'map KiB':>8} {'peak MiB':>8}")
    print(header)
    print("-" * len(header))
    for name, codec in (("none", 0), ("lz4", 3)):
        batches = make_batches(args.records, args.keys, args.value_bytes, args.batch, codec)
        runs = [one_run(batches, args.segment_bytes, settings) for _ in range(args.runs)]

        def med(k, runs=runs):
            return statistics.median(r[k] for r in runs)

        mb = med("bytes") / 1e6
        write_rate = mb / med("write_s")
        clean_rate = med("dirty") / 1e6 / med("clean_s")
        print(f"{name:6} {mb:7.1f} {write_rate:10.1f} {clean_rate:10.1f} {med('clean_s') / med('write_s'):10.2f}x "
              f"{med('after') / 1e6:8.2f} {med('map') / 1024:8.0f} {med('peak') / 2**20:8.1f}")


if __name__ == "__main__":
    main()
