"""The exactly-once coordkafka sink under real SIGKILLs: every input record's output read once.

Run:  .venv/bin/python bench/bench_eos_kills.py [--records 200000] [--kills 25] [--seed 7] [--figures eos_kills]

One broker process of ours with its ZooKeeper (``cluster.LocalCluster``).  Topic A (2 partitions) is
filled with ``--records`` keyed records of unique values before the clock starts.  A streaming query,
run as its own process (this file with ``--query``; ``local[2,4]``: two tasks a batch, a failed task
tried again up to 4 times), reads A with ``kafka.isolation.level=read_committed`` and
``maxOffsetsPerTrigger`` ``--per-batch`` (many micro-batches; Trigger.AvailableNow, so the query ends
once A is read) and writes topic B with ``kafka.transactional.id.prefix``, its checkpoint in a
directory that outlives every process.

The run SIGKILLs it ``--kills`` times, the kinds drawn in turn from a shuffled schedule (seeded):

- ``executor_mid_write``: the Python worker of a task whose rows were produced and acknowledged, its
  transaction's offset and its report to the driver still to come.  Spark tries the task again in a
  new worker; the query process goes on.
- ``driver_before_commit``: the query's whole process group (driver JVM, Python driver, workers) once
  every task reported, before the driver's first EndTxn.
- ``driver_during_commit``: the group after the driver's first EndTxn, before its second.
- ``driver_after_commit``: the group after the driver's last EndTxn (Spark's commit log of the batch
  may or may not be written by then: recorded).
- ``random``: the group a random 0-3 s after the query's first announcement of a point since its
  start (so while it processes batches, not while it starts), wherever it is then (recorded from the
  checkpoint: a batch in flight or between batches).

Each aimed kill waits for the k-th (1-3, seeded) announcement of its point on the query's stderr,
printed by the sink's test hook (``SPARK_COORD_SINK_TEST_HOOK``: ``write_pause_ms`` and
``commit_pause_ms``, 100 ms pauses that widen the windows and change nothing else).  After a group kill
the query is started again from the checkpoint; after the last kill it runs to its end.

Then B is read (our fetch client) with read_committed and, independently, read_uncommitted with the
transaction markers: every input value's copies in the committed read are counted (missing,
duplicated), and each record read committed is looked up in the markers of the log (aborted or open
transactions read must be 0).  The same schedule (same seed, same kinds and counts) then runs with
the default sink (no prefix) into topic C: the duplicates it leaves are what the exactly-once sink
saves.  Prints a table; ``--figures NAME`` records the report as bench/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PARTITIONS = 2
KINDS = ("executor_mid_write", "driver_before_commit", "driver_during_commit", "driver_after_commit", "random")
PAUSE_MS = 100
HOOK = "SPARK_COORD_SINK_TEST_HOOK: "


# ------------------------------------------------------------------------------------ the query process

def run_query(argv: list[str]) -> int:
    """The query's own process: ``<bootstrap> <source> <out> <checkpoint> <prefix or -> <per batch>``;
    prints ``QUERY DONE`` when the availableNow query read everything."""
    import logging

    from pyspark.sql import SparkSession

    bootstrap, source, out, checkpoint, prefix, per_batch = argv
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spark = (SparkSession.builder.master(f"local[{PARTITIONS},4]").appName("bench-eos-kills")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(PARTITIONS))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", per_batch).load()
          .selectExpr("key", "value"))
    writer = (df.writeStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", out).option("checkpointLocation", checkpoint))
    if prefix != "-":
        writer = (writer.option("kafka.transactional.id.prefix", prefix)
                  .option("kafka.transaction.timeout.ms", "60000"))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    print("QUERY DONE", flush=True)
    spark.stop()
    return 0


class Query:
    """One start of the query process (its own process group), its output lines in a queue and a log."""

    def __init__(self, args: list[str], env: dict, log_path: Path) -> None:
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed by wait()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--query", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                                     start_new_session=True, text=True, errors="replace", bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        self.done = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            if line.startswith("QUERY DONE"):
                self.done = True
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern, nth: int, deadline: float) -> re.Match | None:
        """The ``nth`` line matching ``pattern`` from now on; None when the process ended or time ran out."""
        seen = 0
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                self.lines.put(None)
                return None
            m = pattern.search(line)
            if m:
                seen += 1
                if seen >= nth:
                    return m
        return None

    def kill_group(self) -> None:
        """SIGKILL every process of the query's group (driver, JVM, workers), and wait until none is left."""
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        deadline = time.monotonic() + 30
        while _group_members(pgid) and time.monotonic() < deadline:
            for pid in _group_members(pgid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        self.log.close()

    def wait(self, timeout: float) -> int | None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        time.sleep(0.2)  # the pump's last lines
        self.log.close()
        return code


def _group_members(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry))
    return out


