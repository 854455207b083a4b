"""Our broker beside Apache Kafka 4.2, with the same clients, in one run.

Run:  .venv/bin/python bench/bench_vs_kafka_broker.py [--records 1000000] [--runs 3]

One Apache Kafka node (KRaft, broker and controller in one process, run from its jars with
java as tests/peers/apache_kafka.py starts it) and one of our brokers (with its ZooKeeper),
both on this machine's disk and loopback, each with a one-partition and a four-partition
topic per run.  The clients, the same against both:

- Kafka's ``kafka-producer-perf-test`` (the Java ``KafkaProducer``): ``--records`` 100-byte
  records, ``acks=all``, ``enable.idempotence=true``, ``--throughput -1``: records/s and
  its latency percentiles (p50, p99);
- Kafka's ``kafka-consumer-perf-test`` (the Java ``KafkaConsumer``) reading them back
  (its ``fetch.nMsg.sec``: the time spent fetching, without joining its group);
- kcat (librdkafka, C) producing the same count (``acks=all``, idempotent) and reading them
  back, timed from start to end.

Each figure is a median over ``--runs``; the two brokers alternate who goes first in each
run.  The ratio is ours over Apache Kafka's, from the same run (machines here are shared
and noisy: read the ratios).  Needs Java 17, Maven (the jars are resolved into a cache on
first use) and kcat (``apt-get install kcat``; its rows are left out without it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from spark_coord.cluster import LocalCluster  # noqa: E402

RECORD_SIZE = 100


def producer_perf(jars: Path, bootstrap: str, topic: str, n: int) -> dict:
    """kafka-producer-perf-test's summary line: records/s, MB/s and latency percentiles (ms)."""
    from peers.apache_kafka import PRODUCER_PERF, kafka_tool

    done = kafka_tool(jars, PRODUCER_PERF, "--topic", topic, "--num-records", str(n), "--record-size",
                      str(RECORD_SIZE), "--throughput", "-1", "--bootstrap-server", bootstrap,
                      # one flag, several values: the tool keeps only the last of repeated flags
                      "--command-property", "acks=all", "enable.idempotence=true", "linger.ms=5", "batch.size=262144",
                      timeout=900, check=True)
    last = [line for line in done.stdout.splitlines() if "records sent" in line][-1]
    # "1000000 records sent, 312499.2 records/sec (29.80 MB/sec), 41.23 ms avg latency, 456.00 ms max latency,
    #  37 ms 50th, 93 ms 95th, 104 ms 99th, 110 ms 99.9th."
    number = r"([\d.]+)"
    found = re.search(rf"{number} records sent, {number} records/sec \({number} MB/sec\), {number} ms avg latency, "
                      rf"{number} ms max latency, {number} ms 50th, {number} ms 95th, {number} ms 99th", last)
    assert found, last
    sent, rate, mb, avg, mx, p50, p95, p99 = (float(x) for x in found.groups())
    assert int(sent) == n, last
    return {"records_s": rate, "mb_s": mb, "p50_ms": p50, "p99_ms": p99}


def consumer_perf(jars: Path, bootstrap: str, topic: str, n: int) -> dict:
    """kafka-consumer-perf-test's row: records/s and MB/s over its fetch time."""
    from peers.apache_kafka import CONSUMER_PERF, kafka_tool

    done = kafka_tool(jars, CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(n),
                      "--timeout", "120000", "--group", f"perf-{time.monotonic_ns()}", timeout=900, check=True)
    lines = [line for line in done.stdout.splitlines() if "," in line]
    stats = dict(zip((h.strip() for h in lines[-2].split(",")), (v.strip() for v in lines[-1].split(",")),
                     strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == n, done.stdout
    # fetch.nMsg.sec: over the time spent fetching, without the group's join (whose initial
    # rebalance delay differs from broker to broker); nMsg.sec, over the whole run, is kept too
    return {"records_s": float(stats["fetch.nMsg.sec"]), "mb_s": float(stats["fetch.MB.sec"]),
            "total_records_s": float(stats["nMsg.sec"])}


def kcat_produce(bootstrap: str, topic: str, n: int, lines: Path) -> dict:
    start = time.perf_counter()
    with open(lines, "rb") as f:
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "linger.ms=5", "-X", "batch.size=1000000",
                        "-X", "acks=all", "-X", "enable.idempotence=true"], stdin=f, check=True, capture_output=True,
                       timeout=900)
    return {"records_s": n / (time.perf_counter() - start)}


