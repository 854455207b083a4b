"""A broker process SIGKILLed at each step of a log cleaner's swap, then restarted (a real broker, real files).

The cleaner's testing hook (``SPARK_COORD_CLEANER_CRASH_AT``, ``spark_coord.log.swap``) makes the broker
kill itself when its cleaner reaches a step.  The log is laid out so that one pass has four groups of
segments: the first is emptied (every key in it written again later), the second keeps one whole batch
of keys never written again in its first segment and drops the three segments after it, the third keeps
two records of one batch (a batch rebuilt with fewer records), the fourth drops tombstones.  The kill
comes while the second group passes the step (the first is already swapped in, empty), or at the
checkpoint once every group is swapped.  After the restart, the broker's log and, before it, the same
recovery run on a copy of the partition directory must keep the log start at 0, read back each live key
with its last value, and hold no record that was not produced at its offset, none twice; once the
cleaner has finished, exactly the live keys remain.  Retention runs every 100 ms meanwhile: it must take
neither the emptied first segment nor anything else of a compacted log.
"""

from __future__ import annotations

import shutil
import signal
import time
import uuid

import pytest
from compaction_support import offsets, read_all, registration_session, wait_registered_again
from helpers import local_cluster, wait_until

from spark_coord.client.admin import AdminClient
from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.log import LogConfig, PartitionLog
from spark_coord.log.swap import CLEANER_CHECKPOINT, CRASH_AT_ENV, CRASH_STEPS
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.reader import iter_batches, iter_records
from spark_coord.wire.registry import ApiKey

PER_BATCH = 10
KEYS = [b"k-%02d" % k for k in range(PER_BATCH)]
STABLE = [b"s-%02d" % k for k in range(PER_BATCH)]
GROUP = 4  # segments (one batch each) per cleaned group
TOMBSTONED, REWRITTEN = 5, 8  # the last round: tombstones for the first 5 keys, values for the next 3


def value(key: bytes, round_: int) -> bytes:
    return (b"%s-round-%02d-" % (key, round_)).ljust(64, b"v")


def layout() -> list[list[tuple[bytes, bytes | None]]]:
    """The batches, in log order (one a segment while producing)."""
    def rounds(first: int, n: int):
        return [[(k, value(k, r)) for k in KEYS] for r in range(first, first + n)]

    batches = rounds(0, GROUP)  # group 1: emptied
    batches.append([(k, value(k, 0)) for k in STABLE])  # group 2: kept whole ...
    batches += rounds(GROUP, GROUP - 1)  # ... dropped
    batches += rounds(2 * GROUP - 1, GROUP)  # group 3: two records kept (the keys not in the last round)
    last = 3 * GROUP - 1
    batches.append([(k, None if i < TOMBSTONED else value(k, last)) for i, k in enumerate(KEYS[:REWRITTEN])])
    batches.append([(b"zz-marker", b"m" * 700)])  # rolls the segment of the one before: the active segment
    return batches


def produced() -> dict[int, tuple[bytes, bytes | None]]:
    """offset -> (key, value) of every record produced."""
    return dict(enumerate(r for b in layout() for r in b))


def live() -> dict[bytes, bytes]:
    last = {}
    for key, val in produced().values():
        last[key] = val
    return {k: v for k, v in last.items() if v is not None}


def batch_bytes(records, ts: int) -> bytes:
    b = BatchBuilder()
    for key, val in records:
        b.append(val, key=key, timestamp_ms=ts)
    return b.build()


def produce_layout(cluster, topic: str) -> int:
    """Every batch of ``layout()`` in its own Produce request; returns the size of a full batch."""
    ts = int(time.time() * 1000) - 1000  # delete.retention.ms=0: the tombstones are due at the pass
    batches = [batch_bytes(b, ts) for b in layout()]
    full = {len(b) for b in batches[:-2]}
    assert len(full) == 1 and 512 < min(full) <= 1024, "one full batch a segment of 1024 bytes"
    with BrokerConnection(*cluster.brokers[0], timeout=15) as conn:
        def send(data: bytes) -> int:
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": data}]}]}
            return conn.request(ApiKey.PRODUCE, body)["responses"][0]["partition_responses"][0]["error_code"]

        wait_until(lambda: send(batches[0]) == ErrorCode.NONE, timeout=15, message="the new topic to take writes")
        for data in batches[1:]:
            assert send(data) == ErrorCode.NONE
    return full.pop()


def read_broker(cluster, topic: str) -> list:
    """Every record of partition 0 from the log start through Fetch; the log start must be 0."""
    start, _ = offsets(cluster, topic)
    assert start == 0, f"log start {start}"
    return read_all(cluster, topic)


def read_recovered_copy(directory, into, segment_bytes: int) -> list:
    """Every record of a copy of the partition directory, opened (and recovered) as the broker opens it, after
    a retention run (which must delete nothing of a compacted log)."""
    copy = into / directory.name
    shutil.copytree(directory, copy)
    plog = PartitionLog(copy, LogConfig(cleanup_policy=("compact",), segment_bytes=segment_bytes,
                                        delete_retention_ms=0))
    try:
        assert plog.log_start_offset == 0 and plog.log_end_offset == len(produced())
        assert plog.apply_retention() == 0 and plog.log_start_offset == 0
        offset, out = plog.log_start_offset, []
        while offset < plog.log_end_offset:
            data = plog.read(offset, 1 << 16).read()
            out.extend(iter_records(data, offset))
            offset = [h for h, _ in iter_batches(data)][-1].next_offset
        return out
    finally:
        plog.close()


