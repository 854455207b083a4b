"""The transaction coordinator (KIP-98) on three real broker processes, driven by real Kafka clients.

confluent-kafka's transactional Producer commits and aborts transactions over partitions led by all
three brokers (so most markers cross the wire from the coordinator to another leader); confluent-kafka's
read_committed Consumer and our thin consumer read exactly the committed records, in order, and
read_uncommitted every data record.  A second producer with the same transactional id fences the first
(its open transaction aborted, its commit fatal).  A transaction left open past its
``transaction.timeout.ms`` is aborted by the coordinator, and the last stable offset moves on.  The
broker holding the id's shard is SIGKILLed mid-transaction: the next holder completes it, and its
records are read once.  Bad requests, sent raw, get Kafka's codes, and the brokers keep serving.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from helpers import wait_until
from txn_cluster import conn as _conn
from txn_cluster import describe as _describe
from txn_cluster import holder as _holder
from txn_cluster import topic as new_topic
from txn_cluster import txn_cluster
from txn_cluster import wait_balanced as _wait_balanced

from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

pytestmark = pytest.mark.slow

PARTITIONS = 3
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with txn_cluster(zookeeper, tmp_path_factory, "transactions", {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}) as c:
        yield c


def _topic(cluster) -> str:
    return new_topic(cluster, "txn")


def _producer(cluster, tid: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})


def _produce(p: Producer, topic: str, values: list[bytes]) -> None:
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=v, partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _read_all(cluster, topic: str, isolation: str) -> dict[int, list[bytes]]:
    """Every record confluent-kafka reads with ``isolation``, by partition, up to each partition's end
    (its position past the high watermark's last marker for read_committed: the LSO reached it)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        c.assign(tps)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

        def done() -> bool:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen[msg.partition()].append(msg.value())
            positions = c.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            return all(tp.offset >= ends[tp.partition] for tp in positions)

        wait_until(done, timeout=30, interval=0, message=lambda: f"{isolation} read of {topic} to {ends}: {seen}")
        return seen
    finally:
        c.close()


def _thin_read(cluster, topic: str, count: int) -> list[bytes]:
    from spark_coord.consumer.consumer import Consumer as ThinConsumer

    consumer = ThinConsumer(cluster.bootstrap, f"thin-{uuid.uuid4().hex[:6]}", topics=[topic],
                            auto_offset_reset="smallest", isolation_level="read_committed")
    try:
        seen: list = []
        wait_until(lambda: seen.extend(consumer.messages(timeout=0.2)) or len(seen) >= count, 60,
                   message=lambda: f"{len(seen)} of {count} records")
        return [r.value for r in seen]
    finally:
        consumer.close()


def _by_partition(values: list[bytes]) -> dict[int, list[bytes]]:
    return {p: values[p::PARTITIONS] for p in range(PARTITIONS)}


def _lso_is_log_end(cluster, topic: str) -> bool:
    """ListOffsets read_committed answers the log end of every partition (no transaction open)."""
    for p in range(PARTITIONS):
        with _conn(cluster, sorted(cluster.brokers)[p]) as conn:
            ends = []
            for isolation in (0, 1):
                r = conn.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "isolation_level": isolation, "topics": [
                    {"name": topic, "partitions": [{"partition_index": p, "timestamp": -1}]}]}, version=5)
                ends.append(r["topics"][0]["partitions"][0]["offset"])
            if ends[0] != ends[1]:
                return False
    return True


