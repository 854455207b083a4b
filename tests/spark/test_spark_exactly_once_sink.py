"""The exactly-once coordkafka sink (``kafka.transactional.id.prefix``, DESIGN.md "Exactly once into
Kafka from Spark") on real local Spark, on Apache Kafka 4.2 and on a broker process of ours.

A streaming query reads topic A (two partitions: two tasks per batch) and writes topic B in
transactions.  The faults are real and deterministic: the query first runs as its own process
(``local[2,2]``: a failed task is retried once) with the sink's test hook
(``SPARK_COORD_SINK_TEST_HOOK``), under which every task's first attempt fails after its rows were
written (an executor lost after the write: the retry's InitProducerId aborts the first attempt's
transaction) and the driver's commit of batch 0 ends task 0's transaction only, then raises (a
driver dying mid-commit: task 1's transaction stays open, Spark's commit log does not get the
batch).  Restarted from the same checkpoint, batch 0 is replayed: task 0 finds the sink group's
offset at 1 and writes nothing, task 1's InitProducerId aborts its open transaction and it writes
again.  B read with read_committed holds every record of A exactly once, while read_uncommitted
sees the aborted copies (so the faults happened).  The same run with the default sink (no prefix)
into topic C holds every record twice: the documented contrast.  Then the crash "after the commit,
before Spark's commit log" (the commit log entry deleted): the replay writes nothing.

A batch write (``df.write``) with the prefix commits each task's transaction from the driver.  The
tests that commit offsets in transactions skip on brokers that do not advertise AddOffsetsToTxn and
TxnOffsetCommit (ApiVersions); ours serve them since their transaction coordinator took offsets.

Run as a script, this file is the query's own process (see ``_run_queries``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
ROWS = 200  # records of topic A, half in each partition

pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------------------- helpers

def _topic(bootstrap: str, partitions: int = PARTITIONS, prefix: str = "eos") -> str:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(name, partitions)
        cc.topic(name, refresh=True, wait=30)
    return name


def _produce_input(bootstrap: str, topic: str) -> dict[int, list[str]]:
    """ROWS records, ``r<i>`` to partition i % 2; returns the values of each partition."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    sent: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc)
        for i in range(ROWS):
            value = f"r{i:05d}"
            producer.send(topic, value.encode(), partition=i % PARTITIONS)
            sent[i % PARTITIONS].append(value)
        producer.flush()
    return sent


def _read_committed(bootstrap: str, topic: str, expected: list[str], timeout: float = 30.0) -> None:
    """Wait until read_committed reads exactly ``expected`` (sorted): a committed transaction's markers are
    written after EndTxn is answered (as Kafka's coordinator writes them), so the last stable offset of
    each partition passes its records a moment later."""
    from helpers import wait_until

    seen: list[list[str]] = []

    def done() -> bool:
        seen[:] = [sorted(_read(bootstrap, topic))]
        return seen[0] == expected

    wait_until(done, timeout=timeout, interval=0.1,
               message=lambda: f"{topic}: read_committed reads {len(seen[0]) if seen else 0} of {len(expected)}")


def _read(bootstrap: str, topic: str, committed: bool = True) -> list[str]:
    """Every value of ``topic`` up to the last stable offset with read_committed (the batches of aborted
    transactions dropped, as Kafka's consumer does), or up to the high watermark with read_uncommitted."""
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


def _high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return AdminClient(cc).list_offsets(topic, None, LATEST)


