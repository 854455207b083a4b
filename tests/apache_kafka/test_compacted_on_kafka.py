"""A compacted topic with tombstones, cleaned by Apache Kafka 4.2's log cleaner, read through
coordkafka and through Spark's own Kafka source (``format("kafka")``): a batch read and a
``Trigger.AvailableNow`` stream of each return the same rows (partition, offset, key, value; a
tombstone's value null), offset for offset, and those rows are what compaction promises.

The topic (2 partitions, ``cleanup.policy=compact``, ``min.cleanable.dirty.ratio=0.01``,
``segment.bytes`` at Kafka 4's minimum of 1 MiB, ``segment.ms`` 30 s) gets ``ROUNDS`` rounds of
keyed records per partition: overwrites, and tombstones (null values).  Each round's records carry
a CreateTime one minute after the previous round's, and Kafka rolls a segment when a record's
timestamp is more than ``segment.ms`` past the first of the active segment: one segment per round,
however fast the rounds are written (no waiting on the clock).  ``min.compaction.lag.ms`` is a day
while the rounds are written, so the cleaner leaves every segment alone; set to 0 afterwards, the
cleaner cleans everything below the active segment (the last round: the dirty head) in one pass per
partition.  Its progress is Kafka's own: ``cleaner-offset-checkpoint`` in the node's log dir.

Kafka's tombstone rule (KIP-534, record batch v2): a pass that keeps a tombstone rewrites its
batch with a delete horizon (the pass's time + ``delete.retention.ms``, in the batch's base
timestamp, attribute bit 6); a later pass after that time drops the tombstone.  A pass only runs
when the log has dirty bytes (the cleanable ratio above ``min.cleanable.dirty.ratio``), so both
states are made deterministic with deadlines, not sleeps:

- state 1, after the first pass: for each key only the latest record below the head survives,
  tombstones included, each in a batch with a delete horizon; the head is intact.  No pass runs
  until more is written.
- state 2: once the clock is past every delete horizon, one more round (timestamps now) rolls
  the old head into the cleanable part, and the second pass cleans it: the tombstones of the
  first pass are gone, the old head is compacted (its tombstones kept, with a horizon of their
  own), and the new round is the head.

In both states the raw log (our fetcher, with the batches' delete horizons), coordkafka batch and
stream and Spark's Kafka source batch and stream give exactly the records of the model.  Spark's
Kafka source reads the compacted topic with its default ``failOnDataLoss=true`` and does not
complain about the gaps: it asks for the earliest offset when a fetch returns a later offset than
it asked for, and treats a gap above the log start as records compacted away, not lost.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest
from helpers import wait_until
from spark_reads import SparkReads

PARTITIONS = 2
ROUNDS = 6                 # rounds written before the cleaner is let go; the last is the dirty head
PER_ROUND = 30             # records per round and partition
KEYS = 16                  # keys per partition
SEGMENT_MS = 30_000        # a round's timestamps are 60 s after the previous round's: one segment each
DELETE_RETENTION_MS = 5_000
#: delete horizon present: attribute bit 6 of a v2 batch (its base timestamp is then the horizon)
DELETE_HORIZON_FLAG = 0x40

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


# ------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def apache_kafka(kafka_jars, tmp_path_factory):
    """One Apache Kafka node whose log cleaner looks for work every 200 ms when it found none
    (``log.cleaner.backoff.ms``, 15 s by default), so a cleaning is seen promptly."""
    from peers.apache_kafka import ApacheKafkaCluster

    with ApacheKafkaCluster(tmp_path_factory.mktemp("apache-kafka-compacted"), jars=kafka_jars,
                            overrides={"log.cleaner.backoff.ms": 200}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark_reads(spark_kafka_jars, tmp_path_factory):
    reads = SparkReads(spark_kafka_jars, tmp_path_factory.mktemp("spark-compacted"))
    yield reads
    reads.close()


# ------------------------------------------------------------------------------ writing the topic
Row = tuple[int, int, str, "str | None"]     # partition, offset, key, value (None: a tombstone)


class Written:
    """Every record produced, per partition in offset order (from the delivery reports)."""

    def __init__(self) -> None:
        self.rows: dict[int, list[Row]] = {p: [] for p in range(PARTITIONS)}

    def first_offset(self, rnd: int) -> dict[int, int]:
        """The first offset of round ``rnd`` in each partition (each round writes PER_ROUND)."""
        return {p: self.rows[p][rnd * PER_ROUND][1] for p in range(PARTITIONS)}


def _round(rnd: int, rng: random.Random) -> list[tuple[int, str, str | None]]:
    """(partition, key, value) of round ``rnd``: random overwrites of keys 5.. (a fifth of them
    tombstones), and keys 0-4 scripted so both states have tombstones to show: all five written in
    round 0; k0, k1, k2 deleted in the last round below the head; in the head k0 written again and
    k3, k4 deleted; in the round after the head (``rnd == ROUNDS``) k1 written again."""
    out = []
    for p in range(PARTITIONS):
        scripted = {0: [(k, f"first-{k}") for k in range(5)],
                    ROUNDS - 2: [(k, None) for k in range(3)],
                    ROUNDS - 1: [(0, "again-0"), (3, None), (4, None)],
                    ROUNDS: [(1, "again-1")]}.get(rnd, [])
        for i in range(PER_ROUND):
            if i < len(scripted):
                k, value = scripted[i]
            else:
                k = rng.randrange(5, KEYS)
                value = None if rng.random() < 0.2 else f"v{rnd}.{i}"
            out.append((p, f"p{p}-k{k}", None if value is None else f"{value}@p{p}"))
    return out


def _produce(bootstrap: str, topic: str, written: Written, rnd: int, rng: random.Random, timestamp_ms: int) -> None:
    """Round ``rnd``, every record with CreateTime ``timestamp_ms``, acknowledged before returning
    (an idempotent producer: the offsets follow the order sent)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked: list = []
    for p, key, value in _round(rnd, rng):
        producer.produce(topic, None if value is None else value.encode(), key.encode(), partition=p,
                         timestamp=timestamp_ms, on_delivery=lambda err, msg: acked.append((err, msg)))
    assert producer.flush(60) == 0
    assert all(err is None for err, _ in acked), [err for err, _ in acked if err]
    for p in range(PARTITIONS):
        mine = sorted(((m.offset(), m.key().decode(), None if m.value() is None else m.value().decode())
                       for _, m in acked if m.partition() == p))
        assert len(mine) == PER_ROUND and (not written.rows[p] or mine[0][0] == written.rows[p][-1][1] + 1)
        written.rows[p] += [(p, o, k, v) for o, k, v in mine]