def test_commits_and_aborts_are_read_exactly_by_read_committed(cluster):
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    p = _producer(cluster, tid)
    p.init_transactions(30)
    first = [b"c1-%d" % i for i in range(9)]
    aborted = [b"a-%d" % i for i in range(9)]
    second = [b"c2-%d" % i for i in range(9)]
    p.begin_transaction()
    _produce(p, topic, first)
    p.commit_transaction(30)
    p.begin_transaction()
    _produce(p, topic, aborted)
    p.abort_transaction(30)
    p.begin_transaction()
    _produce(p, topic, second)
    p.commit_transaction(30)

    state = wait_until(lambda: (s := _describe(cluster, tid))["transaction_state"] == "CompleteCommit" and s,
                       timeout=15, message="the last commit completed")
    assert state["error_code"] == ErrorCode.NONE and state["topics"] == [] and state["producer_epoch"] == 0
    committed = {q: _by_partition(first)[q] + _by_partition(second)[q] for q in range(PARTITIONS)}
    assert _read_all(cluster, topic, READ_COMMITTED) == committed
    everything = {q: _by_partition(first)[q] + _by_partition(aborted)[q] + _by_partition(second)[q]
                  for q in range(PARTITIONS)}
    assert _read_all(cluster, topic, READ_UNCOMMITTED) == everything
    thin = _thin_read(cluster, topic, len(first) + len(second))
    assert sorted(thin) == sorted(first + second)
    for q in range(PARTITIONS):  # in order within each partition
        assert [v for v in thin if v in committed[q]] == committed[q]
    # every broker lists the id it holds (ListTransactions), and only there
    listed = {}
    for broker_id in cluster.brokers:
        with _conn(cluster, broker_id) as conn:
            r = conn.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": ["CompleteCommit", "Bogus"],
                                                        "producer_id_filters": []}, version=1)
            assert r["error_code"] == ErrorCode.NONE and r["unknown_state_filters"] == ["Bogus"]
            listed.update({s["transactional_id"]: broker_id for s in r["transaction_states"]})
    assert listed.get(tid) == _holder(cluster, tid)


def test_a_second_producer_fences_the_first(cluster):
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    zombie = _producer(cluster, tid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    _produce(zombie, topic, [b"zombie-%d" % i for i in range(6)])
    assert _describe(cluster, tid)["transaction_state"] == "Ongoing"

    fresh = _producer(cluster, tid)
    fresh.init_transactions(30)  # aborts the zombie's open transaction first (CONCURRENT_TRANSACTIONS, retried)
    fresh.begin_transaction()
    _produce(fresh, topic, [b"fresh-%d" % i for i in range(6)])
    fresh.commit_transaction(30)

    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(10)
    error = e.value.args[0]
    assert error.fatal(), error
    assert error.code() in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, KafkaError._FENCED), error
    state = _describe(cluster, tid)
    assert state["producer_epoch"] == 2  # 0 for the zombie, 1 its abort, 2 the fresh producer
    assert sorted(v for vs in _read_all(cluster, topic, READ_COMMITTED).values() for v in vs) == \
        sorted(b"fresh-%d" % i for i in range(6))


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(cluster):
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    p = _producer(cluster, tid, **{"transaction.timeout.ms": 3000})
    p.init_transactions(30)
    p.begin_transaction()
    _produce(p, topic, [b"late-%d" % i for i in range(6)])
    assert not _lso_is_log_end(cluster, topic)  # open: the LSO holds back
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteAbort", timeout=20,
               message="the coordinator aborted the timed-out transaction")
    assert _describe(cluster, tid)["producer_epoch"] == 1  # bumped: the producer is fenced
    wait_until(lambda: _lso_is_log_end(cluster, topic), timeout=10, message="the LSO at the log end")
    assert _read_all(cluster, topic, READ_COMMITTED) == {q: [] for q in range(PARTITIONS)}
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def _init(conn, tid: str, timeout_ms: int = 60000, version: int = 4) -> dict:
    return conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout_ms": timeout_ms},
                        version=version)


def _end(conn, tid: str, pid: int, epoch: int, commit: bool = True, version: int = 3) -> int:
    return conn.request(ApiKey.END_TXN, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                         "committed": commit}, version=version)["error_code"]


def _add(conn, tid: str, pid: int, epoch: int, topic: str, version: int = 3) -> list[int]:
    r = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [0, 1]}]}, version=version)
    return [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]]


