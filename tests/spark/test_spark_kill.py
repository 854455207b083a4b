"""SIGKILL of a whole Spark application (driver, executors, the reader's group members) inside a
micro-batch and between micro-batches, then a restart on the same checkpoint.

DESIGN.md section 9, invariant 2: a query with an idempotent sink sees every record
exactly once.  ``kill_job.py`` runs in its own process group, so a kill takes the
Python driver, its JVM and the Python workers down at once, as a crashed machine
would.  "Inside a batch" is detected by a marker file that the job's UDF touches
while it evaluates a chosen record; the checkpoint then holds that batch's offsets
without its commit.  "Between batches" is a query that caught up: every planned
batch committed.  The foreachBatch sink is also killed after it wrote the replayed
batch and before Spark's commit log has it, so that batch is replayed twice.
After the last restart catches up, the sink must hold each
(partition, offset) exactly once with the produced value -- no dedupe in the check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import wait_until
from spark_data import new_topic, produce

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("kill_job.py")
PARTITIONS = 2
FIRST, SECOND = 400, 200   # records produced before the first start / before the last restart
MAX_OFFSETS = 100          # per batch: the first run's batches are [0, 50), [50, 100), ... per partition
MARK = (0, 120)            # a record of batch 2, after two committed batches
START_TIMEOUT = 120        # a cold Spark start on two busy cores, plus a group rebalance


class Job:
    """One run of kill_job.py in its own process group, its output in a log file."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p and p != str(ROOT)])
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(JOB), *args], stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, cwd=str(ROOT), start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 40) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def kill(self) -> None:
        """SIGKILL the whole process group (driver, JVM, Python workers) and reap the driver."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        # the JVM and workers are in the same group; wait until none is left
        wait_until(lambda: not _group_alive(self.proc.pid), timeout=30, message="killed job's processes gone")
        self._log.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------- checkpoint reading
def _numbered(d: Path) -> list[int]:
    return sorted(int(f.name) for f in d.iterdir() if f.name.isdigit()) if d.is_dir() else []


def checkpoint_state(ckpt: Path) -> tuple[int | None, bool, dict[tuple[str, int], int]]:
    """(last planned batch id, whether it committed, its end offsets) from Spark's offset and commit logs."""
    planned = _numbered(ckpt / "offsets")
    if not planned:
        return None, False, {}
    last = planned[-1]
    lines = (ckpt / "offsets" / str(last)).read_text().splitlines()
    ends = {}
    for topic, parts in json.loads(lines[-1]).items():
        if topic.startswith("$"):
            continue
        ends.update({(topic, int(p)): int(o) for p, o in parts.items()})
    return last, last in _numbered(ckpt / "commits"), ends


def caught_up(ckpt: Path, expected: dict[tuple[str, int], int]) -> bool:
    """The last planned batch committed and reaches ``expected`` on every partition."""
    _, committed, ends = checkpoint_state(ckpt)
    return committed and all(ends.get(tp) == off for tp, off in expected.items())


# ---------------------------------------------------------------------------------- sink reading
def sink_rows(spark, sink: str, out: Path) -> list[tuple[int, int, str]]:
    """Every (partition, offset, value) the sink holds, duplicates included."""
    if sink == "files":
        rows = []
        for f in sorted(out.glob("*.json")):
            rows.extend(tuple(r) for r in json.loads(f.read_text()))
        return rows
    # Spark's reader honours _spark_metadata: files of batches that never committed are not read
    df = spark.read.parquet(str(out))
    return [(r.partition, r.offset, bytes(r.value).decode()) for r in df.select("partition", "offset", "value")
            .collect()]


def _expected(rows: list[tuple]) -> list[tuple[int, int, str]]:
    return sorted((r[3], r[4], bytes(r[1]).decode()) for r in rows)


def _ends(topic: str, rows: list[tuple]) -> dict[tuple[str, int], int]:
    ends = {(topic, p): 0 for p in range(PARTITIONS)}
    for r in rows:
        ends[(topic, r[3])] = max(ends[(topic, r[3])], r[4] + 1)
    return ends


