"""coordkafka queries as members of Kafka 4's consumer group protocol (``kafka.group.protocol=consumer``,
KIP-848): the query's members are members of the cluster's own group beside Kafka's Java consumers
(``KafkaConsumer`` with ``group.protocol=consumer``, tests/peers/java/GroupConsumer.java) on Apache
Kafka 4.2 (no ZooKeeper, no coordinator of ours), and on our brokers (Java consumers too where
Java and Kafka's jars are at hand, confluent-kafka's otherwise).

The query joins first and holds all 12 partitions while it reads a backlog a few records per
micro-batch; the two consumers join meanwhile and the coordinator moves partitions from the
query to them, each only after the batch that read it committed (else a consumer would start
below the query's last batch and read its records again).  Then: the coordinator describes the
query's two members (``kafka-consumer-groups --describe --members`` on Kafka) and, once
everything is read, lag 0; a third consumer joins while the query has a backlog and records keep
coming: the coordinator moves a few partitions to it and only those change hands (the query keeps
the rest and its batches on them go on; each consumer's callbacks revoke only what the third one
got); the query stopped, its partitions go to the consumers, which read on from its commits; a
new query (a fresh checkpoint, so it has nothing but the group's offsets) takes partitions back
and reads on from the group's committed offsets.  Every record is read exactly once across the
two runs' sinks and the consumers' own records.  On Kafka the second run leaves
``kafka.group.protocol`` out: ``auto`` finds Kafka 4's protocol by ApiVersions.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from helpers import local_cluster, wait_until
from kip848_readers import produce
from peers.group_peers import KafkaPeer
from test_spark_group import Collect

PARTITIONS = 12
#: heartbeats every half second, so each hand-over takes about one (Kafka's default: 5 s)
FAST_HEARTBEATS = {"group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def apache_kafka(kafka_jars, tmp_path_factory):
    """One Apache Kafka 4.2 node (tests/apache_kafka_fixtures.py's), whose consumer groups heartbeat
    every half second."""
    from peers.apache_kafka import ApacheKafkaCluster

    with ApacheKafkaCluster(tmp_path_factory.mktemp("apache-kafka"), jars=kafka_jars,
                            overrides=FAST_HEARTBEATS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """One of our brokers, its KIP-848 members heartbeating every half second."""
    settings = {"zookeeper.session.timeout.ms": 6000, "group.consumer.heartbeat.interval.ms": 500}
    with local_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 1, "s-kip848-members", settings) as c:
        yield c


def start_query(spark, bootstrap: str, topic: str, group: str, client_id: str, sink: Collect, checkpoint,
                protocol: str | None = "consumer"):
    reader = (spark.readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("group.id", group).option("members", "2")
              .option("kafka.client.id", client_id).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "24").option("session.timeout.ms", "40000"))
    if protocol is not None:
        reader = reader.option("kafka.group.protocol", protocol)
    return (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def members(bootstrap: str, group: str) -> list[tuple[str, str, set[int]]]:
    """(client id, member id, partitions) of each member, as the group's coordinator describes it
    (ConsumerGroupDescribe, through confluent-kafka's AdminClient); none while no coordinator answers.
    librdkafka's FindCoordinator gives up after two retries of COORDINATOR_NOT_AVAILABLE (a broker that
    just started, its shards not all elected) and then waits for a broker state change that never comes:
    the next call asks again with a new client."""
    from concurrent.futures import TimeoutError as NoAnswer

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    admin = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        described = admin.describe_consumer_groups([group], request_timeout=10).get(group).result(15)
    except (KafkaException, NoAnswer):  # no such group yet, or no coordinator found yet
        return []
    return [(m.client_id, m.member_id, {tp.partition for tp in m.assignment.topic_partitions})
            for m in described.members]


def create_topic(bootstrap: str) -> str:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    topic = f"kip848q-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
        cc.topic(topic, refresh=True, wait=30)
    return topic


def committed(bootstrap: str, group: str) -> dict[int, int]:
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
        return {p: c.offset for (_, p), c in gc.fetch_offsets(group).items()}


def log_end(bootstrap: str, topic: str) -> dict[int, int]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return dict(AdminClient(cc).list_offsets(topic, None, LATEST))


def lags(described: str, topic: str) -> dict[int, str]:
    """partition -> LAG column of ``kafka-consumer-groups --describe``."""
    lines = [line.split() for line in described.splitlines() if line.strip()]
    header = next(line for line in lines if "LAG" in line and "PARTITION" in line)
    at = {name: i for i, name in enumerate(header)}
    return {int(row[at["PARTITION"]]): row[at["LAG"]] for row in lines
            if len(row) == len(header) and row[at["TOPIC"]] == topic}


class Rounds(threading.Thread):
    """Produces one record to every partition each half second (values numbered on from ``start``)
    until ``stop()`` or ``most`` rounds, whichever comes first (records keep coming, never more than
    a query reading 24 a batch catches up with on a loaded machine); ``produced``: the number of the
    next value."""

    def __init__(self, bootstrap: str, topic: str, start: int, most: int = 40):
        super().__init__(name="rounds", daemon=True)
        self.bootstrap, self.topic, self.produced = bootstrap, topic, start
        self.rounds, self.most = 0, most
        self._stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self.rounds < self.most and not self._stop_event.wait(0.5):
                produce(self.bootstrap, self.topic, PARTITIONS, 1, start=self.produced)
                self.produced += PARTITIONS
                self.rounds += 1
        except BaseException as e:  # noqa: BLE001 -- stop() raises it in the test
            self.error = e

    def stop(self) -> int:
        self._stop_event.set()
        self.join(30)
        assert not self.is_alive(), "the producer thread did not stop"
        if self.error is not None:
            raise self.error
        return self.produced


def run_scenario(spark, bootstrap: str, tmp_path, describe=None, second_protocol: str | None = "consumer",
                 peer_kind: str = "java", jars=None) -> None:
    """The module docstring's scenario on the cluster at ``bootstrap``; ``describe(*args)``: the
    stdout of ``kafka-consumer-groups --describe --group GROUP`` with these arguments (None: not checked);
    ``peer_kind``: ``KafkaPeer``'s kind of the consumers (``java``: run with the jars of the folder ``jars``)."""
    group, client = f"g-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, PARTITIONS, 20)
    produced = PARTITIONS * 20
    sinks = [Collect(), Collect()]
    peers: list[KafkaPeer] = []
    rounds: Rounds | None = None
    query = start_query(spark, bootstrap, topic, group, client, sinks[0], tmp_path / "c1")

    def peer(name: str) -> KafkaPeer:
        return KafkaPeer(peer_kind, bootstrap, group, topic, name, tmp_path, "consumer", jars=jars)

    def by_client() -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for client_id, _, parts in members(bootstrap, group):
            out.setdefault(client_id, set()).update(parts)
        return out

    def reads() -> Counter:
        return (Counter((p, o) for s in sinks for _, p, o, _ in s.rows())
                + Counter(x for peer in peers for x in peer.records()))

    def everything_read() -> bool:
        return set(reads()) == {(p, o) for p in range(PARTITIONS) for o in range(produced // PARTITIONS)}

    def missing() -> str:
        """What is not read yet, by partition, and who holds each partition now."""
        got = set(reads())
        gaps: dict[int, list[int]] = {}
        for p in range(PARTITIONS):
            gaps[p] = [o for o in range(produced // PARTITIONS) if (p, o) not in got]
        holders = {p: c for c, ps in by_client().items() for p in ps}
        return (f"{len(got)} of {produced} read; missing "
                + "; ".join(f"p{p} {gap[0]}..{gap[-1]} ({len(gap)}, held by {holders.get(p)})"
                            for p, gap in gaps.items() if gap)
                + f"; the group's offsets {committed(bootstrap, group)}"
                + f"; the query: active={query.isActive}, exception={query.exception()}, status={query.status}")

    def at_log_end() -> bool:
        return committed(bootstrap, group) == {p: produced // PARTITIONS for p in range(PARTITIONS)}

    try:
        wait_until(lambda: by_client().get(client) == set(range(PARTITIONS)), timeout=60, interval=0.3,
                   message=lambda: f"the query's members to hold every partition: {by_client()}")
        # the consumers join while the query reads the backlog 24 records a batch: partitions move to them, each
        # acknowledged once the batch in flight on it committed.  After the first batch: a batch slower than half
        # of session.timeout.ms (40 s here) is read again by the next owner, and a query's first batch on a
        # loaded machine can be that slow
        wait_until(lambda: sinks[0].rows(), timeout=60, interval=0.2, message="the query's first micro-batch")
        peers = [peer(name) for name in ("k1", "k2")]

        def settled() -> bool:
            """The query and every consumer hold partitions, each partition one of them."""
            held = by_client()
            return (set(held) == {client, *(k.client_id for k in peers)} and all(held.values())
                    and sorted(p for ps in held.values() for p in ps) == list(range(PARTITIONS)))

        def consumers_agree() -> bool:
            """Each consumer's callbacks leave it the partitions the coordinator describes it with."""
            held = by_client()
            return all(k.owned() == held.get(k.client_id) for k in peers)

        def disagreement() -> str:
            return f"coordinator: {by_client()}; callbacks: { {k.client_id: k.callbacks() for k in peers} }"

        wait_until(settled, timeout=60, interval=0.3, message=lambda: f"the query and k1, k2 to share: {by_client()}; "
                   + "; ".join(k.report() for k in peers))
        wait_until(consumers_agree, timeout=30, interval=0.3,
                   message=lambda: f"the consumers' callbacks to match the coordinator: {disagreement()}")
        assert not any(what == "lost" for k in peers for _, what, _ in k.callbacks()), disagreement()
        assert sum(1 for c, _, _ in members(bootstrap, group) if c == client) == 2
        if describe is not None:
            listed = describe(group, "--members")
            assert listed.count(client) == 2, listed
        produce(bootstrap, topic, PARTITIONS, 5, start=produced)
        produced += PARTITIONS * 5
        wait_until(everything_read, timeout=60, interval=0.3, message=lambda: f"every record read: {missing()}")
        wait_until(at_log_end, timeout=30, interval=0.3,
                   message=lambda: f"the group's offsets at the log end: {committed(bootstrap, group)}")
        assert committed(bootstrap, group) == log_end(bootstrap, topic)
        if describe is not None:
            described = describe(group)
            assert client in described, described
            assert lags(described, topic) == {p: "0" for p in range(PARTITIONS)}, described
        before = {p for _, p, _, _ in sinks[0].rows()}
        assert before, "the query read nothing"

        # a third consumer joins while the query has a backlog and records keep coming
        held_before = by_client()
        produce(bootstrap, topic, PARTITIONS, 20, start=produced)
        produced += PARTITIONS * 20
        rounds = Rounds(bootstrap, topic, produced)
        rounds.start()
        joined_at = time.time()
        peers.append(peer("k3"))
        wait_until(settled, timeout=60, interval=0.3,
                   message=lambda: f"k3 to take partitions from the query, k1 and k2: {by_client()}; "
                   + "; ".join(k.report() for k in peers))
        wait_until(consumers_agree, timeout=30, interval=0.3,
                   message=lambda: f"the consumers' callbacks to match the coordinator: {disagreement()}")
        held_after = by_client()
        moved = held_after["k3"]
        kept = held_after[client]
        assert kept <= held_before[client] and kept, (
            f"the query's partitions went from {held_before[client]} to {kept}: more than k3's share moved")
        for k in peers[:2]:
            name = k.client_id
            assert held_after[name] <= held_before[name], f"{name}: {held_before[name]} -> {held_after[name]}"
            revoked = set().union(*k.revoked_after(joined_at))
            assert revoked == held_before[name] - held_after[name], (
                f"{name}'s callbacks revoked {revoked} after k3 joined, the coordinator moved "
                f"{held_before[name] - held_after[name]}: {k.callbacks()}")
        assert moved == set().union(*(held_before[c] - held_after[c] for c in held_before)), (held_before, held_after)
        k3_saw = [(what, parts) for _, what, parts in peers[2].callbacks() if parts]
        assert {what for what, _ in k3_saw} == {"assigned"} and set().union(*(ps for _, ps in k3_saw)) == moved, (
            f"k3's callbacks: {peers[2].callbacks()}, the coordinator gave it {moved}")
        assert not any(what == "lost" for k in peers for _, what, _ in k.callbacks()), disagreement()
        # the query's batches go on on the partitions it kept
        seen = {(p, o) for _, p, o, _ in sinks[0].rows()}
        wait_until(lambda: kept <= {p for _, p, o, _ in sinks[0].rows() if (p, o) not in seen}, timeout=60,
                   interval=0.3, message=lambda: f"new micro-batch rows on each of the query's partitions {kept}: "
                   f"{ {p for _, p, o, _ in sinks[0].rows() if (p, o) not in seen} }")
        produced = rounds.stop()
        wait_until(everything_read, timeout=120, interval=0.3, message=lambda: f"every record read: {missing()}")
        wait_until(at_log_end, timeout=30, interval=0.3,
                   message=lambda: f"the group's offsets at the log end: {committed(bootstrap, group)}")

        query.stop()  # its members leave: the consumers take every partition from its commits
        wait_until(lambda: client not in by_client() and settled_without(by_client(), client, len(peers)),
                   timeout=60, interval=0.3,
                   message=lambda: f"k1, k2 and k3 to take the query's partitions: {by_client()}")
        produce(bootstrap, topic, PARTITIONS, 5, start=produced)
        produced += PARTITIONS * 5
        wait_until(everything_read, timeout=60, interval=0.3, message=lambda: f"every record read: {missing()}")
        wait_until(at_log_end, timeout=30, interval=0.3,
                   message=lambda: f"the group's offsets at the log end: {committed(bootstrap, group)}")

        # a fresh checkpoint: where the new run starts is the group's committed offsets alone
        restart_at = produced // PARTITIONS
        query = start_query(spark, bootstrap, topic, group, client, sinks[1], tmp_path / "c2", second_protocol)
        wait_until(settled, timeout=60, interval=0.3,
                   message=lambda: f"the restarted query to take partitions back: {by_client()}")
        produce(bootstrap, topic, PARTITIONS, 5, start=produced)
        produced += PARTITIONS * 5
        wait_until(everything_read, timeout=60, interval=0.3, message=lambda: f"every record read: {missing()}")
        wait_until(at_log_end, timeout=30, interval=0.3,
                   message=lambda: f"the group's offsets at the log end: {committed(bootstrap, group)}")
        assert sinks[1].rows(), "the restarted query read nothing"
        lowest = min(o for _, _, o, _ in sinks[1].rows())
        assert lowest >= restart_at, f"the restarted query read from {lowest}, below the group's {restart_at}"
    finally:
        if rounds is not None and rounds.is_alive():
            rounds.stop()
        query.stop()
        for k in peers:
            k.stop()
    twice = sorted(x for x, n in reads().items() if n > 1)
    readers = {**{f"query {i + 1}": {(p, o) for _, p, o, _ in s.rows()} for i, s in enumerate(sinks)},
               **{k.client_id: k.records() for k in peers}}
    assert twice == [], (f"{len(twice)} record(s) read twice: "
                         + "; ".join(f"{x} by {[n for n, got in readers.items() if x in got]}" for x in twice[:10]))
    assert everything_read()


def settled_without(held: dict[str, set[int]], gone: str, others: int) -> bool:
    rest = {c: ps for c, ps in held.items() if c != gone}
    return len(rest) == others and sorted(p for ps in rest.values() for p in ps) == list(range(PARTITIONS))


def test_query_and_kafka_consumers_share_a_group_on_apache_kafka(spark, apache_kafka, kafka_jars, kafka_tool,
                                                                 tmp_path):
    from peers.apache_kafka import CONSUMER_GROUPS

    bootstrap = apache_kafka.bootstrap

    def describe(group: str, *args: str) -> str:
        return kafka_tool(CONSUMER_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group, *args,
                          check=True).stdout

    run_scenario(spark, bootstrap, tmp_path, describe, second_protocol=None, peer_kind="java", jars=kafka_jars)


def test_query_and_kafka_consumers_share_a_group_on_our_brokers(spark, cluster, tmp_path):
    """Kafka's Java consumers beside the query where Java 17 and Kafka's jars can be had;
    confluent-kafka's (librdkafka's KIP-848 member) otherwise."""
    from peers.apache_kafka import ApacheKafkaUnavailable, kafka_jars

    try:
        jars, kind = kafka_jars(), "java"
    except ApacheKafkaUnavailable:
        jars, kind = None, "confluent"
    run_scenario(spark, cluster.bootstrap, tmp_path, peer_kind=kind, jars=jars)


# ---------------------------------------------------------------------------------- the option
@pytest.mark.parametrize("options, message", [
    ({"kafka.group.protocol": "classic"}, "kafka.group.protocol: classic is not taken"),
    ({"kafka.group.protocol": "zk"}, "kafka.group.protocol: expected one of auto, coordkafka, consumer"),
    ({"kafka.group.protocol": "consumer", "coordinator.bootstrap": "127.0.0.1:1"},
     "coordinator.bootstrap: not with kafka.group.protocol=consumer"),
    ({"group.id": None, "kafka.group.protocol": "consumer"}, "kafka.group.protocol: only meaningful with group.id"),
])
def test_group_protocol_option_refused(options, message):
    from spark_coord.spark.options import parse_source_options

    given = {"bootstrap.brokers": "127.0.0.1:9092", "subscribe": "a", "group.id": "g", **options}
    with pytest.raises(ValueError) as e:
        parse_source_options({k: v for k, v in given.items() if v is not None}, streaming=True)
    assert str(e.value).startswith(message), str(e.value)


def test_auto_picks_the_clusters_way_into_a_group():
    from spark_coord.spark.group_protocol import resolve_group_protocol
    from spark_coord.spark.options import parse_source_options

    class Cluster:  # what resolve_group_protocol asks: a connection's ApiVersions answer
        def __init__(self, keys):
            self.conn = type("Conn", (), {"host": "b1", "port": 9092, "broker_versions": {k: (0, 1) for k in keys}})

        def any_connection(self):
            return self.conn

    def resolved(keys, **options) -> str:
        given = {"bootstrap.brokers": "b1:9092", "subscribe": "a", "group.id": "g", **options}
        return resolve_group_protocol(parse_source_options(given, streaming=True), Cluster(keys))

    ours, kafka4, kafka3 = [0, 1, 68, 1000, 1001], [0, 1, 68], [0, 1, 11, 14]
    assert resolved(ours) == "coordkafka"
    assert resolved(kafka4) == "consumer"
    assert resolved(kafka4, **{"coordinator.bootstrap": "c1:9093"}) == "coordkafka"
    assert resolved(ours, **{"kafka.group.protocol": "consumer"}) == "consumer"
    assert resolved(kafka3, **{"group.protocol": "coordkafka"}) == "coordkafka"
    with pytest.raises(ValueError, match="kafka.group.protocol: the broker at b1:9092 serves neither"):
        resolved(kafka3)


# ------------------------------------------------------------------------- the revocation hold
class ScriptedCoordinator:
    """``MemberIo`` of a KIP-848 coordinator that answers heartbeats from a script and records
    the heartbeats and commits it got."""

    TOPIC_ID = b"\x01" * 16

    def __init__(self, answers: list[dict]) -> None:
        self.answers = answers
        self.heartbeats: list[dict] = []
        self.commits: list[tuple[dict, int]] = []

    def answer(self, epoch: int, partitions: list[int] | None) -> dict:
        return {"error_code": 0, "error_message": None, "member_id": None, "member_epoch": epoch,
                "heartbeat_interval_ms": 500,
                "assignment": None if partitions is None else
                {"topic_partitions": [{"topic_id": self.TOPIC_ID, "partitions": partitions}]}}

    def heartbeat(self, body: dict) -> dict:
        self.heartbeats.append(body)
        return self.answers.pop(0)

    def coordinator_lost(self) -> None:
        pass

    def commit(self, offsets, member_id, epoch) -> None:
        self.commits.append((dict(offsets), epoch))

    def committed(self, partitions, member_id, epoch) -> dict:
        return {}

    def topic_names(self, topic_ids, subscribed) -> dict:
        return {i: "t" for i in topic_ids if i == self.TOPIC_ID}

    def topic_ids(self, names) -> dict:
        return {n: self.TOPIC_ID for n in names if n == "t"}

    def close(self) -> None:
        pass


def test_a_revoked_partition_is_acknowledged_only_after_its_batch_committed():
    """The query stops planning a revoked partition at once, but its member commits the partition's
    offset and acknowledges (a heartbeat no longer listing it) only once Spark confirmed the batch
    in flight on it: the next owner starts after that batch, never inside it."""
    import threading

    from spark_coord.consumer.kip848 import Kip848Member
    from spark_coord.spark.group import GroupPartitionSource
    from spark_coord.spark.options import parse_source_options

    source = GroupPartitionSource(parse_source_options(
        {"bootstrap.brokers": "127.0.0.1:9", "subscribe": "t", "group.id": "g", "kafka.group.protocol": "consumer",
         "startingOffsets": "earliest"}, streaming=True))
    source.resolver = type("Earliest", (), {"list_offsets": lambda self, tps, which: {tp: 0 for tp in tps}})()
    io = ScriptedCoordinator([])
    io.answers = [io.answer(1, [0, 1]), io.answer(2, [1]), io.answer(2, None)]
    member = source.members[0]
    member.kip848 = True
    kip848 = Kip848Member(io, "g", member, topics=["t"], member_id="m0", auto_commit_interval_ms=None)
    kip848.heartbeat_once()  # joined with both partitions
    assert source.assigned() == {("t", 0): 0, ("t", 1): 0}
    source.on_batch_planned({("t", 0): 10, ("t", 1): 10})  # a batch in flight on both

    revoking = threading.Thread(target=kip848.heartbeat_once)  # the answer revokes t-0
    revoking.start()
    try:
        wait_until(lambda: ("t", 0) in source.stopping, timeout=10, message="the revocation to start")
        assert source.assigned() == {("t", 1): 0}, "a revoked partition is planned no more"
        assert io.commits == [] and revoking.is_alive(), "acknowledged before the batch on t-0 committed"
        source.on_batch_committed({("t", 0): 10, ("t", 1): 10})  # Spark confirms the batch
        revoking.join(10)
        assert not revoking.is_alive()
    finally:
        source.on_batch_committed({("t", 0): 10})
        revoking.join(10)
    assert io.commits == [({("t", 0): 10}, 2)]
    kip848.heartbeat_once()  # the acknowledgement: t-1 alone
    assert io.heartbeats[-1]["topic_partitions"] == [{"topic_id": io.TOPIC_ID, "partitions": [1]}]
    assert member.owned == {("t", 1): 0}