# ----------------------------------------------------------------------------------- the model
def compacted(written: Written, cleaned_to: dict[int, int], tombstones_gone_below: dict[int, int]) -> list[Row]:
    """What compaction promises once the cleaner cleaned every partition ``p`` up to
    ``cleaned_to[p]`` (the active segment's base offset when it ran): below it only the latest record
    of each key in that range, without the tombstones below ``tombstones_gone_below[p]`` (those a
    later pass found past their delete horizon); from it on every record, as written."""
    out: list[Row] = []
    for p, rows in written.rows.items():
        below = [r for r in rows if r[1] < cleaned_to[p]]
        latest = {r[2]: r[1] for r in below}
        out += [r for r in below if latest[r[2]] == r[1] and not (r[3] is None and r[1] < tombstones_gone_below[p])]
        out += [r for r in rows if r[1] >= cleaned_to[p]]
    return sorted(out)


# ------------------------------------------------------------------------------ what Kafka holds
def _cleaned_to(cluster, topic: str) -> dict[int, int]:
    """The log cleaner's checkpoint per partition of ``topic``: the offset below which it cleaned
    (``cleaner-offset-checkpoint``: a version line, a count line, then "topic partition offset")."""
    path = cluster.nodes[0].directory / "data" / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()[2:]
    except OSError:
        return {}
    return {int(p): int(o) for t, p, o in (line.split() for line in lines if line.strip()) if t == topic}


def _segments(cluster, topic: str) -> dict[int, int]:
    """How many segment files each partition of ``topic`` has."""
    data = cluster.nodes[0].directory / "data"
    return {p: len(list((data / f"{topic}-{p}").glob("*.log"))) for p in range(PARTITIONS)}


def _raw_log(bootstrap: str, topic: str) -> tuple[list[Row], dict[int, int]]:
    """Every record of ``topic`` as its leader's log holds it (our fetcher, from the log start to the
    log end), and per partition the latest delete horizon (ms) of a batch holding a tombstone (0: none)."""
    from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
    from spark_coord.records.reader import batch_records, decode_records, iter_batches

    rows: list[Row] = []
    horizons = dict.fromkeys(range(PARTITIONS), 0)
    with ClusterClient(bootstrap, timeout=10.0) as cc:
        admin = AdminClient(cc)
        cc.topic(topic, refresh=True, wait=10.0)
        starts, ends = admin.list_offsets(topic, None, EARLIEST), admin.list_offsets(topic, None, LATEST)
        for p in range(PARTITIONS):
            position, deadline = starts[p], time.monotonic() + 30
            while position < ends[p]:
                assert time.monotonic() < deadline, f"{topic}-{p}: read to {position} of {ends[p]}"
                (data,) = fetch(cc.connection(cc.leader(topic, p)), {(topic, p): position}, max_wait_ms=100)
                assert data.error == 0, f"{topic}-{p}: fetch error {data.error}"
                for header, batch in iter_batches(data.records or b""):
                    if header.next_offset <= position:
                        continue
                    records = list(decode_records(header, batch_records(header, batch, DEFAULT_MAX_DECOMPRESSED_BYTES),
                                                  position))
                    if header.attributes & DELETE_HORIZON_FLAG and any(r.value is None for r in records):
                        horizons[p] = max(horizons[p], header.base_timestamp)
                    rows += [(p, r.offset, r.key.decode(), None if r.value is None else r.value.decode())
                             for r in records]
                    position = header.next_offset
    return sorted(rows), horizons