@pytest.mark.slow
@pytest.mark.timeout(600)  # two Spark jobs killed and restarted; over 300 s on a loaded 2-core machine
@pytest.mark.parametrize("sink,group", [("parquet", False), ("files", True)], ids=["parquet-static", "files-group"])
def test_sigkill_inside_and_between_batches_keeps_exactly_once(spark, cluster, tmp_path, sink, group):
    topic = new_topic(cluster, PARTITIONS, prefix="kill")
    rows = produce(cluster, topic, FIRST, partitions=PARTITIONS, headers=False)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    base = ["--bootstrap", cluster.bootstrap, "--topic", topic, "--checkpoint", str(ckpt), "--sink", sink,
            "--out", str(out), "--max-offsets", str(MAX_OFFSETS)]
    if group:
        base += ["--group", f"kill-{topic}", "--session-timeout-ms", "3000"]
    markers = tmp_path / "markers"
    markers.mkdir()
    jobs: list[Job] = []
    try:
        # 1. kill inside batch 2: its offsets are logged, its tasks are running, its commit is not written
        job = Job(base + ["--row-delay-ms", "10", "--mark", f"{MARK[0]}:{MARK[1]}", "--marker-dir", str(markers)],
                  tmp_path / "run1.log")
        jobs.append(job)
        marker = markers / f"reached-{MARK[0]}-{MARK[1]}"
        wait_until(lambda: marker.exists() or not job.alive(), timeout=START_TIMEOUT,
                   message=lambda: f"the UDF reaching {MARK}; job log:\n{job.tail()}")
        assert job.alive(), f"job exited early:\n{job.tail()}"
        job.kill()
        last, committed, ends = checkpoint_state(ckpt)
        assert last is not None and not committed, f"batch {last} already committed: the kill was not inside it"
        assert ends.get((topic, MARK[0]), 0) > MARK[1], f"batch {last} ({ends}) does not hold {MARK}"

        killed_batch = last
        if sink == "files":
            # 2a. replay the killed batch, and kill once its file is in the sink but before Spark's commit
            job = Job(base + ["--row-delay-ms", "2", "--hold-after-batch", str(killed_batch), "--marker-dir",
                              str(markers)], tmp_path / "run2a.log")
            jobs.append(job)
            written = markers / f"written-{killed_batch}"
            wait_until(lambda: written.exists() or not job.alive(), timeout=START_TIMEOUT,
                       message=lambda: f"batch {killed_batch} replayed into the sink; job log:\n{job.tail()}")
            assert job.alive(), f"job exited early:\n{job.tail()}"
            job.kill()
            assert (out / f"{killed_batch}.json").exists()
            assert checkpoint_state(ckpt)[:2] == (killed_batch, False), "the held batch is not the last uncommitted one"

        # 2. restart on the same checkpoint: the killed batch is replayed; kill again once idle (between batches)
        job = Job(base + ["--row-delay-ms", "2"], tmp_path / "run2.log")
        jobs.append(job)
        wait_until(lambda: caught_up(ckpt, _ends(topic, rows)) or not job.alive(), timeout=START_TIMEOUT,
                   message=lambda: f"catching up to {_ends(topic, rows)}: {checkpoint_state(ckpt)}\n{job.tail()}")
        assert job.alive(), f"job exited early:\n{job.tail()}"
        job.kill()
        assert caught_up(ckpt, _ends(topic, rows)), "a batch was planned after catching up with no new data"

        # 3. more records while it is down; restart and catch up again
        rows += produce(cluster, topic, SECOND, partitions=PARTITIONS, start=FIRST, headers=False)
        job = Job(base, tmp_path / "run3.log")
        jobs.append(job)
        wait_until(lambda: caught_up(ckpt, _ends(topic, rows)) or not job.alive(), timeout=START_TIMEOUT,
                   message=lambda: f"catching up to {_ends(topic, rows)}: {checkpoint_state(ckpt)}\n{job.tail()}")
        assert job.alive(), f"job exited early:\n{job.tail()}"
        job.kill()

        got = sink_rows(spark, sink, out)
        counts = Counter((p, o) for p, o, _ in got)
        twice = sorted(k for k, n in counts.items() if n > 1)
        assert not twice, f"{len(twice)} record(s) in the sink more than once, e.g. {twice[:5]}"
        assert sorted(got) == _expected(rows)
    finally:
        for j in jobs:
            if j.alive():
                j.kill()


