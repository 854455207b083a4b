"""Broker produce/fetch throughput with librdkafka clients, against raw loopback.

Run:  .venv/bin/python bench/bench_broker.py [--records 400000] [--runs 3]

In one run it measures, for 100-byte and 1 KiB records:
- produce: a confluent-kafka (librdkafka) Producer sending N records (acks=1,
  no compression, linger 5 ms) to one broker, until every delivery report is in;
- fetch: a confluent-kafka Consumer assigned to the topic from the beginning,
  until it has all N records;
- raw: a minimal Python asyncio server that only streams a file of the same size
  to a socket with sendfile, read by a plain socket client (the practical limit of
  a Python server on this machine's loopback);
- the broker's resident memory (VmRSS) sampled during the run.
Figures are medians over --runs; each ratio compares against the raw figure of the
same run.  Machines here are shared and noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.client.admin import AdminClient  # noqa: E402
from spark_coord.client.metadata import ClusterClient  # noqa: E402
from spark_coord.cluster import LocalCluster  # noqa: E402


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class RssSampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def run(self):
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, rss_mb(self.pid))

    def stop(self):
        self._stop.set()
        self.join()
        return self.peak


def raw_stream(path: Path, size: int) -> float:
    """Seconds for a minimal asyncio server to sendfile ``path`` to a socket client reading it all."""
    ready = threading.Event()
    port_box = {}

    async def serve():
        async def handle(reader, writer):
            with open(path, "rb") as f:
                await asyncio.get_running_loop().sendfile(writer.transport, f, 0, size)
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_box["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await asyncio.sleep(3600)

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    fut = asyncio.run_coroutine_threadsafe(serve(), loop)
    ready.wait(10)
    buf = bytearray(1 << 20)
    mv = memoryview(buf)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port_box["port"])) as s:
        got = 0
        while got < size:
            n = s.recv_into(mv)
            if not n:
                break
            got += n
    elapsed = time.perf_counter() - start
    fut.cancel()
    loop.call_soon_threadsafe(loop.stop)
    assert got == size, (got, size)
    return elapsed


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1000000,
                  "queue.buffering.max.messages": 2000000, "enable.idempotence": False})
    value = os.urandom(size)
    delivered = [0]

    def cb(err, msg):
        if err is None:
            delivered[0] += 1

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % 4, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - start
    assert delivered[0] == n, f"only {delivered[0]} of {n} delivered"
    return elapsed


def consume(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760, "log_level": 3})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if not m.error():
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    assert got == n, f"only {got} of {n} consumed"
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000, help="records per size (default: %(default)s)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    results: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="spark-coord-bench-") as tmp:
        with LocalCluster(1, tmp, overrides={"log.segment.bytes": str(256 << 20)}) as cluster:
            broker_pid = cluster.broker_pid(next(iter(cluster.brokers)))
            sampler = RssSampler(broker_pid)
            sampler.start()
            for size in (100, 1024):
                n = args.records if size == 100 else max(args.records // 4, 1000)
                for run in range(args.runs):
                    topic = f"bench-{size}-{run}"
                    with ClusterClient(cluster.bootstrap) as c:
                        AdminClient(c).create_topic(topic, 4)
                    tp = produce(cluster.bootstrap, topic, n, size)
                    tf = consume(cluster.bootstrap, topic, n)
                    with ClusterClient(cluster.bootstrap) as c:
                        rows = AdminClient(c).describe([topic])
                    # bytes on the wire for the fetch: the topic's log size
                    log_bytes = sum(f.stat().st_size for f in Path(tmp).rglob(f"{topic}-*/*.log"))
                    raw_file = Path(tmp) / "raw.bin"
                    with open(raw_file, "wb") as f:
                        f.truncate(log_bytes)
                    tr = raw_stream(raw_file, log_bytes)
                    raw_file.unlink()
                    results.setdefault(size, []).append({
                        "n": n, "payload_mb": n * size / 1e6, "log_mb": log_bytes / 1e6,
                        "produce_s": tp, "fetch_s": tf, "raw_s": tr, "rows": len(rows)})
            peak = sampler.stop()

    print(f"\nbroker throughput, librdkafka clients, one broker, 4 partitions; median of {args.runs} runs\n")
    print(f"{'record':>7} {'op':>8} {'records/s':>12} {'MB/s':>9} {'raw MB/s':>9} {'ratio':>7}")
    for size, runs in results.items():
        raw_mbs = statistics.median(r["log_mb"] / r["raw_s"] for r in runs)
        for op in ("produce", "fetch"):
            rps = statistics.median(r["n"] / r[f"{op}_s"] for r in runs)
            mbs = statistics.median(r["log_mb"] / r[f"{op}_s"] for r in runs)
            print(f"{size:>6}B {op:>8} {rps:>12,.0f} {mbs:>9.1f} {raw_mbs:>9.1f} {mbs / raw_mbs:>6.0%}")
    print(f"\nbroker peak resident memory during the run: {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
