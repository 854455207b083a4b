"""The partition side of transactions (KIP-98) on real broker processes: transactional batches on
Produce open a producer's transaction, WriteTxnMarkers (27) closes it with a COMMIT or ABORT marker,
Fetch with isolation_level=1 stops at the last stable offset and lists the aborted transactions,
ListOffsets answers the LSO for read_committed, a SIGKILL and restart keep all of it, bad markers get
Kafka's error codes and change nothing, confluent-kafka's read_committed consumer reads exactly the
committed records, and the cleaner of a compacted topic removes aborted batches without changing
what read_committed reads.  The transaction coordinator is not built yet: the markers are sent by hand,
as a coordinator would send them."""

from __future__ import annotations

import signal
import uuid

import pytest
from helpers import local_cluster, wait_until

from spark_coord.client.admin import AdminClient
from spark_coord.client.connection import BrokerConnection
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import HEADER_SIZE, parse_header
from spark_coord.wire.registry import ApiKey

FETCH_V = 11  # by topic name; isolation_level, last_stable_offset and aborted_transactions from v4
LIST_OFFSETS_V = 5
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def txn_cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("txn"), 2, "txn-partition",
                       {"zookeeper.session.timeout.ms": 6000, "num.partitions": 1,
                        "log.cleaner.backoff.ms": 100}) as c:
        yield c


def _topic(cluster, partitions: int = 1, leaders: list[int] | None = None, configs: dict | None = None) -> str:
    """A new topic; with ``leaders``, partition i is placed on broker ``leaders[i]``."""
    name = f"txn-{uuid.uuid4().hex[:8]}"
    with ClusterClient(cluster.bootstrap) as c:
        if leaders is None:
            AdminClient(c).create_topic(name, partitions, configs=configs)
        else:
            r = c.request_any(ApiKey.CREATE_TOPICS, {"timeout_ms": 30000, "validate_only": False, "topics": [
                {"name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
                 "assignments": [{"partition_index": i, "broker_ids": [b]} for i, b in enumerate(leaders)]}]})
            assert r["topics"][0]["error_code"] == ErrorCode.NONE, r
        count = len(c.topic(name, wait=10.0).partitions)
    for broker_id in cluster.brokers:  # every broker's view has it (each follows ZooKeeper on its own)
        with _conn(cluster, broker_id) as conn:
            def known() -> bool:
                r = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": name, "partitions": [{"partition_index": p, "timestamp": -1} for p in range(count)]}]},
                    version=LIST_OFFSETS_V)
                return all(p["error_code"] in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                           for p in r["topics"][0]["partitions"])
            wait_until(known, timeout=10, message=f"broker {broker_id} knows {name}")
    return name


def _leader(cluster, topic: str, partition: int = 0) -> int:
    with ClusterClient(cluster.bootstrap) as c:
        c.topic(topic, wait=10.0)
        return c.leader(topic, partition)


def _conn(cluster, broker_id: int) -> BrokerConnection:
    return BrokerConnection(*cluster.brokers[broker_id], timeout=10)


def _producer_id(conn) -> tuple[int, int]:
    r = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert r["error_code"] == ErrorCode.NONE
    return r["producer_id"], r["producer_epoch"]


def _batch(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1, transactional: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    for v in values:
        b.append(v, key=v)
    return b.build()


def _produce(conn, topic: str, records: bytes, partition: int = 0) -> dict:
    r = conn.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]


def _marker(conn, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
            partitions: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    r = conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
         "coordinator_epoch": coordinator_epoch,
         "topics": [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]}]})
    (m,) = r["markers"]
    assert m["producer_id"] == pid
    return {(t["name"], p["partition_index"]): p["error_code"] for t in m["topics"] for p in t["partitions"]}


def _fetch(conn, topic: str, isolation: int, offset: int = 0, partition: int = 0) -> dict:
    r = conn.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": offset, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}, version=FETCH_V)
    p = r["responses"][0]["partitions"][0]
    assert p["error_code"] == ErrorCode.NONE, ErrorCode(p["error_code"]).name
    return p


def _batches(records) -> list[tuple[int, int, bool]]:
    """(base offset, producer id, control) of each batch."""
    data = bytes(records or b"")
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(data):
        h = parse_header(data, pos)
        out.append((h.base_offset, h.producer_id, h.is_control))
        pos += h.size
    return out


def _all_batches(conn, topic: str) -> list[tuple[int, int, bool]]:
    """Every batch of partition 0 (read_uncommitted), fetch after fetch (a read stops at a segment's end)."""
    out: list[tuple[int, int, bool]] = []
    offset = 0
    while True:
        p = _fetch(conn, topic, READ_UNCOMMITTED, offset=offset)
        batches = _batches(p["records"])
        if not batches:
            assert offset >= p["high_watermark"], f"nothing read at {offset} below {p['high_watermark']}"
            return out
        out.extend(b for b in batches if b[0] >= offset)
        offset = max(offset, batches[-1][0] + 1)