def _sink_offsets(bootstrap: str, prefix: str, partitions=range(PARTITIONS)) -> dict[int, int]:
    """The sink group's committed offsets of its pseudo-partitions (require_stable: none in an open
    transaction is asked for, or the fetch answers UNSTABLE_OFFSET_COMMIT until it times out)."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import committed_offsets_stable

    with ClusterClient(bootstrap) as cc:
        found = committed_offsets_stable(cc, prefix, [(f"{prefix}-sink", p) for p in partitions], timeout=10)
    return {p: o for (_, p), o in found.items()}


def _stream(spark, bootstrap: str, source: str, out: str, checkpoint: str, prefix: str | None) -> None:
    """One availableNow run of the query A -> ``out`` (the values only: a deterministic plan, task p
    reads partition p of A); raises what the query failed with."""
    df = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest").load()
          .selectExpr("CAST(value AS STRING) AS value"))
    writer = (df.writeStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", out).option("checkpointLocation", checkpoint))
    if prefix is not None:
        writer = writer.option("kafka.transactional.id.prefix", prefix)
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
    finally:
        if query.isActive:
            query.stop()


def _run_queries(argv: list[str]) -> int:
    """The query's own process: ``<bootstrap> <source> (<out> <checkpoint> <prefix or ->)...``; prints one
    JSON line with each query's failure (None when it completed)."""
    from pyspark.sql import SparkSession

    bootstrap, source, rest = argv[0], argv[1], argv[2:]
    spark = (SparkSession.builder.master("local[2,2]").appName("spark-coord-eos-sink")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    failures = {}
    for i in range(0, len(rest), 3):
        out, checkpoint, prefix = rest[i:i + 3]
        try:
            _stream(spark, bootstrap, source, out, checkpoint, None if prefix == "-" else prefix)
            failures[out] = None
        except Exception as e:  # noqa: BLE001 - reported to the test, which asserts what it was
            failures[out] = str(e)[-2000:]
    print("RESULT " + json.dumps(failures), flush=True)
    spark.stop()
    return 0


def _query_process(tmp_path: Path, hook: dict, argv: list[str]) -> dict:
    from spark_coord.spark.sink import TEST_HOOK_ENV

    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                       if p and p != str(ROOT)])
    env[TEST_HOOK_ENV] = json.dumps(hook)
    log_path = tmp_path / "query-process.log"
    with open(log_path, "wb") as log:
        proc = subprocess.run([sys.executable, str(Path(__file__)), *argv], stdout=log, stderr=subprocess.STDOUT,
                              env=env, cwd=str(ROOT), timeout=240)
    text = log_path.read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"query process exited {proc.returncode}:\n{text[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


# ---------------------------------------------------------------------------------------- options

def test_options_of_the_transactional_sink_are_checked():
    from spark_coord.spark.options import parse_sink_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    opts = parse_sink_options({**base, "kafka.transactional.id.prefix": "orders-out"})
    assert (opts.transactional_id_prefix, opts.transaction_timeout_ms, opts.idempotence, opts.acks) == (
        "orders-out", 900_000, True, -1)
    assert parse_sink_options(base).transactional_id_prefix is None
    assert parse_sink_options({**base, "kafka.transactional.id.prefix": "p",
                               "kafka.transaction.timeout.ms": "60000"}).transaction_timeout_ms == 60000
    bad = [({"kafka.acks": "1"}, "kafka.transactional.id.prefix: a transactional producer is idempotent; kafka.acks"),
           ({"kafka.enable.idempotence": "false"}, "kafka.enable.idempotence=false refused"),
           ({"kafka.max.in.flight.requests.per.connection": "6"}, "at most 5"),
           ({"kafka.transactional.id.prefix": "bad name"}, "must be a topic name")]
    for extra, message in bad:
        options = {**base, "kafka.transactional.id.prefix": "p", **extra}
        with pytest.raises(ValueError, match=message):
            parse_sink_options(options)
    with pytest.raises(ValueError, match="kafka.transaction.timeout.ms: only taken with kafka.transactional.id"):
        parse_sink_options({**base, "kafka.transaction.timeout.ms": "1000"})
    with pytest.raises(ValueError, match="kafka.transactional.id.prefix"):  # Kafka's key: pointed to the prefix
        parse_sink_options({**base, "kafka.transactional.id": "x"})


# ------------------------------------------------------------------------------------ on a broker