# ------------------------------------------------------------------------------------ topics and reads

def make_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> str:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(name, partitions)
        cc.topic(name, refresh=True, wait=30)
    return name


def fill(bootstrap: str, topic: str, records: int) -> None:
    """``records`` records, key ``k<i>``, unique value ``v<i>``, partition by key (murmur2)."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc, acks=-1, batch_size=262144)
        for i in range(records):
            producer.send(topic, b"v%08d" % i, key=b"k%08d" % i)
        producer.flush()


def read_log(bootstrap: str, topic: str, committed: bool) -> tuple[list[tuple[int, int, bytes]], list]:
    """Every record of ``topic`` (partition, offset, value) up to the last stable offset with read_committed
    (the aborted transactions' batches dropped, as Kafka's consumer does) or the high watermark with
    read_uncommitted; read_uncommitted also returns every batch header (partition, header, marker or None)."""
    from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED, fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import control_marker, drop_aborted, iter_batches, iter_records, next_offset

    records, batches = [], []
    with ClusterClient(bootstrap) as cc:
        for p in sorted(cc.topic(topic, refresh=True, wait=30).partitions):
            offset, deadline = 0, time.monotonic() + 120
            while True:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}-{p}: no progress at offset {offset}")
                part = fetch(cc.connection(cc.leader(topic, p)), {(topic, p): offset}, max_wait_ms=100,
                             isolation_level=READ_COMMITTED if committed else READ_UNCOMMITTED)[0]
                if part.error:
                    raise RuntimeError(f"{topic}-{p}: fetch error {part.error}")
                end = part.last_stable_offset if committed else part.high_watermark
                if offset >= end:
                    break
                if not part.records:
                    continue
                if not committed:
                    for header, batch in iter_batches(part.records):
                        if header.next_offset > offset and header.base_offset < end:
                            marker = control_marker(header, batch) if header.is_control else None
                            batches.append((p, header, marker))
                buf = drop_aborted(part.records, part.aborted_transactions) if committed else part.records
                records.extend((p, r.offset, r.value) for r in iter_records(buf, min_offset=offset) if r.offset < end)
                offset = max(offset, min(next_offset(part.records) or offset, end))
    return records, batches


def outcomes(batches) -> dict[tuple[int, int], tuple[int, str]]:
    """(partition, base offset) of each transactional data batch -> (last offset, "commit" / "abort" /
    "open"), from the markers that follow it in its partition for its producer id."""
    from spark_coord.records.header import TRANSACTIONAL_MASK
    from spark_coord.records.reader import COMMIT_MARKER

    out: dict[tuple[int, int], tuple[int, str]] = {}
    pending: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p, header, marker in batches:
        key = (p, header.producer_id)
        if header.is_control:
            for base, last in pending.pop(key, []):
                out[(p, base)] = (last, "commit" if marker == COMMIT_MARKER else "abort")
        elif header.attributes & TRANSACTIONAL_MASK:
            pending.setdefault(key, []).append((header.base_offset, header.last_offset))
    for (p, _), left in pending.items():
        for base, last in left:
            out[(p, base)] = (last, "open")
    return out


def check(bootstrap: str, topic: str, records: int) -> dict:
    """Missing, duplicated and aborted-or-open records in ``topic`` read committed, against the input."""
    import bisect

    committed, _ = read_log(bootstrap, topic, committed=True)
    uncommitted, batches = read_log(bootstrap, topic, committed=False)
    counts = Counter(v for _, _, v in committed)
    expected = {b"v%08d" % i for i in range(records)}
    missing = sum(1 for v in expected if v not in counts)
    duplicated = sum(c - 1 for v, c in counts.items() if c > 1 and v in expected)
    unknown = sum(c for v, c in counts.items() if v not in expected)
    txn = outcomes(batches)
    starts: dict[int, list[int]] = {}
    for (p, base) in sorted(txn):
        starts.setdefault(p, []).append(base)
    not_committed = 0
    for p, offset, _ in committed:
        bases = starts.get(p, [])
        i = bisect.bisect_right(bases, offset) - 1
        if i >= 0:
            last, outcome = txn[(p, bases[i])]
            if offset <= last and outcome != "commit":
                not_committed += 1
    states = Counter(o for _, o in txn.values())
    return {"read_committed": len(committed), "read_uncommitted": len(uncommitted), "missing": missing,
            "duplicated": duplicated, "unknown": unknown, "aborted_or_open_read": not_committed,
            "transactional_batches": dict(states)}


# ------------------------------------------------------------------------------------ the kill loop

ANY_POINT = re.compile(re.escape(HOOK))
MID_WRITE = re.compile(r"mid-write pid (\d+) task (\d+) batch (\d+) attempt (\d+)")
PATTERNS = {
    "driver_before_commit": (re.compile(r"commit of batch (\d+): before transaction 1 of"),
                             re.compile(r"commit of batch (\d+): before the commit")),
    "driver_during_commit": (re.compile(r"commit of batch (\d+): before transaction 2 of"),
                             re.compile(r"commit of batch (\d+): before the commit")),
    "driver_after_commit": (re.compile(r"commit of batch (\d+): committed"),) * 2,
}


def schedule(kills: int, seed: int) -> list[tuple[str, int, float]]:
    """``kills`` (kind, nth announcement, random delay s), every kind as often as the count allows."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(kills)]
    rng.shuffle(kinds)
    return [(k, rng.randint(1, 3), round(rng.uniform(0.0, 3.0), 2)) for k in kinds]


