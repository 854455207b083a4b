"""Offsets in transactions (KIP-98, KIP-447) on three real broker processes: AddOffsetsToTxn at the
transaction coordinator, TxnOffsetCommit at the group's coordinator, the group's marker.

A group joins a producer's transaction as a partition does (Kafka adds the group's
``__consumer_offsets`` partition; here the group id is kept in the transaction's znode), and its
offsets (TxnOffsetCommit) are held pending for the producer id under
``/consumers/<group>/pending/<producer id>``: OffsetFetch does not show them, with require_stable
the partitions answer UNSTABLE_OFFSET_COMMIT; EndTxn's marker for the group's shard makes them the
group's offsets (commit) or drops them (abort).  Driven by our TransactionalProducer and by
confluent-kafka's ``send_offsets_to_transaction``.  The holder of the group's shard SIGKILLed with
offsets pending: the next holder loads them and the commit lands.  Requests sent raw get Kafka's
codes (NOT_COORDINATOR elsewhere, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or INVALID_PRODUCER_EPOCH
for a stale epoch, UNKNOWN_MEMBER_ID, UNKNOWN_TOPIC_OR_PARTITION) and the brokers keep serving.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from helpers import wait_until
from txn_cluster import conn as _conn
from txn_cluster import describe as _describe
from txn_cluster import holder as _holder
from txn_cluster import txn_cluster
from txn_cluster import wait_balanced as _wait_balanced

from spark_coord.coordinator.txn.store import id_path
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

pytestmark = pytest.mark.slow

PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with txn_cluster(zookeeper, tmp_path_factory, "txn-offsets") as c:
        c.topic = _topic(c)
        yield c


def _topic(cluster, partitions: int = PARTITIONS) -> str:
    """A new topic every broker's coordinators know (TxnOffsetCommit checks its partitions exist)."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    name = f"txo-{uuid.uuid4().hex[:8]}"
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(name, partitions)
        cc.topic(name, refresh=True, wait=30)
    for broker_id in cluster.brokers:
        with _conn(cluster, broker_id) as conn:
            wait_until(lambda: all(t["error_code"] == ErrorCode.NONE and len(t["partitions"]) == partitions
                                   for t in conn.request(ApiKey.METADATA, {"topics": [{"name": name}]})["topics"]),
                       timeout=30, message=f"broker {broker_id} knows {name}")
    return name


def _znode(cluster, tid: str) -> dict:
    from spark_coord.zk.client import close, connect

    zk = connect(cluster.zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        data, _ = zk.get(id_path(tid))
        return json.loads(data)
    finally:
        close(zk)


def _init(conn, tid: str | None, version: int = 4) -> dict:
    return conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout_ms": 60000},
                        version=version)


def _add_offsets(conn, tid: str, pid: int, epoch: int, group: str, version: int = 3) -> int:
    return conn.request(ApiKey.ADD_OFFSETS_TO_TXN, {"transactional_id": tid, "producer_id": pid,
                                                    "producer_epoch": epoch, "group_id": group},
                        version=version)["error_code"]


def _end(conn, tid: str, pid: int, epoch: int, commit: bool = True) -> int:
    return conn.request(ApiKey.END_TXN, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                         "committed": commit}, version=3)["error_code"]


