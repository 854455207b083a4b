"""Share groups' admin (KIP-932) on three broker processes with confluent-kafka ``ShareConsumer``s
(librdkafka 2.16): DescribeShareGroupOffsets after consumption, ``spark-coord share-groups
describe`` and ``reset-offsets`` (dry run, refused while the group has members, then executed:
a new consumer reads everything again), the share series of the Prometheus endpoints, DeleteGroups
taking the group's state and configs along, and a share group beside a classic consumer group
(confluent-kafka ``Consumer``) on one topic, each reading everything at its own pace.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter

import pytest
from helpers import wait_until
from share_support import SHARE_OVERRIDES, ShareReader, describe_share_group, produce, set_group_config
from support import BROKER_OVERRIDES, log_end

#: Every broker serves metrics on a free port (named in its log); the samplers run often.
METRICS = {"metrics.port": 0, "metrics.lag.sample.ms": 300}
SHARE_CLUSTER = {**BROKER_OVERRIDES, **SHARE_OVERRIDES, **METRICS}

pytestmark = pytest.mark.parametrize("cluster", [SHARE_CLUSTER], indirect=True)


def share_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag), as DescribeShareGroupOffsets answers them."""
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
        return {tp: (o.start_offset, o.lag) for tp, o in gc.share_group_offsets(group).items()}


def share_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_coord.cli", "share-groups", *args, "-b", bootstrap],
                          capture_output=True, text=True, timeout=120)


def group_lag(out: str) -> int | None:
    """The total lag in ``share-groups describe``'s header line."""
    m = re.search(r"^Share group \S+: .*, lag (\d+)$", out, re.M)
    return int(m.group(1)) if m else None


def metrics_urls(cluster) -> list[str]:
    """Each broker's metrics endpoint, as its log names it (metrics.port=0: a free port)."""
    urls = []
    for broker_id in sorted(cluster.procs):
        text = cluster.log_path(broker_id).read_text(errors="replace")
        found = re.findall(r"metrics at (http://\S+)/metrics", text)
        assert found, f"broker {broker_id} names no metrics endpoint"
        urls.append(found[-1])
    return urls


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        return r.read().decode()


def series(texts: list[str], name: str, **labels: str) -> list[float]:
    """Values of ``name`` whose labels include ``labels``, over every endpoint."""
    out = []
    for text in texts:
        for line in text.splitlines():
            if not line.startswith(name + "{"):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                out.append(float(line.rsplit(" ", 1)[1]))
    return out


