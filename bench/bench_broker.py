"""Broker produce/fetch throughput with librdkafka clients, against raw loopback.

Run:  .venv/bin/python bench/bench_broker.py [--records 1000000] [--runs 3]

In one run it measures, for 100-byte and 1 KiB records:
- produce: kcat (librdkafka's command-line client, C) sending N records (acks=1,
  no compression, linger 5 ms) to one broker, until every delivery report is in;
- fetch: kcat reading the topic from the beginning to its end;
  (without kcat, or with --python-client: confluent-kafka's Producer/Consumer,
  whose per-message Python loop then dominates);
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
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.client.admin import AdminClient  # noqa: E402
from spark_coord.client.metadata import ClusterClient  # noqa: E402
from spark_coord.cluster import LocalCluster  # noqa: E402

RAW_BYTES = 256 << 20


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        self.pid, self.peak, self._halt = pid, 0.0, threading.Event()

    def run(self):
        while not self._halt.wait(0.2):
            self.peak = max(self.peak, rss_mb(self.pid))

    def stop(self):
        self._halt.set()
        self.join()
        return self.peak


class RawFileServer:
    """A minimal asyncio server that only streams a file to each client with sendfile.

    The client sends one line, ``<path> <size>\n``; the server answers with those
    bytes of the file and closes.  This is the practical ceiling for a Python server
    on this machine's loopback, measured in the same run as the broker.
    """

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.port = None
        ready = threading.Event()

        async def start():
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(start(), self.loop)
        ready.wait(10)

    async def _handle(self, reader, writer):
        path, size = (await reader.readline()).decode().split()
        with open(path, "rb") as f:
            await self.loop.sendfile(writer.transport, f, 0, int(size))
        await writer.drain()
        writer.close()

    def stream(self, path: Path, size: int) -> float:
        """Seconds for a plain socket client to receive ``size`` bytes of ``path``."""
        buf = memoryview(bytearray(1 << 20))
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(f"{path} {size}\n".encode())
            got = 0
            while got < size:
                n = s.recv_into(buf)
                if not n:
                    break
                got += n
        elapsed = time.perf_counter() - start
        assert got == size, (got, size)
        return elapsed


def kcat_produce(bootstrap: str, topic: str, n: int, size: int, workdir: Path, tls: list[str] = ()) -> float:
    """kcat (librdkafka, C) producing ``n`` lines of ``size`` bytes (one record each); ``tls``: the
    -X options of an SSL connection."""
    lines = workdir / f"lines-{size}.txt"
    if not lines.exists():
        row = os.urandom(size).hex()[: size - 1].encode() + b"\n"
        with open(lines, "wb") as f:
            for _ in range(n):
                f.write(row)
    start = time.perf_counter()
    with open(lines, "rb") as f:
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "linger.ms=5", "-X", "batch.size=1000000",
                        "-X", "acks=1", *tls], stdin=f, check=True, capture_output=True)
    return time.perf_counter() - start


def kcat_consume(bootstrap: str, topic: str, n: int, tls: list[str] = ()) -> float:
    """kcat reading the topic from the beginning to its end, printing nothing per record
    (kcat writes and flushes each formatted record, which would measure the pipe)."""
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", "",
                          "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=10485760",
                          # at the end every partition is at its high watermark and the broker holds the
                          # fetch for fetch.wait.max.ms (as Kafka does) before kcat sees EOF: keep that
                          # constant tail out of a throughput figure
                          "-X", "fetch.wait.max.ms=10", *tls],
                         check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    # "% Reached end of topic T [p] at offset N" per partition proves every record was read
    ends = [int(m) for m in re.findall(r"Reached end of topic \S+ \[\d+\] at offset (\d+)", out.stderr)]
    assert sum(ends) == n, f"kcat reached offsets {ends}, expected {n} records in all"
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
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="100-byte records per run; a quarter as many 1 KiB ones (default: %(default)s)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tls", action="store_true",
                    help="also produce and fetch over an SSL listener of the same broker (kcat only), "
                         "reported beside plaintext")
    ap.add_argument("--python-client", action="store_true",
                    help="use confluent-kafka from Python even when kcat is installed")
    args = ap.parse_args()

    results: dict[str, list] = {}
    raw = RawFileServer()
    use_kcat = shutil.which("kcat") is not None and not args.python_client
    client = "kcat (librdkafka, C)" if use_kcat else "confluent-kafka (librdkafka, Python loop)"
    with tempfile.TemporaryDirectory(prefix="spark-coord-bench-") as tmp:
        overrides = {"log.segment.bytes": str(256 << 20)}
        base_port = 0
        tls_opts: list[str] = []
        if args.tls and use_kcat:
            from spark_coord.net import free_port
            from testkit.tls import TestPki

            pki = TestPki(Path(tmp) / "pki")
            base_port, ssl_port = free_port(), free_port()
            overrides.update({"listeners": f"PLAINTEXT://127.0.0.1:{base_port},SSL://127.0.0.1:{ssl_port}",
                              "ssl.keystore.location": str(pki.server().keystore)})
            tls_opts = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca_path}"]
            ssl_bootstrap = f"127.0.0.1:{ssl_port}"
        with LocalCluster(1, tmp, base_port=base_port, overrides=overrides) as cluster:
            broker_pid = cluster.procs[next(iter(cluster.brokers))].pid
            raw_file = Path(tmp) / "raw.bin"
            with open(raw_file, "wb") as f:
                f.write(os.urandom(1 << 20) * (RAW_BYTES >> 20))
            sampler = RssSampler(broker_pid)
            sampler.start()
            for size in (100, 1024):
                n = args.records if size == 100 else max(args.records // 4, 1000)
                for run in range(args.runs):
                    topic = f"bench-{size}-{run}"
                    with ClusterClient(cluster.bootstrap) as c:
                        AdminClient(c).create_topic(topic, 4)
                    c0 = cpu_seconds(broker_pid)
                    if use_kcat:
                        tp = kcat_produce(cluster.bootstrap, topic, n, size, Path(tmp))
                    else:
                        tp = produce(cluster.bootstrap, topic, n, size)
                    c1 = cpu_seconds(broker_pid)
                    if use_kcat:
                        tf = kcat_consume(cluster.bootstrap, topic, n)
                    else:
                        tf = consume(cluster.bootstrap, topic, n)
                    cp, cf = c1 - c0, cpu_seconds(broker_pid) - c1
                    with ClusterClient(cluster.bootstrap) as c:
                        rows = AdminClient(c).describe([topic])
                    # bytes on the wire for the fetch: the topic's log size
                    log_bytes = sum(f.stat().st_size for f in Path(tmp).rglob(f"{topic}-*/*.log"))
                    tr = statistics.median(raw.stream(raw_file, RAW_BYTES) for _ in range(3))
                    results.setdefault(size, []).append({
                        "n": n, "payload_mb": n * size / 1e6, "log_mb": log_bytes / 1e6,
                        "produce_s": tp, "fetch_s": tf, "raw_mbs": RAW_BYTES / 1e6 / tr,
                        "produce_cpu": cp, "fetch_cpu": cf, "rows": len(rows)})
                    if tls_opts:  # the same over TLS, interleaved with the plaintext run
                        tls_topic = f"{topic}-tls"
                        with ClusterClient(cluster.bootstrap) as c:
                            AdminClient(c).create_topic(tls_topic, 4)
                        c0 = cpu_seconds(broker_pid)
                        tp = kcat_produce(ssl_bootstrap, tls_topic, n, size, Path(tmp), tls_opts)
                        c1 = cpu_seconds(broker_pid)
                        tf = kcat_consume(ssl_bootstrap, tls_topic, n, tls_opts)
                        results.setdefault(f"{size}-tls", []).append({
                            "n": n, "payload_mb": n * size / 1e6, "log_mb": log_bytes / 1e6,
                            "produce_s": tp, "fetch_s": tf, "raw_mbs": RAW_BYTES / 1e6 / tr,
                            "produce_cpu": c1 - c0, "fetch_cpu": cpu_seconds(broker_pid) - c1,
                            "plain_produce_s": results[size][-1]["produce_s"],
                            "plain_fetch_s": results[size][-1]["fetch_s"]})
            peak = sampler.stop()

    print(f"\nbroker throughput with {client}, one broker, 4 partitions; median of {args.runs} runs\n")
    print(f"{'record':>7} {'op':>8} {'records/s':>12} {'MB/s':>9} {'raw MB/s':>9} {'ratio':>7} {'broker CPU':>11}")
    for size, runs in results.items():
        if isinstance(size, str):
            continue  # TLS rows below
        for op in ("produce", "fetch"):
            rps = statistics.median(r["n"] / r[f"{op}_s"] for r in runs)
            mbs = statistics.median(r["log_mb"] / r[f"{op}_s"] for r in runs)
            raw_mbs = statistics.median(r["raw_mbs"] for r in runs)
            ratio = statistics.median(r["log_mb"] / r[f"{op}_s"] / r["raw_mbs"] for r in runs)
            busy = statistics.median(r[f"{op}_cpu"] / r[f"{op}_s"] for r in runs)
            print(f"{size:>6}B {op:>8} {rps:>12,.0f} {mbs:>9.1f} {raw_mbs:>9.1f} {ratio:>6.0%} {busy:>10.0%}")
    tls_rows = {k: v for k, v in results.items() if isinstance(k, str)}
    if tls_rows:
        print("\nover TLS (SSL listener of the same broker, kcat with ssl.ca.location), interleaved with the "
              "plaintext runs:\n")
        print(f"{'record':>7} {'op':>8} {'records/s':>12} {'MB/s':>9} {'TLS/plain':>10} {'broker CPU':>11}")
        for key, runs in tls_rows.items():
            for op in ("produce", "fetch"):
                rps = statistics.median(r["n"] / r[f"{op}_s"] for r in runs)
                mbs = statistics.median(r["log_mb"] / r[f"{op}_s"] for r in runs)
                ratio = statistics.median(r[f"plain_{op}_s"] / r[f"{op}_s"] for r in runs)
                busy = statistics.median(r[f"{op}_cpu"] / r[f"{op}_s"] for r in runs)
                print(f"{key.split('-')[0]:>6}B {op:>8} {rps:>12,.0f} {mbs:>9.1f} {ratio:>9.0%} {busy:>10.0%}")
    print("\nMB/s counts log bytes (record batches as stored); ratio = MB/s over the raw sendfile stream of the"
          "\nsame run (median of per-run ratios); broker CPU = broker process CPU time / wall time.")
    print(f"\nbroker peak resident memory during the run: {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
