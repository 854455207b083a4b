"""Kafka 4's consumer group protocol (KIP-848) through a SIGKILL of the group's coordinator: a
coordkafka query with ``kafka.group.protocol=consumer`` and a thin consumer
(``Consumer(group_protocol="consumer")``) share one group of an 8-partition topic on a three-node
Apache Kafka 4.2 cluster (replication factor 3, min.insync.replicas 2, ``__consumer_offsets``
replicated 3 times).  The node that is the group's coordinator (FindCoordinator, as the
AdminClient's group description names it) is SIGKILLed while records keep coming.

Checks: the coordinator moves to another node; both members go on reading records produced after
the kill, and their commits reach the new coordinator (the group's offsets at the log end while the
node is still dead); every record is read; nothing the group had committed when the coordinator died is read
again (precisely: with C the group's committed offsets read just before the SIGKILL, no record
of a partition p below C[p] is read twice, by the same member or by both; the query's sink keeps
a replayed micro-batch once, by batch id); and once the node is back, the group's committed
offsets reach the log end of every partition."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest
from helpers import wait_until
from kip848_readers import ThinReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS = 8
#: heartbeats every half second, so each hand-over takes about one (Kafka's default: 5 s)
FAST_HEARTBEATS = {"group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def kafka3(kafka_jars, tmp_path_factory):
    """Three Apache Kafka 4.2 nodes, each broker and KRaft controller, whose consumer groups
    heartbeat every half second."""
    from peers.apache_kafka import ApacheKafkaCluster

    with ApacheKafkaCluster(tmp_path_factory.mktemp("apache-kafka-3"), nodes=3, jars=kafka_jars,
                            overrides=FAST_HEARTBEATS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A local[2] SparkSession as tests/spark/conftest.py's (the same session if that one is up: getOrCreate)."""
    from spark_session import shared_session

    session = shared_session(tmp_path_factory)
    yield session  # left running: a later module's session-scoped fixture may share it


