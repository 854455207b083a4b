"""KIP-848 members, in one run: join-to-fetch of our thin consumer against Kafka's Java consumer on
Apache Kafka 4.2, and a coordkafka query's rows/s as a KIP-848 member against today's protocol.

Run:  .venv/bin/python bench/bench_kip848_members.py [--rounds 7] [--queries 5] [--quick]

1. **Join-to-fetch on Apache Kafka 4.2** (one KRaft node, tests/peers/apache_kafka.py starts it
   from its jars, its consumer groups heartbeating every ``--heartbeat-ms``): a topic of
   ``--partitions`` partitions with ``RECORDS_PER_PARTITION`` records in each; ``--members``
   members settle in a fresh group (each holds its even share and fetched it), then one more
   joins.  Timed from right before the joiner subscribes until every partition that moved
   was fetched (a record read) by its new owner, the members holding an even spread (each
   partition once).  Offsets are not committed, so a new owner reads from the earliest offset
   and a record arrives as soon as it fetches.  Two kinds of members, alternating round by
   round so the machine's noise hits both:

   - **Java**: Kafka 4.2's ``KafkaConsumer`` with ``group.protocol=consumer``, all in one JVM
     (``bench/java/JoinToFetch.java``, run from source by ``java`` with Kafka's jars); the
     clock starts after the joiner's ``KafkaConsumer`` was built, right before ``subscribe``;
   - **ours**: ``spark_coord.consumer.Consumer(group_protocol="consumer")``, all in this
     process, one reading thread each; the clock starts right before the joiner's
     ``Consumer(...)``, which builds it and sends its first heartbeat.

   The coordinator is Kafka's in both; the protocol bounds the figure below by heartbeats:
   the joiner's first heartbeat, the old owners' next ones (they learn of the revocation and
   acknowledge it), then the joiner's next one (it gets the freed partitions).

2. **Query rows/s on our brokers** (one broker of ours with its embedded ZooKeeper, its KIP-848
   groups heartbeating every ``--heartbeat-ms`` too): ``--records`` records of 100 bytes in
   ``--query-partitions`` partitions (kcat), read ``--queries`` times each by
   ``readStream.format("coordkafka")`` with a fresh ``group.id`` from earliest into the
   ``noop`` sink with ``Trigger.AvailableNow`` in one ``local[2]`` SparkSession, with
   ``kafka.group.protocol=consumer`` (KIP-848) and ``coordkafka`` (today's protocol),
   alternating who goes first.  Rows per second of the whole query, its start (joining the
   group) included.

Prints medians and ratios (ours / Java; consumer / coordkafka: the first query of each is cold
and left out of the median), the heartbeat interval the coordinator gave our members, and writes
bench/results/kip848_members.json.  The goals (issue 45): join-to-fetch no slower than Java's
members, the query within 5% of today's protocol.  Needs a JDK 17 and Maven (Kafka's jars are
resolved into a cache on first use), kcat and pyspark.  ``--quick``: fewer rounds and records
(a few minutes).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_vs_kafka_broker import create_topic  # noqa: E402
from bench_vs_kafka_groups import fill  # noqa: E402

PROGRAM = ROOT / "bench" / "java" / "JoinToFetch.java"


def java_round(jars: Path, bootstrap: str, topic: str, members: int) -> dict:
    from peers.apache_kafka import java_binary

    group = f"j-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([java_binary(), "-Xmx1g", "-Dlog4j2.level=warn", "-cp", f"{jars}/*", str(PROGRAM),
                           bootstrap, topic, group, str(members)], capture_output=True, text=True, timeout=600)
    events = {e["event"]: e for e in (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))}
    if done.returncode != 0 or "joined" not in events:
        raise RuntimeError(f"JoinToFetch exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    j = events["joined"]
    return {"seconds": j["seconds"], "assigned_seconds": j["assigned_seconds"], "moved": j["moved"],
            "joiner_first_fetch_seconds": j["joiner_first_fetch_seconds"]}


class Group:
    """What our members of one round hold and read, as JoinToFetch.java keeps it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: dict[int, frozenset[int]] = {}
        self.fetched: dict[int, tuple[int, float]] = {}  # partition -> (member, first record since reset)
        self.stop = threading.Event()
        self.join_start: float | None = None
        self.interval: float | None = None

    def owners(self) -> dict[int, int]:
        with self.lock:
            return {p: m for m, ps in self.owned.items() for p in ps}

    def even(self, partitions: int, members: int) -> bool:
        low, high = partitions // members, -(-partitions // members)
        with self.lock:
            held = list(self.owned.values())
        if len(held) != members or any(not low <= len(ps) <= high for ps in held):
            return False
        every = [p for ps in held for p in ps]
        return len(every) == partitions == len(set(every))


