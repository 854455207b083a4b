"""kcat (librdkafka as Debian ships it) against a LocalCluster of 3 brokers: -L lists the
metadata, -P produces with every codec, -C -e consumes; records round-trip both ways
(kcat -> our reader, our producer -> kcat)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from helpers import local_cluster, wait_until

from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.records.reader import iter_records

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not on PATH (apt-get install kcat)")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
N = 90
TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("kcat"), 3, "kcat", {"num.partitions": PARTITIONS}) as c:
        yield c


def kcat(*args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run([KCAT, *args, "-X", "log_level=3"], input=stdin, capture_output=True, timeout=TIMEOUT)
    assert proc.returncode == 0, \
        f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def create_topic(cluster, name: str) -> None:
    with ClusterClient(cluster.bootstrap) as c:
        AdminClient(c).create_topic(name, PARTITIONS)


def lines(tag: str) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs: text with spaces, tabs and non-ASCII; some values long enough to compress."""
    return [(f"k{i % 7}".encode(), f"{tag} value {i}\té {'z' * (i * 5)}".encode()) for i in range(N)]


def read_ours(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    got = []
    with ClusterClient(bootstrap) as c:
        admin = AdminClient(c)
        starts = admin.list_offsets(topic, None, EARLIEST)
        ends = admin.list_offsets(topic, None, LATEST)
        for p, pos in starts.items():
            while pos < ends[p]:
                data = fetch(c.connection(c.leader(topic, p)), {(topic, p): pos}, max_wait_ms=100)[0]
                assert data.error == 0
                for r in iter_records(data.records or b"", min_offset=pos):
                    got.append((p, r.offset, r.key, r.value))
                    pos = r.offset + 1
    return got


def consume_kcat(bootstrap: str, topic: str) -> list[dict]:
    """Every message of ``topic`` read by ``kcat -C -e`` as JSON envelopes."""
    out = kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def test_kcat_lists_metadata(cluster):
    create_topic(cluster, "kcat-meta")

    def listed():  # the broker kcat asks may learn of the new topic a moment after the one that created it
        doc = json.loads(kcat("-b", cluster.bootstrap, "-L", "-J"))
        topic = next((t for t in doc["topics"] if t["topic"] == "kcat-meta"), None)
        return topic is not None and (doc, topic)
    doc, topic = wait_until(listed, timeout=30, interval=0.2, message="kcat to list the new topic")
    assert sorted(b["id"] for b in doc["brokers"]) == sorted(cluster.brokers)
    assert {b["name"] for b in doc["brokers"]} == {f"{h}:{p}" for h, p in cluster.brokers.values()}
    assert [p["partition"] for p in sorted(topic["partitions"], key=lambda p: p["partition"])] == [0, 1, 2]
    assert {p["leader"] for p in topic["partitions"]} <= set(cluster.brokers)
    assert all(p["replicas"] == [{"id": p["leader"]}] for p in topic["partitions"])
    # one topic by name (-t), as scripts do
    doc = json.loads(kcat("-b", cluster.bootstrap, "-L", "-J", "-t", "kcat-meta"))
    assert [t["topic"] for t in doc["topics"]] == ["kcat-meta"]


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_with_codec_and_records_round_trip(cluster, codec):
    topic = f"kcat-p-{codec}"
    create_topic(cluster, topic)
    records = lines(f"kcat/{codec}")
    stdin = b"".join(k + b"|" + v + b"\n" for k, v in records)
    args = ["-b", cluster.bootstrap, "-P", "-t", topic, "-K", "|", "-X", "linger.ms=5"]
    if codec != "none":
        args += ["-z", codec]
    kcat(*args, stdin=stdin)

    ours = read_ours(cluster.bootstrap, topic)
    assert sorted((k, v) for _p, _o, k, v in ours) == sorted(records)
    assert {p for p, *_ in ours} == set(range(PARTITIONS)), "keys were not spread over the partitions"
    # same key, same partition; order per key preserved
    for key in {k for k, _ in records}:
        parts = {p for p, _o, k, _v in ours if k == key}
        assert len(parts) == 1
        assert [v for _p, _o, k, v in sorted(ours) if k == key] == [v for k, v in records if k == key]

    got = consume_kcat(cluster.bootstrap, topic)
    assert sorted((m["partition"], m["offset"], m["key"], m["payload"]) for m in got) == \
        sorted((p, o, k.decode(), v.decode()) for p, o, k, v in ours)


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_consumes_what_we_produced(cluster, codec):
    topic = f"kcat-c-{codec}"
    create_topic(cluster, topic)
    records = lines(f"ours/{codec}")
    with ClusterClient(cluster.bootstrap) as c:
        producer = Producer(c, acks=-1, compression=codec, batch_size=2048)
        for k, v in records:
            producer.send(topic, v, key=k)
        producer.flush()
    got = consume_kcat(cluster.bootstrap, topic)
    assert sorted((m["key"].encode(), m["payload"].encode()) for m in got) == sorted(records)
    offsets = sorted((m["partition"], m["offset"]) for m in got)
    assert len(set(offsets)) == len(offsets) == N
    for p in range(PARTITIONS):
        mine = [o for q, o in offsets if q == p]
        assert mine == list(range(len(mine))), f"partition {p}: offsets not contiguous"


def test_kcat_idempotent_producer(cluster):
    """librdkafka 2.0 with enable.idempotence=true: InitProducerId, then sequenced batches, stored once."""
    topic = "kcat-idempotent"
    create_topic(cluster, topic)
    records = lines("kcat/idempotent")
    kcat("-b", cluster.bootstrap, "-P", "-t", topic, "-K", "|", "-X", "enable.idempotence=true", "-z", "lz4",
         stdin=b"".join(k + b"|" + v + b"\n" for k, v in records))
    ours = read_ours(cluster.bootstrap, topic)
    assert sorted((k, v) for _p, _o, k, v in ours) == sorted(records)


def test_kcat_balanced_consumer_joins_our_group_and_commits(cluster):
    """kcat -G (librdkafka 2.0's group consumer: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
    OffsetCommit, LeaveGroup at the versions it sends) reads everything and commits it to
    ZooKeeper; a second run of the same group finds nothing left to read."""
    from helpers import group_offsets

    topic, group = "kcat-group", "kcat-g"
    create_topic(cluster, topic)
    with ClusterClient(cluster.bootstrap) as c:
        producer = Producer(c)
        for k, v in lines("G"):
            producer.send(topic, v, key=k)
        producer.flush()
        ends = AdminClient(c).list_offsets(topic, None, LATEST)
    out = kcat("-b", cluster.bootstrap, "-G", group, "-o", "beginning", "-e", "-f", "%p:%o\\n",
               "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", topic)
    got = {tuple(map(int, line.split(":"))) for line in out.decode().splitlines() if ":" in line}
    assert got == {(p, o) for p, end in ends.items() for o in range(end)}
    assert group_offsets(cluster.zk_connect, group, topic) == ends
    again = kcat("-b", cluster.bootstrap, "-G", group, "-e", "-f", "%p:%o\\n", topic)
    assert again.strip() == b""
