"""What coordinator shards cost an idle coordinator: election time, CPU, memory.

Run:  .venv/bin/python bench/bench_shards.py [--shards 1,16,50] [--idle-s 30] [--runs 3]

For each shard count, one broker process (coordinator.enable, no groups, no topics)
on a fresh ZooKeeper of its own: the time from its start until it holds every shard,
then the CPU seconds it spends over --idle-s seconds doing nothing but keeping the
shards (each shard's leadership check: a fenced ZooKeeper multi every
zookeeper.session.timeout.ms / 4) and its resident memory at the end.  The baseline
is one shard (the single coordinator of before), measured in the same run.  The
machine is shared and noisy: read the medians, and the load average printed beside.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.zk import client as zkclient  # noqa: E402
from spark_coord.zk.embedded import EmbeddedZooKeeper  # noqa: E402
from testkit.zk_history import read_shard_holders  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_run(shards: int, idle_s: float, session_ms: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        zk_server = EmbeddedZooKeeper(data_dir=Path(tmp) / "zk")
        zk_server.start(timeout=60)
        cluster = LocalCluster(1, Path(tmp) / "cluster", zk_connect=zk_server.connect_string,
                               overrides={"coordinator.shards": shards, "zookeeper.session.timeout.ms": session_ms})
        zk = zkclient.connect(zk_server.connect_string)
        try:
            started = time.monotonic()
            cluster.start()
            while not ((h := read_shard_holders(zk)) and len(h) == shards and None not in h.values()):
                time.sleep(0.02)
            elected = time.monotonic() - started
            pid = cluster.procs[0].pid
            cpu0 = cpu_seconds(pid)
            time.sleep(idle_s)  # the measure: what an idle coordinator spends
            return elected, cpu_seconds(pid) - cpu0, rss_mb(pid)
        finally:
            zkclient.close(zk)
            cluster.stop()
            zk_server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default="1,16,50", help="shard counts to compare (the first is the baseline)")
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=18000, help="zookeeper.session.timeout.ms (the default)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    counts = [int(c) for c in args.shards.split(",")]
    results: dict[int, list[tuple[float, float, float]]] = {c: [] for c in counts}
    for run in range(args.runs):
        for c in counts:
            r = one_run(c, args.idle_s, args.session_ms)
            results[c].append(r)
            print(f"run {run + 1}: {c:3d} shards: all elected after {r[0]:5.2f} s; idle {args.idle_s:.0f} s: "
                  f"{r[1]:5.2f} CPU s; RSS {r[2]:6.1f} MB   (load {os.getloadavg()[0]:.2f})", flush=True)
    base = counts[0]
    b_elect, b_cpu = (statistics.median(x[i] for x in results[base]) for i in (0, 1))
    print(f"\nmedians over {args.runs} runs, idle {args.idle_s:.0f} s, session {args.session_ms} ms "
          f"(load {os.getloadavg()[0]:.2f}):")
    for c in counts:
        elect, cpu, rss = (statistics.median(x[i] for x in results[c]) for i in (0, 1, 2))
        print(f"  {c:3d} shards: elected in {elect:5.2f} s (x{elect / b_elect:4.1f}), idle CPU {cpu:5.2f} s "
              f"= {100 * cpu / args.idle_s:4.1f}% of a core (x{cpu / b_cpu if b_cpu else float('nan'):4.1f}), "
              f"RSS {rss:6.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
