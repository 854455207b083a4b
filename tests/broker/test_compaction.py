"""Per-topic log settings and compaction against a real broker process.

- A topic's retention.ms lowered through IncrementalAlterConfigs removes its old closed segments at once
  (the broker's periodic retention check is 10 minutes away here).
- max.message.bytes of a topic answers MESSAGE_TOO_LARGE; LogAppendTime stamps batches.
- A compacted topic written with 100,000 records over 1,000 keys (the last write of 100 keys a
  tombstone) is cleaned to one record per live key; the broker is SIGKILLed once while the (throttled)
  cleaner is mid-pass, its recovery (run first on a copy of the directory) keeps the log start at 0 and
  after the restart nothing is lost; kcat, confluent-kafka and the thin consumer then read exactly the live
  keys with their last values, offsets increasing with gaps.  (test_compaction_crash_steps.py kills the
  cleaner at each step of its swap.)
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest
from compaction_support import offsets, read_all, registration_session, wait_registered_again
from helpers import local_cluster, wait_until

from spark_coord.client.admin import AdminClient
from spark_coord.client.connection import BrokerConnection
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.errors import ErrorCode
from spark_coord.log import LogConfig, PartitionLog
from spark_coord.log.checkpoint import read_offset
from spark_coord.log.swap import CLEANER_CHECKPOINT
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
KEYS, ROUNDS, TOMBSTONED = 1000, 100, 100
THROTTLE = 400_000  # bytes/s: a pass over the log takes seconds, so the SIGKILL lands mid-pass


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("compaction"), 1, "compaction", {
            "log.retention.check.interval.ms": 600000, "log.cleaner.backoff.ms": 100,
            "log.cleaner.io.max.bytes.per.second": THROTTLE, "zookeeper.session.timeout.ms": 6000}) as c:
        yield c


def partition_dir(cluster, topic: str):
    return cluster.data_dir / "broker-0" / f"{topic}-0"


def produce(cluster, topic: str, records, compression: str = "none", batch_size: int = 16384) -> None:
    with ClusterClient(cluster.bootstrap) as c:
        p = Producer(c, compression=compression, batch_size=batch_size)
        for key, value, ts in records:
            p.send(topic, value, key=key, partition=0, timestamp_ms=ts)
        p.flush()


def alter(cluster, topic: str, **configs: str) -> None:
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).alter_topic_configs(topic, {k.replace("_", "."): v for k, v in configs.items()})


def test_lowering_retention_ms_removes_old_segments_promptly(cluster):
    topic = f"ret-{uuid.uuid4().hex[:6]}"
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(topic, 1, configs={"segment.bytes": "2048"})
    old = int(time.time() * 1000) - 2 * 3600_000
    produce(cluster, topic, [(b"k%d" % i, b"x" * 200, old) for i in range(60)], batch_size=200)
    produce(cluster, topic, [(b"fresh", b"y", None)])
    segments = sorted(partition_dir(cluster, topic).glob("*.log"))
    assert len(segments) > 3 and offsets(cluster, topic) == (0, 61)
    alter(cluster, topic, retention_ms="3600000")
    # the log start moves first, the old files go right after: wait for both
    wait_until(lambda: offsets(cluster, topic)[0] > 0
               and len(list(partition_dir(cluster, topic).glob("*.log"))) < len(segments), timeout=10,
               message="retention to apply the topic's new retention.ms")
    assert read_all(cluster, topic)[-1].value == b"y"


def test_max_message_bytes_and_log_append_time_per_topic(cluster):
    topic = f"msg-{uuid.uuid4().hex[:6]}"
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(topic, 1, configs={"max.message.bytes": "1000",
                                                       "message.timestamp.type": "LogAppendTime"})
    small, big = BatchBuilder(), BatchBuilder()
    small.append(b"a", timestamp_ms=1234)
    big.append(b"z" * 2000, timestamp_ms=1234)
    host, port = cluster.brokers[0]
    with BrokerConnection(host, port, timeout=15) as conn:
        def send(batch: bytes) -> dict:
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
            return conn.request(ApiKey.PRODUCE, body)["responses"][0]["partition_responses"][0]
        refused = send(big.build())
        assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE and "1000" in refused["error_message"]
        before = int(time.time() * 1000)
        ok = send(small.build())
        assert ok["error_code"] == ErrorCode.NONE and ok["log_append_time_ms"] >= before
    [record] = read_all(cluster, topic)
    assert record.timestamp_type == 1 and record.timestamp == ok["log_append_time_ms"]


def test_a_compacted_topic_survives_a_sigkill_mid_pass_and_reads_back_its_live_keys(cluster, tmp_path):
    started = time.monotonic()
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    with ClusterClient(cluster.bootstrap) as c:  # compacted once written: one pass over the whole log
        AdminClient(c).create_topic(topic, 1, configs={
            "cleanup.policy": "delete", "segment.bytes": "131072", "delete.retention.ms": "0",
            "min.cleanable.dirty.ratio": "0.3"})
    expected = {}
    records = []
    for r in range(ROUNDS):
        for k in range(KEYS):
            key = b"key-%04d" % k
            value = None if r == ROUNDS - 1 and k < TOMBSTONED else b"value-%04d-%03d-%s" % (k, r, b"p" * 8)
            records.append((key, value, None))
            expected[key] = value
    live = {k: v for k, v in expected.items() if v is not None}
    produce(cluster, topic, records, compression="lz4")
    # compacted from now on, and the next append rolls the active segment: everything is closed.  The pass
    # (seconds long at THROTTLE) starts once the log is written, so the SIGKILL below lands in it even on a
    # loaded machine (a pass that ran while the log was written leaves the last one too short for that)
    alter(cluster, topic, cleanup_policy="compact", segment_ms="1")
    produce(cluster, topic, [(b"zz-marker", b"end", None)])
    live[b"zz-marker"] = b"end"
    assert offsets(cluster, topic) == (0, KEYS * ROUNDS + 1)

    # SIGKILL while the throttled cleaner is writing its .cleaned output (or, on a loaded machine, has just
    # swapped a group in and not yet started the next: still mid-pass, its checkpoint not moved)
    directory = partition_dir(cluster, topic)
    wait_until(lambda: list(directory.glob("*.cleaned")) or list(directory.glob("*.swap")), timeout=30,
               interval=0.01, message="the cleaner to be mid-pass")
    session = registration_session(cluster)
    cluster.kill_broker(0)
    assert (read_offset(directory / CLEANER_CHECKPOINT) or 0) < KEYS * ROUNDS, "the SIGKILL came after the pass"
    # the broker's recovery, run on a copy of what the SIGKILL left (the restarted broker's cleaner may
    # start its next pass, with new .cleaned files, before the test looks)
    copy = tmp_path / directory.name
    shutil.copytree(directory, copy)
    recovered = PartitionLog(copy, LogConfig(cleanup_policy=("compact",), segment_bytes=131072))
    try:
        assert not list(copy.glob("*.cleaned")) and not list(copy.glob("*.swap"))
        assert (recovered.log_start_offset, recovered.log_end_offset) == (0, KEYS * ROUNDS + 1)
        assert recovered.apply_retention() == 0 and recovered.log_start_offset == 0
    finally:
        recovered.close()
    cluster.start_broker(0)
    wait_registered_again(cluster, session)
    assert offsets(cluster, topic) == (0, KEYS * ROUNDS + 1)

    # lift the throttle for every broker (a dynamic broker config), and let the cleaner finish
    with BrokerConnection(*cluster.brokers[0], timeout=15) as conn:
        answer = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [{
            "resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.cleaner.io.max.bytes.per.second", "config_operation": 0, "value": str(1 << 40)}]}],
            "validate_only": False})
    assert answer["responses"][0]["error_code"] == ErrorCode.NONE

    def compacted():
        got = read_all(cluster, topic)
        return got if len(got) == len(live) else None

    got = wait_until(compacted, timeout=40, interval=0.5, message="the log to be compacted to one record per key")
    assert {r.key: r.value for r in got} == live
    got_offsets = [r.offset for r in got]
    assert got_offsets == sorted(set(got_offsets)) and got_offsets[-1] == KEYS * ROUNDS
    assert len(got_offsets) < got_offsets[-1], "a compacted log has gaps"

    # confluent-kafka from the beginning
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:  # _PARTITION_EOF
                break
            raise AssertionError(msg.error())
        seen.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert {k: v for _, k, v in seen} == live and [o for o, _, _ in seen] == got_offsets

    # the thin consumer (a group of the broker-side coordinator)
    from spark_coord.consumer import Consumer as ThinConsumer

    thin = ThinConsumer(cluster.bootstrap, f"thin-{uuid.uuid4().hex[:6]}", topics=[topic],
                        auto_offset_reset="smallest", session_timeout_ms=6000, config={"fetch.wait.max.ms": 100})
    rows = []
    try:
        def done():
            for batch in thin.batches(timeout=0.2):
                rows.extend(batch.to_pylist())
                break
            return thin.positions().get((topic, 0), -1) >= KEYS * ROUNDS + 1
        wait_until(done, timeout=40, interval=0)
    finally:
        thin.close(timeout=10)
    assert {r["key"]: r["value"] for r in rows} == live
    assert [r["offset"] for r in rows] == got_offsets

    if KCAT is not None:  # kcat -C from the beginning
        out = subprocess.run([KCAT, "-C", "-b", cluster.bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
                              "-e", "-q", "-f", "%o\t%k\t%s\n", "-X", "log_level=3"],
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = [line.split(b"\t") for line in out.stdout.splitlines()]
        assert {k: v for _, k, v in lines} == live
        assert [int(o) for o, _, _ in lines] == got_offsets
    assert time.monotonic() - started < 60


def test_cli_alter_config_and_describe_configs(cluster, capsys):
    from spark_coord.cli import main

    topic = f"cli-{uuid.uuid4().hex[:6]}"
    assert main(["topics", "create", topic, "-b", cluster.bootstrap, "--config", "cleanup.policy=compact"]) == 0
    assert main(["topics", "alter-config", topic, "-b", cluster.bootstrap, "--set", "retention.ms=60000",
                 "--set", "segment.bytes=65536", "--delete", "cleanup.policy"]) == 0
    capsys.readouterr()
    assert main(["topics", "describe", topic, "-b", cluster.bootstrap, "--configs"]) == 0
    out = capsys.readouterr().out
    assert "retention.ms" in out and "60000" in out and "segment.bytes" in out and "cleanup.policy" not in out
    # a bad value is refused naming the key; the exit code says so
    assert main(["topics", "alter-config", topic, "-b", cluster.bootstrap, "--set", "retention.ms=soon"]) == 1
    assert main(["topics", "alter-config", "no-such-" + topic, "-b", cluster.bootstrap,
                 "--set", "retention.ms=1"]) == 1