def test_group_offsets_behind_the_checkpoint_do_not_rewind_the_query():
    """The rule the group run above depends on: after a restart the coordinator may hand out the
    group's offsets, which trail the checkpoint by the batches whose ping never went out; the query
    continues from its checkpoint there, and skips ahead where another member read further."""
    from spark_coord.spark.stream import CoordKafkaStreamReader

    handed = {("t", 0): 100, ("t", 1): 300, ("t", 2): 7}
    checkpoint = {("t", 0): 150, ("t", 1): 150}
    assert CoordKafkaStreamReader._handed_starts(handed, checkpoint) == {("t", 0): 150, ("t", 1): 300, ("t", 2): 7}


class _Handing:
    """A ``PartitionSource`` whose coordinator handed out ``assigned`` (what ``GroupPartitionSource``
    answers), with an offset resolver over fixed log ends: the planning rule alone, no Spark."""

    def __init__(self, assigned: dict, latest: dict) -> None:
        self._assigned, self._latest = assigned, latest
        self.committed, self.planned = {}, {}

    def assigned(self) -> dict:
        return dict(self._assigned)

    def on_batch_committed(self, end: dict) -> None:
        self.committed.update(end)

    def on_batch_planned(self, end: dict) -> None:
        self.planned.update(end)

    # the resolver's part
    def latest(self, tps) -> dict:
        return {tp: self._latest[tp] for tp in tps}

    def earliest(self, tps) -> dict:
        return {tp: 0 for tp in tps}

    def gone(self, tps) -> list:
        return []

    def leaders(self, tps) -> dict:
        return {}


def _planned_ranges(reader, start: dict, limit) -> dict:
    from spark_coord.spark.offsets import to_json

    end = reader.latestOffset(to_json(start), limit)
    return {(p.topic, p.partition): (p.from_offset, p.until_offset)
            for p in reader.partitions(to_json(start), end)}


@pytest.mark.parametrize("limit", ["all", "max"])
def test_a_partition_handed_out_at_its_log_end_is_not_read_again_from_the_checkpoint(limit):
    """What a chaos run found (a Spark member killed and restarted on its checkpoint): while it was
    gone another member read the partition to its log end and committed; the coordinator hands it
    back at that offset, so the next batch has nothing to read there -- yet it was planned from the
    checkpoint's offset to the handed-out one, reading 1,835 records the group had committed past.
    The same when ``maxOffsetsPerTrigger`` leaves the handed-out partition nothing this batch."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.stream import CoordKafkaStreamReader

    t0, t1 = ("t", 0), ("t", 1)
    reader = CoordKafkaStreamReader(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "group.id": "g"}, streaming=True))
    handing = _Handing({t0: 2940, t1: None}, {t0: 2940 if limit == "all" else 2941, t1: 5000})
    reader._source = reader._resolver = handing
    cap = ReadAllAvailable() if limit == "all" else ReadMaxRows(10)
    ranges = _planned_ranges(reader, {t0: 1105, t1: 4000}, cap)
    assert ranges.get(t0, (2940, 2940))[0] == 2940, ranges
    assert ranges[t1][0] == 4000
    assert handing.planned[t0] >= 2940


def test_a_replayed_first_batch_leaves_the_handed_out_offsets_to_the_next_batch():
    """What a chaos run found under load (a Spark member killed while its first batch ran, restarted
    on its checkpoint): Spark replays a logged batch 0 from ``initialOffset()``, asked again of the new
    reader, which answers the coordinator's handed-out offsets -- and took them as applied, though the
    replay ends at the checkpoint's offsets and the next batch starts there.  That batch then read a
    partition the checkpoint did not have from its earliest offset (0) and one it had from the
    checkpoint's offset (3625), both below what the group had committed (6330, 6350)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_coord.spark.offsets import from_json, to_json
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.stream import CoordKafkaStreamReader

    t2, t4, t5 = ("t", 2), ("t", 4), ("t", 5)
    reader = CoordKafkaStreamReader(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "group.id": "g",
         "startingOffsets": "earliest"}, streaming=True))
    handing = _Handing({t4: 6330, t5: 6350}, {t4: 6400, t5: 6400})
    reader._source = reader._resolver = handing
    batch0 = {t2: 3625, t5: 3625}  # the killed run's batch 0, in the offset log, not in the commit log
    initial = reader.initialOffset()  # the replay's start (Spark logs none for batch 0)
    replayed = {(p.topic, p.partition): (p.from_offset, p.until_offset)
                for p in reader.partitions(initial, to_json(batch0))}
    assert all(a >= {t4: 6330, t5: 6350}.get(tp, a) for tp, (a, _) in replayed.items()), replayed
    ranges = _planned_ranges(reader, batch0, ReadAllAvailable())
    assert ranges == {t4: (6330, 6400), t5: (6350, 6400)}
    # a query with no checkpoint: its first batch starts at the initial offsets, as before
    fresh = CoordKafkaStreamReader(reader.opts)
    fresh._source = fresh._resolver = _Handing({t4: 6330, t5: 6350}, {t4: 6400, t5: 6400})
    initial = fresh.initialOffset()
    assert _planned_ranges(fresh, from_json(initial), ReadAllAvailable()) == {t4: (6330, 6400), t5: (6350, 6400)}


