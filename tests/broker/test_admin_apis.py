"""The admin surface Kafka tools expect (issue 30), against real broker processes with real clients:
CreatePartitions (running groups get the new partitions), DeleteRecords (log start offset moves, survives
a restart, consumers below it follow auto.offset.reset), OffsetDelete, DescribeLogDirs and DescribeProducers,
and the refusals Kafka answers for bad input, after which the broker keeps serving."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec
from helpers import local_cluster, wait_until

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, request):
    """Two broker processes (partitions spread over both, so leaders differ)."""
    with local_cluster(zookeeper, tmp_path_factory.mktemp("admin"), 2, "adm-" + request.module.__name__,
                       {"zookeeper.session.timeout.ms": 6000, "num.partitions": PARTITIONS}) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def new_topic(admin: AdminClient, partitions: int = PARTITIONS, prefix: str = "adm") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=15)[name].result(20)
    return name


def produce(cluster, topic: str, partition: int, n: int, **conf) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, **conf})
    errors: list = []
    for i in range(n):
        p.produce(topic, f"{topic}-{partition}-{i}".encode(), partition=partition,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def refused(fn) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        fn()
    return e.value.args[0]


def still_serves(cluster) -> None:
    """Every broker answers Metadata on a fresh connection."""
    for host, port in cluster.brokers.values():
        with BrokerConnection(host, port, timeout=10) as conn:
            assert conn.request(ApiKey.METADATA, {"topics": []})["brokers"]


def earliest(admin: AdminClient, topic: str, partition: int) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=15)[tp].result(20).offset


# ------------------------------------------------------------------ CreatePartitions

def test_create_partitions_reaches_running_groups_of_both_kinds(cluster, admin):
    """A confluent-kafka consumer group and a thin-consumer group are given the new partitions by the
    coordinator, which follows the topic's znode, and consume what is produced to them."""
    from spark_coord.consumer import Consumer as ThinConsumer

    topic = new_topic(admin)
    ck = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"ck-{topic}", "auto.offset.reset": "earliest",
                   "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    ck.subscribe([topic])
    thin = ThinConsumer(cluster.bootstrap, f"thin-{topic}", topics=[topic], session_timeout_ms=10000,
                        auto_offset_reset="smallest")
    try:
        def ck_assigned(n: int):
            ck.poll(0.2)
            return {tp.partition for tp in ck.assignment()} == set(range(n))

        def thin_assigned(n: int):
            return {tp[1] for tp in thin.assignment()} == set(range(n))

        wait_until(lambda: ck_assigned(PARTITIONS), timeout=60, message="confluent consumer assigned 2 partitions")
        wait_until(lambda: thin_assigned(PARTITIONS), timeout=60, message="thin consumer assigned 2 partitions")

        admin.create_partitions([NewPartitions(topic, 4)], request_timeout=15)[topic].result(20)
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        assert sorted(meta.partitions) == [0, 1, 2, 3]
        assert {meta.partitions[p].leader for p in (2, 3)} <= set(cluster.brokers)

        wait_until(lambda: ck_assigned(4), timeout=60,
                   message=lambda: f"confluent consumer given partitions 2 and 3 (has {ck.assignment()})")
        wait_until(lambda: thin_assigned(4), timeout=60,
                   message=lambda: f"thin consumer given partitions 2 and 3 (has {thin.assignment()})")

        produce(cluster, topic, 3, 5)
        seen: list[bytes] = []

        def ck_reads_new_partition():
            m = ck.poll(0.5)
            if m is not None and not m.error() and m.partition() == 3:
                seen.append(m.value())
            return len(seen) >= 5

        wait_until(ck_reads_new_partition, timeout=60, message="records of partition 3 consumed")
        assert seen[0] == f"{topic}-3-0".encode()
        got = []
        wait_until(lambda: got.extend(r for r in thin.messages(timeout=0.5) if r.partition == 3) or len(got) >= 5,
                   timeout=60, message="the thin consumer reads partition 3")
    finally:
        ck.close()
        thin.close()