@pytest.fixture(scope="module", params=["apache_kafka", "our_brokers"])
def kafka(request, tmp_path_factory):
    """The bootstrap of Apache Kafka 4.2 (one KRaft node), or of one broker process of ours."""
    if request.param == "apache_kafka":
        yield request.getfixturevalue("apache_kafka").bootstrap
        return
    from helpers import local_cluster

    zookeeper = request.getfixturevalue("zookeeper")
    with local_cluster(zookeeper, tmp_path_factory.mktemp("eos-sink"), 1, "eos-sink") as cluster:
        yield cluster.bootstrap


def test_offsets_in_a_transaction_need_the_topic_and_partition_to_exist(kafka):
    """Why the sink creates ``<prefix>-sink``: TxnOffsetCommit of a topic the brokers do not have, or of
    a partition past its count, is refused with UNKNOWN_TOPIC_OR_PARTITION (Kafka 4.2 checks both), which
    the producer retries until max_block_ms."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionalProducer, TransactionTimeoutError
    from spark_coord.errors import ErrorCode

    existing = _topic(kafka, partitions=1)
    for tp in ((f"absent-{uuid.uuid4().hex[:8]}", 0), (existing, 3)):
        with ClusterClient(kafka) as cc:
            producer = TransactionalProducer(cc, f"probe-{uuid.uuid4().hex[:8]}", max_block_ms=1500)
            producer.init_transactions()
            producer.begin_transaction()
            with pytest.raises(TransactionTimeoutError) as refused:
                producer.send_offsets_to_transaction({tp: 1}, f"probe-{uuid.uuid4().hex[:8]}")
            assert refused.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (tp, refused.value)
            producer.abort_transaction()


def test_a_batch_write_commits_each_task_transaction_from_the_driver(spark, kafka):
    """df.write with the prefix: each of the two tasks writes in its own transaction, ended by the driver's
    commit; read_committed reads every row once, and no transaction is left open (the last stable offset
    is the high watermark)."""
    out, prefix = _topic(kafka), f"bw-{uuid.uuid4().hex[:6]}"
    values = [f"b{i:04d}" for i in range(300)]
    (spark.createDataFrame([(v,) for v in values], "value string").repartition(2).write.format("coordkafka")
     .option("kafka.bootstrap.servers", kafka).option("topic", out)
     .option("kafka.transactional.id.prefix", prefix).mode("append").save())
    _read_committed(kafka, out, values)
    assert sorted(_read(kafka, out, committed=False)) == values
    assert sum(_high_watermarks(kafka, out).values()) > len(values)  # the commit markers


def _row_writer_job(spark, kafka: str, out: str, prefix: str, values: list[str]) -> list:
    """The row writer (pyspark without Arrow writers) in real Spark tasks, two of them: each task's
    SinkCommitMessage."""
    from spark_coord.spark.options import parse_sink_options
    from spark_coord.spark.sink import SinkColumns, produce_rows

    opts = parse_sink_options({"kafka.bootstrap.servers": kafka, "topic": out,
                               "kafka.transactional.id.prefix": prefix})
    cols = SinkColumns(value=0)
    return spark.sparkContext.parallelize([(v,) for v in values], 2).mapPartitions(
        lambda rows: [produce_rows(rows, opts, cols)]).collect()


def test_the_row_writer_writes_in_the_task_transaction_and_a_replayed_batch_writes_nothing(spark, kafka):
    """produce_rows (the row writers' path) as task p of micro-batch 4 (Spark's local property set as
    MicroBatchExecution sets it): nothing is readable until the driver side ends the reported
    transactions; the same batch run again finds the sink group's offset at 5 and writes nothing."""
    from spark_coord.spark.options import parse_sink_options
    from spark_coord.spark.sink import _end_transactions

    out, prefix = _topic(kafka), f"rw-{uuid.uuid4().hex[:6]}"
    values = [f"w{i:04d}" for i in range(100)]
    opts = parse_sink_options({"kafka.bootstrap.servers": kafka, "topic": out, "kafka.transactional.id.prefix": prefix})
    sc = spark.sparkContext
    sc.setLocalProperty("streaming.sql.batchId", "4")
    try:
        first = _row_writer_job(spark, kafka, out, prefix, values)
        assert sorted(m.transaction[0] for m in first) == [f"{prefix}-0", f"{prefix}-1"]
        assert sum(m.records for m in first) == 100 and not any(m.done for m in first)
        assert _read(kafka, out) == []  # open: the last stable offset holds read_committed back
        assert _end_transactions(opts, first, 4, True) == 2
        _read_committed(kafka, out, values)
        assert _sink_offsets(kafka, prefix) == {0: 5, 1: 5}
        again = _row_writer_job(spark, kafka, out, prefix, values)
        assert [(m.done, m.transaction, m.records) for m in again] == [(True, None, 0)] * 2
        assert _end_transactions(opts, again, 4, True) == 0
    finally:
        sc.setLocalProperty("streaming.sql.batchId", None)
    assert sorted(_read(kafka, out, committed=False)) == values


