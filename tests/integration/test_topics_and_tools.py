"""Topic watchers (wildcard subscriptions, new partitions) and ``spark-coord groups`` on real processes."""

from __future__ import annotations

import json
import subprocess
import sys

from support import log_end, topic_partitions, wait_balanced, wait_caught_up

from spark_coord.zk import model, paths


def test_pattern_picks_up_new_topics_and_partitions(cluster, czk, members, create):
    group = "g-pattern"
    create("pat-a", 2)
    create("other", 2)  # does not match
    ms = [members(f"p{i}", group, pattern=r"pat-.*") for i in range(2)]
    gen, _ = wait_balanced(ms, topic_partitions("pat-a", 2))

    create("pat-b", 3)
    expected = topic_partitions("pat-a", 2) | topic_partitions("pat-b", 3)
    gen, _ = wait_balanced(ms, expected, above=gen)

    # add partitions to pat-a the way ZooKeeper-mode Kafka tools did: rewrite the topic znode
    data, _ = czk.get(paths.topic("pat-a"))
    assignment = model.parse_topic_assignment(data, "pat-a")
    brokers = sorted(cluster.brokers)
    for p in range(2, 5):
        assignment[p] = [brokers[p % len(brokers)]]
    czk.set(paths.topic("pat-a"), model.topic_assignment(assignment))
    expected = topic_partitions("pat-a", 5) | topic_partitions("pat-b", 3)
    gen, owned = wait_balanced(ms, expected, above=gen)
    assert not any(t == "other" for tps in owned.values() for t, _ in tps)


def _groups_cli(cluster, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_coord.cli", "groups", "--bootstrap", cluster.bootstrap,
                           *args], capture_output=True, text=True, timeout=60)


def test_groups_cli_lists_and_describes(cluster, czk, members, create):
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    group, topic = "g-cli", "cli"
    create(topic, 4)
    ms = [members(f"k{i}", group, topics=[topic]) for i in range(2)]
    gen, owned = wait_balanced(ms, topic_partitions(topic, 4))
    with ClusterClient(cluster.bootstrap) as cc:
        producer = Producer(cc)
        for p in range(4):
            for i in range(10 + p):
                producer.send(topic, f"v{i}".encode(), partition=p)
        producer.flush()
    ends = log_end(cluster.bootstrap, topic)
    wait_caught_up(czk, group, ends)

    listed = _groups_cli(cluster, "list")
    assert listed.returncode == 0, listed.stderr
    assert group in listed.stdout and "GENERATION" in listed.stdout.upper()

    described = _groups_cli(cluster, "--json", "describe", group)
    assert described.returncode == 0, described.stderr
    doc = json.loads(described.stdout)
    assert [g["group_id"] for g in doc] == [group]
    g = doc[0]
    assert g["generation_id"] == gen and g["state"]
    assert {m["consumer_id"]: {(a["topic"], a["partition"]) for a in m["assigned"]} for m in g["members"]} == owned
    rows = {(o["topic"], o["partition"]): o for o in g["offsets"]}
    assert set(rows) == topic_partitions(topic, 4)
    for tp, row in rows.items():
        assert row["committed_offset"] == ends[tp] == row["log_end"]
        assert row["lag"] == 0
        assert row["owner"].rsplit("-", 1)[0] in owned and tp in owned[row["owner"].rsplit("-", 1)[0]]

    table = _groups_cli(cluster, "describe", group)
    assert table.returncode == 0, table.stderr
    text = table.stdout
    assert f"generation {gen}" in text
    for header in ("TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER"):
        assert header in text
    for m in ms:
        assert m.consumer_id in text