@pytest.mark.parametrize("kind, conf", [
    ("cooperative", {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10000,
                     "heartbeat.interval.ms": 500}),
    ("kip848", {"group.protocol": "consumer"}),
])
def test_create_partitions_reach_cooperative_and_kip848_members(cluster, admin, kind, conf):
    """Two librdkafka consumers of one group (cooperative-sticky, or KIP-848's consumer protocol) share a
    2-partition topic; two partitions are added: the coordinator hands them out incrementally -- each
    consumer's rebalance callbacks see only partitions added, none taken away -- and both consumers
    together read what is produced to the new partitions."""
    topic = new_topic(admin, prefix=kind)
    events: dict[str, list] = {"a": [], "b": []}

    def consumer(name: str) -> Consumer:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"{kind}-{topic}",
                      "auto.offset.reset": "earliest", **conf})
        c.subscribe([topic], on_assign=lambda _c, ps: events[name].append(("assign", {p.partition for p in ps})),
                    on_revoke=lambda _c, ps: events[name].append(("revoke", {p.partition for p in ps})))
        return c
    consumers = {"a": consumer("a"), "b": consumer("b")}

    def owned() -> dict[str, set[int]]:
        for c in consumers.values():
            c.poll(0.1)
        return {n: {tp.partition for tp in c.assignment()} for n, c in consumers.items()}
    try:
        wait_until(lambda: (o := owned()) and all(o.values()) and set().union(*o.values()) == {0, 1}, timeout=60,
                   message=lambda: f"both consumers assigned ({owned()})")
        before = {n: len(e) for n, e in events.items()}
        admin.create_partitions([NewPartitions(topic, 4)], request_timeout=15)[topic].result(20)
        wait_until(lambda: set().union(*owned().values()) == {0, 1, 2, 3}, timeout=60,
                   message=lambda: f"the new partitions handed out ({owned()})")
        # incremental: after the topic grew, nobody had a partition taken away
        later = [e for n, es in events.items() for e in es[before[n]:]]
        assert all(what == "assign" or not parts for what, parts in later), events
        produce(cluster, topic, 2, 5)
        produce(cluster, topic, 3, 5)
        seen: set[tuple[int, bytes]] = set()

        def read_new() -> bool:
            for c in consumers.values():
                m = c.poll(0.2)
                if m is not None and not m.error() and m.partition() in (2, 3):
                    seen.add((m.partition(), m.value()))
            return len(seen) >= 10
        wait_until(read_new, timeout=60, message=lambda: f"records of the new partitions read ({len(seen)} of 10)")
    finally:
        for c in consumers.values():
            c.close()


