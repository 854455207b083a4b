"""A Spark structured-streaming query as a group member process, journaling like ``testkit.member``.

Run as ``python -m testkit.spark_member --bootstrap H:P --group G --topics a
--journal FILE --member-journal FILE --checkpoint DIR``.  It starts a local Spark session
(``local[1]``, a 512 MB driver) whose query reads ``spark.readStream.format("coordkafka")``
with ``group.id`` (the coordinator assigns partitions to the query's executor-member,
hosted in the driver-side process that runs the stream reader), checkpoints into
``--checkpoint`` and hands every micro-batch to a ``foreachBatch`` that journals its
records.  The group's offsets are committed by the source as Spark confirms batches.
On SIGTERM it waits (at most ``DRAIN_S``) until what it journaled has reached the group
-- a commit at or past the end of every partition it still holds, which comes once Spark
has written the batch to its commit log and asked the source for the next one -- then
stops the query (its member leaves the group with a final commit of what Spark
confirmed) and the session, and exits 0: a clean close leaves the group's offsets where
its deliveries ended, as the other kinds' do.  A query that fails is started again on
the same checkpoint.

Two journals, both JSON lines with ``ts`` and ``ev`` in the format of ``testkit.member``,
read together (by time) by ``SparkMemberProcess.events``:

- ``--journal``, written by this process: ``start`` (``id``, ``pid``, ``kind`` ``spark``);
  ``recs``, one line per partition of a micro-batch as ``foreachBatch`` saw it: ``t``,
  ``p``, ``offs``, ``vals`` (the records' values), ``gen`` null, ``batch`` (Spark's batch
  id) and ``replay`` true when the batch was planned by an earlier run of the query on
  this checkpoint and not confirmed by it (Spark runs such a batch again, exactly as
  planned, before it asks the source for anything: an at-least-once delivery of
  partitions this incarnation may not own -- see below); ``error`` (the query failed:
  ``msg``; it is started again); ``closed`` (the query and session stopped, ``left`` true);
- ``--member-journal``, written by the stream reader's process through the source's
  testing hook (``SPARK_COORD_MEMBER_JOURNAL``, ``spark_coord.spark.group``): ``assign``
  (StartFetcher, the complete assignment, ``gen``, ``parts``), ``stop`` (partitions given
  up, all or ``parts``), ``lost`` (lease over, ``lease_end``), ``resume``, and
  ``commit`` / ``commit_failed`` (the source's active commits), each naming its ``member``.

So the checks of ``testkit.invariants`` read a Spark member like a thin one: it owns a
partition from an ``assign`` until a ``stop``, ``lost`` or ``closed`` (or its death).
A Spark member killed and restarted on the same checkpoint is a new incarnation (a new
process, a new group member); the batch the killed one had planned but not confirmed is
replayed by the new one (``replay``): those records are delivered again (duplicates, as
Spark's at-least-once promises across a crash) whoever owns their partitions by then.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from testkit import child_env
from testkit.member import Journal, MemberProcess, read_journal

log = logging.getLogger(__name__)

__all__ = ["SparkMemberProcess", "held", "main", "unconfirmed_batches", "unconfirmed_deliveries"]

#: On SIGTERM, how long to wait for the last batch's offsets to reach the group before stopping.
DRAIN_S = 15.0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testkit.spark_member",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--journal", required=True)
    p.add_argument("--member-journal", required=True, help="the source's testing hook writes here")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--trigger-ms", type=int, default=500)
    p.add_argument("--max-offsets", type=int, default=20000, help="maxOffsetsPerTrigger")
    p.add_argument("--master", default="local[1]")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def unconfirmed_batches(checkpoint: str | os.PathLike) -> set[int]:
    """Batch ids in the checkpoint's offset log without an entry in its commit log: planned by an
    earlier run and not confirmed, so Spark runs them again first."""

    def numbered(d: Path) -> set[int]:
        return {int(f.name) for f in d.iterdir() if f.name.isdigit()} if d.is_dir() else set()

    return numbered(Path(checkpoint) / "offsets") - numbered(Path(checkpoint) / "commits")


def held(events: list[dict]) -> set[tuple[str, int]]:
    """The partitions a Spark member holds after ``events`` (both journals, by time)."""
    out: set[tuple[str, int]] = set()
    for e in events:
        if e["ev"] in ("assign", "resume"):
            out = {(t, p) for t, p, _ in e["parts"]}
        elif e["ev"] == "stop" and e.get("parts") is not None:
            out -= {(t, p) for t, p in e["parts"]}
        elif e["ev"] in ("stop", "lost", "closed"):
            out = set()
    return out


def unconfirmed_deliveries(events: list[dict]) -> dict[tuple[str, int], int]:
    """Partition -> end of what was delivered on it (``recs``), for the partitions the member holds
    whose group offset (``commit``) has not reached that end."""
    delivered: dict[tuple[str, int], int] = {}
    committed: dict[tuple[str, int], int] = {}
    for e in events:
        if e["ev"] == "recs":
            delivered[(e["t"], e["p"])] = max(delivered.get((e["t"], e["p"]), 0), e["offs"][-1] + 1)
        elif e["ev"] == "commit":
            committed[(e["t"], e["p"])] = max(committed.get((e["t"], e["p"]), 0), e["off"])
    holds = held(events)
    return {tp: end for tp, end in delivered.items() if tp in holds and committed.get(tp, -1) < end}


def _journal_batch(journal: Journal, replays: set[int]):
    """foreachBatch target: one ``recs`` line per partition of the batch."""

    def write(df, batch_id: int) -> None:
        taken: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
        for r in df.select("topic", "partition", "offset", "value").collect():
            taken[(r[0], r[1])].append((r[2], bytes(r[3] or b"").decode(errors="replace")))
        extra = {"replay": True} if batch_id in replays else {}
        for (t, p), recs in sorted(taken.items()):
            recs.sort()
            journal.write("recs", t=t, p=p, offs=[o for o, _ in recs], vals=[v for _, v in recs], gen=None,
                          batch=batch_id, **extra)

    return write


def main(argv: list[str] | None = None) -> int:
    from spark_coord.spark.group import MEMBER_JOURNAL_ENV

    args = _parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness may ask for every thread's stack
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    # before the JVM starts: the stream reader's process (started by it) inherits the hook
    os.environ[MEMBER_JOURNAL_ENV] = args.member_journal
    journal = Journal(args.journal)
    journal.write("start", id=args.client_id, pid=os.getpid(), kind="spark")

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName(f"spark-coord-member-{args.client_id}")
             .config("spark.driver.memory", "512m")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.default.parallelism", "1")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.warehouse.dir", str(Path(args.checkpoint).parent / "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    query = None
    try:
        while not stop.is_set():
            replays = unconfirmed_batches(args.checkpoint)
            reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", args.bootstrap)
                      .option("subscribe", args.topics).option("group.id", args.group)
                      .option("session.timeout.ms", args.session_timeout_ms).option("client.id", args.client_id)
                      .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", args.max_offsets))
            query = (reader.load().writeStream.foreachBatch(_journal_batch(journal, replays))
                     .option("checkpointLocation", args.checkpoint)
                     .trigger(processingTime=f"{args.trigger_ms} milliseconds").start())
            log.info("query %s running (group %s, replaying batches %s)", query.id, args.group, sorted(replays))
            while not stop.wait(0.5) and query.isActive:
                pass
            if not stop.is_set():
                error = query.exception()
                log.error("query ended: %s; starting it again on the same checkpoint", error)
                journal.write("error", msg=str(error)[:500])
        deadline = time.monotonic() + DRAIN_S
        while query is not None and query.isActive and time.monotonic() < deadline:
            events = sorted(read_journal(args.journal) + read_journal(args.member_journal), key=lambda e: e["ts"])
            waiting = unconfirmed_deliveries(events)
            if not waiting:
                break
            log.info("stopping: waiting for the group offsets of %s", waiting)
            time.sleep(0.2)
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.stop()
        journal.write("closed", left=True)
        journal.close()
    return 0


def _session_pids(sid: int) -> list[int]:
    """Every process of session ``sid`` (the driver, its JVM, the JVM's Python workers, whichever
    process group they put themselves in)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, session
        if int(fields[3]) == sid:
            out.append(int(d.name))
    return out