class ThinMember(threading.Thread):
    """One of our KIP-848 members: builds its ``Consumer`` (the joiner: the clock starts right before),
    reads on, notes its assignment after every read and the first record of each partition it gets."""

    def __init__(self, index: int, bootstrap: str, group_id: str, topic: str, group: Group, joiner: bool):
        super().__init__(name=f"member-{index}", daemon=True)
        self.index, self.bootstrap, self.group_id, self.topic = index, bootstrap, group_id, topic
        self.group, self.joiner = group, joiner
        self.consumer = None
        self.error: BaseException | None = None

    def run(self) -> None:
        from spark_coord.consumer import Consumer

        g = self.group
        try:
            if self.joiner:
                g.join_start = time.monotonic()
            self.consumer = c = Consumer(self.bootstrap, self.group_id, topics=[self.topic], group_protocol="consumer",
                                         auto_commit=False, auto_offset_reset="earliest",
                                         config={"client.id": f"member-{self.index}"})
            while not g.stop.is_set():
                for r in c.messages(timeout=0.02):
                    now = time.monotonic()
                    with g.lock:
                        f = g.fetched.get(r.partition)
                        if f is None or f[0] != self.index:
                            g.fetched[r.partition] = (self.index, now)
                    self._note(c)
                    if g.stop.is_set():
                        break
                self._note(c)
        except BaseException as e:  # noqa: BLE001 -- reported by the round
            self.error = e

    def _note(self, c) -> None:
        held = frozenset(p for _, p in c.assignment())
        with self.group.lock:
            self.group.owned[self.index] = held
        if self.group.interval is None and held:
            self.group.interval = getattr(c.connector, "interval", None)

    def close(self) -> None:
        self.join(10)
        if self.consumer is not None:
            self.consumer.close(timeout=10)