def checkpoint_state(checkpoint: Path) -> str:
    """Where the query stood: the last batch planned (offsets log) and the last committed (commit log)."""
    def last(d: str) -> int:
        names = [int(n) for n in os.listdir(checkpoint / d) if n.isdigit()] if (checkpoint / d).is_dir() else []
        return max(names, default=-1)
    planned, done = last("offsets"), last("commits")
    return "between batches" if planned == done else f"batch {planned} in flight"


def run(bootstrap: str, source: str, out: str, prefix: str | None, plan, work: Path, args) -> dict:
    """The kill schedule ``plan`` against one query writing ``out``, then the query to its end."""
    checkpoint = work / f"checkpoint-{out}"
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("JAVA_TOOL_OPTIONS", None)
    env["SPARK_COORD_SINK_TEST_HOOK"] = json.dumps({out: {"write_pause_ms": PAUSE_MS,
                                                          "commit_pause_ms": PAUSE_MS}})
    qargs = [bootstrap, source, out, str(checkpoint), prefix or "-", str(args.per_batch)]
    log_path = work / f"query-{out}.log"
    kills, starts, retried = [], 1, 0
    t0 = time.monotonic()
    query = Query(qargs, env, log_path)
    for kind, nth, delay in plan:
        if query.proc.poll() is not None:
            if query.done:
                break
            query.wait(5)
            query, starts = Query(qargs, env, log_path), starts + 1
        deadline = time.monotonic() + args.point_timeout
        record = {"kind": kind, "nth": nth}
        if kind == "random":  # from the first point announced: the query is running batches
            if query.wait_for(ANY_POINT, 1, deadline) is None:
                break
            time.sleep(delay)
            if query.done or query.proc.poll() is not None:
                break
            record.update(delay_s=delay, state=checkpoint_state(checkpoint))
            query.kill_group()
        elif kind == "executor_mid_write":
            m = query.wait_for(MID_WRITE, nth, deadline)
            if m is None:
                break
            pid = int(m.group(1))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                record["gone"] = True
            record.update(pid=pid, task=int(m.group(2)), batch=int(m.group(3)), attempt=int(m.group(4)))
        else:
            m = query.wait_for(PATTERNS[kind][0 if prefix else 1], nth, deadline)
            if m is None:
                break
            query.kill_group()
            batch = int(m.group(1))
            record.update(batch=batch, commit_log_written=(checkpoint / "commits" / str(batch)).exists())
        record["at_s"] = round(time.monotonic() - t0, 1)
        kills.append(record)
        print(f"  {out}: kill {len(kills)}/{len(plan)} {kind} {json.dumps(record)}", flush=True)
        if kind != "executor_mid_write":
            query, starts = Query(qargs, env, log_path), starts + 1
    while True:  # to the end: a query that stopped without finishing (a failure after a kill) starts again
        code = query.wait(args.end_timeout)
        if code is None:
            query.kill_group()
            raise RuntimeError(f"{out}: the query did not finish in {args.end_timeout} s (log {log_path})")
        if query.done:
            break
        if starts > len(plan) + 10:
            raise RuntimeError(f"{out}: the query keeps failing (log {log_path})")
        query, starts = Query(qargs, env, log_path), starts + 1
    text = log_path.read_text(errors="replace")
    retried = len(re.findall(r"mid-write pid \d+ task \d+ batch \d+ attempt [1-9]", text))
    return {"kills": kills, "starts": starts, "retried_task_attempts": retried,
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--query":
        return run_query(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--per-batch", type=int, default=2_000, help="maxOffsetsPerTrigger")
    p.add_argument("--kills", type=int, default=25)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--point-timeout", type=float, default=120, help="seconds to wait for a kill's point")
    p.add_argument("--end-timeout", type=float, default=900, help="seconds for the last start to finish")
    p.add_argument("--skip-default", action="store_true", help="only the exactly-once sink")
    p.add_argument("--figures", metavar="NAME", help="record the report as bench/results/NAME.json")
    args = p.parse_args(argv)
    from spark_coord.cluster import LocalCluster

    plan = schedule(args.kills, args.seed)
    load_start = os.getloadavg()
    report: dict = {"records": args.records, "partitions": PARTITIONS, "max_offsets_per_trigger": args.per_batch,
                    "seed": args.seed, "pause_ms": PAUSE_MS, "load_average_start": [round(x, 2) for x in load_start]}
    with tempfile.TemporaryDirectory(prefix="bench-eos-kills-") as tmp:
        work = Path(tmp)
        with LocalCluster(1, work / "cluster") as cluster:
            bootstrap = cluster.bootstrap
            tag = uuid.uuid4().hex[:6]
            source = make_topic(bootstrap, f"eos-in-{tag}")
            fill(bootstrap, source, args.records)
            print(f"{args.records:,} records in {source}; {args.kills} kills, seed {args.seed}; load average "
                  f"{load_start[0]:.2f}", flush=True)
            runs = [("exactly_once", f"eos-out-{tag}", f"eos-kills-{tag}")]
            if not args.skip_default:
                runs.append(("default", f"default-out-{tag}", None))
            for name, out, prefix in runs:
                make_topic(bootstrap, out)
                figures = run(bootstrap, source, out, prefix, plan, work, args)
                figures.update(check(bootstrap, out, args.records))
                report[name] = figures
                print(f"{name}: {json.dumps({k: v for k, v in figures.items() if k != 'kills'})}", flush=True)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print_table(report)
    if args.figures:
        import figures

        figures.write(args.figures, report, label=f"seed{args.seed}" + ("-exactly-once" if args.skip_default else ""))
    eos = report["exactly_once"]
    return 0 if (eos["missing"], eos["duplicated"], eos["aborted_or_open_read"], eos["unknown"]) == (0, 0, 0, 0) else 1


def print_table(report: dict) -> None:
    print(f"\n{report['records']:,} input records, {report['partitions']} partitions, maxOffsetsPerTrigger "
          f"{report['max_offsets_per_trigger']}, seed {report['seed']}; load average "
          f"{report['load_average_start'][0]:.2f} -> {report['load_average_end'][0]:.2f}")
    names = [n for n in ("exactly_once", "default") if n in report]
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for kind in KINDS:
        print(f"| kills: {kind} | " + " | ".join(str(sum(1 for k in report[n]["kills"] if k["kind"] == kind))
                                             for n in names) + " |")
    rows = [("kills", lambda f: len(f["kills"])), ("query starts", lambda f: f["starts"]),
            ("task attempts retried", lambda f: f["retried_task_attempts"]), ("seconds", lambda f: f["seconds"]),
            ("records read_committed", lambda f: f"{f['read_committed']:,}"),
            ("records in the log (read_uncommitted)", lambda f: f"{f['read_uncommitted']:,}"),
            ("missing", lambda f: f["missing"]), ("duplicated", lambda f: f["duplicated"]),
            ("aborted or open records read", lambda f: f["aborted_or_open_read"])]
    for label, value in rows:
        print(f"| {label} | " + " | ".join(str(value(report[n])) for n in names) + " |")


if __name__ == "__main__":
    sys.exit(main())