def check_nothing_lost(records) -> None:
    """Offsets increase (none twice), every record is the one produced at its offset, and the last record of
    each key is its last write (a tombstone may be gone with the older values of its key)."""
    sent = produced()
    got = [r.offset for r in records]
    assert got == sorted(set(got)), "an offset read twice or out of order"
    assert [(r.key, r.value) for r in records] == [sent[o] for o in got], "a record not as produced"
    last = {}
    for r in records:
        last[r.key] = r.value
    assert {k: v for k, v in last.items() if v is not None} == live()


def on_disk_at(step: str, directory, base: int, full: int) -> bool:
    """Whether the partition directory is as the second group (based at ``base``) leaves it at ``step``."""
    names = {p.name for p in directory.iterdir()}
    log_, index = f"{base:020d}.log", f"{base:020d}.index"
    following = {f"{base + i * PER_BATCH:020d}.log" for i in range(1, GROUP)}
    first = directory / f"{0:020d}.log"
    first_emptied = first.exists() and first.stat().st_size == 0  # the first group, swapped in
    if step == "checkpoint":
        return (first_emptied and CLEANER_CHECKPOINT not in names
                and not any(n.endswith((".cleaned", ".swap")) for n in names))
    return first_emptied and {
        "cleaned": log_ + ".cleaned" in names and index + ".cleaned" in names and following <= names,
        "index-swap": log_ + ".cleaned" in names and index + ".swap" in names,
        "committed": log_ + ".swap" in names and index + ".swap" in names and following <= names,
        "unlinked": log_ + ".swap" in names and index + ".swap" in names and not following & names,
        "index-renamed": log_ + ".swap" in names and index + ".swap" not in names,
        "renamed": (not any(n.endswith((".cleaned", ".swap")) for n in names) and not following & names
                    and (directory / log_).stat().st_size == full),
    }[step]


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_sigkill_at_each_step_of_the_cleaners_swap_loses_nothing_and_keeps_the_log_start(
        step, zookeeper, tmp_path, monkeypatch):
    # the second group passes each step of the swap the second time the cleaner reaches it; the checkpoint
    # is reached once a pass
    monkeypatch.setenv(CRASH_AT_ENV, step if step == "checkpoint" else f"{step}:2")
    with local_cluster(zookeeper, tmp_path / "cluster", 1, f"crash-{step}", {
            "log.retention.check.interval.ms": 100, "log.cleaner.backoff.ms": 100,
            "zookeeper.session.timeout.ms": 6000}) as cluster:
        topic = f"steps-{uuid.uuid4().hex[:6]}"

        def created() -> bool:  # no compaction while the layout is written
            try:
                with ClusterClient(cluster.bootstrap) as c:
                    AdminClient(c).create_topic(topic, 1, configs={"cleanup.policy": "delete",
                                                                   "segment.bytes": "1024"})
            except KafkaError as e:  # a cluster just started may not list its own broker yet
                if e.code != ErrorCode.BROKER_NOT_AVAILABLE:
                    raise
                return False
            return True

        wait_until(created, timeout=30, interval=0.2, message=f"topic {topic} created")
        full = produce_layout(cluster, topic)
        directory = cluster.data_dir / "broker-0" / f"{topic}-0"
        assert len(list(directory.glob("*.log"))) == len(layout())
        session = registration_session(cluster)
        proc = cluster.procs[0]
        try:
            with ClusterClient(cluster.bootstrap) as c:  # one pass over groups of four segments
                AdminClient(c).alter_topic_configs(topic, {
                    "cleanup.policy": "compact", "delete.retention.ms": "0", "segment.bytes": str(GROUP * full)})
        except BrokerConnectionError:  # the pass may kill the broker before it answers
            pass
        wait_until(lambda: proc.poll() is not None, timeout=30, message=f"the cleaner to kill its broker at {step}")
        assert proc.returncode == -signal.SIGKILL
        cluster.kill_broker(0)  # already gone: closes its log file
        assert on_disk_at(step, directory, GROUP * PER_BATCH, full), sorted(p.name for p in directory.iterdir())

        check_nothing_lost(read_recovered_copy(directory, tmp_path, GROUP * full))
        monkeypatch.delenv(CRASH_AT_ENV)
        cluster.start_broker(0)
        wait_registered_again(cluster, session)
        assert offsets(cluster, topic) == (0, len(produced()))
        check_nothing_lost(read_broker(cluster, topic))

        def compacted():
            got = read_broker(cluster, topic)
            return got if len(got) == len(live()) else None

        got = wait_until(compacted, timeout=30, interval=0.1, message="the cleaner to finish the pass")
        check_nothing_lost(got)
        assert offsets(cluster, topic) == (0, len(produced()))