# ------------------------------------------------------------------------------------------- test
def _four_reads(spark_reads: SparkReads, bootstrap: str, topic: str, workdir: Path, state: int) -> dict[str, list]:
    """coordkafka and Spark's Kafka source, each a batch read and an AvailableNow stream from a
    checkpoint of its own: (partition, offset, key, value) rows per reader."""
    out = {}
    for source in ("coordkafka", "kafka"):
        for mode in ("batch", "stream"):
            rows = spark_reads.read(source, topic, bootstrap, "read_uncommitted", mode,
                                    str(workdir / f"cp-{state}-{source}") if mode == "stream" else None)
            assert all(r[0] == topic for r in rows), (source, mode)
            out[f"{source} {mode}"] = [tuple(r[1:]) for r in rows]
    return out


def test_compacted_topic_reads_the_same_through_both_sources(apache_kafka, spark_reads, tmp_path):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    bootstrap, topic = apache_kafka.bootstrap, f"compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={
        "cleanup.policy": "compact", "segment.bytes": str(1024 * 1024), "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(DELETE_RETENTION_MS),
        "min.compaction.lag.ms": str(24 * 3600 * 1000)})])[topic].result(30)
    rng = random.Random(20261206)
    written = Written()
    first_ts = int(time.time() * 1000) - (ROUNDS + 5) * 60_000
    for rnd in range(ROUNDS):
        _produce(bootstrap, topic, written, rnd, rng, first_ts + rnd * 60_000)
    assert _segments(apache_kafka, topic) == dict.fromkeys(range(PARTITIONS), ROUNDS)
    raw, _ = _raw_log(bootstrap, topic)
    assert raw == sorted(r for rows in written.rows.values() for r in rows)  # nothing cleaned yet

    # ---- state 1: the first pass, tombstones kept with a delete horizon
    head = written.first_offset(ROUNDS - 1)
    admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])])[
        ConfigResource(ResourceType.TOPIC, topic)].result(30)
    wait_until(lambda: _cleaned_to(apache_kafka, topic) == head, 60,
               message=lambda: f"the cleaner's checkpoint {_cleaned_to(apache_kafka, topic)}, not {head}")
    expected = compacted(written, head, dict.fromkeys(range(PARTITIONS), 0))
    raw, horizons = _raw_log(bootstrap, topic)
    assert raw == expected
    for p in range(PARTITIONS):
        offsets = [r[1] for r in raw if r[0] == p and r[1] < head[p]]
        assert len(offsets) <= KEYS < head[p] and offsets != list(range(head[p])), (p, offsets)  # gaps
        tombstones = {r[2] for r in raw if r[0] == p and r[1] < head[p] and r[3] is None}
        assert {f"p{p}-k{k}" for k in range(3)} <= tombstones, (p, tombstones)
        assert horizons[p] > 0, "no tombstone batch carries a delete horizon"
    reads = _four_reads(spark_reads, bootstrap, topic, tmp_path, 1)
    for reader, rows in reads.items():
        assert rows == expected, (1, reader)
    assert _cleaned_to(apache_kafka, topic) == head and _raw_log(bootstrap, topic)[0] == expected  # no pass since

    # ---- state 2: a pass past the delete horizons drops the tombstones it had kept
    wait_until(lambda: time.time() * 1000 > max(horizons.values()), DELETE_RETENTION_MS / 1000 + 30,
               message="the clock passes the delete horizons")
    _produce(bootstrap, topic, written, ROUNDS, rng, int(time.time() * 1000))
    new_head = written.first_offset(ROUNDS)
    wait_until(lambda: _cleaned_to(apache_kafka, topic) == new_head, 60,
               message=lambda: f"the cleaner's checkpoint {_cleaned_to(apache_kafka, topic)}, not {new_head}")
    expected = compacted(written, new_head, head)
    raw, _ = _raw_log(bootstrap, topic)
    assert raw == expected
    for p in range(PARTITIONS):
        assert not [r for r in raw if r[0] == p and r[1] < head[p] and r[3] is None], p
        kept = {r[2] for r in raw if r[0] == p and head[p] <= r[1] < new_head[p] and r[3] is None}
        assert {f"p{p}-k3", f"p{p}-k4"} <= kept, (p, kept)
    reads = _four_reads(spark_reads, bootstrap, topic, tmp_path, 2)
    for reader, rows in reads.items():
        assert rows == expected, (2, reader)
