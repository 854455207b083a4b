"""The producer's partitioning of records without a key (Kafka's sticky partitioner,
KIP-480), ``--partition`` on ``spark-coord produce``, and its codec names, against a
real broker."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from helpers import local_cluster

from spark_coord import cli
from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer

PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("producer"), 1, "producer",
                       {"num.partitions": PARTITIONS}) as c:
        yield c


def _create(cluster, topic: str) -> None:
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)


def _counts(cluster, topic: str) -> dict[int, int]:
    """Records per partition (log end minus log start)."""
    with ClusterClient(cluster.bootstrap) as cc:
        admin = AdminClient(cc)
        start, end = admin.list_offsets(topic, None, EARLIEST), admin.list_offsets(topic, None, LATEST)
    return {p: end[p] - start[p] for p in sorted(end)}


def test_repeated_keyless_produce_runs_spread_over_the_partitions(cluster, tmp_path):
    """Each run starts at a random partition: 30 runs of a few lines reach every partition
    (a run that always started at partition 0 would leave the others empty)."""
    _create(cluster, "sticky-runs")
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(5)))
    runs = 30
    seen: list[dict[int, int]] = []
    before = _counts(cluster, "sticky-runs")
    for _ in range(runs):
        assert cli.main(["produce", "-t", "sticky-runs", "-f", str(lines), "-b", cluster.bootstrap,
                         "--log-level", "WARNING"]) == 0
        after = _counts(cluster, "sticky-runs")
        seen.append({p: after[p] - before[p] for p in after if after[p] != before[p]})
        before = after
    # one small run is one batch: all of it on one partition
    assert all(len(run) == 1 and sum(run.values()) == 5 for run in seen), seen
    landed = Counter(p for run in seen for p in run)
    assert set(landed) == set(range(PARTITIONS)), f"runs per partition: {dict(landed)}"


def test_keyless_records_stick_to_a_partition_until_its_batch_is_sent(cluster):
    _create(cluster, "sticky-batches")
    with ClusterClient(cluster.bootstrap) as cc:
        producer = Producer(cc, batch_size=300, rng=random.Random(7))
        placed = []
        for i in range(200):
            producer.send("sticky-batches", f"value-{i:04d}".encode())
            placed.append(producer._sticky.get("sticky-batches"))  # None right after a batch was sent
        producer.flush()
        assert producer.sent_records == 200
    counts = _counts(cluster, "sticky-batches")
    assert sum(counts.values()) == 200 and all(counts.values()), counts
    # runs of records share a partition; a batch that was sent moves the next record elsewhere
    runs = [p for i, p in enumerate(placed) if p is not None and (i == 0 or placed[i - 1] != p)]
    assert len(runs) >= 10
    assert all(a != b for a, b in zip(runs, runs[1:], strict=False)), runs


def test_partition_option_forces_one_partition(cluster, tmp_path):
    _create(cluster, "forced")
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"k{i}:v{i}\n" for i in range(50)))
    assert cli.main(["produce", "-t", "forced", "-f", str(lines), "-K", ":", "--partition", "2",
                     "-b", cluster.bootstrap, "--log-level", "WARNING"]) == 0
    assert _counts(cluster, "forced") == {0: 0, 1: 0, 2: 50}


def test_unknown_codec_is_refused_naming_the_known_ones(cluster):
    with ClusterClient(cluster.bootstrap) as cc:
        with pytest.raises(ValueError, match="brotli.*gzip"):
            Producer(cc, compression="brotli")


@pytest.mark.parametrize("idempotence", [True, False])
def test_idempotent_producer_absorbs_lost_answers(broker_factory, idempotence):
    """Answers lost on the way back (a proxy that cuts the connection once the broker answered):
    the idempotent producer sends the batches again and the broker keeps one copy of each; a plain
    producer stores them twice."""
    from proxy import AnswerDroppingProxy

    from spark_coord.client.fetcher import fetch
    from spark_coord.records.reader import iter_records

    holder: dict = {}
    proxy = AnswerDroppingProxy(lambda: holder["broker"].address)
    holder["broker"] = broker_factory(0, **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    bootstrap = f"127.0.0.1:{proxy.port}"
    try:
        with ClusterClient(bootstrap) as cc:
            AdminClient(cc).create_topic("lost", 1)
            proxy.drop_answer_of(2, 5, 6)
            producer = Producer(cc, acks=-1, batch_size=1024, idempotence=idempotence)
            for i in range(2000):
                producer.send("lost", b"%06d" % i, partition=0)
            producer.flush()
            assert producer.producer_id >= 0 if idempotence else producer.producer_id == -1
            values, offset = [], 0
            end = AdminClient(cc).list_offsets("lost", [0], LATEST)[0]
            while offset < end:
                part = fetch(cc.connection(cc.leader("lost", 0)), {("lost", 0): offset})[0]
                for rec in iter_records(part.records, min_offset=offset):
                    values.append(int(rec.value))
                    offset = rec.offset + 1
    finally:
        proxy.close()
    assert len(proxy.dropped) == 3
    if idempotence:
        assert values == list(range(2000))
    else:
        assert len(values) > 2000 and sorted(set(values)) == list(range(2000))