def test_bad_requests_get_kafkas_codes_and_the_brokers_keep_serving(cluster):
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    other = next(b for b in cluster.brokers if b != holder)
    with _conn(cluster, holder) as conn, _conn(cluster, other) as elsewhere:
        assert _init(elsewhere, tid)["error_code"] == ErrorCode.NOT_COORDINATOR
        assert _init(conn, tid, timeout_ms=120001)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert _init(conn, "")["error_code"] == ErrorCode.INVALID_REQUEST
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _end(conn, tid, pid, epoch) == ErrorCode.INVALID_TXN_STATE  # no AddPartitionsToTxn
        assert _end(conn, tid, pid + 1000, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _end(conn, f"{tid}-unknown", pid, epoch) in (ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                                            ErrorCode.NOT_COORDINATOR)
        assert _add(conn, tid, pid, epoch, "no-such-topic") == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
        assert _add(conn, tid, pid, epoch, topic) == [ErrorCode.NONE] * 2
        assert _end(elsewhere, tid, pid, epoch) == ErrorCode.NOT_COORDINATOR
        r2 = _init(conn, tid)  # a new producer: the open transaction is aborted first
        assert r2["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
        r2 = wait_until(lambda: (r := _init(conn, tid))["error_code"] == ErrorCode.NONE and r, timeout=10,
                        message="InitProducerId once the abort completed")
        assert (r2["producer_id"], r2["producer_epoch"]) == (pid, epoch + 2)
        assert _end(conn, tid, pid, epoch) == ErrorCode.PRODUCER_FENCED  # the stale epoch
        assert _end(conn, tid, pid, epoch, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH  # an older client
        assert _add(conn, tid, pid, epoch, topic, version=1) == [ErrorCode.INVALID_PRODUCER_EPOCH] * 2
        # KIP-360: resuming another producer's epoch is fenced
        r3 = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                                    "producer_id": pid, "producer_epoch": epoch}, version=4)
        assert r3["error_code"] == ErrorCode.PRODUCER_FENCED
        # still serving: the current producer's transaction, an idempotent producer, a group key
        assert _add(conn, tid, pid, epoch + 2, topic) == [ErrorCode.NONE] * 2
        assert _end(conn, tid, pid, epoch + 2, commit=False) == ErrorCode.NONE
        assert _init(elsewhere, None)["error_code"] == ErrorCode.NONE
        assert conn.request(ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}, version=3)["error_code"] == 0
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteAbort", timeout=10,
               message="the abort completed")


def test_the_next_holder_completes_a_transaction_whose_coordinator_was_killed(cluster):
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    p = _producer(cluster, tid)
    p.init_transactions(30)
    p.begin_transaction()
    values = [b"k-%d" % i for i in range(9)]
    _produce(p, topic, values)
    cluster.kill_broker(holder)
    started = time.monotonic()
    try:
        # once the killed broker's ZooKeeper session expires another broker wins the id's shard and
        # loads the transaction Ongoing; the client's EndTxn reaches it and is answered once
        # PrepareCommit is written, but the marker of the killed broker's partition waits for it
        new_holder = wait_until(lambda: (h := _holder(cluster, tid)) != holder and (h,), timeout=30,
                                message="another broker holds the id's shard")[0]
        p.commit_transaction(60)
        moved_s = time.monotonic() - started
        state = _describe(cluster, tid)
        assert state["transaction_state"] == "PrepareCommit", state
        assert state["topics"] == [{"topic": topic, "partitions": list(range(PARTITIONS))}], state
    finally:
        cluster.start_broker(holder)
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteCommit", timeout=30,
               message="the commit completed by the next holder")
    assert _read_all(cluster, topic, READ_COMMITTED) == _by_partition(values)  # each record once
    assert _read_all(cluster, topic, READ_UNCOMMITTED) == _by_partition(values)
    print(f"coordinator {holder} killed; {new_holder} committed {moved_s:.1f} s later")
    _wait_balanced(cluster)  # the restarted broker takes its share back before the next test


def _kp_producer(cluster, tid: str, **extra):
    """kafka-python's transactional KafkaProducer."""
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=tid, max_block_ms=30000,
                         linger_ms=5, **extra)


def _kp_send(p, topic: str, values: list[bytes]) -> None:
    """``values`` round-robin over the partitions, each acknowledged (its offset known)."""
    futures = [p.send(topic, value=v, key=v, partition=i % PARTITIONS) for i, v in enumerate(values)]
    p.flush(timeout=30)
    for f in futures:
        f.get(timeout=1)