def ours_round(bootstrap: str, topic: str, members: int, partitions: int) -> dict:
    group, group_id = Group(), f"o-{uuid.uuid4().hex[:8]}"
    threads = [ThinMember(i, bootstrap, group_id, topic, group, joiner=False) for i in range(members)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while not (group.even(partitions, members) and len(group.fetched) == partitions):
            _check(threads, deadline, "the first members never settled")
            time.sleep(0.01)
        time.sleep(1.0)  # every member read what it holds (a few records per partition)
        before = group.owners()
        with group.lock:
            group.fetched.clear()
        joiner = ThinMember(members, bootstrap, group_id, topic, group, joiner=True)
        threads.append(joiner)
        joiner.start()
        while group.join_start is None:
            time.sleep(0.001)
        t0 = group.join_start
        assigned = None
        deadline = time.monotonic() + 300
        while True:
            _check(threads, deadline, f"the join never completed: {group.owned}")
            if group.even(partitions, members + 1):
                assigned = assigned or time.monotonic()
                now = group.owners()
                moved = [p for p, m in now.items() if before.get(p) != m]
                with group.lock:
                    got = [group.fetched.get(p) for p in moved]
                if all(f is not None and f[0] == now[p] for p, f in zip(moved, got, strict=True)):
                    with group.lock:
                        first = min((t for m, t in group.fetched.values() if m == members), default=None)
                    return {"seconds": max(t for _, t in got) - t0, "assigned_seconds": assigned - t0,
                            "moved": len(moved), "joiner_first_fetch_seconds": -1.0 if first is None else first - t0,
                            "heartbeat_interval_s": group.interval}
            else:
                assigned = None
            time.sleep(0.005)
    finally:
        group.stop.set()
        closers = [threading.Thread(target=t.close, daemon=True) for t in threads]
        for c in closers:
            c.start()
        for c in closers:
            c.join(20)


def _check(threads: list[ThinMember], deadline: float, why: str) -> None:
    for t in threads:
        if t.error is not None:
            raise RuntimeError(f"{t.name}: {t.error!r}") from t.error
    if time.monotonic() > deadline:
        raise RuntimeError(why)


def join_to_fetch(args, tmp: Path) -> dict:
    from peers.apache_kafka import ApacheKafkaCluster, kafka_jars

    jars = kafka_jars()
    hb = {"group.consumer.heartbeat.interval.ms": args.heartbeat_ms,
          "group.consumer.min.heartbeat.interval.ms": min(args.heartbeat_ms, 5000)}
    samples: dict[str, list[dict]] = {"java": [], "ours": []}
    with ApacheKafkaCluster(tmp / "kafka", jars=jars, overrides=hb) as kafka:
        topic = "join-to-fetch"
        fill(kafka.bootstrap, topic, args.partitions)
        print(f"join-to-fetch on Apache Kafka 4.2 at {kafka.bootstrap}: {args.members} members + 1 joining, "
              f"{args.partitions} partitions, heartbeat interval {args.heartbeat_ms} ms", flush=True)
        for r in range(args.rounds):
            for name in (["java", "ours"] if r % 2 == 0 else ["ours", "java"]):
                got = (java_round(jars, kafka.bootstrap, topic, args.members) if name == "java"
                       else ours_round(kafka.bootstrap, topic, args.members, args.partitions))
                samples[name].append(got)
                extra = (f", heartbeat interval given {got['heartbeat_interval_s'] * 1000:.0f} ms"
                         if got.get("heartbeat_interval_s") else "")
                print(f"  round {r} {name}: {got['moved']} partitions moved, fetched by their new owners "
                      f"{got['seconds']:.3f} s after the join (assignment even after {got['assigned_seconds']:.3f} s, "
                      f"the joiner's first record after {got['joiner_first_fetch_seconds']:.3f} s){extra}", flush=True)
    med = {n: {k: statistics.median(s[k] for s in samples[n])
               for k in ("seconds", "assigned_seconds", "joiner_first_fetch_seconds")} for n in samples}
    given = [s["heartbeat_interval_s"] for s in samples["ours"] if s.get("heartbeat_interval_s")]
    return {"members": args.members, "partitions": args.partitions, "heartbeat_interval_ms": args.heartbeat_ms,
            "heartbeat_interval_given_ms": round(statistics.median(given) * 1000) if given else None,
            "rounds": args.rounds, "java": med["java"], "ours": med["ours"],
            "ratio": med["ours"]["seconds"] / med["java"]["seconds"], "samples": samples}


# ------------------------------------------------------------------ query rows/s
def session(workdir: Path):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + paths)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-kip848-members")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
             .config("spark.python.daemon.module", "pyspark_coordkafka.daemon")
             .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def query_rates(args, tmp: Path) -> dict:
    import bench_spark_source as bss

    from spark_coord.cluster import LocalCluster

    hb = {"group.consumer.heartbeat.interval.ms": args.heartbeat_ms,
          "group.consumer.min.heartbeat.interval.ms": min(args.heartbeat_ms, 5000)}
    rates: dict[str, list[float]] = {"consumer": [], "coordkafka": []}
    outsides: dict[str, list[float]] = {"consumer": [], "coordkafka": []}
    with LocalCluster(1, tmp / "ours", overrides=hb) as ours:
        topic = "kip848-query"
        create_topic(ours.bootstrap, topic, args.query_partitions)
        seconds = bss.produce(ours.bootstrap, topic, bss.SHAPES["a"], args.records, 100)
        print(f"query rows/s on our broker at {ours.bootstrap}: {args.records:,} records of 100 bytes in "
              f"{args.query_partitions} partitions (produced in {seconds:.1f} s), local[2]", flush=True)
        spark = session(tmp)
        try:
            for run in range(args.queries):
                for protocol in (["consumer", "coordkafka"] if run % 2 == 0 else ["coordkafka", "consumer"]):
                    df = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", ours.bootstrap)
                          .option("subscribe", topic).option("startingOffsets", "earliest")
                          .option("group.id", f"q-{protocol}-{uuid.uuid4().hex[:8]}")
                          .option("kafka.group.protocol", protocol).load())
                    label = f"query {run} kafka.group.protocol={protocol}"
                    rate, outside = timed_query(spark, df, label, args.records)
                    rates[protocol].append(rate)
                    outsides[protocol].append(outside)
                    print(f"  {label}: {rate:,.0f} rows/s ({args.records / rate:.2f} s, of which {outside:.2f} s "
                          f"outside the micro-batches: the query's start and stop)", flush=True)
        finally:
            spark.stop()
    warm = {p: r[1:] or r for p, r in rates.items()}
    med = {p: statistics.median(w) for p, w in warm.items()}
    paired = statistics.median(a / b for a, b in zip(warm["consumer"], warm["coordkafka"], strict=True))
    outside = {p: statistics.median(o[1:] or o) for p, o in outsides.items()}
    return {"records": args.records, "partitions": args.query_partitions, "queries": args.queries,
            "heartbeat_interval_ms": args.heartbeat_ms, "consumer": med["consumer"], "coordkafka": med["coordkafka"],
            "ratio": med["consumer"] / med["coordkafka"], "paired_ratio": paired, "outside_s": outside,
            "samples": rates, "outside_samples": outsides}


