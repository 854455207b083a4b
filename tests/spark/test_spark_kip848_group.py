"""Kafka 4's consumer group protocol (KIP-848) beside every other kind of member (DESIGN.md "One
registry, several doors").

Three confluent-kafka consumers with ``group.protocol=consumer``, a classic
cooperative-sticky consumer, ``spark-coord consume`` and a Spark query share a
12-partition topic in one group.  Each Kafka consumer is checked by what its own
callbacks received: the assignment is disjoint, complete and balanced and agrees with
ZooKeeper's owners; when a KIP-848 member and then the CLI consumer are SIGKILLed,
only the dead member's partitions move, within the session timeout, and no survivor's
revocation callback fires; every record is read and the group's offsets reach the log
end, in ZooKeeper and through OffsetFetch.  ``spark-coord groups describe`` names each
member's protocol; confluent-kafka's AdminClient lists the group with its type and
describes all six members.
"""

from __future__ import annotations

import signal
import time

import pytest
from helpers import group_owners, local_cluster, owners_by_member, wait_until
from peers.group_peers import CliConsumer, KafkaPeer
from test_spark_group import Collect, group_reader, wait_everything_read_and_committed

from spark_coord.coordinator.core.group import registry_key

PARTITIONS = 12
SESSION_MS = 6000
MODERN = ("k1", "k2", "k3")


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """One broker; KIP-848 members heartbeat every 500 ms and are failed after 6 s of silence."""
    settings = {"zookeeper.session.timeout.ms": 6000, "group.consumer.session.timeout.ms": SESSION_MS,
                "group.consumer.heartbeat.interval.ms": 500}
    with local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 1, "s-kip848", settings) as c:
        yield c


def test_consumer_protocol_members_share_a_group_with_every_other_kind(spark, cluster, tmp_path):
    from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupType
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.consumer.cli import describe_groups
    from testkit.producer import AckingProducer

    group, topic = "kip848", "kip848"
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
    producer = AckingProducer(cluster.bootstrap, topic, PARTITIONS, batch=2, interval=0.1)
    producer.start()
    peers: dict[str, KafkaPeer] = {}
    cli = query = None

    def by_name() -> dict[str, set[int]]:
        """ZooKeeper's owners by member name (KIP-848 members by the member id they reported)."""
        names = {registry_key(p.member_id()): name for name, p in peers.items() if p.member_id()}
        out = {}
        for member, parts in owners_by_member(group_owners(cluster.zk_connect, group, topic)).items():
            name = names.get(member) or next((k for k in ("coop", "cli", "coordkafka") if member.startswith(k)),
                                             member)
            out[name] = parts
        return out

    def settled(expected: set[str]):
        """Owners by name when exactly ``expected`` share every partition, balanced, and each Kafka
        peer's own callbacks agree with ZooKeeper."""
        by = by_name()
        if set(by) != expected or set().union(*by.values()) != set(range(PARTITIONS)):
            return None
        if sum(map(len, by.values())) != PARTITIONS or max(map(len, by.values())) - min(map(len, by.values())) > 1:
            return None
        if any(p.owned() != by.get(name, set()) for name, p in peers.items() if p.alive()):
            return None
        return by

    try:
        for name in MODERN:
            peers[name] = KafkaPeer("confluent", cluster.bootstrap, group, topic, name, tmp_path, "consumer")
        peers["coop"] = KafkaPeer("confluent", cluster.bootstrap, group, topic, "coop", tmp_path,
                                  "cooperative-sticky", SESSION_MS)
        cli = CliConsumer(cluster.bootstrap, group, topic, tmp_path, name="cli", session_ms=SESSION_MS)
        sink = Collect()
        query = (group_reader(spark, cluster, topic, group, **{"session.timeout.ms": str(SESSION_MS)})
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(processingTime="200 milliseconds").start())
        everyone = {*MODERN, "coop", "cli", "coordkafka"}
        after = wait_until(lambda: settled(everyone), timeout=120, interval=0.3,
                           message=lambda: f"six members sharing the topic: {by_name()}; callbacks "
                                           f"{ {n: p.owned() for n, p in peers.items()} }")
        assert sorted(map(len, after.values())) == [2] * 6

        described = {m["consumer_id"]: m["protocol"]
                     for m in describe_groups(cluster.bootstrap, [group], with_lag=False)[0]["members"]}
        assert sorted(described.values()) == ["classic", "consumer", "consumer", "consumer", "coordinator", "spark"]
        assert all(described[registry_key(peers[n].member_id())] == "consumer" for n in MODERN)

        admin = KafkaAdmin({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group]).get(group).result(30)
        assert len(described.members) == 6
        assert {m.member_id for m in described.members} >= {peers[n].member_id() for n in MODERN}

        t_kill = time.time()
        victim_parts = after["k3"]
        peers["k3"].stop(signal.SIGKILL)
        survivors = everyone - {"k3"}
        final = wait_until(lambda: settled(survivors), timeout=SESSION_MS / 1000 + 30, interval=0.2,
                           message=lambda: f"the survivors taking the killed KIP-848 member's partitions: {by_name()}")
        moved_after = time.time() - t_kill
        moved = {p for name, ps in final.items() for p in ps if p not in after.get(name, set())}
        assert moved == victim_parts  # only the dead member's partitions moved
        for name in ("k1", "k2", "coop"):
            assert peers[name].revoked_after(t_kill) == [], (name, peers[name].callbacks())
            assert final[name] >= after[name]

        t_kill2 = time.time()
        cli.stop(signal.SIGKILL)
        last = wait_until(lambda: settled(survivors - {"cli"}), timeout=SESSION_MS / 1000 + 30, interval=0.2,
                          message=lambda: f"the survivors taking the CLI consumer's partitions: {by_name()}")
        moved_after2 = time.time() - t_kill2
        moved = {p for name, ps in last.items() for p in ps if p not in final.get(name, set())}
        assert moved == final["cli"]
        for name in ("k1", "k2", "coop"):
            assert peers[name].revoked_after(t_kill2) == [], (name, peers[name].callbacks())
        print(f"\nKIP-848 member SIGKILLed: its partitions moved after {moved_after:.1f} s; the CLI consumer's "
              f"after {moved_after2:.1f} s (session {SESSION_MS} ms)")

        producer.stop()
        ends = wait_everything_read_and_committed(cluster, group, topic, peers.values(), sink, cli)
        fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
        assert {tp.partition: tp.offset for tp in fetched.topic_partitions if tp.topic == topic} == ends  # OffsetFetch
    finally:
        if producer.is_alive():
            producer.stop()
        if query is not None:
            query.stop()
        if cli is not None:
            cli.stop()
        for p in peers.values():
            p.stop()