def test_api_versions_advertises_offsets_in_transactions(cluster):
    for broker_id in cluster.brokers:
        with _conn(cluster, broker_id) as conn:
            assert conn.broker_versions[ApiKey.ADD_OFFSETS_TO_TXN] == (0, 4)
            assert conn.broker_versions[ApiKey.TXN_OFFSET_COMMIT] == (0, 4)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_groups_join_the_transaction_durably_and_the_commit_clears_them(cluster, version):
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    with _conn(cluster, holder) as conn:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(conn, tid, pid, epoch, "g-1", version) == ErrorCode.NONE
        state = _describe(cluster, tid)
        assert state["transaction_state"] == "Ongoing" and state["producer_id"] == pid, state
        node = _znode(cluster, tid)
        assert (node["state"], node["groups"], node["partitions"]) == ("Ongoing", ["g-1"], []), node
        started = node["startMs"]
        assert _add_offsets(conn, tid, pid, epoch, "g-1", version) == ErrorCode.NONE  # in already: no write
        assert _znode(cluster, tid) == node
        assert _add_offsets(conn, tid, pid, epoch, "g-0", version) == ErrorCode.NONE
        node = _znode(cluster, tid)
        assert (node["groups"], node["startMs"]) == (["g-0", "g-1"], started), node
        assert _end(conn, tid, pid, epoch) == ErrorCode.NONE
    wait_until(lambda: _znode(cluster, tid)["state"] == "CompleteCommit", timeout=10, message="the commit completed")
    assert _znode(cluster, tid)["groups"] == []


def test_bad_requests_get_kafkas_codes_and_the_brokers_keep_serving(cluster):
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    other = next(b for b in cluster.brokers if b != holder)
    with _conn(cluster, holder) as conn, _conn(cluster, other) as elsewhere:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(elsewhere, tid, pid, epoch, "g") == ErrorCode.NOT_COORDINATOR
        assert _add_offsets(conn, "", pid, epoch, "g") == ErrorCode.INVALID_REQUEST
        assert _add_offsets(conn, tid, pid + 1000, epoch, "g") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _add_offsets(conn, tid, pid, epoch + 1, "g") == ErrorCode.PRODUCER_FENCED
        assert _add_offsets(conn, tid, pid, epoch, "g") == ErrorCode.NONE
        # a new producer of the id: the open transaction is aborted with the epoch bumped
        assert _init(conn, tid)["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
        r2 = wait_until(lambda: (r := _init(conn, tid))["error_code"] == ErrorCode.NONE and r, timeout=10,
                        message="InitProducerId once the abort completed")
        assert (r2["producer_id"], r2["producer_epoch"]) == (pid, epoch + 2)
        assert _znode(cluster, tid)["groups"] == []  # the new producer starts with none
        assert _add_offsets(conn, tid, pid, epoch, "g") == ErrorCode.PRODUCER_FENCED
        for old in (0, 1):  # clients older than KIP-588 are told INVALID_PRODUCER_EPOCH
            assert _add_offsets(conn, tid, pid, epoch, "g", version=old) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _add_offsets(conn, tid, pid, epoch, "g", version=2) == ErrorCode.PRODUCER_FENCED
        # still serving: the current producer's transaction, another id, a group key
        assert _add_offsets(conn, tid, pid, epoch + 2, "g") == ErrorCode.NONE
        assert _end(conn, tid, pid, epoch + 2, commit=False) == ErrorCode.NONE
        assert _init(elsewhere, None)["error_code"] == ErrorCode.NONE
        assert conn.request(ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}, version=3)["error_code"] == 0
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteAbort", timeout=10,
               message="the abort completed")


def test_the_next_holder_loads_the_groups_of_an_open_transaction(cluster):
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    with _conn(cluster, holder) as conn:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(conn, tid, pid, epoch, "g-killed") == ErrorCode.NONE
    cluster.kill_broker(holder)
    started = time.monotonic()
    try:
        new_holder = wait_until(lambda: (h := _holder(cluster, tid)) != holder and (h,), timeout=30,
                                message="another broker holds the id's shard")[0]
        moved_s = time.monotonic() - started
        assert _describe(cluster, tid)["transaction_state"] == "Ongoing"
        with _conn(cluster, new_holder) as conn:
            # the group is in the loaded transaction: adding it again writes nothing
            node = _znode(cluster, tid)
            assert node["groups"] == ["g-killed"], node
            assert _add_offsets(conn, tid, pid, epoch, "g-killed") == ErrorCode.NONE
            assert _znode(cluster, tid) == node
            assert _end(conn, tid, pid, epoch) == ErrorCode.NONE
        wait_until(lambda: _znode(cluster, tid)["state"] == "CompleteCommit", timeout=10,
                   message="the commit completed by the next holder")
    finally:
        cluster.start_broker(holder)
    print(f"coordinator {holder} killed; {new_holder} served the id {moved_s:.1f} s later")
    _wait_balanced(cluster)


