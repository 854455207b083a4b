"""The coordinator beside a Kafka-protocol cluster (docs/deploying/beside-kafka.md): ``spark-coord coordinator``
processes over Tansu (a broker nobody here wrote) and over our brokers with coordinator.enable=false.

Members (the thin consumer) bootstrap the coordinator separately from the data cluster and
fetch from the data cluster's leaders; offsets land in the coordinator's ZooKeeper in Kafka's
layout and, mirrored, in the data cluster's own offset store; killing the active coordinator
hands the group to the other; a topic created on the data cluster reaches a wildcard group.
"""

from __future__ import annotations

import time
import uuid

import pytest
from helpers import group_offsets, local_cluster, wait_until

from spark_coord.consumer import Consumer
from testkit.coordinator_process import CoordinatorProcess

PARTITIONS = 4


@pytest.fixture(scope="module", params=["tansu", "ours"])
def data_cluster(request, zookeeper, tmp_path_factory):
    """The data cluster: Tansu, or one of our brokers with coordinator.enable=false (which keeps no
    offsets of its own: its groups' offsets are the coordinator's ZooKeeper ones, nothing to mirror)."""
    if request.param == "tansu":
        broker = request.getfixturevalue("tansu")
        broker.has_offset_store = True
        yield broker
        return
    with local_cluster(zookeeper, tmp_path_factory.mktemp("data"), 1, "standalone-data",
                       {"coordinator.enable": False, "num.partitions": PARTITIONS}) as c:
        c.has_offset_store = False
        yield c