def _latest(conn, topic: str, isolation: int, partition: int = 0) -> int:
    r = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]}, version=LIST_OFFSETS_V)
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == ErrorCode.NONE
    return p["offset"]


def _open_transactions(conn, topic: str, partition: int = 0) -> dict[int, int]:
    """DescribeProducers: producer id -> the first offset of its open transaction (-1: none)."""
    r = conn.request(ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == ErrorCode.NONE
    return {a["producer_id"]: a["current_txn_start_offset"] for a in p["active_producers"]}


def _aborted(p: dict) -> list[tuple[int, int]]:
    return sorted((a["producer_id"], a["first_offset"]) for a in p["aborted_transactions"] or [])


def test_lso_fetch_and_list_offsets_follow_transactions_and_markers(txn_cluster):
    topic = _topic(txn_cluster)
    with _conn(txn_cluster, _leader(txn_cluster, topic)) as conn:
        pid_a, epoch_a = _producer_id(conn)
        pid_b, epoch_b = _producer_id(conn)
        assert _produce(conn, topic, _batch([b"plain-0"]))["base_offset"] == 0
        first_a = _produce(conn, topic, _batch([b"a1", b"a2"], pid_a, epoch_a, 0, True))
        assert (first_a["error_code"], first_a["base_offset"]) == (ErrorCode.NONE, 1)
        assert _produce(conn, topic, _batch([b"b1"], pid_b, epoch_b, 0, True))["base_offset"] == 3
        assert _produce(conn, topic, _batch([b"a3"], pid_a, epoch_a, 2, True))["base_offset"] == 4
        # a duplicate transactional batch is answered with its offset and not stored twice
        assert _produce(conn, topic, _batch([b"a3"], pid_a, epoch_a, 2, True))["base_offset"] == 4
        assert _produce(conn, topic, _batch([b"plain-5"]))["base_offset"] == 5

        committed = _fetch(conn, topic, READ_COMMITTED)
        assert committed["last_stable_offset"] == 1 and committed["high_watermark"] == 6
        assert _batches(committed["records"]) == [(0, -1, False)]
        assert _fetch(conn, topic, READ_COMMITTED, offset=1)["records"] in (b"", None)
        uncommitted = _fetch(conn, topic, READ_UNCOMMITTED)
        assert uncommitted["last_stable_offset"] == 1
        assert [o for o, *_ in _batches(uncommitted["records"])] == [0, 1, 3, 4, 5]
        assert (_latest(conn, topic, READ_COMMITTED), _latest(conn, topic, READ_UNCOMMITTED)) == (1, 6)
        assert _open_transactions(conn, topic) == {pid_a: 1, pid_b: 3}

        assert _marker(conn, pid_a, epoch_a, True, 3, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        # A committed: the LSO moves to B's first offset
        assert _fetch(conn, topic, READ_COMMITTED)["last_stable_offset"] == 3
        assert _latest(conn, topic, READ_COMMITTED) == 3
        assert _marker(conn, pid_b, epoch_b, False, 3, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        assert _open_transactions(conn, topic) == {pid_a: -1, pid_b: -1}
        done = _fetch(conn, topic, READ_COMMITTED)
        assert done["last_stable_offset"] == done["high_watermark"] == 8
        assert _batches(done["records"]) == [(0, -1, False), (1, pid_a, False), (3, pid_b, False),
                                             (4, pid_a, False), (5, -1, False), (6, pid_a, True), (7, pid_b, True)]
        assert _aborted(done) == [(pid_b, 3)]
        # a read_committed fetch past the aborted transaction does not list it
        assert _aborted(_fetch(conn, topic, READ_COMMITTED, offset=8)) == []
        assert _fetch(conn, topic, READ_UNCOMMITTED)["aborted_transactions"] is None
        assert _fetch(conn, topic, READ_COMMITTED, offset=8)["aborted_transactions"] == []  # as Kafka answers
        assert _latest(conn, topic, READ_COMMITTED) == 8
        # a marker for a producer with no open transaction here is appended and changes nothing
        assert _marker(conn, pid_a, epoch_a, False, 3, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        assert _aborted(_fetch(conn, topic, READ_COMMITTED)) == [(pid_b, 3)]
        assert _latest(conn, topic, READ_COMMITTED) == 9


def test_bad_markers_get_kafkas_codes_and_change_nothing(txn_cluster):
    topic = _topic(txn_cluster, leaders=[0, 1])
    leaders = {p: _leader(txn_cluster, topic, p) for p in (0, 1)}
    assert leaders == {0: 0, 1: 1}
    here, elsewhere = leaders[0], [1]
    with _conn(txn_cluster, here) as conn:
        pid, epoch = _producer_id(conn)
        assert _produce(conn, topic, _batch([b"t"], pid, epoch, 0, True))["error_code"] == ErrorCode.NONE
        assert _marker(conn, pid, epoch, True, 5, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        assert _produce(conn, topic, _batch([b"u"], pid, epoch, 1, True))["base_offset"] == 2
        end = _fetch(conn, topic, READ_UNCOMMITTED)["high_watermark"]
        # a deposed coordinator's late marker
        assert _marker(conn, pid, epoch, False, 4, {topic: [0]}) == {
            (topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
        # an unknown topic, a partition led elsewhere, one that does not exist
        assert _marker(conn, pid, epoch, False, 5, {"no-such-topic": [0], topic: [elsewhere[0], 99]}) == {
            ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (topic, elsewhere[0]): ErrorCode.NOT_LEADER_OR_FOLLOWER,
            (topic, 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # a producer's newer epoch fences markers of the older one
        assert _produce(conn, topic, _batch([b"v"], pid, epoch + 1, 0, True))["error_code"] == ErrorCode.NONE
        end += 1
        assert _marker(conn, pid, epoch, False, 5, {topic: [0]}) == {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        # a client may not produce control batches
        from spark_coord.records.builder import control_batch

        refused = _produce(conn, topic, control_batch(1, pid, epoch + 1))
        assert refused["error_code"] == ErrorCode.INVALID_RECORD
        after = _fetch(conn, topic, READ_UNCOMMITTED)
        assert after["high_watermark"] == end, "a refused marker appended nothing"
        assert after["last_stable_offset"] == 2, "the open transaction is still open"
        # the connection keeps serving, and the transaction still ends normally
        assert _marker(conn, pid, epoch + 1, False, 5, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        final = _fetch(conn, topic, READ_COMMITTED)
        assert final["last_stable_offset"] == final["high_watermark"] == end + 1
        assert _aborted(final) == [(pid, 2)]
    # other clients are served meanwhile
    with _conn(txn_cluster, leaders[elsewhere[0]]) as other:
        assert _produce(other, topic, _batch([b"other"]), partition=elsewhere[0])["error_code"] == ErrorCode.NONE


def test_sigkill_and_restart_keep_open_transactions_the_lso_and_the_aborted_index(txn_cluster):
    topic = _topic(txn_cluster)
    leader = _leader(txn_cluster, topic)
    with _conn(txn_cluster, leader) as conn:
        aborted_pid, ae = _producer_id(conn)
        open_pid, oe = _producer_id(conn)
        _produce(conn, topic, _batch([b"p"]))  # 0
        assert _produce(conn, topic, _batch([b"x1", b"x2"], aborted_pid, ae, 0, True))["base_offset"] == 1
        assert _produce(conn, topic, _batch([b"o1"], open_pid, oe, 0, True))["base_offset"] == 3
        assert _marker(conn, aborted_pid, ae, False, 7, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}  # 4
        _produce(conn, topic, _batch([b"q"]))  # 5
        before = _fetch(conn, topic, READ_COMMITTED)
    assert before["last_stable_offset"] == 3 and _aborted(before) == [(aborted_pid, 1)]

    assert txn_cluster.kill_broker(leader, signal.SIGKILL) == -signal.SIGKILL
    txn_cluster.start_broker(leader)
    with _conn(txn_cluster, leader) as conn:
        def recovered():
            try:
                return _fetch(conn, topic, READ_COMMITTED)
            except AssertionError:
                return None
        after = wait_until(recovered, timeout=30, message="the restarted leader serves the partition")
        assert after["high_watermark"] == 6 and after["last_stable_offset"] == 3
        assert _batches(after["records"]) == _batches(before["records"])
        assert _aborted(after) == [(aborted_pid, 1)]
        assert _latest(conn, topic, READ_COMMITTED) == 3
        # the coordinator epoch survived too: a late marker is still fenced
        assert _marker(conn, aborted_pid, ae, False, 6, {topic: [0]}) == {
            (topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
        # the open transaction ends after the restart
        assert _marker(conn, open_pid, oe, True, 7, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        final = _fetch(conn, topic, READ_COMMITTED)
        assert final["last_stable_offset"] == final["high_watermark"] == 7
        assert _aborted(final) == [(aborted_pid, 1)]
        # the producer whose last batch before the kill was its marker goes on with its next sequence
        # (a marker has none), and a retry of that batch is answered as a duplicate
        again = _produce(conn, topic, _batch([b"x3"], aborted_pid, ae, 2, True))
        assert (again["error_code"], again["base_offset"]) == (ErrorCode.NONE, 7)
        assert _produce(conn, topic, _batch([b"x3"], aborted_pid, ae, 2, True))["base_offset"] == 7
        assert _fetch(conn, topic, READ_COMMITTED)["last_stable_offset"] == 7


def _read_confluent(cluster, topic: str, isolation: str) -> list[bytes]:
    """Every value of partition 0 as confluent-kafka's consumer reads it at ``isolation``, up to the end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []

        def step():
            msg = consumer.poll(0.5)
            if msg is None:
                return False
            if msg.error():
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                return True
            got.append(msg.value())
            return False
        wait_until(step, timeout=30, interval=0, message=lambda: f"the end of the partition ({got})")
        return got
    finally:
        consumer.close()


def test_the_cleaner_drops_aborted_batches_and_read_committed_sees_the_same(txn_cluster):
    """A compacted topic: an aborted record of a key never supersedes its committed one, the cleaner removes
    the aborted batches and keeps the markers, and read_committed reads the same records before and after."""
    topic = _topic(txn_cluster, configs={"cleanup.policy": "compact", "segment.bytes": "1024",
                                         "min.cleanable.dirty.ratio": "0.01"})
    leader = _leader(txn_cluster, topic)
    pad = b"." * 300
    with _conn(txn_cluster, leader) as conn:
        aborter, ae = _producer_id(conn)
        committer, ce = _producer_id(conn)
        _produce(conn, topic, _batch([b"k" + pad]))  # key = value: "k..." committed
        _produce(conn, topic, _batch([b"k" + pad + b"aborted"], aborter, ae, 0, True))
        aborted_at = _produce(conn, topic, _batch([b"j" + pad], aborter, ae, 1, True))["base_offset"]
        assert _marker(conn, aborter, ae, False, 0, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        _produce(conn, topic, _batch([b"c" + pad], committer, ce, 0, True))
        assert _marker(conn, committer, ce, True, 0, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        for i in range(6):  # roll: everything above sits in closed segments the cleaner may take
            _produce(conn, topic, _batch([b"f%d" % i + pad * 2]))
        before = _read_confluent(txn_cluster, topic, "read_committed")  # the cleaner may have run already
        assert [v[:2] for v in before] == [b"k.", b"c.", b"f0", b"f1", b"f2", b"f3", b"f4", b"f5"]

        wait_until(lambda: aborted_at not in [o for o, *_ in _all_batches(conn, topic)], timeout=30,
                   message="the cleaner removed the aborted batches")
        kept = _all_batches(conn, topic)
        assert (0, -1, False) in kept, "the committed record of k is kept"
        assert sum(1 for *_, control in kept if control) == 2, "both markers are kept"
        assert not [o for o, pid, control in kept if pid == aborter and not control], "no aborted batch is left"
    assert _read_confluent(txn_cluster, topic, "read_committed") == before
    assert _read_confluent(txn_cluster, topic, "read_uncommitted") == before


def test_confluent_read_committed_consumer_reads_exactly_the_committed_records(txn_cluster):
    topic = _topic(txn_cluster)
    with _conn(txn_cluster, _leader(txn_cluster, topic)) as conn:
        committer, ce = _producer_id(conn)
        aborter, ab = _producer_id(conn)
        _produce(conn, topic, _batch([b"plain-1"]))
        _produce(conn, topic, _batch([b"c1", b"c2"], committer, ce, 0, True))
        _produce(conn, topic, _batch([b"a1", b"a2"], aborter, ab, 0, True))
        _produce(conn, topic, _batch([b"c3"], committer, ce, 2, True))
        _produce(conn, topic, _batch([b"a3"], aborter, ab, 2, True))
        assert _marker(conn, aborter, ab, False, 0, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        assert _marker(conn, committer, ce, True, 0, {topic: [0]}) == {(topic, 0): ErrorCode.NONE}
        _produce(conn, topic, _batch([b"plain-2"]))
        end = _fetch(conn, topic, READ_UNCOMMITTED)["high_watermark"]

    assert _read_confluent(txn_cluster, topic, "read_committed") == [b"plain-1", b"c1", b"c2", b"c3", b"plain-2"]
    assert _read_confluent(txn_cluster, topic, "read_uncommitted") == [
        b"plain-1", b"c1", b"c2", b"a1", b"a2", b"c3", b"a3", b"plain-2"]
    assert end == 10


def test_write_txn_markers_needs_cluster_action(broker_factory):
    """An inter-broker request: without ClusterAction on the cluster every partition answers
    CLUSTER_AUTHORIZATION_FAILED, nothing is appended, and the connection keeps being served."""
    b = broker_factory(0, **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with BrokerConnection(*b.address, timeout=10) as conn:
        assert _marker(conn, 1, 0, True, 0, {"t": [0, 1]}) == {
            ("t", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ("t", 1): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        assert conn.request(ApiKey.API_VERSIONS, {})["error_code"] == ErrorCode.NONE