class Sink:
    """A foreachBatch sink keyed by batch id (a replayed batch replaces itself)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df, batch_id) -> None:
        rows = [(r.partition, r.offset) for r in df.collect()]
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[int, int]]:
        with self.lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]


class Admin:
    """confluent-kafka's AdminClient on the cluster: it follows the coordinator and the leaders
    wherever they move."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def coordinator(self, group: str) -> int | None:
        """The node id of ``group``'s coordinator (None while no node answers for it)."""
        from confluent_kafka import KafkaException

        try:
            return self.admin.describe_consumer_groups([group], request_timeout=10).get(group).result(15) \
                .coordinator.id
        except KafkaException:
            return None

    def members(self, group: str) -> dict[str, set[int]]:
        """client id -> the partitions its members hold, as the coordinator describes the group."""
        from confluent_kafka import KafkaException

        try:
            described = self.admin.describe_consumer_groups([group], request_timeout=10).get(group).result(15)
        except KafkaException:
            return {}
        out: dict[str, set[int]] = {}
        for m in described.members:
            out.setdefault(m.client_id, set()).update(tp.partition for tp in m.assignment.topic_partitions)
        return out

    def committed(self, group: str) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

        try:
            result = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                            request_timeout=10)[group].result(15)
        except KafkaException:
            return {}
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    def log_end(self, topic: str) -> dict[int, int]:
        """Every partition's log end; asked again, by a new client with fresh metadata, while leaders
        move (a node just died or came back: a client's cached leader epoch is fenced)."""
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        def ask() -> dict[int, int] | None:
            wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
            try:
                return {tp.partition: f.result(30).offset
                        for tp, f in admin.list_offsets(wanted, request_timeout=20).items()}
            except KafkaException:
                return None

        return wait_until(ask, timeout=60, interval=0.5, message=f"the log ends of {topic}")


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    """``per_partition`` records to every partition, acks=all (two in-sync replicas of three are enough)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 0})
    failed: list = []
    for p in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(topic, f"p{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed


def test_members_follow_a_sigkilled_group_coordinator(spark, kafka3, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    from spark_coord.consumer.consumer import Consumer

    bootstrap = kafka3.bootstrap
    topic, group = f"kill848-{uuid.uuid4().hex[:6]}", f"kill848-g-{uuid.uuid4().hex[:6]}"
    client = f"q-{uuid.uuid4().hex[:6]}"
    creator = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for f in creator.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
        f.result(timeout=60)
    admin = Admin(bootstrap)
    produce(bootstrap, topic, 20)
    sink = Sink()
    query = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("group.id", group).option("kafka.group.protocol", "consumer")
             .option("kafka.client.id", client).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "40").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    thin = ThinReader(Consumer(bootstrap, group, topics=[topic], group_protocol="consumer",
                               auto_offset_reset="smallest", auto_commit_interval_ms=200,
                               config={"client.id": "thin"}), "thin")
    thin.start()
    victim = None

    def reads() -> Counter:
        return Counter(sink.rows()) + Counter(thin.read())

    def read_all(ends: dict[int, int]) -> bool:
        return set(reads()) >= {(p, o) for p, end in ends.items() for o in range(end)}

    def missing(ends: dict[int, int]) -> str:
        got = set(reads())
        gaps = {p: [o for o in range(end) if (p, o) not in got] for p, end in ends.items()}
        return "; ".join(f"p{p}: {len(g)} from {g[0]}" for p, g in gaps.items() if g) + \
            f"; members {admin.members(group)}; committed {admin.committed(group)}"

    try:
        def shared() -> bool:
            held = admin.members(group)
            return (set(held) == {client, "thin"} and all(held.values())
                    and sorted(p for ps in held.values() for p in ps) == list(range(PARTITIONS)))

        wait_until(shared, timeout=120, interval=0.3,
                   message=lambda: f"the query and the thin consumer to share the partitions: {admin.members(group)}")
        produce(bootstrap, topic, 20)
        ends = admin.log_end(topic)
        wait_until(lambda: read_all(ends), timeout=60, interval=0.3,
                   message=lambda: f"the records before the kill read: {missing(ends)}")
        wait_until(lambda: admin.committed(group) == ends, timeout=60, interval=0.3,
                   message=lambda: f"the group's offsets at {ends}: {admin.committed(group)}")
        # a backlog the members are in the middle of when the coordinator dies
        produce(bootstrap, topic, 30)
        wait_until(lambda: len(reads()) > sum(ends.values()), timeout=60, interval=0.1,
                   message="reading the backlog")
        victim = wait_until(lambda: admin.coordinator(group), timeout=30, interval=0.3,
                            message="the group's coordinator")
        at_kill = admin.committed(group)
        read_at_kill = {"query": len(sink.rows()), "thin": len(thin.read())}
        kafka3.kill(victim)

        produce(bootstrap, topic, 20)  # records keep coming while the group has no coordinator
        moved_to = wait_until(lambda: (c := admin.coordinator(group)) not in (None, victim) and c, timeout=90,
                              interval=0.5, message=f"a new coordinator for the group after node {victim} died")
        produce(bootstrap, topic, 20)
        ends = admin.log_end(topic)
        wait_until(lambda: read_all(ends), timeout=120, interval=0.3,
                   message=lambda: f"every record read with node {victim} dead (coordinator now {moved_to}): "
                                   f"{missing(ends)}")
        # the members' commits go to the new coordinator: the group's offsets reach the log end with the node dead
        wait_until(lambda: admin.committed(group) == ends, timeout=90, interval=0.5,
                   message=lambda: f"the group's offsets at the log end {ends} through coordinator {moved_to}: "
                                   f"{admin.committed(group)}")
        assert len(sink.rows()) > read_at_kill["query"], "the query read nothing after the coordinator died"
        assert len(thin.read()) > read_at_kill["thin"], "the thin consumer read nothing after the coordinator died"
        assert thin.error is None, thin.error
        assert query.exception() is None and query.isActive, query.exception()

        kafka3.restart(victim)
        victim = None
        produce(bootstrap, topic, 10)
        ends = admin.log_end(topic)
        wait_until(lambda: read_all(ends), timeout=120, interval=0.3,
                   message=lambda: f"every record read once the node is back: {missing(ends)}")
        wait_until(lambda: admin.committed(group) == ends, timeout=90, interval=0.5,
                   message=lambda: f"the group's offsets at the log end {ends}: {admin.committed(group)}")
        held = admin.members(group)
        assert set(held) == {client, "thin"} and all(held.values()), f"both members still in the group: {held}"
    finally:
        thin.stop()
        query.stop()
        if victim is not None:
            kafka3.restart(victim)  # the module's cluster whole again

    counts = reads()
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    assert set(counts) == expected, f"missing {sorted(expected - set(counts))[:10]}"
    again = sorted((p, o) for (p, o), n in counts.items() if n > 1 and o < at_kill.get(p, 0))
    readers = {"query": set(sink.rows()), "thin": set(thin.read())}
    assert again == [], (f"{len(again)} committed record(s) read again (committed at the kill: {at_kill}): "
                         + "; ".join(f"{x} by {[n for n, got in readers.items() if x in got]}" for x in again[:10]))