# ---------------------------------------------------------------------------------------- offsets in the transaction
def _group_holder(cluster, group: str) -> int:
    def ask():
        for broker_id in cluster.brokers:
            if cluster.procs[broker_id].poll() is not None:
                continue
            with _conn(cluster, broker_id) as conn:
                r = conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0}, version=3)
            if r["error_code"] == ErrorCode.NONE and cluster.procs[r["node_id"]].poll() is None:
                return (r["node_id"],)
            return None
        return None
    return wait_until(ask, timeout=30, message=f"a coordinator for group {group}")[0]


def _fetch(cluster, group: str, topic: str, stable: bool = False, version: int = 8) -> tuple[int, dict]:
    """OffsetFetch of ``topic``'s partitions at the group's coordinator: (the group's error code,
    {partition: (committed offset, error code)})."""
    body = {"require_stable": stable}
    wanted = [{"name": topic, "partition_indexes": list(range(PARTITIONS))}]
    if version >= 8:
        body["groups"] = [{"group_id": group, "topics": wanted}]
    else:
        body.update(group_id=group, topics=wanted)
    with _conn(cluster, _group_holder(cluster, group)) as conn:
        r = conn.request(ApiKey.OFFSET_FETCH, body, version=version)
    one = r["groups"][0] if version >= 8 else r
    parts = {p["partition_index"]: (p["committed_offset"], p["error_code"]) for t in one["topics"]
             for p in t["partitions"]}
    return one["error_code"], parts


def _committed(cluster, group: str, topic: str) -> dict[int, int]:
    code, parts = _fetch(cluster, group, topic)
    assert code == ErrorCode.NONE
    return {p: o for p, (o, _) in parts.items() if o >= 0}


def _stable(cluster, group: str, topic: str) -> dict[int, int] | None:
    """The committed offsets by require_stable, None while a partition is UNSTABLE_OFFSET_COMMIT."""
    code, parts = _fetch(cluster, group, topic, stable=True)
    assert code == ErrorCode.NONE
    if any(c == ErrorCode.UNSTABLE_OFFSET_COMMIT for _, c in parts.values()):
        return None
    assert all(c == ErrorCode.NONE for _, c in parts.values()), parts
    return {p: o for p, (o, _) in parts.items() if o >= 0}


def _pending_nodes(cluster, group: str) -> list[str]:
    from spark_coord.coordinator.storage.zk_store import pending_root
    from spark_coord.zk.client import close, connect

    zk = connect(cluster.zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        return zk.get_children(pending_root(group)) if zk.exists(pending_root(group)) else []
    finally:
        close(zk)


def test_our_clients_offsets_are_committed_with_the_transaction_only(cluster):
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionalProducer

    topic, group = cluster.topic, f"txg-{uuid.uuid4().hex[:6]}"
    with ClusterClient(cluster.bootstrap) as cc:
        producer = TransactionalProducer(cc, f"txo-{uuid.uuid4().hex[:6]}")
        pid, _ = producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"first", partition=0)
        producer.send_offsets_to_transaction({(topic, 0): 5, (topic, 1): 7}, group)
        assert _pending_nodes(cluster, group) == [str(pid)]
        assert _committed(cluster, group, topic) == {}  # pending: not the group's yet
        for version in (7, 8):  # at the partition; the group's error stays NONE
            code, parts = _fetch(cluster, group, topic, stable=True, version=version)
            assert code == ErrorCode.NONE
            assert parts == {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
                             2: (-1, ErrorCode.NONE)}, (version, parts)
        producer.commit_transaction()
        offsets = wait_until(lambda: _stable(cluster, group, topic), timeout=10, message="the commit's offsets")
        assert offsets == {0: 5, 1: 7}
        assert _committed(cluster, group, topic) == {0: 5, 1: 7} and _pending_nodes(cluster, group) == []

        producer.begin_transaction()
        producer.send(topic, b"second", partition=0)
        producer.send_offsets_to_transaction({(topic, 0): 9, (topic, 2): 3}, group)
        assert _stable(cluster, group, topic) is None
        producer.abort_transaction()
        offsets = wait_until(lambda: _stable(cluster, group, topic), timeout=10, message="the abort completed")
        assert offsets == {0: 5, 1: 7}  # never the aborted ones
        assert _pending_nodes(cluster, group) == []
        producer.close()