def timed_query(spark, df, label: str, records: int) -> tuple[float, float]:
    """``df`` from earliest into the ``noop`` sink with ``Trigger.AvailableNow``: rows per second of
    the whole query, and the seconds outside its micro-batches (Spark's ``triggerExecution`` summed:
    the rest is the query's start, its members joining, and its stop, their leaving)."""
    ckpt = tempfile.mkdtemp(prefix="bench-ckpt-")
    try:
        t0 = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        progress = query.recentProgress
        rows = sum(p["numInputRows"] for p in progress)
        if rows != records:
            raise RuntimeError(f"{label} read {rows} rows, expected {records}")
        inside = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
        return rows / elapsed, elapsed - inside
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=3, help="members in the group before one more joins")
    p.add_argument("--partitions", type=int, default=12, help="partitions of the join-to-fetch topic")
    p.add_argument("--rounds", type=int, default=7, help="join-to-fetch rounds per kind of member")
    p.add_argument("--heartbeat-ms", type=int, default=500,
                   help="group.consumer.heartbeat.interval.ms of both clusters (Kafka's default: 5000)")
    p.add_argument("--records", type=int, default=3_000_000, help="records the queries read")
    p.add_argument("--query-partitions", type=int, default=4)
    p.add_argument("--queries", type=int, default=5, help="queries per protocol (the first is cold)")
    p.add_argument("--skip", choices=["join", "query"], help="leave one half out")
    p.add_argument("--quick", action="store_true", help="3 rounds, 3 queries of 1,000,000 records")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.queries, args.records = min(args.rounds, 3), min(args.queries, 3), min(args.records,
                                                                                                1_000_000)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    join = query = None
    with tempfile.TemporaryDirectory(prefix="bench-kip848-members-") as tmp:
        tmp = Path(tmp)
        if args.skip != "join":
            join = join_to_fetch(args, tmp)
        if args.skip != "query":
            query = query_rates(args, tmp)
    print()
    print("| figure | KIP-848 member | baseline | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    if join:
        ours, java = join["ours"], join["java"]
        print(f"| join to every moved partition fetched, s (ours / Java on Kafka 4.2; {join['members']} + 1 members, "
              f"{join['partitions']} partitions, heartbeat {join['heartbeat_interval_ms']} ms) | {ours['seconds']:.3f} "
              f"| {java['seconds']:.3f} | {join['ratio']:.2f} | <= 1.00: {'met' if join['ratio'] <= 1 else 'missed'} |")
        print(f"| join to an even assignment, s | {ours['assigned_seconds']:.3f} | {java['assigned_seconds']:.3f} "
              f"| {ours['assigned_seconds'] / java['assigned_seconds']:.2f} | |")
        print(f"| join to the joiner's first record, s | {ours['joiner_first_fetch_seconds']:.3f} "
              f"| {java['joiner_first_fetch_seconds']:.3f} "
              f"| {ours['joiner_first_fetch_seconds'] / java['joiner_first_fetch_seconds']:.2f} | |")
    if query:
        print(f"| query rows/s, group.protocol consumer / coordkafka ({query['records']:,} records, "
              f"{query['partitions']} partitions, warm median) | {query['consumer']:,.0f} | {query['coordkafka']:,.0f} "
              f"| {query['ratio']:.3f} (paired {query['paired_ratio']:.3f}) "
              f"| >= 0.95: {'met' if query['ratio'] >= 0.95 else 'missed'} |")
        o = query["outside_s"]
        print(f"| the query's seconds outside its micro-batches (start, join, stop; warm median) "
              f"| {o['consumer']:.2f} | {o['coordkafka']:.2f} | | |")
    if join:
        print(f"heartbeat interval: {join['heartbeat_interval_ms']} ms set on both clusters; the coordinator gave "
              f"our members {join['heartbeat_interval_given_ms']} ms")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{time.monotonic() - started:.0f} s in all; load average {load:.2f} at the end")
    import figures

    figures.write("kip848_members", {"join_to_fetch": join, "query": query},
                  label="quick" if args.quick else "full")
    return 0


if __name__ == "__main__":
    sys.exit(main())
