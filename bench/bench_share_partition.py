"""What a share partition's state table costs per ShareFetch: acquire + acknowledge operations/s
of ``spark_coord.share.SharePartition`` on 500-record batches, on one core, no I/O.

Run:  .venv/bin/python bench/bench_share_partition.py [--batches 4000] [--batch 500] [--runs 5]

Shapes, each ``--batches`` rounds of one acquire (of a ``--batch``-record batch read from the
partition's ``fetch_offset()``) and one acknowledge, ``--runs`` times; the median is printed:

* ``accept whole``: one member, the batch accepted with one type (a consumer in implicit mode);
* ``accept each``: the same, one ACCEPT per offset (the client's per-offset acknowledgements);
* ``mixed each``: one type per offset, 1 in 50 RELEASE and 1 in 100 REJECT: released records
  are redelivered by later fetches, so the window holds several ranges;
* ``4 members``: four members take turns, each holding its batch for three more rounds before
  accepting it (locks and acks interleave, the window holds four batches);
* ``expiry``: as ``accept whole`` but every other batch is left to its lock, expired by
  ``expire_locks`` and fetched again.

An operation is one acquire or one acknowledge call (``expire_locks`` counts as one too); the
records/s column counts acquired records.  Nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.share import AckType, SharePartition  # noqa: E402

# plain ints, as a request's decoded AcknowledgeTypes are
ACCEPT, RELEASE, REJECT, RENEW = int(AckType.ACCEPT), int(AckType.RELEASE), int(AckType.REJECT), int(AckType.RENEW)


def _read(sp: SharePartition, batch: int, produced: list[int]) -> list[tuple[int, int]]:
    """The batches a log read at ``fetch_offset()`` returns: producer batches of ``batch`` records."""
    at = sp.fetch_offset()
    if at is None:
        return []
    first = at - at % batch
    out = []
    while len(out) < 2:
        out.append((first, first + batch - 1))
        first += batch
    produced[0] = max(produced[0], first)
    return out


def run_shape(shape: str, rounds: int, batch: int) -> tuple[float, int, int]:
    """(seconds, operations, acquired records)."""
    sp = SharePartition(0, max_in_flight=max(2000, 8 * batch))
    produced = [0]
    ops = records = 0
    held: list[tuple[str, list]] = []
    mixed = [RELEASE if k % 50 == 7 else REJECT if k % 100 == 3 else ACCEPT for k in range(batch)]
    now = 0
    t0 = time.perf_counter()
    for n in range(rounds):
        now += 10
        member = f"m{n % 4}" if shape == "4 members" else "m"
        got = sp.acquire(member, _read(sp, batch, produced), max_records=batch, lock_deadline=now + 30_000)
        ops += 1
        for a in got:
            size = a.last_offset - a.first_offset + 1
            records += size
            if shape == "accept whole":
                sp.acknowledge(member, a.first_offset, a.last_offset, [ACCEPT])
            elif shape == "accept each":
                sp.acknowledge(member, a.first_offset, a.last_offset, [ACCEPT] * size)
            elif shape == "mixed each":
                sp.acknowledge(member, a.first_offset, a.last_offset,
                               mixed[:size] if size == batch else [ACCEPT] * size)
            elif shape == "4 members":
                held.append((member, [a]))
                continue  # acknowledged three rounds later
            elif shape == "expiry":
                if n % 2:
                    sp.acknowledge(member, a.first_offset, a.last_offset, [ACCEPT])
                else:
                    sp.acknowledge(member, a.first_offset, a.last_offset, [RENEW], lock_deadline=now)
            ops += 1
        while shape == "4 members" and len(held) > 3:
            m, acquired = held.pop(0)
            for a in acquired:
                sp.acknowledge(m, a.first_offset, a.last_offset, [ACCEPT])
                ops += 1
        if shape == "expiry":
            sp.expire_locks(now)
            ops += 1
    return time.perf_counter() - t0, ops, records


SHAPES = ("accept whole", "accept each", "mixed each", "4 members", "expiry")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=4000, help="acquire rounds per run (default 4000)")
    p.add_argument("--batch", type=int, default=500, help="records per producer batch (default 500)")
    p.add_argument("--runs", type=int, default=5, help="runs per shape; the median is printed (default 5)")
    args = p.parse_args()
    print(f"SharePartition, {args.batches} rounds of {args.batch}-record batches, median of {args.runs} runs")
    print(f"{'shape':<14} {'ops/s':>10} {'us/op':>8} {'records/s':>12}")
    for shape in SHAPES:
        results = [run_shape(shape, args.batches, args.batch) for _ in range(args.runs)]
        secs = statistics.median(r[0] for r in results)
        ops, records = results[0][1], results[0][2]
        print(f"{shape:<14} {ops / secs:>10,.0f} {secs / ops * 1e6:>8.1f} {records / secs:>12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