def test_a_member_plans_its_partitions_only_while_half_a_session_is_left_of_its_lease():
    """What a nemesis run found (seed 41, a Spark member among thin and librdkafka ones): a member cut
    off from its coordinator planned batches until its lease had 0.5 s left, and their records were
    written after the lease ran out -- 0.1 s after, and once, when the fetch itself was slowed, 3 s
    after: when the coordinator may have handed the partitions to another member.  A member now
    plans only while more than half its session is left of its lease (pings come every third of a
    session, so a confirmed member always has that), giving the last batch planned that half to
    finish in."""
    from spark_coord.spark.group import GroupPartitionSource
    from spark_coord.spark.options import parse_source_options

    source = GroupPartitionSource(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "group.id": "g", "session.timeout.ms": "10000"},
        streaming=True))
    member = source.members[0]
    member.owned = {("t", 0): 5}
    now = time.monotonic()
    for left, planned in [(10.0, True), (6.7, True), (5.2, True), (4.8, False), (0.5, False), (-1.0, False)]:
        member.renew_lease(now + left)
        assert member.plannable() is planned, left
        assert source.assigned() == ({("t", 0): 5} if planned else {}), left
    member.renew_lease(now + 10.0)
    member.suspended = True    # the lease ran out earlier and no coordinator took it back yet
    assert not member.plannable() and source.assigned() == {}