def test_create_partitions_reach_a_share_group(cluster, admin):
    """A librdkafka ShareConsumer of a share group (reading from the earliest offset) is given the new
    partitions and receives what is produced to them."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from share_support import ShareReader, set_group_config

    topic = new_topic(admin, prefix="share")
    group = f"share-{topic}"
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    reader = ShareReader("s", cluster.bootstrap, group, [topic])
    reader.start()
    try:
        produce(cluster, topic, 0, 3)
        wait_until(lambda: len(reader.seen()) >= 3, timeout=60, message="the share consumer reads partition 0")
        admin.create_partitions([NewPartitions(topic, 4)], request_timeout=15)[topic].result(20)
        produce(cluster, topic, 3, 5)
        wait_until(lambda: {(p, o) for p, o in reader.seen() if p == 3} == {(3, o) for o in range(5)}, timeout=60,
                   message=lambda: f"the share consumer reads the new partition 3 ({sorted(reader.seen())})")
    finally:
        reader.stop()
    assert not reader.errors, reader.errors


def test_create_partitions_refusals_as_kafka_answers_them(cluster, admin):
    topic = new_topic(admin, 3)
    fewer = refused(lambda: admin.create_partitions([NewPartitions(topic, 2)])[topic].result(20))
    assert fewer.code() == KafkaError.INVALID_PARTITIONS and "higher than the requested 2" in fewer.str()
    same = refused(lambda: admin.create_partitions([NewPartitions(topic, 3)])[topic].result(20))
    assert same.code() == KafkaError.INVALID_PARTITIONS
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    unknown = refused(lambda: admin.create_partitions([NewPartitions(missing, 4)])[missing].result(20))
    assert unknown.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    wrong_count = refused(lambda: admin.create_partitions(
        [NewPartitions(topic, 5, replica_assignment=[[0]])])[topic].result(20))  # 2 new partitions, 1 assignment
    assert wrong_count.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    unknown_broker = refused(lambda: admin.create_partitions(
        [NewPartitions(topic, 4, replica_assignment=[[77]])])[topic].result(20))
    assert unknown_broker.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    two_replicas = refused(lambda: admin.create_partitions(
        [NewPartitions(topic, 4, replica_assignment=[[0, 1]])])[topic].result(20))
    assert two_replicas.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    admin.create_partitions([NewPartitions(topic, 6)], validate_only=True)[topic].result(20)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3  # validate_only wrote nothing
    admin.create_partitions([NewPartitions(topic, 4, replica_assignment=[[1]])])[topic].result(20)
    wait_until(lambda: admin.list_topics(topic, timeout=10).topics[topic].partitions.get(3) is not None,
               timeout=10, message="partition 3")
    assert admin.list_topics(topic, timeout=10).topics[topic].partitions[3].leader == 1  # as assigned
    still_serves(cluster)


# ------------------------------------------------------------------ DeleteRecords

def test_delete_records_moves_the_log_start_offset_for_every_reader(cluster, admin):
    topic = new_topic(admin, 1)
    produce(cluster, topic, 0, 10)
    tp = TopicPartition(topic, 0, 4)
    deleted = admin.delete_records([tp], request_timeout=15)[tp].result(20)
    assert deleted.low_watermark == 4  # the low watermark
    assert earliest(admin, topic, 0) == 4
    # a consumer positioned below the log start follows auto.offset.reset (earliest: the new start)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"dr-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 1)])
    try:
        first = wait_until(lambda: (m := c.poll(0.5)) is not None and not m.error() and m, timeout=30,
                           message="a record after the reset")
        assert first.offset() == 4 and first.value() == f"{topic}-0-4".encode()
    finally:
        c.close()
    # a raw Fetch below the log start is OFFSET_OUT_OF_RANGE, with the log start in the answer
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    with BrokerConnection(*cluster.brokers[leader], timeout=10) as conn:
        out = conn.request(ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                          "topics": [{"topic": topic, "partitions": [
                                              {"partition": 0, "fetch_offset": 2, "partition_max_bytes": 1 << 20}]}]},
                           version=11)
        part = out["responses"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and part["log_start_offset"] == 4
    # -1 is the high watermark: everything goes
    everything = TopicPartition(topic, 0, -1)
    assert admin.delete_records([everything], request_timeout=15)[everything].result(20).low_watermark == 10
    assert earliest(admin, topic, 0) == 10
    # an offset below the log start changes nothing
    back = TopicPartition(topic, 0, 3)
    assert admin.delete_records([back], request_timeout=15)[back].result(20).low_watermark == 10


def test_delete_records_beyond_the_high_watermark_is_offset_out_of_range(cluster, admin):
    topic = new_topic(admin, 1)
    produce(cluster, topic, 0, 3)
    beyond = TopicPartition(topic, 0, 50)
    e = refused(lambda: admin.delete_records([beyond], request_timeout=15)[beyond].result(20))
    assert e.code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert earliest(admin, topic, 0) == 0
    # a partition that does not exist (librdkafka refuses it before sending: ask the broker directly)
    for host, port in cluster.brokers.values():
        with BrokerConnection(host, port, timeout=10) as conn:
            out = conn.request(ApiKey.DELETE_RECORDS, {"timeout_ms": 5000, "topics": [
                {"name": topic, "partitions": [{"partition_index": 7, "offset": 1}]},
                {"name": f"missing-{topic}", "partitions": [{"partition_index": 0, "offset": 1}]}]})
            assert [p["error_code"] for t in out["topics"] for p in t["partitions"]] == \
                [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    still_serves(cluster)


def test_the_log_start_offset_survives_a_broker_restart(cluster, admin):
    topic = new_topic(admin, 1)
    produce(cluster, topic, 0, 6)
    tp = TopicPartition(topic, 0, 5)
    assert admin.delete_records([tp], request_timeout=15)[tp].result(20).low_watermark == 5
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    cluster.kill_broker(leader)
    cluster.start_broker(leader)
    wait_until(lambda: _earliest_or_none(admin, topic) == 5, timeout=60,
               message="the log start offset read back after the restart")


def _earliest_or_none(admin, topic):
    try:
        return earliest(admin, topic, 0)
    except KafkaException:
        return None


# ------------------------------------------------------------------ OffsetDelete

def test_offset_delete_forgets_offsets_of_topics_the_group_does_not_consume(cluster, admin):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError, UnknownTopicOrPartitionError
    from kafka.structs import TopicPartition as KTP

    topic = new_topic(admin, 2)
    group = f"od-{topic}"
    produce(cluster, topic, 0, 4)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        m = wait_until(lambda: (m := c.poll(0.5)) is not None and not m.error() and m, timeout=60,
                       message="a record")
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 0)], asynchronous=False)
        assert m.partition() == 0
        # while the group consumes the topic: refused per partition
        assert kp.delete_group_offsets(group, [KTP(topic, 0)]) == {KTP(topic, 0): GroupSubscribedToTopicError}
    finally:
        c.close()
    try:
        committed = kp.list_group_offsets(group)[group]
        assert committed[KTP(topic, 0)].offset == 3
        assert kp.delete_group_offsets(group, [KTP(topic, 0)]) == {KTP(topic, 0): NoError}
        missing = KTP(f"missing-{topic}", 0)
        assert kp.delete_group_offsets(group, [missing]) == {missing: UnknownTopicOrPartitionError}
        after = kp.list_group_offsets(group)[group]
        assert KTP(topic, 0) not in after or after[KTP(topic, 0)].offset == -1
        assert after[KTP(topic, 1)].offset == 0  # the other partition keeps its offset
        with pytest.raises(GroupIdNotFoundError):
            kp.delete_group_offsets(f"nobody-{topic}", [KTP(topic, 0)])
    finally:
        kp.close()


# ------------------------------------------------------------------ DescribeLogDirs, DescribeProducers

def test_describe_log_dirs_lists_every_partition_with_its_size(cluster, admin):
    from kafka.admin import KafkaAdminClient

    topic = new_topic(admin, 2)
    produce(cluster, topic, 0, 20)
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    with BrokerConnection(*cluster.brokers[leader], timeout=10) as conn:
        for version in range(5):
            out = conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": [{"topic": topic, "partitions": [0, 1]}]},
                               version=version)
            [result] = out["results"]
            assert result["error_code"] == 0 and result["log_dir"].endswith(f"broker-{leader}")
            [found] = [t for t in result["topics"] if t["name"] == topic]
            sizes = {p["partition_index"]: p["partition_size"] for p in found["partitions"]}
            assert sizes[0] > 20 * len(topic) and all(p["offset_lag"] == 0 for p in found["partitions"])
            if version >= 4:
                assert result["total_bytes"] >= result["usable_bytes"] > 0
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        dirs = kp.describe_log_dirs()
        assert dirs, dirs
        text = repr(dirs)
        assert topic in text
    finally:
        kp.close()


def test_describe_producers_shows_an_idempotent_producer(cluster, admin):
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP

    topic = new_topic(admin, 1)
    produce(cluster, topic, 0, 5, **{"enable.idempotence": True})
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        states = kp.describe_producers([KTP(topic, 0)])
    finally:
        kp.close()
    state = states[KTP(topic, 0)]
    producers = getattr(state, "active_producers", None)
    if producers is None:
        producers = state["active_producers"] if isinstance(state, dict) else list(state)
    assert len(producers) == 1
    p = producers[0]
    get = (lambda k: p[k]) if isinstance(p, dict) else (lambda k: getattr(p, k))
    assert get("producer_id") >= 0 and get("producer_epoch") == 0 and get("last_sequence") == 4
    assert get("last_timestamp") > 0


# ------------------------------------------------------------------ CLI

def test_topics_cli_adds_partitions_and_deletes_records(cluster, admin):
    import subprocess
    import sys

    def cli(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "spark_coord.cli", "topics", "-b", cluster.bootstrap, *args],
                              capture_output=True, text=True, timeout=60)

    topic = new_topic(admin, 1)
    produce(cluster, topic, 0, 8)
    grown = cli("add-partitions", topic, "--partitions", "3")
    assert grown.returncode == 0, grown.stderr
    assert "now has 3 partition(s)" in grown.stderr
    fewer = cli("add-partitions", topic, "--partitions", "2")
    assert fewer.returncode == 1 and "INVALID_PARTITIONS" in fewer.stderr and "higher than" in fewer.stderr
    deleted = cli("delete-records", topic, "--partition", "0", "--before", "6")
    assert deleted.returncode == 0, deleted.stderr
    assert [topic, "0", "6"] in [line.split() for line in deleted.stdout.splitlines()]
    beyond = cli("delete-records", topic, "--partition", "0", "--before", "99")
    assert beyond.returncode == 1 and "OFFSET_OUT_OF_RANGE" in beyond.stderr
    rows = [line.split() for line in cli("describe", topic).stdout.splitlines() if line.startswith(topic)]
    assert [(r[1], r[-2], r[-1]) for r in rows] == [("0", "6", "8"), ("1", "0", "0"), ("2", "0", "0")]
    everything = cli("delete-records", topic, "--before", "end")
    assert everything.returncode == 0, everything.stderr
    assert earliest(admin, topic, 0) == 8


# ------------------------------------------------------------------ one admin script, two client libraries

class _Confluent:
    """The script's steps with confluent-kafka's AdminClient."""

    def __init__(self, cluster):
        self.a = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def create_topic(self, name, n):
        self.a.create_topics([NewTopic(name, n, 1)], request_timeout=15)[name].result(20)

    def add_partitions(self, name, n):
        self.a.create_partitions([NewPartitions(name, n)], request_timeout=15)[name].result(20)

    def delete_records(self, name, p, before):
        tp = TopicPartition(name, p, before)
        return self.a.delete_records([tp], request_timeout=15)[tp].result(20).low_watermark

    def earliest(self, name, p):
        return earliest(self.a, name, p)

    def set_password(self, user, password):
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        self.a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode())],
            request_timeout=15)[user].result(20)

    def users(self):
        return {u: sorted(i.mechanism.value for i in d.scram_credential_infos)
                for u, d in self.a.describe_user_scram_credentials(request_timeout=15).result(20).items()}

    def log_dir_topics(self):
        return None  # confluent-kafka 2.16 has no describe_log_dirs

    def close(self):
        pass


class _KafkaPython:
    """The same steps with kafka-python's KafkaAdminClient."""

    def __init__(self, cluster):
        from kafka.admin import KafkaAdminClient

        self.a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)

    def create_topic(self, name, n):
        from kafka.admin import NewTopic as KNewTopic

        self.a.create_topics([KNewTopic(name, n, 1)])

    def add_partitions(self, name, n):
        self.a.create_partitions({name: n})

    def delete_records(self, name, p, before):
        from kafka.structs import TopicPartition as KTP

        out = self.a.delete_records({KTP(name, p): before})
        return out[KTP(name, p)]["low_watermark"] if isinstance(out[KTP(name, p)], dict) else out[KTP(name, p)]

    def earliest(self, name, p):
        from kafka.admin import OffsetSpec as KSpec
        from kafka.structs import TopicPartition as KTP

        return self.a.list_partition_offsets({KTP(name, p): KSpec.EARLIEST})[KTP(name, p)].offset

    def set_password(self, user, password):
        from kafka.admin import ScramMechanism as KScram
        from kafka.admin import UserScramCredentialUpsertion as KUpsert

        assert self.a.alter_user_scram_credentials([KUpsert(user, KScram.SCRAM_SHA_256, password,
                                                            iterations=4096)]) == {user: None}

    def users(self):
        return {u: sorted(int(i["mechanism"]) for i in d["credential_infos"])
                for u, d in self.a.describe_user_scram_credentials().items()}

    def log_dir_topics(self):
        return repr(self.a.describe_log_dirs())

    def close(self):
        self.a.close()