def kcat_consume(bootstrap: str, topic: str, n: int) -> dict:
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", "",
                          "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=10485760",
                          "-X", "fetch.wait.max.ms=10",
                          # librdkafka pauses fetching (for up to a second) once its local queue holds
                          # queued.min.messages: a stall as long as the read itself, whichever the broker
                          "-X", "queued.min.messages=10000000"],
                         check=True, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    ends = [int(m) for m in re.findall(r"Reached end of topic \S+ \[\d+\] at offset (\d+)", out.stderr)]
    assert sum(ends) == n, f"kcat reached offsets {ends}, expected {n}"
    return {"records_s": n / elapsed}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every partition led, as producers will ask
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        if len(meta.partitions) == partitions and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} not led everywhere on {bootstrap}")


def one_target(name: str, bootstrap: str, jars: Path, n: int, run: int, lines: Path | None) -> dict:
    out: dict = {}
    for partitions in (1, 4):
        tag = f"p{partitions}"
        topic = f"perf-{name}-{tag}-{run}"
        create_topic(bootstrap, topic, partitions)
        out[f"java produce {tag}"] = producer_perf(jars, bootstrap, topic, n)
        out[f"java fetch {tag}"] = consumer_perf(jars, bootstrap, topic, n)
        if lines is not None:
            ktopic = f"kcat-{name}-{tag}-{run}"
            create_topic(bootstrap, ktopic, partitions)
            out[f"librdkafka produce {tag}"] = kcat_produce(bootstrap, ktopic, n, lines)
            out[f"librdkafka fetch {tag}"] = kcat_consume(bootstrap, ktopic, n)
        print(f"  run {run} {name} {tag}: " + ", ".join(f"{k.split(' ', 1)[0]} {k.split(' ')[1]} "
                                                         f"{v['records_s']:,.0f}/s" for k, v in out.items()
                                                         if k.endswith(tag)), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars

    jars = kafka_jars()
    use_kcat = shutil.which("kcat") is not None
    samples: dict[str, dict[str, list[dict]]] = {"kafka": {}, "ours": {}}
    with tempfile.TemporaryDirectory(prefix="bench-vs-kafka-") as tmp:
        tmp = Path(tmp)
        lines = None
        if use_kcat:
            lines = tmp / "lines.txt"
            row = os.urandom(RECORD_SIZE).hex()[: RECORD_SIZE - 1].encode() + b"\n"
            lines.write_bytes(row * args.records)
        with ApacheKafkaCluster(tmp / "kafka", jars=jars) as kafka, LocalCluster(1, tmp / "ours") as ours:
            targets = {"kafka": kafka.bootstrap, "ours": ours.bootstrap}
            print(f"Apache Kafka 4.2 at {kafka.bootstrap}, ours at {ours.bootstrap}; {args.records:,} records of "
                  f"{RECORD_SIZE} B, {args.runs} run(s)", flush=True)
            for run in range(args.runs):
                order = ["kafka", "ours"] if run % 2 == 0 else ["ours", "kafka"]
                for name in order:
                    for key, value in one_target(name, targets[name], jars, args.records, run, lines).items():
                        samples[name].setdefault(key, []).append(value)
    rows = []
    print()
    print("| client, op | Apache Kafka records/s | ours records/s | ratio | Kafka p50 / p99 ms | ours p50 / p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for key in samples["kafka"]:
        k = statistics.median(s["records_s"] for s in samples["kafka"][key])
        o = statistics.median(s["records_s"] for s in samples["ours"][key])
        lat = {}
        for name in ("kafka", "ours"):
            if "p99_ms" in samples[name][key][0]:
                lat[name] = (statistics.median(s["p50_ms"] for s in samples[name][key]),
                             statistics.median(s["p99_ms"] for s in samples[name][key]))
        row = {"op": key, "kafka_records_s": k, "ours_records_s": o, "ratio": o / k, **{
            f"{name}_p50_p99_ms": v for name, v in lat.items()}}
        rows.append(row)
        latency = [f"{lat[n][0]:.0f} / {lat[n][1]:.0f}" if n in lat else "" for n in ("kafka", "ours")]
        print(f"| {key} | {k:,.0f} | {o:,.0f} | {o / k:.2f} | {latency[0]} | {latency[1]} |")
    import figures

    figures.write("vs_kafka_broker", {"records": args.records, "runs": args.runs, "record_size": RECORD_SIZE,
                                      "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