def test_describe_reset_to_earliest_and_read_everything_again(cluster, create, czk):
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import ErrorCode, KafkaError

    group, topic, n = "sa-reset", "share-admin-reset", 20
    bootstrap = cluster.bootstrap
    create(topic, 2)
    set_group_config(bootstrap, group, share_auto_offset_reset="earliest")
    produce(bootstrap, topic, [(p, f"k{p}-{i}".encode(), b"v") for p in range(2) for i in range(n)])
    everything = {(p, o) for p in range(2) for o in range(n)}
    at_end = {(topic, 0): (n, 0), (topic, 1): (n, 0)}

    a = ShareReader("reader-a", bootstrap, group, [topic])
    a.start()
    try:
        wait_until(lambda: a.seen() >= everything, timeout=60, message=lambda: f"reader-a got {len(a.seen())}")
        # every record acknowledged: the start offsets reach the log ends, no lag left
        wait_until(lambda: share_offsets(bootstrap, group) == at_end, timeout=30, interval=0.3,
                   message=lambda: f"offsets {share_offsets(bootstrap, group)}")

        # the CLI shows the member, its assignment and the lag
        out = wait_until(lambda: (r := share_cli(bootstrap, "describe", group)).returncode == 0
                         and "reader-a" in r.stdout and group_lag(r.stdout) == 0 and r.stdout, timeout=30,
                         message="share-groups describe with reader-a and lag 0")
        assert f"{topic}-0,{topic}-1" in out and "START-OFFSET" in out, out
        rows = [line.split() for line in out.splitlines() if line.startswith(topic + " ")]
        assert sorted(rows) == [[topic, "0", str(n), str(n), "0"], [topic, "1", str(n), str(n), "0"]], out
        listed = share_cli(bootstrap, "list")
        assert listed.returncode == 0 and re.search(rf"^{group}\s+Stable\s+1$", listed.stdout, re.M), listed.stdout

        # the share series: the leaders' partitions, the coordinator's group
        urls = metrics_urls(cluster)

        def exported():
            texts = [scrape(u) for u in urls]
            starts = series(texts, "spark_coord_share_partition_start_offset", sharegroup=group, topic=topic)
            lags = series(texts, "spark_coord_share_partition_lag", sharegroup=group, topic=topic)
            members = series(texts, "spark_coord_share_group_members", sharegroup=group)
            group_lags = series(texts, "spark_coord_share_group_lag", sharegroup=group)
            acquired = series(texts, "spark_coord_share_partition_records", sharegroup=group, state="acquired")
            return (sorted(starts) == [n, n] and lags == [0, 0] and members == [1.0] and group_lags == [0.0]
                    and len(acquired) == 2 and texts)

        texts = wait_until(exported, timeout=30, interval=0.5, message="the share series of every endpoint")
        assert series(texts, "spark_coord_share_partition_deliveries_total", sharegroup=group) == [n, n]

        # offsets of a group with a member cannot be reset
        refused = share_cli(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
        assert refused.returncode == 1 and "empty" in refused.stderr, refused.stderr
        with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
            with pytest.raises(KafkaError) as e:
                gc.alter_share_group_offsets(group, {(topic, 0): 0})
        assert e.value.code == ErrorCode.NON_EMPTY_GROUP
    finally:
        a.stop()
    assert not a.errors, a.errors
    wait_until(lambda: describe_share_group(bootstrap, group).state == "Empty", timeout=30,
               message="the group empty once its consumer closed")

    # a dry run prints the new offsets and changes nothing
    dry = share_cli(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert sorted(line.split() for line in dry.stdout.splitlines() if line.startswith(group)) == [
        [group, topic, "0", "0"], [group, topic, "1", "0"]], dry.stdout
    assert "dry run" in dry.stderr and share_offsets(bootstrap, group) == at_end

    done = share_cli(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert share_offsets(bootstrap, group) == {(topic, 0): (0, n), (topic, 1): (0, n)}

    # a new consumer of the group reads everything again, each record once
    b = ShareReader("reader-b", bootstrap, group, [topic])
    b.start()
    try:
        wait_until(lambda: b.seen() >= everything, timeout=60, message=lambda: f"reader-b got {len(b.seen())}")
        wait_until(lambda: share_offsets(bootstrap, group) == at_end, timeout=30, interval=0.3,
                   message=lambda: f"offsets {share_offsets(bootstrap, group)}")
    finally:
        b.stop()
    assert not b.errors, b.errors
    assert Counter((d.partition, d.offset) for d in b.deliveries) == Counter(everything)
    assert all(d.count == 1 for d in b.deliveries)  # a fresh state: counted from one again

    # DeleteGroups of the empty share group takes its state and configs along
    wait_until(lambda: describe_share_group(bootstrap, group).state == "Empty", timeout=30,
               message="the group empty again")
    assert czk.exists(f"/share-groups/{group}") is not None and czk.exists(f"/config/groups/{group}") is not None
    with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
        assert gc.delete_groups([group]) == {group: ErrorCode.NONE}
    assert czk.exists(f"/share-groups/{group}") is None
    assert czk.exists(f"/config/groups/{group}") is None
    assert share_offsets(bootstrap, group) == {}


class ClassicReader(threading.Thread):
    """A confluent-kafka ``Consumer`` of the classic group protocol, committing automatically,
    reading at its own pace (``pause`` seconds per record)."""

    def __init__(self, bootstrap: str, group: str, topic: str, pause: float):
        super().__init__(name=f"classic-{group}", daemon=True)
        self.bootstrap, self.group, self.topic, self.pause = bootstrap, group, topic, pause
        self.seen: Counter = Counter()
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "group.protocol": "classic",
                      "client.id": "classic-reader", "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "auto.commit.interval.ms": 200})
        try:
            c.subscribe([self.topic])
            while not self._halt.is_set():
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(str(m.error()))
                    continue
                self.seen[(m.partition(), m.offset())] += 1
                time.sleep(self.pause)
        finally:
            c.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def test_a_share_group_and_a_classic_group_read_one_topic_side_by_side(cluster, create):
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    topic, share_group, classic_group, n = "share-admin-both", "sa-both-share", "sa-both-classic", 60
    bootstrap = cluster.bootstrap
    create(topic, 3)
    set_group_config(bootstrap, share_group, share_auto_offset_reset="earliest")
    produce(bootstrap, topic, [(p, f"a{p}-{i}".encode(), b"v") for p in range(3) for i in range(n)])

    def slowly(m) -> str:  # the share consumer takes its time: the lag is seen before it is gone
        time.sleep(0.02)
        return "accept"

    share = ShareReader("share-reader", bootstrap, share_group, [topic], policy=slowly, config={"max.poll.records": 10})
    classic = ClassicReader(bootstrap, classic_group, topic, pause=0.005)
    share.start()
    classic.start()
    lags: list[int] = []
    try:
        # more records while both read
        produce(bootstrap, topic, [(p, f"b{p}-{i}".encode(), b"v") for p in range(3) for i in range(n)])
        everything = {(p, o) for p in range(3) for o in range(2 * n)}

        def share_lag_gone() -> bool:
            r = share_cli(bootstrap, "describe", share_group)
            lag = group_lag(r.stdout) if r.returncode == 0 else None
            if lag is not None:
                lags.append(lag)
            return share.seen() >= everything and lag == 0

        wait_until(share_lag_gone, timeout=120, interval=0.2,
                   message=lambda: f"the share group's lag to reach 0 (saw {lags}, {len(share.seen())} read)")
        wait_until(lambda: set(classic.seen) >= everything, timeout=60,
                   message=lambda: f"the classic group reads all ({len(classic.seen)})")
        ends = log_end(bootstrap, topic)
        with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
            wait_until(lambda: {tp: o.offset for tp, o in gc.fetch_offsets(classic_group).items()} == ends,
                       timeout=30, interval=0.3, message="the classic group's offsets at the log ends")
    finally:
        share.stop()
        classic.stop()
    assert not share.errors and not classic.errors, (share.errors, classic.errors)
    assert any(lag > 0 for lag in lags) and lags[-1] == 0, lags
    # each group read every record, once
    assert Counter((d.partition, d.offset) for d in share.deliveries) == Counter(everything)
    assert classic.seen == Counter(everything)
    assert share_offsets(bootstrap, share_group) == {(topic, p): (2 * n, 0) for p in range(3)}
