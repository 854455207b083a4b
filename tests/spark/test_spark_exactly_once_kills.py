"""The exactly-once coordkafka sink under real SIGKILLs, on a broker process of ours.

A streaming query (its own process group, ``local[2,4]``: two tasks a batch, a failed task tried again)
reads topic A (two partitions, 400 records, ``maxOffsetsPerTrigger`` 100: four micro-batches) with
``read_committed`` and writes topic B with ``kafka.transactional.id.prefix``.  The sink's test hook
(``SPARK_COORD_SINK_TEST_HOOK``) only pauses and announces the points on stderr (``commit_pause_ms``,
``write_pause_ms``); the faults are SIGKILLs:

1. the whole group when the driver's commit of batch 1 ended task 0's transaction and not task 1's
   (the driver dies during its commit): Spark's commit log lacks batch 1;
2. restarted from the checkpoint, the Python worker of a task that produced its rows of a batch and
   has not reported yet (an executor dies mid-write): Spark runs the task again.

Then the query runs to its end.  B read with read_committed holds every record of A once; read
uncommitted it holds more (the killed copies, in aborted transactions), so the kills hit writes.  The
bigger run is bench/bench_eos_kills.py.

Run as a script, this file is the query's own process.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
ROWS = 400
PER_BATCH = 100
START_TIMEOUT = 180  # a cold Spark start on two busy cores

pytestmark = pytest.mark.slow


def _query(argv: list[str]) -> int:
    """The query's own process: ``<bootstrap> <source> <out> <checkpoint> <prefix>``."""
    from pyspark.sql import SparkSession

    bootstrap, source, out, checkpoint, prefix = argv
    spark = (SparkSession.builder.master(f"local[{PARTITIONS},4]").appName("spark-coord-eos-kills")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(PARTITIONS)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", str(PER_BATCH)).load()
          .selectExpr("CAST(value AS STRING) AS value"))
    query = (df.writeStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", out).option("checkpointLocation", checkpoint)
             .option("kafka.transactional.id.prefix", prefix).trigger(availableNow=True).start())
    query.awaitTermination()
    print("QUERY DONE", flush=True)
    spark.stop()
    return 0


class _Query:
    """One start of the query process in a process group of its own; its output lines in a queue."""

    def __init__(self, args: list[str], out: str, log_path: Path) -> None:
        from spark_coord.spark.sink import TEST_HOOK_ENV

        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p and p != str(ROOT)])
        env[TEST_HOOK_ENV] = json.dumps({out: {"write_pause_ms": 300, "commit_pause_ms": 300}})
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed when the process ends
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__)), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, cwd=str(ROOT), start_new_session=True,
                                     text=True, errors="replace")
        self.lines: queue.Queue = queue.Queue()
        self.text: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            self.text.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            assert line is not None, f"the query ended before {pattern!r}:\n{''.join(self.text[-60:])}"
            m = re.search(pattern, line)
            if m:
                return m
        raise AssertionError(f"no {pattern!r} in {timeout} s:\n{''.join(self.text[-60:])}")

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def finish(self, timeout: float = START_TIMEOUT) -> str:
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.kill_group()
        time.sleep(0.2)
        self.log.close()
        return "".join(self.text)


def _read(bootstrap: str, topic: str, committed: bool) -> list[str]:
    """Every value of ``topic`` up to the last stable offset (read_committed, aborted batches dropped) or
    the high watermark (read_uncommitted)."""
    from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED, fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.reader import drop_aborted, iter_records, next_offset

    out: list[str] = []
    with ClusterClient(bootstrap) as cc:
        for p in sorted(cc.topic(topic, refresh=True, wait=30).partitions):
            offset, deadline = 0, time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, f"{topic}-{p}: no progress at offset {offset}"
                part = fetch(cc.connection(cc.leader(topic, p)), {(topic, p): offset}, max_wait_ms=100,
                             isolation_level=READ_COMMITTED if committed else READ_UNCOMMITTED)[0]
                assert part.error == 0, f"{topic}-{p}: fetch error {part.error}"
                end = part.last_stable_offset if committed else part.high_watermark
                if offset >= end:
                    break
                if not part.records:
                    continue
                buf = drop_aborted(part.records, part.aborted_transactions) if committed else part.records
                out.extend(r.value.decode() for r in iter_records(buf, min_offset=offset) if r.offset < end)
                offset = max(offset, min(next_offset(part.records) or offset, end))
    return out


@pytest.fixture(scope="module")
def bootstrap(zookeeper, tmp_path_factory):
    from helpers import local_cluster

    with local_cluster(zookeeper, tmp_path_factory.mktemp("eos-kills"), 1, "eos-kills") as cluster:
        yield cluster.bootstrap


def test_sigkills_of_the_driver_mid_commit_and_of_a_writing_worker_leave_every_record_once(bootstrap, tmp_path):
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    tag = uuid.uuid4().hex[:8]
    source, out, prefix = f"eos-kill-in-{tag}", f"eos-kill-out-{tag}", f"eos-kill-{tag}"
    with ClusterClient(bootstrap) as cc:
        for name in (source, out):
            AdminClient(cc).create_topic(name, PARTITIONS)
            cc.topic(name, refresh=True, wait=30)
        producer = Producer(cc)
        for i in range(ROWS):
            producer.send(source, b"r%05d" % i, partition=i % PARTITIONS)
        producer.flush()
    checkpoint = tmp_path / "checkpoint"
    args = [bootstrap, source, out, str(checkpoint), prefix]
    log_path = tmp_path / "query.log"

    query = _Query(args, out, log_path)
    query.wait_for(r"commit of batch 1: before transaction 2 of 2")
    query.kill_group()  # the driver dies during its commit: task 0's transaction committed, task 1's open
    query.finish()
    assert not (checkpoint / "commits" / "1").exists(), "Spark's commit log has batch 1: the kill came too late"

    query = _Query(args, out, log_path)
    m = query.wait_for(r"mid-write pid (\d+) task (\d+) batch (\d+) attempt 0")
    os.kill(int(m.group(1)), signal.SIGKILL)  # the Python worker of a task that wrote and has not reported
    retried = query.wait_for(rf"mid-write pid \d+ task {m.group(2)} batch {m.group(3)} attempt [1-9]")
    assert retried, "Spark did not run the killed task again"
    text = query.finish()
    assert query.proc.returncode == 0 and "QUERY DONE" in text, text[-4000:]

    committed = _read(bootstrap, out, committed=True)
    expected = [f"r{i:05d}" for i in range(ROWS)]
    counts = Counter(committed)
    assert sorted(counts) == expected, f"missing {sorted(set(expected) - set(counts))[:10]}"
    assert [v for v, c in counts.items() if c > 1] == [], "duplicated with read_committed"
    uncommitted = _read(bootstrap, out, committed=False)
    assert len(uncommitted) > ROWS, "no killed write left aborted records behind: the kills missed the writes"


if __name__ == "__main__":
    sys.exit(_query(sys.argv[1:]))