def test_a_stream_writes_each_record_once_through_retries_and_replays(spark, kafka, tmp_path):
    source = _topic(kafka, prefix="eos-a")
    sent = _produce_input(kafka, source)
    everything = sorted(sent[0] + sent[1])
    out, plain = _topic(kafka, prefix="eos-b"), _topic(kafka, prefix="eos-c")
    prefix = f"eos-{uuid.uuid4().hex[:6]}"
    ck_out, ck_plain = str(tmp_path / "ck-out"), str(tmp_path / "ck-plain")

    # 1. the query's own process: first attempts fail after writing, the driver's commit stops midway
    hook = {out: {"fail_first_attempt": True, "fail_commit_after": 1}, plain: {"fail_commit_after": 0}}
    failures = _query_process(tmp_path, hook, [kafka, source, out, ck_out, prefix, plain, ck_plain, "-"])
    assert "commit stops after 1 transaction" in (failures[out] or ""), failures
    assert "commit stops" in (failures[plain] or ""), failures
    assert not (Path(ck_out) / "commits" / "0").exists()  # Spark never recorded batch 0 as done
    assert _sink_offsets(kafka, prefix, [0]) == {0: 1}  # task 0's transaction committed, task 1's still open
    assert sorted(_read(kafka, plain)) == everything  # the default sink wrote its rows, uncommitted batch

    # 2. restarted from the checkpoints: batch 0 replayed
    _stream(spark, kafka, source, out, ck_out, prefix)
    _stream(spark, kafka, source, plain, ck_plain, None)
    got = _read(kafka, out)
    assert sorted(got) == everything, f"{len(got)} read_committed, {len(set(got))} distinct of {ROWS}"
    uncommitted = _read(kafka, out, committed=False)
    # both tasks' aborted first attempts, and task 1's transaction the replay aborted, are in the log
    assert len(uncommitted) == ROWS * 5 // 2, len(uncommitted)
    assert set(uncommitted) == set(everything)
    assert _sink_offsets(kafka, prefix) == {0: 1, 1: 1}
    assert (Path(ck_out) / "commits" / "0").exists()
    doubled = _read(kafka, plain)
    assert sorted(doubled) == sorted(everything * 2), "the default sink writes a replayed batch again"

    # 3. the driver died after its commit, before Spark's commit log: the replay writes nothing
    before = _high_watermarks(kafka, out)
    for name in ("0", ".0.crc"):
        path = Path(ck_out) / "commits" / name
        if path.exists():
            path.unlink()
    _stream(spark, kafka, source, out, ck_out, prefix)
    assert (Path(ck_out) / "commits" / "0").exists()
    assert _high_watermarks(kafka, out) == before
    _read_committed(kafka, out, everything)
    shutil.rmtree(tmp_path / "ck-plain", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(_run_queries(sys.argv[1:]))
