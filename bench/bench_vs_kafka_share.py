"""Share groups beside consumer groups, on Apache Kafka 4.2 and on our broker, in one run: each
client's share/consumer ratio on Kafka's own broker is the anchor for ours.

Run:  .venv/bin/python bench/bench_vs_kafka_share.py [--records 200000] [--runs 3] [--targets kafka,ours]
                                                        [--warmup 20000]

For each target (one Apache Kafka node in KRaft mode with share groups on, run from its jars as
tests/peers/apache_kafka.py starts it; one of our brokers) a four-partition topic gets
``--records`` 100-byte records from ``kafka-producer-perf-test``, then ``--runs`` times, each
reader with a fresh group reading the whole topic from its start:

- **Java**: ``kafka-consumer-perf-test`` (``KafkaConsumer``; its ``fetch.nMsg.sec``, the join left
  out) and ``kafka-share-consumer-perf-test`` (``KafkaShareConsumer``, implicit acknowledgement;
  its ``nMsg.sec``), the group's ``share.auto.offset.reset`` set to ``earliest`` first;
- **librdkafka** (confluent-kafka): a ``Consumer`` and a ``ShareConsumer`` (implicit
  acknowledgement), each counted from its first record to its last (every offset once).

Before the runs, one ``kafka-share-consumer-perf-test`` read of ``--warmup`` records (not counted) on
each broker: on Kafka a share group's first use creates the share-state topic and loads its share
coordinator, which would otherwise be in the first measured read.

Printed: records/s (medians) and each client's share / consumer ratio per broker, then ours
against Kafka's.  Figures go to bench/results/vs_kafka_share.json.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_vs_kafka_broker import consumer_perf, create_topic, producer_perf  # noqa: E402

log = logging.getLogger("bench.vs_kafka_share")
PARTITIONS = 4
SHARE_PERF = "org.apache.kafka.tools.ShareConsumerPerformance"  # kafka-share-consumer-perf-test
READERS = ("java consumer", "java share", "librdkafka consumer", "librdkafka share")


def set_earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=[entry])]).values():
        f.result(timeout=30)


def share_perf(jars: Path, bootstrap: str, topic: str, n: int) -> dict:
    """kafka-share-consumer-perf-test's row: records/s over its run."""
    from peers.apache_kafka import kafka_tool

    group = f"share-perf-{time.monotonic_ns()}"
    set_earliest(bootstrap, group)
    done = kafka_tool(jars, SHARE_PERF, "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(n),
                      "--timeout", "120000", "--group", group, timeout=900, check=True)
    lines = [line for line in done.stdout.splitlines() if "," in line]
    stats = dict(zip((h.strip() for h in lines[-2].split(",")), (v.strip() for v in lines[-1].split(",")),
                     strict=True))
    assert int(stats["data.consumed.in.nMsg"]) >= n, done.stdout
    return {"records_s": float(stats["nMsg.sec"])}


def librdkafka_read(bootstrap: str, topic: str, n: int, share: bool) -> dict:
    """A confluent-kafka Consumer or ShareConsumer reading the topic: records/s from its first
    record to its n-th, every (partition, offset) once."""
    from confluent_kafka import Consumer, ShareConsumer

    group = f"{'share' if share else 'group'}-rd-{time.monotonic_ns()}"
    if share:
        set_earliest(bootstrap, group)
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        poll = lambda: c.poll(0.5)  # noqa: E731
    else:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "fetch.queue.backoff.ms": 10})
        poll = lambda: c.consume(500, 0.5)  # noqa: E731
    c.subscribe([topic])
    seen: set[tuple[int, int]] = set()
    first = None
    deadline = time.monotonic() + 300
    try:
        while len(seen) < n and time.monotonic() < deadline:
            got = [m for m in poll() if m.error() is None]
            if got and first is None:
                first = time.monotonic()
            seen.update((m.partition(), m.offset()) for m in got)
        elapsed = time.monotonic() - first if first is not None else float("nan")
    finally:
        c.close()
    assert len(seen) == n, f"read {len(seen)} of {n} records"
    return {"records_s": n / elapsed}


