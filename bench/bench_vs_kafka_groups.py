"""Group coordination, Kafka's coordinator against ours: a group of Kafka's Java consumers
with ``group.protocol=consumer`` (KIP-848), in one run.

Run:  .venv/bin/python bench/bench_vs_kafka_groups.py [--members 100] [--runs 3] [--protocol consumer]

One Apache Kafka 4.2 node (KRaft; tests/peers/apache_kafka.py starts it from its jars) and
one of our brokers (with its ZooKeeper), each with a topic of two partitions per member
holding 20 records per partition.  ``bench/java/GroupTimes.java`` (run from source by
``java`` with Kafka's jars) starts ``--members`` ``KafkaConsumer``s in one JVM, one thread
each, in a fresh group, and reports:

- **join**: seconds from the first ``subscribe`` until every partition is assigned to
  exactly one member and every member holds its even share (two partitions), as the
  members' rebalance listeners see it;
- **move**: seconds from one member's ``close()`` until every partition it had was fetched
  (a record read) by another member.  Offsets are not committed, so the new owner reads
  from the beginning and a record arrives as soon as it fetches.

**Profile** (ours): the broker logs one line per rebalance attempt (its outcome, each
StopFetcher/StartFetcher round's members and wall time, its store calls and their latency,
the broker process's CPU during it); the run's lines for the group are summed up and kept
with the figures (``profile``), each attempt's line with its time from the first one.

Both coordinators run with Kafka's defaults for the consumer protocol (heartbeat interval
5 s, session 45 s; the move is bounded by heartbeats: the coordinator tells the others at
their next one).  Medians over ``--runs``, the brokers alternating who goes first; the
ratio is ours over Kafka's from the same run.  Needs a JDK 17 (``java`` runs the .java
source), Maven (Kafka's jars are resolved into a cache on first use).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_vs_kafka_broker import create_topic  # noqa: E402

from spark_coord.cluster import LocalCluster  # noqa: E402

PROGRAM = ROOT / "bench" / "java" / "GroupTimes.java"
RECORDS_PER_PARTITION = 20


def fill(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, b"v%d" % i, partition=p)
    assert producer.flush(60) == 0


def group_times(jars: Path, bootstrap: str, topic: str, members: int, protocol: str) -> dict:
    from peers.apache_kafka import java_binary

    group = f"g-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([java_binary(), "-Xmx1g", "-Dlog4j2.level=warn", "-cp", f"{jars}/*", str(PROGRAM),
                           bootstrap, topic, group, str(members), protocol],
                          capture_output=True, text=True, timeout=900)
    events = {e["event"]: e for e in (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))}
    if done.returncode != 0 or "moved" not in events:
        raise RuntimeError(f"GroupTimes exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return {"group": group, "join_s": events["joined"]["seconds"], "move_s": events["moved"]["seconds"],
            "moved_partitions": events["moved"]["partitions"]}


_ATTEMPT = re.compile(r"^(\S+ \S+) \S+ +\S+: group (\S+): attempt \((.*)\) took ([0-9.]+) s: (.*); (\d+) store "
                      r"call\(s\) ([0-9.]+) s; process CPU ([0-9.]+) s$")
_ROUND = re.compile(r"(StopFetcher|StartFetcher) round (\d+) member\(s\) ([0-9.]+) s")


def profile(log_path: Path, group: str) -> dict:
    """The rebalance attempts of ``group`` from our broker's log: each one's outcome, rounds, store
    calls and CPU, and their sums."""
    from datetime import datetime

    attempts = []
    first = None
    for line in log_path.read_text(errors="replace").splitlines():
        m = _ATTEMPT.match(line)
        if m is None or m.group(2) != group:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        first = at if first is None else first
        rounds = [(k, int(n), float(s)) for k, n, s in _ROUND.findall(m.group(5))]
        attempts.append({"ended_s": round(at - first, 3), "outcome": m.group(3), "seconds": float(m.group(4)),
                         "stop_s": sum(s for k, _, s in rounds if k == "StopFetcher"),
                         "stopped": sum(n for k, n, _ in rounds if k == "StopFetcher"),
                         "start_s": sum(s for k, _, s in rounds if k == "StartFetcher"),
                         "started": sum(n for k, n, _ in rounds if k == "StartFetcher"),
                         "store_calls": int(m.group(6)), "store_s": float(m.group(7)), "cpu_s": float(m.group(8))})
    total = {k: round(sum(a[k] for a in attempts), 3) for k in ("seconds", "stop_s", "start_s", "store_calls",
                                                                  "store_s", "cpu_s")}
    return {"attempts": len(attempts), "with_stops": sum(1 for a in attempts if a["stopped"]), **total,
            "timeline": attempts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--protocol", default="consumer", choices=["consumer", "classic"])
    args = p.parse_args(argv)
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars

    jars = kafka_jars()
    partitions = 2 * args.members
    samples: dict[str, list[dict]] = {"kafka": [], "ours": []}
    with tempfile.TemporaryDirectory(prefix="bench-vs-kafka-groups-") as tmp:
        tmp = Path(tmp)
        with ApacheKafkaCluster(tmp / "kafka", jars=jars) as kafka, LocalCluster(1, tmp / "ours") as ours:
            targets = {"kafka": kafka.bootstrap, "ours": ours.bootstrap}
            topic = "groups-bench"
            for bootstrap in targets.values():
                fill(bootstrap, topic, partitions)
            print(f"{args.members} members, group.protocol={args.protocol}, {partitions} partitions; "
                  f"Apache Kafka 4.2 at {kafka.bootstrap}, ours at {ours.bootstrap}", flush=True)
            for run in range(args.runs):
                for name in (["kafka", "ours"] if run % 2 == 0 else ["ours", "kafka"]):
                    got = group_times(jars, targets[name], topic, args.members, args.protocol)
                    if name == "ours":
                        got["profile"] = prof = profile(ours.log_path(0), got["group"])
                        print(f"    ours: {prof['attempts']} attempts ({prof['with_stops']} with a StopFetcher "
                              f"round), {prof['seconds']:.2f} s in attempts: StopFetcher rounds "
                              f"{prof['stop_s']:.2f} s, "
                              f"StartFetcher rounds {prof['start_s']:.2f} s, {prof['store_calls']} store calls "
                              f"{prof['store_s']:.2f} s, broker CPU {prof['cpu_s']:.2f} s", flush=True)
                        for a in prof["timeline"]:
                            print(f"      +{a['ended_s']:7.3f} s {a['outcome'][:40]:40} {a['seconds']:6.3f} s: "
                                  f"stop {a['stopped']:3} members {a['stop_s']:6.3f} s, start {a['started']:3} "
                                  f"members {a['start_s']:6.3f} s, store {a['store_calls']} {a['store_s']:.3f} s, "
                                  f"CPU {a['cpu_s']:.3f} s", flush=True)
                    samples[name].append(got)
                    print(f"  run {run} {name}: every member assigned in {got['join_s']:.2f} s; "
                          f"{got['moved_partitions']} partitions of a leaver fetched again in {got['move_s']:.2f} s",
                          flush=True)
    rows = []
    print()
    print("| | Apache Kafka s | ours s | ours / Kafka |")
    print("|---|---:|---:|---:|")
    for key, title in (("join_s", "every member has its partitions"),
                       ("move_s", "a leaver's partitions fetched again")):
        k = statistics.median(s[key] for s in samples["kafka"])
        o = statistics.median(s[key] for s in samples["ours"])
        rows.append({"figure": key, "kafka_s": k, "ours_s": o, "ratio": o / k})
        print(f"| {title} ({args.members} members) | {k:.2f} | {o:.2f} | {o / k:.2f} |")
    import figures

    figures.write("vs_kafka_groups", {"members": args.members, "protocol": args.protocol, "runs": args.runs,
                                      "rows": rows, "samples": samples}, label=args.protocol)
    return 0


if __name__ == "__main__":
    sys.exit(main())
