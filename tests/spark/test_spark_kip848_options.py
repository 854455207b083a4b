"""The Spark source's settings of Kafka 4's consumer group protocol: ``kafka.group.instance.id``
(static members, KIP-345, one id per query member) and ``kafka.group.remote.assignor`` (the
assignor the group's coordinator runs), checked at load and at the query's start, and carried
to the coordinator: a query stopped and started again within the group's session timeout gets
its members' partitions back by their instance ids."""

from __future__ import annotations

import uuid

import pytest
from helpers import local_cluster, wait_until
from kip848_readers import produce
from test_spark_group import Collect

from spark_coord.spark.group_protocol import check_protocol_settings, kip848_member
from spark_coord.spark.options import parse_source_options

BASE = {"bootstrap.brokers": "127.0.0.1:9092", "subscribe": "a", "group.id": "g"}
PARTITIONS = 4


def test_the_settings_are_read_under_kafkas_names():
    opts = parse_source_options({**BASE, "kafka.group.protocol": "consumer", "kafka.group.instance.id": "reader",
                                 "kafka.group.remote.assignor": "range"}, streaming=True)
    assert (opts.group_instance_id, opts.group_remote_assignor) == ("reader", "range")
    assert parse_source_options(BASE, streaming=True).group_instance_id is None


@pytest.mark.parametrize("extra, message", [
    ({"kafka.group.protocol": "coordkafka", "kafka.group.instance.id": "r"},
     "kafka.group.instance.id: a setting of Kafka 4's consumer group protocol, "
     "not with kafka.group.protocol=coordkafka"),
    ({"kafka.group.remote.assignor": "range", "group.id": None},
     "kafka.group.remote.assignor: only meaningful with group.id"),
    ({"kafka.group.instance.id": "no spaces"}, "kafka.group.instance.id: expected a name"),
    ({"kafka.group.remote.assignor": " "}, "kafka.group.remote.assignor: expected a name"),
])
def test_bad_settings_are_refused_naming_the_option(extra, message):
    options = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(ValueError) as e:
        parse_source_options(options, streaming=True)
    assert message in str(e.value)


def test_settings_for_a_group_that_auto_puts_on_the_coordinators_channel_fail_the_start():
    opts = parse_source_options({**BASE, "kafka.group.instance.id": "r"}, streaming=True)
    check_protocol_settings(opts, "consumer")
    with pytest.raises(ValueError, match=r"kafka.group.instance.id: settings of Kafka 4's consumer group protocol, "
                                         r"but group 'g' joins through spark-coord's coordinator"):
        check_protocol_settings(opts, "coordkafka")


def test_each_member_is_static_under_its_own_instance_id_and_asks_for_the_assignor():
    opts = parse_source_options({**BASE, "kafka.group.protocol": "consumer", "kafka.group.instance.id": "reader",
                                 "kafka.group.remote.assignor": "range"}, streaming=True)
    members = [kip848_member(opts, object(), f"m{i}", i) for i in range(2)]
    try:
        assert [(m.instance_id, m.server_assignor, m.static) for m in members] == [
            ("reader-0", "range", True), ("reader-1", "range", True)]
        assert members[0].heartbeat_body()["instance_id"] == "reader-0"
        assert members[0].heartbeat_body()["server_assignor"] == "range"
    finally:
        for m in members:
            m.io.close()


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """One broker whose KIP-848 members heartbeat every half second and keep a static member's
    partitions for 30 s after it left."""
    settings = {"zookeeper.session.timeout.ms": 6000, "group.consumer.heartbeat.interval.ms": 500,
                "group.consumer.session.timeout.ms": 30000}
    with local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 1, "s-kip848-static", settings) as c:
        yield c


def describe(bootstrap: str, group: str):
    """confluent-kafka's ConsumerGroupDescribe of ``group`` (None before it exists)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    admin = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        return admin.describe_consumer_groups([group]).get(group).result(30)
    except KafkaException:
        return None


def by_instance(bootstrap: str, group: str) -> dict[str, set[int]]:
    described = describe(bootstrap, group)
    if described is None:
        return {}
    return {m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members}


def test_a_restarted_query_gets_its_static_members_partitions_back(spark, cluster, tmp_path):
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    topic, group, instance = (f"kip848s-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}",
                              f"q-{uuid.uuid4().hex[:6]}")
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
        cc.topic(topic, refresh=True, wait=30)
    produce(cluster.bootstrap, topic, PARTITIONS, 10)
    sinks = [Collect(), Collect()]

    def start(sink: Collect):
        return (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", cluster.bootstrap)
                .option("subscribe", topic).option("group.id", group).option("members", "2")
                .option("kafka.group.protocol", "consumer").option("kafka.group.instance.id", instance)
                .option("kafka.group.remote.assignor", "range").option("startingOffsets", "earliest")
                .load().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "c"))
                .trigger(processingTime="200 milliseconds").start())

    def split() -> dict[str, set[int]] | None:
        held = by_instance(cluster.bootstrap, group)
        if set(held) == {f"{instance}-0", f"{instance}-1"} and all(held.values()) \
                and sorted(p for ps in held.values() for p in ps) == list(range(PARTITIONS)):
            return held
        return None

    query = start(sinks[0])
    try:
        before = wait_until(split, timeout=60, interval=0.3, message=lambda: "both static members to hold "
                            f"partitions: {by_instance(cluster.bootstrap, group)}")
        described = describe(cluster.bootstrap, group)
        assert described.partition_assignor == "range", described
        wait_until(lambda: len(sinks[0].rows()) == PARTITIONS * 10, timeout=60, interval=0.3,
                   message=lambda: f"the backlog read: {len(sinks[0].rows())}")
        query.stop()
        # static members that left (epoch -2) stay in the group with their partitions for the session timeout
        assert by_instance(cluster.bootstrap, group) == before
        produce(cluster.bootstrap, topic, PARTITIONS, 5, start=10)
        query = start(sinks[1])
        wait_until(lambda: len(sinks[1].rows()) == PARTITIONS * 5, timeout=60, interval=0.3,
                   message=lambda: f"the restarted query to read the new records: {len(sinks[1].rows())}")
        assert by_instance(cluster.bootstrap, group) == before
        assert sorted((p, o) for _, p, o, _ in sinks[1].rows()) == [(p, o) for p in range(PARTITIONS)
                                                                   for o in range(10, 15)]
    finally:
        query.stop()