def run_target(target: str, bootstrap: str, jars: Path, args) -> dict[str, list[float]]:
    topic = f"share-perf-{target}-{int(time.time())}"
    create_topic(bootstrap, topic, PARTITIONS)
    producer_perf(jars, bootstrap, topic, args.records)
    if args.warmup:
        # not counted: a share group's first use on Kafka creates its share-state topic (__share_group_state)
        # and loads its share coordinator (the warm-up read itself runs at a few thousand records/s there);
        # both brokers get the same warm-up read
        r = share_perf(jars, bootstrap, topic, args.warmup)
        print(f"  {target} warm-up java share ({args.warmup:,} records, not counted): {r['records_s']:,.0f} records/s",
              flush=True)
    rates: dict[str, list[float]] = {r: [] for r in READERS}
    for run in range(args.runs):
        readers = READERS if run % 2 == 0 else READERS[::-1]
        for reader in readers:
            if reader == "java consumer":
                r = consumer_perf(jars, bootstrap, topic, args.records)
            elif reader == "java share":
                r = share_perf(jars, bootstrap, topic, args.records)
            else:
                r = librdkafka_read(bootstrap, topic, args.records, share=reader.endswith("share"))
            rates[reader].append(r["records_s"])
            print(f"  {target} run {run + 1} {reader}: {r['records_s']:,.0f} records/s", flush=True)
    return rates


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--targets", default="kafka,ours", help="kafka (Apache Kafka 4.2), ours, or both")
    p.add_argument("--warmup", type=int, default=20_000,
                   help="records of one KafkaShareConsumer read before the measured runs, not counted (0: none)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars

    from spark_coord.cluster import LocalCluster

    load_start = os.getloadavg()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    jars = kafka_jars()
    rates: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-vs-kafka-share-") as tmp:
        tmp = Path(tmp)
        if "kafka" in targets:
            with ApacheKafkaCluster(tmp / "kafka", jars=jars) as kafka:
                rates["kafka"] = run_target("kafka", kafka.bootstrap, jars, args)
        if "ours" in targets:
            with LocalCluster(1, tmp / "ours") as ours:
                rates["ours"] = run_target("ours", ours.bootstrap, jars, args)
    med = {t: {r: statistics.median(v) for r, v in rs.items()} for t, rs in rates.items()}
    ratio = {t: {c: m[f"{c} share"] / m[f"{c} consumer"] for c in ("java", "librdkafka")} for t, m in med.items()}
    print(f"\n{args.records:,} records of 100 bytes, {PARTITIONS} partitions, one reader each, medians of {args.runs}")
    print("| broker | client | consumer records/s | share records/s | share / consumer |")
    print("|---|---|---:|---:|---:|")
    for t, m in med.items():
        broker = "Apache Kafka 4.2" if t == "kafka" else "ours"
        for c in ("java", "librdkafka"):
            print(f"| {broker} | {c} | {m[f'{c} consumer']:,.0f} | {m[f'{c} share']:,.0f} | {ratio[t][c]:.2f} |")
    load_end = os.getloadavg()
    print(f"load average (1, 5, 15 min) at the start: {load_start[0]:.1f} {load_start[1]:.1f} {load_start[2]:.1f}; "
          f"at the end: {load_end[0]:.1f} {load_end[1]:.1f} {load_end[2]:.1f} on {os.cpu_count()} CPUs")
    if len(ratio) == 2:
        for c in ("java", "librdkafka"):
            print(f"{c}: our share/consumer ratio against Kafka's: {ratio['ours'][c] / ratio['kafka'][c]:.2f}")
    import figures

    figures.write("vs_kafka_share", {"records": args.records, "runs": args.runs, "rates": rates, "medians": med,
                                     "ratios": ratio, "load": [load_start, load_end]}, label=args.targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