@pytest.mark.parametrize("client", [_Confluent, _KafkaPython], ids=["confluent-kafka", "kafka-python"])
def test_one_admin_script_runs_with_either_client(cluster, client):
    c = client(cluster)
    try:
        topic = f"script-{uuid.uuid4().hex[:8]}"
        c.create_topic(topic, 2)
        c.add_partitions(topic, 3)
        wait_until(lambda: len(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
                               .topics[topic].partitions) == 3, timeout=10, message="3 partitions")
        produce(cluster, topic, 2, 7)
        assert c.delete_records(topic, 2, 5) == 5
        assert c.earliest(topic, 2) == 5 and c.earliest(topic, 0) == 0
        user = f"user-{uuid.uuid4().hex[:6]}"
        c.set_password(user, "pw-" + user)
        assert c.users()[user] == [1]  # SCRAM-SHA-256
        dirs = c.log_dir_topics()
        assert dirs is None or topic in dirs
    finally:
        c.close()


def test_describe_client_quotas_finds_none_and_refuses_a_malformed_filter(broker):
    """No quotas are kept: any valid filter matches nothing (Kafka's answer on a cluster without
    quotas); a filter Kafka refuses gets INVALID_REQUEST naming the problem, at both versions."""
    with BrokerConnection(*broker.address, timeout=10) as c:
        for version in (0, 1):
            ok = c.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": [
                {"entity_type": "user", "match_type": 0, "match": "alice"},
                {"entity_type": "client-id", "match_type": 2, "match": None}], "strict": False}, version=version)
            assert (ok["error_code"], ok["entries"]) == (0, []), ok
            for components, words in (
                    ([{"entity_type": "group", "match_type": 2, "match": None}], "entity type 'group'"),
                    ([{"entity_type": "user", "match_type": 0, "match": None}], "null match"),
                    ([{"entity_type": "user", "match_type": 2, "match": None}] * 2, "Duplicate user"),
                    ([{"entity_type": "user", "match_type": 7, "match": None}], "match type 7")):
                bad = c.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": True},
                                version=version)
                assert bad["error_code"] == ErrorCode.INVALID_REQUEST and words in bad["error_message"], bad
        assert c.request(ApiKey.METADATA, {"topics": None}, version=1)["brokers"]  # still served