def _create_and_produce(bootstrap: str, n: int, topic: str | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = topic or f"sa-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(timeout=30)
    produce(bootstrap, topic, n)
    return topic


def produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _ends(got) -> dict[int, int]:
    """The next offset per partition after what was read (every record was read: the log end)."""
    ends: dict[int, int] = {}
    for p, o in got:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def _mirrored(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {tp.partition: tp.offset for tp in future.result(timeout=20).topic_partitions
            if tp.topic == topic and tp.offset >= 0}


def _drain(consumers, got: list, timeout: float = 0.3) -> None:
    for c in consumers:
        got.extend((r.partition, r.offset) for r in c.messages(timeout=timeout))


def test_members_read_through_a_standalone_coordinator_and_offsets_are_mirrored(data_cluster, zk_connect,
                                                                                  tmp_path):
    n, group = 200, f"sa-g-{uuid.uuid4().hex[:6]}"
    topic = _create_and_produce(data_cluster.bootstrap, n)
    coordinator = CoordinatorProcess(1001, data_cluster.bootstrap, zk_connect, tmp_path,
                                     **{"coordinator.offsets.mirror": data_cluster.has_offset_store}).wait_listening()
    members = []
    try:
        members = [Consumer(data_cluster.bootstrap, group, topics=[topic], auto_offset_reset="smallest",
                            session_timeout_ms=6000, coordinator_bootstrap=coordinator.address) for _ in range(2)]
        got: list = []
        # the second member may join after the first has read everything (a loaded machine): both
        # end up with partitions, and a partition that moved is read on from where its first owner stopped
        wait_until(lambda: _drain(members, got) or all(m.assignment() for m in members), timeout=90,
                   message=lambda: f"both members to get partitions: {[m.assignment() for m in members]}")
        wait_until(lambda: _drain(members, got) or len(got) >= n, timeout=90,
                   message=lambda: f"{n} records through the standalone coordinator; have {len(got)}")
        assert sorted(got) == sorted({(p, o) for p in range(PARTITIONS) for o in range(n // PARTITIONS)})
        for m in members:
            m.commit(m.positions(), timeout=10)
        ends = _ends(got)
        assert group_offsets(zk_connect, group, topic) == ends
        if data_cluster.has_offset_store:  # the cluster's own tools see the lag (OffsetFetch on the cluster)
            wait_until(lambda: _mirrored(data_cluster.bootstrap, group, topic) == ends, timeout=30,
                       message=lambda: f"offsets mirrored into the data cluster: "
                                       f"{_mirrored(data_cluster.bootstrap, group, topic)} (want {ends})")
    finally:
        for m in members:
            m.close()
        coordinator.stop()


def test_killing_the_active_coordinator_hands_the_group_to_the_other(data_cluster, zk_connect, tmp_path):
    from spark_coord.zk.client import close, connect
    from testkit.zk_history import read_coordinator

    group = f"sa-fail-{uuid.uuid4().hex[:6]}"
    topic = _create_and_produce(data_cluster.bootstrap, 40)
    coordinators = {cid: CoordinatorProcess(cid, data_cluster.bootstrap, zk_connect, tmp_path).wait_listening()
                    for cid in (1001, 1002)}
    zk = connect(zk_connect)
    members = []
    try:
        bootstrap = ",".join(c.address for c in coordinators.values())
        members = [Consumer(data_cluster.bootstrap, group, topics=[topic], auto_offset_reset="smallest",
                            session_timeout_ms=10000, coordinator_bootstrap=bootstrap) for _ in range(2)]
        got: list = []
        wait_until(lambda: _drain(members, got) or len(got) >= 40, timeout=90, message="the first 40 records")
        active = wait_until(lambda: (c := read_coordinator(zk, group)) is not None and (c,),
                            message="the group's coordinator")[0]
        coordinators[active].kill()
        killed = time.monotonic()
        produce(data_cluster.bootstrap, topic, 40, start=40)
        wait_until(lambda: _drain(members, got) or len(got) >= 80, timeout=60,
                   message=lambda: f"records produced after the kill; have {len(got)}")
        resumed = time.monotonic() - killed
        successor = wait_until(lambda: (c := read_coordinator(zk, group)) is not None and c != active and (c,),
                               timeout=60, message="the other coordinator elected")[0]
        wait_until(lambda: all(m.connector.registered.is_set() and m.connector.coordinator is not None
                               and m.connector.coordinator.coordinator_id == successor for m in members),
                   timeout=60, message="both members registered with the new coordinator")
        moved = time.monotonic() - killed
        print(f"\nstandalone coordinator {active} SIGKILLed: records produced after it read within {resumed:.2f} s "
              f"(members read on under their lease); both members with coordinator {successor} after {moved:.2f} s")
        assert len(set(got)) == 80
        for m in members:
            m.commit(m.positions(), timeout=15)
        assert group_offsets(zk_connect, group, topic) == _ends(got)
    finally:
        for m in members:
            m.close()
        close(zk)
        for c in coordinators.values():
            c.stop()


def test_a_topic_created_on_the_data_cluster_reaches_a_wildcard_group(data_cluster, zk_connect, tmp_path):
    prefix = f"wild{uuid.uuid4().hex[:6]}"
    first = _create_and_produce(data_cluster.bootstrap, 20, topic=f"{prefix}-a")
    coordinator = CoordinatorProcess(1003, data_cluster.bootstrap, zk_connect, tmp_path).wait_listening()
    member = Consumer(data_cluster.bootstrap, f"{prefix}-g", pattern=f"{prefix}-.*", auto_offset_reset="smallest",
                      session_timeout_ms=6000, coordinator_bootstrap=coordinator.address)
    try:
        got: list = []

        def drain():
            got.extend((r.topic, r.offset) for r in member.messages(timeout=0.3))
            return got

        wait_until(lambda: sum(1 for t, _ in drain() if t == first) >= 20, timeout=60, message="the first topic")
        second = _create_and_produce(data_cluster.bootstrap, 20, topic=f"{prefix}-b")
        wait_until(lambda: sum(1 for t, _ in drain() if t == second) >= 20, timeout=60,
                   message=lambda: f"the topic created later; have {len(got)} records")
    finally:
        member.close()
        coordinator.stop()


def test_a_standalone_coordinator_exports_its_groups_lag(data_cluster, zk_connect, tmp_path):
    """Its metrics endpoint: the group's members and lag, with log ends read from the data cluster."""
    import socket
    import urllib.request

    from confluent_kafka import Producer
    from prometheus_client.parser import text_string_to_metric_families

    group, per_partition = f"sa-m-{uuid.uuid4().hex[:6]}", 25
    topic = _create_and_produce(data_cluster.bootstrap, 0)
    # one record per batch: Tansu answers ListOffsets (latest) with its last batch's base offset + 1
    producer = Producer({"bootstrap.servers": data_cluster.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(per_partition * PARTITIONS):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    coordinator = CoordinatorProcess(1003, data_cluster.bootstrap, zk_connect, tmp_path,
                                     **{"metrics.port": port}).wait_listening()
    member = None

    def scrape() -> dict:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
                for family in text_string_to_metric_families(text) for smp in family.samples}

    def serving() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True
        except OSError:
            return False

    try:
        # the coordinator opens its metrics endpoint once its coordination started, after its Kafka listener
        wait_until(serving, timeout=30, message="the coordinator's metrics endpoint")
        member = Consumer(data_cluster.bootstrap, group, topics=[topic], auto_commit=False, session_timeout_ms=6000,
                          coordinator_bootstrap=coordinator.address)
        wait_until(lambda: len(member.assignment()) == PARTITIONS, timeout=60, message="the member's partitions")
        member.commit({(topic, p): 10 for p in range(PARTITIONS)}, timeout=10)

        def lag() -> dict:
            return {labels: v for (name, labels), v in scrape().items() if name == "kafka_consumergroup_lag"}

        want = {(("consumergroup", group), ("partition", str(p)), ("topic", topic)): per_partition - 10
                for p in range(PARTITIONS)}
        wait_until(lambda: lag() == want, timeout=30, message=lambda: f"lag {lag()} (want {want})")
        found = scrape()
        assert found[("kafka_consumergroup_members", (("consumergroup", group),))] == 1
        assert found[("spark_coord_coordinator_members", (("protocol", "coordinator"),))] == 1
        assert found[("spark_coord_coordinator_active", ())] == 1
        from spark_coord.wire.coordinator import REGISTER_VERSION

        assert found[("kafka_network_requestmetrics_requests_total",
                      (("request", "RegisterConsumer"), ("version", str(REGISTER_VERSION))))] >= 1
        assert found[("spark_coord_zookeeper_session_state", (("state", "CONNECTED"),))] == 1
    finally:
        if member is not None:
            member.close()
        coordinator.stop()
