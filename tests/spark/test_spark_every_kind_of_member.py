"""Every kind of member in one group, with incremental rebalancing (DESIGN.md "A rebalance").

confluent-kafka consumers with ``cooperative-sticky`` (KIP-429), a kafka-python
cooperative consumer, an eager confluent-kafka consumer (librdkafka's default
assignors), ``spark-coord consume`` and a Spark query share a 12-partition topic
in one group.  Each member is checked by what it saw itself -- the partitions its
assignment and revocation callbacks received -- not only by totals: the
assignment is disjoint and complete, every record is read, and when members join
or one is SIGKILLed, a cooperative consumer's revocation callback receives only
partitions that actually left it, and no partition leaves a member that keeps
its share; with the producer stopped, the group's offsets reach the log end.
"""

from __future__ import annotations

import signal
import time

from helpers import group_owners, owners_by_member, wait_until
from peers.group_peers import CliConsumer, KafkaPeer
from test_spark_group import Collect, group_reader, wait_everything_read_and_committed

PARTITIONS = 12
SESSION_MS = 6000


def _kind(member_id: str) -> str:
    for prefix in ("coop1", "coop2", "coop3", "kpcoop", "eager", "cli", "coordkafka"):
        if member_id.startswith(prefix):
            return prefix
    return member_id


def test_cooperative_eager_cli_and_a_query_share_one_group(spark, cluster, tmp_path):
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from testkit.producer import AckingProducer

    group, topic = "every-kind", "every-kind"
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
    producer = AckingProducer(cluster.bootstrap, topic, PARTITIONS, batch=2, interval=0.1)
    producer.start()
    peers: dict[str, KafkaPeer] = {}
    cli = query = None

    def peer(name: str, kind: str, strategy: str | None) -> None:
        peers[name] = KafkaPeer(kind, cluster.bootstrap, group, topic, name, tmp_path, strategy, SESSION_MS)

    def settled(expected: set[str]):
        """Owners by kind when exactly ``expected`` share every partition, balanced, and each Kafka
        peer's own callbacks agree with what ZooKeeper says it owns."""
        by = {_kind(m): ps for m, ps in owners_by_member(group_owners(cluster.zk_connect, group, topic)).items()}
        if set(by) != expected or set().union(*by.values()) != set(range(PARTITIONS)):
            return None
        if max(map(len, by.values())) - min(map(len, by.values())) > 1:
            return None
        if any(p.owned() != by.get(name, set()) for name, p in peers.items() if p.alive()):
            return None
        return by

    try:
        peer("coop1", "confluent", "cooperative-sticky")
        peer("coop2", "confluent", "cooperative-sticky")
        before = wait_until(lambda: settled({"coop1", "coop2"}), timeout=60, interval=0.2,
                            message=lambda: f"two cooperative consumers sharing the topic: "
                                            f"{owners_by_member(group_owners(cluster.zk_connect, group, topic))}")
        assert {len(ps) for ps in before.values()} == {6}

        t_join = time.time()
        peer("coop3", "confluent", "cooperative-sticky")
        peer("kpcoop", "kafka-python", "cooperative-sticky")
        peer("eager", "confluent", None)
        cli = CliConsumer(cluster.bootstrap, group, topic, tmp_path, name="cli", session_ms=SESSION_MS)
        sink = Collect()
        query = (group_reader(spark, cluster, topic, group, **{"session.timeout.ms": str(SESSION_MS)})
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(processingTime="200 milliseconds").start())
        everyone = {"coop1", "coop2", "coop3", "kpcoop", "eager", "cli", "coordkafka"}
        after = wait_until(lambda: settled(everyone), timeout=120, interval=0.3,
                           message=lambda: f"seven members sharing the topic: "
                                           f"{owners_by_member(group_owners(cluster.zk_connect, group, topic))}")
        assert sorted(map(len, after.values())) == [1, 1, 2, 2, 2, 2, 2]
        for name in ("coop1", "coop2"):  # each gave up exactly what left it, nothing it kept
            revoked = set().union(*peers[name].revoked_after(t_join), set())
            assert revoked == before[name] - after[name], (name, peers[name].callbacks())
            assert after[name] <= before[name]  # sticky: it got nothing new while giving some up

        victim = peers["coop3"]
        victim_parts = after["coop3"]
        t_kill = time.time()
        victim.stop(signal.SIGKILL)
        survivors = everyone - {"coop3"}
        final = wait_until(lambda: settled(survivors), timeout=SESSION_MS / 1000 + 60, interval=0.3,
                           message=lambda: f"the survivors taking the killed member's partitions: "
                                           f"{owners_by_member(group_owners(cluster.zk_connect, group, topic))}")
        moved = {p for name, ps in final.items() for p in ps if p not in after.get(name, set())}
        assert moved == victim_parts  # only the dead member's partitions moved
        for name in ("coop1", "coop2", "kpcoop"):
            assert peers[name].revoked_after(t_kill) == [], (name, peers[name].callbacks())
            assert final[name] >= after[name]

        producer.stop()
        wait_everything_read_and_committed(cluster, group, topic, peers.values(), sink, cli)
    finally:
        if producer.is_alive():
            producer.stop()
        if query is not None:
            query.stop()
        if cli is not None:
            cli.stop()
        for p in peers.values():
            p.stop()