def test_a_lease_that_runs_out_while_the_plan_waits_for_the_log_ends_keeps_the_partition_out_of_the_batch():
    """What a nemesis run found (seed 36, every member kind): a Spark member cut from everyone
    checked its lease, then asked the brokers for the log ends -- an answer that came 13 s later,
    when the cut healed, 5 s after the lease had run out -- and planned a batch of 625 records per
    partition on that answer, written while the coordinator could have handed the partitions on.
    The plan now checks the lease again once the log ends are in, and leaves out what is no longer
    plannable; the next batch plans it again once the member is confirmed."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_coord.spark.group import GroupPartitionSource
    from spark_coord.spark.offsets import from_json, to_json
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.stream import CoordKafkaStreamReader

    opts = parse_source_options({"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "group.id": "g",
                                 "session.timeout.ms": "10000"}, streaming=True)
    source = GroupPartitionSource(opts)
    member = source.members[0]
    member.owned = {("t", 0): None, ("t", 1): None}
    member.renew_lease(time.monotonic() + 10.0)

    class LogEnds:  # the brokers' answers; ``cut`` makes the answer come after the lease ran out
        cut = True

        def latest(self, tps):
            if self.cut:
                member.renew_lease(time.monotonic() - 1.0)
            return {tp: 5250 for tp in tps}

        def earliest(self, tps):
            return {tp: 0 for tp in tps}

        def gone(self, tps):
            return []

        def close(self):
            pass

    reader = CoordKafkaStreamReader(opts)
    reader._source, reader._resolver = source, LogEnds()
    start = to_json({("t", 0): 4625, ("t", 1): 4625})
    assert from_json(reader.latestOffset(start, ReadAllAvailable())) == {("t", 0): 4625, ("t", 1): 4625}
    assert source.planned == {}
    # confirmed again, and the brokers answer at once: the partitions are planned
    reader._resolver.cut = False
    member.renew_lease(time.monotonic() + 10.0)
    assert from_json(reader.latestOffset(start, ReadAllAvailable())) == {("t", 0): 5250, ("t", 1): 5250}


class _GrowingLog(_Handing):
    """No group (``assigned`` all None): the starting offsets come from the resolver, over a log that
    grows by 100 records between any two questions (a producer writing all along)."""

    def __init__(self, tps) -> None:
        super().__init__({tp: None for tp in tps}, {tp: 1000 for tp in tps})

    def latest(self, tps) -> dict:
        for tp in self._latest:
            self._latest[tp] += 100
        return super().latest(tps)

    def starting(self, tps, policy: str) -> dict:
        assert policy == "latest"
        return self.latest(tps)


def test_the_initial_offsets_resolved_from_latest_are_the_same_each_time_spark_asks():
    """Seen in the latency benchmark: queries from ``latest`` on a topic being written logged "planned
    start N is after end M; skipped" for their first batch.  Spark asks ``initialOffset()`` again when
    it plans batch 0, and each answer resolved "latest" anew: the batch started past the end the
    first answer had led to, and skipped the partitions."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_coord.spark.offsets import from_json
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.stream import CoordKafkaStreamReader

    tps = [("t", 0), ("t", 1)]
    reader = CoordKafkaStreamReader(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "startingOffsets": "latest"}, streaming=True))
    reader._source = reader._resolver = _GrowingLog(tps)
    first = reader.initialOffset()
    end = reader.latestOffset(first, ReadAllAvailable())
    again = reader.initialOffset()  # Spark asks again when it plans batch 0
    assert again == first
    planned = {(p.topic, p.partition): (p.from_offset, p.until_offset) for p in reader.partitions(again, end)}
    assert planned == {tp: (from_json(first)[tp], from_json(end)[tp]) for tp in tps}


class _Deleted(_Handing):
    """The coordinator still hands out ``deleted``'s partitions, whose topic is gone from the brokers."""

    def __init__(self, assigned: dict, latest: dict, deleted: str) -> None:
        super().__init__(assigned, latest)
        self.deleted = deleted

    def latest(self, tps) -> dict:
        from spark_coord.errors import ErrorCode, KafkaError

        if any(t == self.deleted for t, _ in tps):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {self.deleted!r}")
        return super().latest(tps)

    def gone(self, tps) -> list:
        return [tp for tp in tps if tp[0] == self.deleted]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_while_the_group_still_assigns_it_is_data_loss_naming_the_partition(fail_on_data_loss, caplog):
    """What a clean-clone run saw: a topic deleted while the query read it, and the coordinator had not
    yet taken its partitions back, so the batch's planning asked their log ends and failed with
    UNKNOWN_TOPIC_OR_PARTITION instead of the data loss that names the partition (failOnDataLoss).
    Without failOnDataLoss the query goes on with the other topics, warned once."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_coord.spark.offsets import to_json
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.partition import DataLossError
    from spark_coord.spark.stream import CoordKafkaStreamReader

    gone0, gone1, kept = ("d", 0), ("d", 1), ("k", 0)
    reader = CoordKafkaStreamReader(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "d,k", "group.id": "g",
         "failOnDataLoss": str(fail_on_data_loss).lower()}, streaming=True))
    source = _Deleted({gone0: None, gone1: None, kept: None}, {kept: 20}, deleted="d")
    reader._source = reader._resolver = source
    start = {gone0: 5, gone1: 5, kept: 10}
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=r"d-[01]: the partition is gone .*failOnDataLoss=false"):
            reader.latestOffset(to_json(start), ReadAllAvailable())
        return
    with caplog.at_level("WARNING", logger="spark_coord.spark.stream"):
        for _ in range(3):
            ranges = _planned_ranges(reader, start, ReadAllAvailable())
            if ranges:
                break
    assert ranges == {kept: (10, 20)}
    warned = [r.getMessage() for r in caplog.records if "the partition is gone" in r.getMessage()]
    assert sorted(w.split(":")[0] for w in warned) == ["d-0", "d-1"]