def _kp_read(cluster, topic: str, isolation: str, settle_polls: int = 0) -> dict[int, list[bytes]]:
    """Every record kafka-python's KafkaConsumer reads with ``isolation``, by partition, up to the ends
    it is told (``end_offsets``: the last stable offset for read_committed, the high watermark for
    read_uncommitted); then ``settle_polls`` more polls of 0.3 s, whose records are kept too (a reader
    stopped at the LSO must read nothing past it)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      group_id=None, consumer_timeout_ms=1000)
    try:
        tps = [KTopicPartition(topic, q) for q in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        seen: dict[int, list[bytes]] = {q: [] for q in range(PARTITIONS)}

        def poll(timeout_ms: int) -> None:
            for tp, records in c.poll(timeout_ms=timeout_ms).items():
                seen[tp.partition].extend(r.value for r in records)

        wait_until(lambda: poll(200) or all(c.position(tp) >= ends[tp] for tp in tps), timeout=30, interval=0,
                   message=lambda: f"kafka-python's {isolation} read of {topic} to {ends}: {seen}")
        for _ in range(settle_polls):
            poll(300)
        assert all(c.position(tp) == ends[tp] for tp in tps) or not settle_polls, (ends, seen)
        return seen
    finally:
        c.close()


def test_kafka_python_commits_and_aborts_are_read_exactly_by_its_read_committed_consumer(cluster):
    """kafka-python's producer commits, aborts and commits; its read_committed KafkaConsumer reads the
    committed records in offset order, and while a fourth transaction is open stops at the last stable
    offset (nothing of the open transaction, nothing past it, even polled again); read_uncommitted reads
    every data record (no marker surfaces as a record).  Once the fourth commits it is read too."""
    topic = _topic(cluster)
    tid = f"tx-kp-{uuid.uuid4().hex[:6]}"
    first, aborted, second, last = ([b"kp-%s-%d" % (tag, i) for i in range(6)] for tag in (b"c1", b"a", b"c2", b"c3"))
    p = _kp_producer(cluster, tid)
    try:
        p.init_transactions()
        p.begin_transaction()
        _kp_send(p, topic, first)
        p.commit_transaction()
        p.begin_transaction()
        _kp_send(p, topic, aborted)
        p.abort_transaction()
        p.begin_transaction()
        _kp_send(p, topic, second)
        p.commit_transaction()
        p.begin_transaction()
        _kp_send(p, topic, last)  # left open while read
        assert _describe(cluster, tid)["transaction_state"] == "Ongoing"
        committed = {q: _by_partition(first)[q] + _by_partition(second)[q] for q in range(PARTITIONS)}
        assert _kp_read(cluster, topic, READ_COMMITTED, settle_polls=3) == committed
        assert not _lso_is_log_end(cluster, topic)
        everything = {q: _by_partition(first)[q] + _by_partition(aborted)[q] + _by_partition(second)[q] +
                      _by_partition(last)[q] for q in range(PARTITIONS)}
        assert _kp_read(cluster, topic, READ_UNCOMMITTED) == everything
        p.commit_transaction()
    finally:
        p.close(timeout=5)
    wait_until(lambda: _lso_is_log_end(cluster, topic), timeout=15, message="the LSO at the log end")
    assert _kp_read(cluster, topic, READ_COMMITTED) == {
        q: _by_partition(first)[q] + _by_partition(second)[q] + _by_partition(last)[q] for q in range(PARTITIONS)}
    state = _describe(cluster, tid)
    assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteCommit", 0), state


def test_kafka_python_zombie_is_fenced_by_a_second_producer(cluster):
    """A second kafka-python producer of the same transactional id aborts the first one's open
    transaction (InitProducerId bumps the epoch); the zombie's commit then raises ProducerFencedError,
    as against Apache Kafka, and only the second producer's records are read committed."""
    from kafka.errors import ProducerFencedError

    topic = _topic(cluster)
    tid = f"tx-kp-{uuid.uuid4().hex[:6]}"
    zombie, fresh = _kp_producer(cluster, tid), None
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        _kp_send(zombie, topic, [b"zombie-%d" % i for i in range(6)])
        fresh = _kp_producer(cluster, tid)
        fresh.init_transactions()
        fresh.begin_transaction()
        _kp_send(fresh, topic, [b"fresh-%d" % i for i in range(6)])
        fresh.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction()
    finally:
        zombie.close(timeout=5)
        if fresh is not None:
            fresh.close(timeout=5)
    assert _describe(cluster, tid)["producer_epoch"] == 2  # 0 the zombie, 1 its abort, 2 the fresh producer
    assert _kp_read(cluster, topic, READ_COMMITTED) == _by_partition([b"fresh-%d" % i for i in range(6)])


