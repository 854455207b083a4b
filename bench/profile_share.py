"""Where a ShareFetch's broker CPU goes: py-spy on the broker while one share consumer reads.

Run:  .venv/bin/python bench/profile_share.py [--records 3000000] [--seconds 6] [--client rdkafka|thin]
                                              [--raw PATH]
      (about 30 s; needs py-spy in the venv: .venv/bin/pip install py-spy)

Set-up as ``bench/bench_share.py``'s: an embedded ZooKeeper and one broker (``LocalCluster``), one
8-partition topic of ``--records`` 100-byte records from confluent-kafka's ``Producer``, a share
group set to ``share.auto.offset.reset=earliest``.  One reader in a process of its own --
confluent-kafka's ``ShareConsumer`` (implicit acknowledgement, librdkafka's defaults) or our thin
``ShareConsumer`` -- reads it with ``poll()``; each poll is one ShareFetch carrying the previous
poll's acknowledgements.  1.5 s after the reader starts, ``py-spy record --gil --nonblocking`` samples
the broker at 500 Hz for ``--seconds`` (only the thread holding the GIL: Python's own work).

Printed: the broker's process CPU (/proc, user + system) over the window divided by the ShareFetches
in it (the reader's polls that returned records, on the one monotonic clock of the machine), and the
GIL-held samples by step of a ShareFetch (each sample goes to the first step whose frames its stack
holds, in the order of the table), as shares and as microseconds of that CPU per ShareFetch.  On a
loaded machine a sample taken while the process waits for a CPU still counts for the thread holding
the GIL: read the shares, and compare runs of one session only.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_share  # noqa: E402

TOPIC, GROUP = "profile-share", "profile-share"
RATE = 500
#: The steps of a ShareFetch and the frames that mark them; a sample goes to the first that matches.
STEPS = [
    ("state write: snapshot + encode (event loop)", ["SharePartition.snapshot", "encode (spark_coord/share/store.py"]),
    ("state write: ZooKeeper multi sent and answered (kazoo's threads)",
     ["ConnectionHandler", "KazooClient", "TransactionRequest", "Transaction.", "AsyncResult", "write_soon",
      "_written"]),
    ("state write: worker-thread hand-over", ["_worker (concurrent", "ThreadPoolExecutor", "run_in_executor",
                                              "write_blocking", "_WorkItem"]),
    ("acknowledgements applied (window bookkeeping)", ["apply_acknowledgements", "SharePartitionManager.acknowledge"]),
    ("acquisition: log read, batch headers, window", ["_acquire (spark_coord/broker/handlers/share_fetch",
                                                       "readable_bytes", "_servable", "_ready ("]),
    ("request read and decode", ["_read_frame", "decode_request", "StructCodec.decode", "Connection._read"]),
    ("response encode and send (sendfile)", ["_write_response", "write_parts", "_send_region", "sendfile"]),
    ("share session, checks, rest of the handler", ["share_fetch.py", "share_common.py", "manager.py"]),
    ("asyncio's event loop (select, callbacks, tasks)", ["asyncio/", "selectors.py"]),
]

READER = """
import sys, time
kind, bootstrap, topic, group, n, limit, out = sys.argv[1:8]
n, limit = int(n), float(limit)
if kind == "rdkafka":
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    def poll():
        return sum(1 for m in c.poll(0.1) if not m.error())
else:
    from spark_coord.consumer.share import ShareConsumer
    c = ShareConsumer(bootstrap, group, [topic])
    def poll():
        return len(c.poll(0.1))
got, stamps, first = 0, [], None
while got < n:
    k = poll()
    if k:
        stamps.append(time.monotonic())
        first = first or stamps[-1]
        got += k
    if first and time.monotonic() - first > limit:
        break
c.close()
open(out, "w").write(" ".join(map(str, stamps)))
"""


def steps(raw: Path) -> tuple[int, collections.Counter]:
    """GIL-held samples in all, and per step, from py-spy's raw (collapsed stacks) output."""
    per: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        name = next((name for name, keys in STEPS if any(k in stack for k in keys)), "other")
        per[name] += int(n)
    return total, per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--client", choices=("rdkafka", "thin"), default="rdkafka")
    ap.add_argument("--raw", help="keep py-spy's raw profile here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        ap.error("py-spy not found: .venv/bin/pip install py-spy")

    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.embedded import EmbeddedZooKeeper

    tmp = Path(tempfile.mkdtemp(prefix="spark-coord-profile-share-"))
    raw = Path(args.raw) if args.raw else tmp / "profile.raw"
    load0 = os.getloadavg()[0]
    zk = EmbeddedZooKeeper(data_dir=tmp / "zk")
    try:
        zk.start(timeout=60)
        with LocalCluster(1, tmp / "cluster", zk_connect=zk.connect_string) as cluster:
            with ClusterClient(cluster.bootstrap) as c:
                AdminClient(c).create_topic(TOPIC, 8)
            bench_share.produce(cluster.bootstrap, TOPIC, args.records, 100, 8)
            entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
            admin = KafkaAdmin({"bootstrap.servers": cluster.bootstrap})
            for f in admin.incremental_alter_configs(
                    [ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[entry])]).values():
                f.result(timeout=30)
            pid = cluster.procs[0].pid
            stamps = tmp / "polls.txt"
            reader = subprocess.Popen([sys.executable, "-c", READER, args.client, cluster.bootstrap, TOPIC, GROUP,
                                       str(args.records), str(args.seconds + 3), str(stamps)], cwd=ROOT)
            time.sleep(1.5)
            t0, cpu0 = time.monotonic(), bench_share.cpu_seconds(pid)
            subprocess.run([spy, "record", "--pid", str(pid), "--duration", str(args.seconds), "--rate", str(RATE),
                            "--format", "raw", "--output", str(raw), "--nonblocking", "--gil"],
                           check=True, capture_output=True)
            t1, cpu1 = time.monotonic(), bench_share.cpu_seconds(pid)
            reader.wait(120)
    finally:
        zk.stop()
    fetches = sum(1 for t in stamps.read_text().split() if t0 <= float(t) <= t1)
    total, per = steps(raw)
    cpu_us = 1e6 * (cpu1 - cpu0) / max(fetches, 1)
    print(f"{args.client} ShareConsumer: {fetches:,} ShareFetches in {t1 - t0:.1f} s ({fetches / (t1 - t0):,.0f}/s); "
          f"broker CPU {100 * (cpu1 - cpu0) / (t1 - t0):.0f}%, {cpu_us:,.0f} us per ShareFetch; "
          f"{total:,} GIL-held samples; load average {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| step | share of GIL-held samples | us of broker CPU per ShareFetch |")
    print("|---|---:|---:|")
    for name, _ in STEPS + [("other", [])]:
        share = per[name] / max(total, 1)
        print(f"| {name} | {100 * share:.0f}% | {share * cpu_us:,.0f} |")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