class SparkMemberProcess(MemberProcess):
    """One Spark member subprocess (its own session: driver, JVM and Python workers), with the
    interface of ``MemberProcess``.  SIGKILL, SIGSTOP and SIGCONT go to every process of its
    session (a crashed or frozen machine); SIGTERM and SIGUSR1 to the Python driver only."""

    def __init__(self, name: str, workdir: str | os.PathLike, bootstrap: str, group: str, *, topics: list[str],
                 checkpoint: str | os.PathLike, session_timeout_ms: int = 6000, consumer_id: str | None = None,
                 trigger_ms: int = 500):
        self.name = name
        self.kind = "spark"
        workdir = Path(workdir)
        self.journal_path = workdir / f"{name}.jsonl"
        self.member_journal_path = workdir / f"{name}.members.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.consumer_id = consumer_id or name
        cmd = [sys.executable, "-m", "testkit.spark_member", "--bootstrap", bootstrap, "--group", group,
               "--topics", ",".join(topics), "--journal", str(self.journal_path),
               "--member-journal", str(self.member_journal_path), "--checkpoint", str(checkpoint),
               "--client-id", self.consumer_id, "--session-timeout-ms", str(session_timeout_ms),
               "--trigger-ms", str(trigger_ms)]
        self._log = open(self.log_path, "ab")
        # what ./spark-submit.sh sets: driver and workers run this Python, with this checkout importable (Spark's
        # Python workers import spark_coord and find the ``pyspark_coordkafka`` data source there)
        env = child_env(PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, cwd=str(workdir), start_new_session=True)

    def events(self, ev: str | None = None) -> list[dict]:
        """Both journals, by time."""
        merged = sorted(read_journal(self.journal_path) + read_journal(self.member_journal_path),
                        key=lambda e: e["ts"])
        return [e for e in merged if ev is None or e["ev"] == ev]

    def owned(self) -> set[tuple[str, int]]:
        """What the journals say the query's member holds now."""
        return held(self.events())

    def signal(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGUSR1):
            super().signal(sig)
            return
        for pid in _session_pids(self.proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL every process of its session and reap the driver."""
        self.signal(signal.SIGKILL)
        self.proc.wait(15)
        self._log.close()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (query and session stop, the member leaves) and wait; then kill what is left."""
        code = super().stop(timeout)
        self.signal(signal.SIGKILL)  # a JVM or Python worker that outlived the driver
        return code

    def __repr__(self) -> str:
        return f"SparkMemberProcess({self.name}, pid={self.proc.pid})"


if __name__ == "__main__":
    sys.exit(main())