def test_kafka_python_transaction_past_its_timeout_is_aborted(cluster):
    """A kafka-python transaction left open past its transaction_timeout_ms is aborted by the coordinator
    (epoch bumped); the producer's commit then raises ProducerFencedError (EndTxn at the old epoch), and
    nothing of it is read committed."""
    from kafka.errors import ProducerFencedError

    topic = _topic(cluster)
    tid = f"tx-kp-{uuid.uuid4().hex[:6]}"
    p = _kp_producer(cluster, tid, transaction_timeout_ms=3000)
    try:
        p.init_transactions()
        p.begin_transaction()
        _kp_send(p, topic, [b"late-%d" % i for i in range(6)])
        assert not _lso_is_log_end(cluster, topic)
        wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteAbort", timeout=20,
                   message="the coordinator aborted the timed-out transaction")
        assert _describe(cluster, tid)["producer_epoch"] == 1
        with pytest.raises(ProducerFencedError):
            p.commit_transaction()
    finally:
        p.close(timeout=5)
    wait_until(lambda: _lso_is_log_end(cluster, topic), timeout=10, message="the LSO at the log end")
    assert _kp_read(cluster, topic, READ_COMMITTED) == {q: [] for q in range(PARTITIONS)}


def test_kafka_python_commit_completes_through_the_next_holder_when_the_coordinator_is_killed(cluster):
    """The id's coordinator SIGKILLed with kafka-python's transaction open: once another broker holds the
    id's shard (it loaded the transaction Ongoing from ZooKeeper) and the killed broker is back, the
    producer's commit_transaction() (in a thread, with a deadline) completes: its EndTxn reaches the
    broker it knew, is answered NOT_COORDINATOR, and is sent to the holder FindCoordinator names.  Each
    record is read once.

    Not killed *during* commit_transaction(): kafka-python 3.0 loses its EndTxn when the retry finds the
    coordinator it knew refusing connections (the sender's ``await_ready`` raises with the target node
    already chosen, so the request is neither sent nor queued again) and commit_transaction() waits for
    ever; Apache Kafka names the dead broker for as long (until its session expires), so the client hangs
    there too.  The restart before the commit keeps the client off that path."""
    import threading

    from kafka.errors import KafkaError as KafkaPythonError

    topic = _topic(cluster)
    tid = f"tx-kp-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    values = [b"kk-%d" % i for i in range(9)]
    p = _kp_producer(cluster, tid)
    outcome: list = []

    def commit() -> None:
        try:
            p.commit_transaction()
            outcome.append("committed")
        except KafkaPythonError as e:  # the test asserts what it was
            outcome.append(e)

    try:
        p.init_transactions()
        p.begin_transaction()
        _kp_send(p, topic, values)
        cluster.kill_broker(holder)
        started = time.monotonic()
        try:
            new_holder = wait_until(lambda: (h := _holder(cluster, tid)) != holder and (h,), timeout=30,
                                    message="another broker holds the id's shard")[0]
            moved_s = time.monotonic() - started
            assert _describe(cluster, tid)["transaction_state"] == "Ongoing"  # loaded, still open
        finally:
            cluster.start_broker(holder)
        committing = threading.Thread(target=commit, daemon=True)
        committing.start()
        committing.join(60)
        assert outcome == ["committed"], outcome
    finally:
        p.close(timeout=5)
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteCommit", timeout=30,
               message="the commit completed")
    assert _kp_read(cluster, topic, READ_COMMITTED) == _by_partition(values)  # each record once
    assert _kp_read(cluster, topic, READ_UNCOMMITTED) == _by_partition(values)
    print(f"coordinator {holder} killed with kafka-python's transaction open; {new_holder} held the id "
          f"{moved_s:.1f} s later")
    _wait_balanced(cluster)