def test_confluent_kafkas_send_offsets_to_transaction(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, group = cluster.topic, f"txg-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"txo-{uuid.uuid4().hex[:6]}"})
    try:
        metadata = consumer.consumer_group_metadata()  # no member: generation -1
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"v", partition=1)
        producer.send_offsets_to_transaction([TopicPartition(topic, 1, 42)], metadata, 30)
        assert _stable(cluster, group, topic) is None and _committed(cluster, group, topic) == {}
        producer.abort_transaction(30)
        wait_until(lambda: _stable(cluster, group, topic) == {}, timeout=10, message="the abort completed")
        producer.begin_transaction()
        producer.produce(topic, b"v", partition=1)
        producer.send_offsets_to_transaction([TopicPartition(topic, 1, 43), TopicPartition(topic, 2, 4)], metadata, 30)
        producer.commit_transaction(30)
        assert wait_until(lambda: _stable(cluster, group, topic), timeout=10, message="committed") == {1: 43, 2: 4}
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == {1: 43, 2: 4}
    finally:
        consumer.close()
        producer.flush(10)


def test_kafka_pythons_send_offsets_to_transaction_from_a_group_member(cluster):
    """kafka-python's consume-transform-produce: a KafkaConsumer of the group (a classic member) and a
    transactional KafkaProducer passing the consumer's ``group_metadata()`` (its generation and member id,
    TxnOffsetCommit v3, KIP-447).  Aborted offsets are never the group's; committed ones are, read back by
    the consumer's ``committed()`` and by OffsetFetch with require_stable."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group = cluster.topic, f"txg-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"txo-{uuid.uuid4().hex[:6]}",
                             max_block_ms=30000)
    try:
        def assigned() -> bool:
            consumer.poll(timeout_ms=200)  # joins the group; records read are not what is tested
            return len(consumer.assignment()) == PARTITIONS

        wait_until(assigned, timeout=30, message="the consumer assigned every partition")
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 1 and metadata.member_id, metadata
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted", partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(9, "", -1) for tp in tps}, metadata)
        assert _stable(cluster, group, topic) is None  # pending: UNSTABLE_OFFSET_COMMIT
        producer.abort_transaction()
        wait_until(lambda: _stable(cluster, group, topic) == {}, timeout=10, message="the abort completed")
        producer.begin_transaction()
        producer.send(topic, b"committed", partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(7 + tp.partition, "", -1) for tp in tps},
                                             consumer.group_metadata())
        producer.commit_transaction()
        assert wait_until(lambda: _stable(cluster, group, topic), timeout=10, message="committed") == {
            p: 7 + p for p in range(PARTITIONS)}
        assert {tp.partition: consumer.committed(tp) for tp in tps} == {p: 7 + p for p in range(PARTITIONS)}
    finally:
        producer.close(timeout=5)
        consumer.close()


def test_the_next_holder_of_the_groups_shard_commits_its_pending_offsets(cluster):
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionalProducer

    topic, tid = cluster.topic, f"txo-{uuid.uuid4().hex[:6]}"
    txn_holder = _holder(cluster, tid)
    group = next(g for g in (f"txg-{uuid.uuid4().hex[:6]}" for _ in range(100))
                 if _group_holder(cluster, g) != txn_holder)  # the killed broker is not the id's coordinator
    holder = _group_holder(cluster, group)
    with ClusterClient(cluster.bootstrap) as cc:
        producer = TransactionalProducer(cc, tid)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(topic, 1): 11}, group)  # no records: no leader to wait for
        cluster.kill_broker(holder)
        started = time.monotonic()
        try:
            new_holder = wait_until(lambda: (h := _group_holder(cluster, group)) != holder and (h,), timeout=30,
                                    message="another broker holds the group's shard")[0]
            assert _stable(cluster, group, topic) is None  # the next holder loaded the pending offsets
            producer.commit_transaction()
            offsets = wait_until(lambda: _stable(cluster, group, topic), timeout=20, message="the commit's offsets")
            moved_s = time.monotonic() - started
            assert offsets == {1: 11}
            assert _pending_nodes(cluster, group) == []
            producer.close()
        finally:
            cluster.start_broker(holder)
    print(f"group coordinator {holder} killed; {new_holder} committed the pending offsets {moved_s:.1f} s later")
    _wait_balanced(cluster)


def _txn_commit(conn, tid: str, group: str, pid: int, epoch: int, offsets: dict, version: int = 3,
                generation: int = -1, member_id: str = "") -> dict:
    r = conn.request(ApiKey.TXN_OFFSET_COMMIT, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": member_id, "group_instance_id": None,
        "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}]}
                   for (t, p), o in offsets.items()]},
        version=version)
    return {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}


def test_txn_offset_commit_bad_requests_get_kafkas_codes(cluster):
    topic, group, tid = cluster.topic, f"txg-{uuid.uuid4().hex[:6]}", f"txo-{uuid.uuid4().hex[:6]}"
    gholder = _group_holder(cluster, group)
    other = next(b for b in cluster.brokers if b != gholder)
    with _conn(cluster, _holder(cluster, tid)) as tconn, _conn(cluster, gholder) as gconn, \
            _conn(cluster, other) as elsewhere:
        r = _init(tconn, tid)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(tconn, tid, pid, epoch, group) == ErrorCode.NONE
        assert _txn_commit(elsewhere, tid, group, pid, epoch, {(topic, 0): 1}) == {
            (topic, 0): ErrorCode.NOT_COORDINATOR}
        assert _txn_commit(gconn, tid, group, pid, epoch, {(topic, 0): 1, (topic, 99): 1, ("no-such", 0): 1}) == {
            (topic, 0): ErrorCode.NONE, (topic, 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert _txn_commit(gconn, tid, group, pid, epoch, {(topic, 1): 2}, generation=3, member_id="nobody") == {
            (topic, 1): ErrorCode.UNKNOWN_MEMBER_ID}
        assert _txn_commit(gconn, tid, group, pid, epoch, {(topic, 2): 3}, version=0) == {(topic, 2): ErrorCode.NONE}
        assert _stable(cluster, group, topic) is None
        # a new producer of the id aborts the open transaction with the epoch bumped: its marker reaches the
        # group, and the old epoch's offsets are refused from then on
        assert _init(tconn, tid)["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
        wait_until(lambda: _init(tconn, tid)["error_code"] == ErrorCode.NONE, timeout=10, message="the fence")
        wait_until(lambda: _stable(cluster, group, topic) == {}, timeout=10, message="the old offsets aborted")
        assert _txn_commit(gconn, tid, group, pid, epoch, {(topic, 0): 4}) == {
            (topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert _pending_nodes(cluster, group) == []
        # still serving: a plain commit of the group, and the current producer
        r = gconn.request(ApiKey.OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": -1,
                                                 "member_id": "", "topics": [{"name": topic, "partitions": [
                                                     {"partition_index": 0, "committed_offset": 8}]}]}, version=8)
        assert r["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        assert _committed(cluster, group, topic) == {0: 8}


def _member_uuid() -> str:
    """A member id as Kafka 4's clients make one (a random UUID, base64url without padding)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def test_txn_offset_commit_to_groups_of_other_protocols_gets_kafkas_codes(cluster):
    """TxnOffsetCommit to a share group, to a KIP-848 consumer group and to a group nobody knows, answered
    as Kafka 4.2's ``validateTransactionalOffsetCommit`` answers them: a share group is no consumer group
    (GROUP_ID_NOT_FOUND, with or without a member); a KIP-848 member in its member epoch is taken, one
    past it ILLEGAL_GENERATION (not STALE_MEMBER_EPOCH: the transaction's producer aborts rather than
    retries), an unknown member UNKNOWN_MEMBER_ID, generation -1 with no member taken; a generation sent
    to a group nobody knows ILLEGAL_GENERATION, generation -1 taken.  Nothing refused is pending, and the
    abort leaves no pending node."""
    topic, tid = cluster.topic, f"txo-{uuid.uuid4().hex[:6]}"
    share, modern, unknown = (f"{kind}-{uuid.uuid4().hex[:6]}" for kind in ("txs", "txc", "txu"))
    share_member, modern_member = _member_uuid(), _member_uuid()
    with _conn(cluster, _group_holder(cluster, share)) as sconn:
        r = sconn.request(ApiKey.SHARE_GROUP_HEARTBEAT, {"group_id": share, "member_id": share_member,
                                                         "member_epoch": 0, "rack_id": None,
                                                         "subscribed_topic_names": [topic]})
        assert r["error_code"] == ErrorCode.NONE, r
    with _conn(cluster, _group_holder(cluster, modern)) as mconn:
        r = mconn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
            "group_id": modern, "member_id": modern_member, "member_epoch": 0, "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [topic], "topic_partitions": []}, version=0)
        assert r["error_code"] == ErrorCode.NONE, r
        member_epoch = r["member_epoch"]
    assert member_epoch >= 1
    with _conn(cluster, _holder(cluster, tid)) as tconn:
        r = _init(tconn, tid)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        for group in (share, modern, unknown):
            assert _add_offsets(tconn, tid, pid, epoch, group) == ErrorCode.NONE

    def commit(group: str, partition: int, **member) -> int:
        with _conn(cluster, _group_holder(cluster, group)) as gconn:
            return _txn_commit(gconn, tid, group, pid, epoch, {(topic, partition): 5}, **member)[(topic, partition)]

    assert commit(share, 0) == ErrorCode.GROUP_ID_NOT_FOUND
    assert commit(share, 0, generation=1, member_id=share_member) == ErrorCode.GROUP_ID_NOT_FOUND
    assert commit(modern, 0, generation=member_epoch + 5, member_id=modern_member) == ErrorCode.ILLEGAL_GENERATION
    assert commit(modern, 0, generation=member_epoch, member_id="nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(modern, 0, generation=member_epoch, member_id=modern_member) == ErrorCode.NONE
    assert commit(modern, 1) == ErrorCode.NONE  # generation -1, no member: a producer outside the group
    assert commit(unknown, 0, generation=3, member_id="someone") == ErrorCode.ILLEGAL_GENERATION
    assert commit(unknown, 0) == ErrorCode.NONE
    assert _pending_nodes(cluster, share) == []
    assert len(_pending_nodes(cluster, modern)) == 1 and len(_pending_nodes(cluster, unknown)) == 1
    with _conn(cluster, _holder(cluster, tid)) as tconn:
        assert _end(tconn, tid, pid, epoch, commit=False) == ErrorCode.NONE
    wait_until(lambda: _pending_nodes(cluster, modern) == [] and _pending_nodes(cluster, unknown) == [],
               timeout=15, message="the abort's markers dropped the pending offsets")
    assert _committed(cluster, modern, topic) == {} and _committed(cluster, unknown, topic) == {}
    with _conn(cluster, _group_holder(cluster, modern)) as mconn:  # the member leaves
        mconn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {"group_id": modern, "member_id": modern_member,
                                                        "member_epoch": -1}, version=0)
    with _conn(cluster, _group_holder(cluster, share)) as sconn:
        sconn.request(ApiKey.SHARE_GROUP_HEARTBEAT, {"group_id": share, "member_id": share_member,
                                                     "member_epoch": -1, "rack_id": None,
                                                     "subscribed_topic_names": None})