@pytest.mark.parametrize("kill", ["at_once", "once_prepared"])
def test_kafka_python_transaction_whose_coordinator_is_killed_during_its_commit_is_all_or_nothing(cluster, kill):
    """The id's coordinator SIGKILLed right after kafka-python's commit_transaction() starts (in a thread;
    ``once_prepared``: as soon as DescribeTransactions shows the commit decided): whether the EndTxn reached
    it (PrepareCommit written: the next holder sends the markers) or not (the transaction loaded Ongoing), a
    new producer of the id (init_transactions) finds the transaction ended (the commit completed, or the
    open transaction aborted), and read_committed reads all of its records once or none, never part; all of
    them when the client saw its commit succeed.  kafka-python's own commit may hang there (its sender drops
    the EndTxn it retries when the coordinator it knew refuses connections): the thread is left to the
    daemon."""
    import threading

    from kafka.errors import KafkaError as KafkaPythonError

    topic = _topic(cluster)
    tid = f"tx-kp-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    values = [b"kd-%d" % i for i in range(9)]
    p = _kp_producer(cluster, tid, request_timeout_ms=6000)
    outcome: list = []

    def commit() -> None:
        try:
            p.commit_transaction()
            outcome.append("committed")
        except KafkaPythonError as e:
            outcome.append(e)

    p.init_transactions()
    p.begin_transaction()
    _kp_send(p, topic, values)
    committing = threading.Thread(target=commit, daemon=True)
    committing.start()
    if kill == "once_prepared":
        wait_until(lambda: _describe(cluster, tid)["transaction_state"] in ("PrepareCommit", "CompleteCommit"),
                   timeout=15, interval=0.01, message="the commit decided")
    cluster.kill_broker(holder)
    try:
        wait_until(lambda: _holder(cluster, tid) != holder, timeout=30, message="another broker holds the id")
    finally:
        cluster.start_broker(holder)
    fresh = _kp_producer(cluster, tid)
    try:
        fresh.init_transactions()  # waits for a commit the next holder completes, or aborts an open one
    finally:
        fresh.close(timeout=5)
        if outcome:  # the zombie's sender is done with; a hung commit is left to its daemon thread
            p.close(timeout=5)
    state = _describe(cluster, tid)
    assert state["transaction_state"] == "Empty" and state["topics"] == [], state  # the fresh producer's, none open
    wait_until(lambda: _lso_is_log_end(cluster, topic), timeout=15, message="the LSO at the log end")
    read = _kp_read(cluster, topic, READ_COMMITTED)
    assert read in (_by_partition(values), {q: [] for q in range(PARTITIONS)}), read  # all, once, or none
    assert _kp_read(cluster, topic, READ_UNCOMMITTED) == _by_partition(values)
    assert outcome in ([], ["committed"]) or isinstance(outcome[0], KafkaPythonError), outcome
    if outcome == ["committed"] or kill == "once_prepared":
        assert read == _by_partition(values)  # a commit decided (or seen by the client) is never undone
    ended = "committed" if read == _by_partition(values) else "aborted"
    print(f"coordinator {holder} killed during kafka-python's commit: the transaction {ended}; "
          f"the client saw {outcome or 'nothing (hung)'}")
    _wait_balanced(cluster)


def test_a_new_holder_sends_the_markers_a_killed_coordinator_left_pending(cluster):
    """EndTxn answered (PrepareCommit durable) while a partition's leader is down, then the coordinator
    SIGKILLed before that marker is written: the shard's next holder loads the transaction in
    PrepareCommit, sends every marker again once the leaders are back, and writes CompleteCommit;
    read_committed reads each record once."""
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    leader = next(b for b in sorted(cluster.brokers) if b != holder)  # leads partition sorted(ids).index(leader)
    p = _producer(cluster, tid)
    p.init_transactions(30)
    p.begin_transaction()
    values = [b"m-%d" % i for i in range(9)]
    _produce(p, topic, values)
    cluster.kill_broker(leader)
    try:
        p.commit_transaction(30)  # answered once PrepareCommit is written; one marker cannot be
        state = _describe(cluster, tid)
        assert state["transaction_state"] == "PrepareCommit", state
        cluster.kill_broker(holder)
        try:
            survivor = wait_until(lambda: (h := _holder(cluster, tid)) not in (holder, leader) and (h,), timeout=30,
                                  message="the last live broker holds the id's shard")[0]
            assert _describe(cluster, tid)["transaction_state"] == "PrepareCommit"  # loaded, still waiting
        finally:
            cluster.start_broker(holder)
    finally:
        cluster.start_broker(leader)
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteCommit", timeout=30,
               message="the markers sent again and the commit completed")
    assert _read_all(cluster, topic, READ_COMMITTED) == _by_partition(values)
    assert _read_all(cluster, topic, READ_UNCOMMITTED) == _by_partition(values)
    print(f"coordinator {holder} killed with a marker for broker {leader} pending; {survivor} loaded it")
    _wait_balanced(cluster)


@pytest.mark.parametrize("tid", ["a/b", "..", ".", "ünïcode tx%2F"])
def test_transactional_ids_znodes_cannot_name_as_they_are(cluster, tid):
    """Ids with a slash, ZooKeeper's reserved names or non-ASCII are kept (percent-encoded node names)."""
    with _conn(cluster, _holder(cluster, tid)) as conn:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE and r["producer_epoch"] == 0
        assert _init(conn, tid)["producer_epoch"] == 1
        (state,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})["transaction_states"]
        assert (state["transactional_id"], state["transaction_state"], state["producer_id"]) == \
            (tid, "Empty", r["producer_id"]), state


def _txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    from spark_coord.records.builder import BatchBuilder

    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    b.append(value, key=value)
    return b.build()


def _produce_raw(cluster, topic: str, partition: int, batch: bytes, tid: str | None) -> int:
    """One Produce (v9) of ``batch`` to ``partition`` at its leader: the partition's error code."""
    with _conn(cluster, sorted(cluster.brokers)[partition]) as conn:
        r = conn.request(ApiKey.PRODUCE, {"transactional_id": tid, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}, version=9)
    return r["responses"][0]["partition_responses"][0]["error_code"]


def test_produce_checks_a_transactional_batch_with_the_coordinator(cluster):
    """Kafka 4's Produce check (KIP-890 part 1): a transactional batch for a partition not added to its
    producer's open transaction is refused INVALID_TXN_STATE, asked of the coordinator in process
    (the partition led by the id's coordinator) and over the wire (led by another broker); an unknown id
    INVALID_PRODUCER_ID_MAPPING, a fenced epoch INVALID_PRODUCER_EPOCH; once a marker closed the
    transaction the same epoch's next batch is asked about again and refused.  Nothing refused is
    appended, and no transaction is left open."""
    topic = _topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    leaders = sorted(cluster.brokers)
    local = leaders.index(holder)  # the partition the coordinator leads
    added, remote = [p for p in range(PARTITIONS) if p != local]
    with _conn(cluster, holder) as conn:
        r = _init(conn, tid)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        r = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [added]}]},
            version=3)
        assert r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
    seq = {p: 0 for p in range(PARTITIONS)}

    def produce(p: int, value: bytes, producer_tid: str | None = tid, at_epoch: int | None = None) -> int:
        code = _produce_raw(cluster, topic, p, _txn_batch(pid, epoch if at_epoch is None else at_epoch, seq[p],
                                                          value), producer_tid)
        if code == ErrorCode.NONE:
            seq[p] += 1
        return code

    assert produce(local, b"not-added-local") == ErrorCode.INVALID_TXN_STATE  # asked in process
    assert produce(remote, b"not-added-remote") == ErrorCode.INVALID_TXN_STATE  # asked over the wire
    assert produce(added, b"in-1") == ErrorCode.NONE
    assert produce(added, b"in-2") == ErrorCode.NONE  # the open transaction here: not asked again
    assert produce(remote, b"other-id", producer_tid=f"{tid}-unknown") in (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.NOT_ENOUGH_REPLICAS)  # the unknown id's shard may be loading
    assert produce(remote, b"other-epoch", at_epoch=epoch + 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    with _conn(cluster, holder) as conn:
        assert _end(conn, tid, pid, epoch) == ErrorCode.NONE
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteCommit", timeout=15,
               message="the commit completed")
    # the marker closed the transaction on ``added``: the same epoch's next batch is checked again
    assert produce(added, b"after-commit") == ErrorCode.INVALID_TXN_STATE
    assert _lso_is_log_end(cluster, topic)  # nothing refused left a transaction open
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for p in range(PARTITIONS):  # a plain record each, so every partition has one to read up to
        plain.produce(topic, value=b"end", partition=p)
    assert plain.flush(30) == 0
    expected = {local: [b"end"], remote: [b"end"], added: [b"in-1", b"in-2", b"end"]}
    assert _read_all(cluster, topic, READ_UNCOMMITTED) == expected
    assert _read_all(cluster, topic, READ_COMMITTED) == expected
