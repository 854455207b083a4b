"""Our transactional producer (``spark_coord.client.transactions``) against Apache Kafka 4.2 (one KRaft node),
and against our brokers.

Committed transactions are read, aborted ones are not, by confluent-kafka's consumer and by our thin
consumer in read_committed (each partition in the order written), batches built outside the producer
(``send_batches``, as the Spark sink builds them) too; a second producer of the same
transactional id fences the first; ``send_offsets_to_transaction`` commits a group's offsets only
with the transaction (OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT while it is
open); ``end_transaction`` from another client commits a transaction its producer left open, which a
later ``init_transactions`` of the id then leaves committed, or aborts one; EndTxn with a stale epoch or another
producer id gets Kafka's error; a batch Kafka refuses makes the transaction abortable, and after the
abort the producer goes on.  And a consume-transform-produce loop SIGKILLed in the middle of a
transaction and started again writes each input record's output exactly once.

The same tests run against one broker process of ours, whose transaction coordinator serves
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, and whose group coordinator serves
TxnOffsetCommit.

Readers stop at a sentinel: a plain record written to every partition after the transactions are
ended, so everything before it is decided when it is read.  The loop runs as this file run as a
script (``_loop_main``), so it can be SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import local_cluster

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
#: Transactions the tests leave open stay open for the test, however slow the machine.
OPEN_TIMEOUT_MS = 600_000


# ------------------------------------------------------------------------------------------ helpers

def _new_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    name = f"txc-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(name, partitions)
        cc.topic(name, refresh=True, wait=30)
    return name


def _producer(cluster, tid: str | None = None, **kwargs):
    from spark_coord.client.transactions import TransactionalProducer

    kwargs.setdefault("transaction_timeout_ms", OPEN_TIMEOUT_MS)
    return TransactionalProducer(cluster, tid or f"tx-{uuid.uuid4().hex[:8]}", **kwargs)


def _send(producer, topic: str, tag: str, per_partition: int = 3) -> dict[int, list[str]]:
    """``per_partition`` records to each partition; their values by partition, in order."""
    sent: dict[int, list[str]] = {}
    for i in range(per_partition):
        for p in range(PARTITIONS):
            value = f"{tag}-{p}-{i}"
            producer.send(topic, value.encode(), key=f"k{i}".encode(), partition=p)
            sent.setdefault(p, []).append(value)
    return sent


def _merge(*sents: dict[int, list[str]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for s in sents:
        for p, values in s.items():
            out[p] += values
    return out


def _sentinels(bootstrap: str, topic: str) -> str:
    """A plain record ``end-<id>`` written to every partition; returns its value."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    value = f"end-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as cc:
        plain = Producer(cc, acks=-1)
        for p in range(PARTITIONS):
            plain.send(topic, value.encode(), partition=p)
        plain.flush()
    return value


def read_confluent(bootstrap: str, topic: str, isolation: str = "read_committed") -> dict[int, list[str]]:
    """Every value of ``topic`` by partition in offset order, read by confluent-kafka's consumer up to a
    new sentinel (sentinels left out)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    end = _sentinels(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    done: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"confluent {isolation}: sentinels of {sorted(done)} only: {out}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            value = msg.value().decode()
            if value == end:
                done.add(msg.partition())
            elif not value.startswith("end-"):
                out[msg.partition()].append(value)
    finally:
        consumer.close()
    return out


def read_thin(bootstrap: str, topic: str) -> dict[int, list[str]]:
    """The same read by our thin consumer (Kafka 4's group protocol) with isolation_level read_committed."""
    from spark_coord.consumer.consumer import Consumer

    end = _sentinels(bootstrap, topic)
    consumer = Consumer(bootstrap, f"thin-{uuid.uuid4().hex[:6]}", topics=[topic], group_protocol="consumer",
                        auto_offset_reset="smallest", isolation_level="read_committed", auto_commit=False)
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    done: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"thin consumer: sentinels of {sorted(done)} only: {out}"
            for r in consumer.messages(timeout=0.5):
                value = r.value.decode()
                if value == end:
                    done.add(r.partition)
                elif not value.startswith("end-"):
                    out[r.partition].append(value)
    finally:
        consumer.close()
    return out


# ------------------------------------------------------------------------------- without a broker

def test_calls_out_of_order_are_refused_before_anything_is_sent():
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionalProducer, TransactionState

    with ClusterClient("127.0.0.1:9") as cc:  # nothing listens there: nothing may be sent
        with pytest.raises(ValueError, match="transactional_id must be a non-empty string"):
            TransactionalProducer(cc, "")
        with pytest.raises(ValueError, match="transaction_timeout_ms must be positive"):
            TransactionalProducer(cc, "t", transaction_timeout_ms=0)
        producer = TransactionalProducer(cc, "t")
        assert producer.state is TransactionState.UNINITIALIZED
        with pytest.raises(RuntimeError, match="begin_transaction: not in state uninitialized"):
            producer.begin_transaction()
        with pytest.raises(RuntimeError, match="send: no transaction begun"):
            producer.send("t", b"v")
        with pytest.raises(RuntimeError, match="commit_transaction: not in state uninitialized"):
            producer.commit_transaction()
        with pytest.raises(RuntimeError, match="send_batches: no transaction begun"):
            producer.send_batches({})
        with pytest.raises(RuntimeError, match="add_partitions_to_transaction: no transaction begun"):
            producer.add_partitions_to_transaction([("t", 0)])


# ------------------------------------------------------------------------------------ on Kafka 4.2

@pytest.fixture(scope="module", params=["apache_kafka", "our_brokers"])
def kafka(request, tmp_path_factory):
    """The bootstrap of Apache Kafka 4.2 (one KRaft node), or of one broker process of ours."""
    if request.param == "apache_kafka":
        yield request.getfixturevalue("apache_kafka").bootstrap
        return
    zookeeper = request.getfixturevalue("zookeeper")
    with local_cluster(zookeeper, tmp_path_factory.mktemp("txn-client"), 1, "txn-client") as cluster:
        yield cluster.bootstrap


def test_commit_and_abort_read_by_read_committed_consumers(kafka):
    """Committed, aborted (flushed, so its records are in the log), committed: read_committed readers
    see the two committed transactions in order, read_uncommitted sees the aborted one too."""
    from spark_coord.client.metadata import ClusterClient

    topic = _new_topic(kafka)
    with ClusterClient(kafka) as cc:
        producer = _producer(cc)
        pid, epoch = producer.init_transactions()
        assert pid >= 0 and epoch >= 0
        producer.begin_transaction()
        first = _send(producer, topic, "c1")
        producer.commit_transaction()
        assert producer.partitions_in_transaction == set()
        producer.begin_transaction()
        aborted = _send(producer, topic, "a1")
        producer.flush()
        assert producer.partitions_in_transaction == {(topic, p) for p in range(PARTITIONS)}
        producer.abort_transaction()
        producer.begin_transaction()
        second = _send(producer, topic, "c2")
        producer.commit_transaction()
        assert (producer.producer_id, producer.producer_epoch) == (pid, epoch)  # transaction.version 1: no bump
    committed = _merge(first, second)
    assert read_confluent(kafka, topic) == committed
    assert read_thin(kafka, topic) == committed
    assert read_confluent(kafka, topic, "read_uncommitted") == _merge(first, aborted, second)


def test_batches_built_elsewhere_are_sent_in_the_transaction(kafka):
    """send_batches with transactional batches built outside the producer (as the Spark sink builds its
    Arrow rows' batches): their partitions are added to the transaction first; an aborted transaction's
    batches are not read, a committed one's are."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.builder import BatchBuilder

    topic = _new_topic(kafka)

    def batches(producer, tag: str) -> tuple[dict, dict[int, list[str]]]:
        built, sent = {}, {}
        for p in range(PARTITIONS):
            values = [f"{tag}-{p}-{i}" for i in range(3)]
            b = BatchBuilder(producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                             base_sequence=producer.take_sequence((topic, p), len(values)), is_transactional=True)
            for v in values:
                b.append(v.encode())
            built[(topic, p)], sent[p] = (b.build(), len(values)), values
        return built, sent

    with ClusterClient(kafka) as cc:
        producer = _producer(cc)
        producer.init_transactions()
        producer.begin_transaction()
        producer.add_partitions_to_transaction([(topic, 0)])
        assert producer.partitions_in_transaction == {(topic, 0)}
        built, _ = batches(producer, "aborted")
        producer.send_batches(built)
        assert producer.partitions_in_transaction == {(topic, p) for p in range(PARTITIONS)}
        producer.abort_transaction()
        producer.begin_transaction()
        built, sent = batches(producer, "committed")
        producer.send_batches(built)
        producer.commit_transaction()
    assert read_confluent(kafka, topic) == sent


def test_a_second_producer_of_the_id_fences_the_first(kafka):
    """Each init_transactions of the id fences the producers before it: the first, fenced with a batch in
    its open transaction (which the second's init aborted), has its next batch to that partition refused
    (Produce) and raises ProducerFencedError, and again at commit; the second, fenced by a third, is
    refused AddPartitionsToTxn for its first partition.  Only the third producer's records are read."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import ProducerFencedError, TransactionState
    from spark_coord.errors import ErrorCode

    topic = _new_topic(kafka)
    tid = f"fence-{uuid.uuid4().hex[:6]}"
    with ClusterClient(kafka) as cc1, ClusterClient(kafka) as cc2, ClusterClient(kafka) as cc3:
        first = _producer(cc1, tid)
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"zombie-0", partition=0)
        first.flush()
        second = _producer(cc2, tid)
        second.init_transactions()
        assert second.producer_id == first.producer_id and second.producer_epoch > first.producer_epoch
        first.send(topic, b"zombie-1", partition=0)
        with pytest.raises(ProducerFencedError) as produce_fenced:
            first.flush()
        assert produce_fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert first.state is TransactionState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            first.commit_transaction()
        third = _producer(cc3, tid)
        third.init_transactions()
        second.begin_transaction()
        second.send(topic, b"zombie-2", partition=1)
        with pytest.raises(ProducerFencedError) as add_fenced:
            second.flush()
        assert add_fenced.value.code == ErrorCode.PRODUCER_FENCED
        with pytest.raises(ProducerFencedError):
            second.abort_transaction()
        third.begin_transaction()
        sent = _send(third, topic, "third", 2)
        third.commit_transaction()
    assert read_confluent(kafka, topic) == sent
    assert read_thin(kafka, topic) == sent


def test_offsets_sent_to_a_transaction_are_committed_with_it_only(kafka):
    """send_offsets_to_transaction: nothing committed while the transaction is open (require_stable:
    UNSTABLE_OFFSET_COMMIT), nothing after an abort, the offsets after a commit."""
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import committed_offsets_stable
    from spark_coord.errors import ErrorCode, KafkaError

    source, out = _new_topic(kafka), _new_topic(kafka)
    group = f"txg-{uuid.uuid4().hex[:6]}"
    with ClusterClient(kafka) as cc:
        producer = _producer(cc)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(out, b"aborted", partition=0)
        producer.send_offsets_to_transaction({(source, 0): 5, (source, 1): 7}, group)
        parts = [(source, 0), (source, 1)]
        with GroupClient(cc, timeout=1.0) as impatient:
            with pytest.raises(KafkaError) as unstable:
                impatient.fetch_offsets(group, parts, require_stable=True)
            assert unstable.value.code == ErrorCode.UNSTABLE_OFFSET_COMMIT
            # Kafka names pending partitions of a fetch of every partition only when they have a committed offset
            assert impatient.fetch_offsets(group, require_stable=True) == {}
            assert impatient.fetch_offsets(group, parts) == {}  # not require_stable: the committed ones, none
        producer.abort_transaction()
        assert committed_offsets_stable(cc, group, parts) == {}
        producer.begin_transaction()
        producer.send(out, b"committed", partition=0)
        producer.send_offsets_to_transaction({(source, 0): 9, (source, 1): 11}, group)
        producer.commit_transaction()
        assert committed_offsets_stable(cc, group, parts) == {(source, 0): 9, (source, 1): 11}
    assert read_confluent(kafka, out) == {0: ["committed"], 1: []}


def test_end_transaction_from_another_client_commits_what_the_producer_left_open(kafka):
    """The producer flushes and stops; end_transaction on a fresh client commits its records and
    offsets (sent again: Kafka answers the same end as done); a later init_transactions of the id does
    not abort them.  EndTxn with the old epoch or another producer id then gets Kafka's error."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import (
        ProducerFencedError,
        TransactionFatalError,
        committed_offsets_stable,
        end_transaction,
    )
    from spark_coord.errors import ErrorCode

    topic = _new_topic(kafka)
    tid, group = f"eot-{uuid.uuid4().hex[:6]}", f"eog-{uuid.uuid4().hex[:6]}"
    with ClusterClient(kafka) as cc:
        producer = _producer(cc, tid)
        pid, epoch = producer.init_transactions()
        producer.begin_transaction()
        sent = _send(producer, topic, "left-open")
        producer.send_offsets_to_transaction({(topic, 0): 3}, group)
        producer.flush()
        producer.close()
    offsets = {(topic, 0): 3}
    with ClusterClient(kafka) as other:  # another process: only the identity is known
        end_transaction(other, tid, pid, epoch, commit=True)
        end_transaction(other, tid, pid, epoch, commit=True)  # a retry after a lost answer: done already
        assert committed_offsets_stable(other, group, [(topic, 0)]) == offsets
        assert read_confluent(kafka, topic) == sent
        again = _producer(other, tid)
        pid2, epoch2 = again.init_transactions()
        assert (pid2, epoch2) == (pid, epoch + 1)
        assert read_confluent(kafka, topic) == sent
        assert read_thin(kafka, topic) == sent
        assert committed_offsets_stable(other, group, [(topic, 0)]) == offsets
        with pytest.raises(ProducerFencedError) as stale:
            end_transaction(other, tid, pid, epoch, commit=True)
        assert stale.value.code == ErrorCode.PRODUCER_FENCED
        with pytest.raises(TransactionFatalError) as wrong_id:
            end_transaction(other, tid, pid + 1000, epoch2, commit=False)
        assert wrong_id.value.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        with pytest.raises(TransactionFatalError) as nothing_open:
            end_transaction(other, tid, pid2, epoch2, commit=True)
        assert nothing_open.value.code == ErrorCode.INVALID_TXN_STATE


def test_end_transaction_from_another_client_aborts_what_the_producer_left_open(kafka):
    """end_transaction(commit=False) on a fresh client: the left-open transaction's records are in the log
    but no read_committed reader sees them, and its offsets are not committed."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import committed_offsets_stable, end_transaction

    topic = _new_topic(kafka)
    tid, group = f"eoa-{uuid.uuid4().hex[:6]}", f"eoa-{uuid.uuid4().hex[:6]}"
    with ClusterClient(kafka) as cc:
        producer = _producer(cc, tid)
        pid, epoch = producer.init_transactions()
        producer.begin_transaction()
        sent = _send(producer, topic, "left-open")
        producer.send_offsets_to_transaction({(topic, 0): 3}, group)
        producer.flush()
        producer.close()
    with ClusterClient(kafka) as other:
        end_transaction(other, tid, pid, epoch, commit=False)
        assert committed_offsets_stable(other, group, [(topic, 0)]) == {}
    assert read_confluent(kafka, topic) == {p: [] for p in range(PARTITIONS)}
    assert read_thin(kafka, topic) == {p: [] for p in range(PARTITIONS)}
    assert read_confluent(kafka, topic, "read_uncommitted") == sent


def test_a_refused_batch_makes_the_transaction_abortable_and_the_producer_goes_on(kafka):
    """A record over the topic's max.message.bytes: the batch is refused, the transaction only takes
    abort_transaction; after it (a new epoch resets the refused batch's sequences) the next transaction
    commits."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionAbortableError, TransactionState
    from spark_coord.errors import ErrorCode

    topic = _new_topic(kafka)
    with ClusterClient(kafka) as cc:
        producer = _producer(cc)
        pid, epoch = producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"fits", partition=0)
        producer.flush()
        with pytest.raises(TransactionAbortableError) as refused:
            producer.send(topic, b"x" * 2_000_000, partition=0)  # a full batch: sent at once
        assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert producer.state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError, match="must be aborted"):
            producer.commit_transaction()
        producer.abort_transaction()
        assert (producer.producer_id, producer.producer_epoch) == (pid, epoch + 1)
        producer.begin_transaction()
        sent = _send(producer, topic, "after")
        producer.commit_transaction()
    assert read_confluent(kafka, topic) == sent


# ------------------------------------------------------------------- consume-transform-produce loop

PER_TRANSACTION = 5


def _loop_main(bootstrap: str, source: str, out: str, tid: str, group: str, die_after: int) -> None:
    """Read ``source`` from ``group``'s stable committed offsets, and write ``out-<value>`` of each record to
    the same partition of ``out`` in transactions of PER_TRANSACTION records, each committing the
    group's next offsets with it (a group without members: generation -1).  With ``die_after`` N, the
    N+1-th transaction is flushed, ``MIDTXN`` printed, and the process waits to be killed."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionalProducer, committed_offsets_stable
    from spark_coord.records.reader import iter_records

    with ClusterClient(bootstrap) as cc:
        producer = TransactionalProducer(cc, tid, transaction_timeout_ms=OPEN_TIMEOUT_MS)
        producer.init_transactions()
        committed = committed_offsets_stable(cc, group, [(source, p) for p in range(PARTITIONS)])
        positions = {p: committed.get((source, p), 0) for p in range(PARTITIONS)}
        ends = AdminClient(cc).list_offsets(source, None, LATEST)
        done = 0
        while any(positions[p] < ends[p] for p in positions):
            batch = []
            for p in positions:
                leader = cc.leader(source, p)
                for pd in fetch(cc.connection(leader), {(source, p): positions[p]}, max_wait_ms=100):
                    assert not pd.error, pd
                    batch += [(p, r) for r in iter_records(pd.records or b"", min_offset=positions[p])]
            batch = batch[:PER_TRANSACTION]
            producer.begin_transaction()
            for p, r in batch:
                producer.send(out, b"out-" + r.value, key=r.key, partition=p)
                positions[p] = r.offset + 1
            producer.send_offsets_to_transaction({(source, p): o for p, o in positions.items()}, group)
            if done == die_after:
                producer.flush()
                print("MIDTXN", flush=True)
                sys.stdin.read()  # killed here
            producer.commit_transaction()
            done += 1
        print("DONE", done, flush=True)


def _loop(bootstrap: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")]
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.Popen([sys.executable, __file__, bootstrap, *args], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_consume_transform_produce_loop_killed_mid_transaction_writes_each_output_once(kafka):
    """40 plain records in the source; the loop is SIGKILLed with its third transaction flushed but
    open; a fresh loop of the same transactional id (its init_transactions aborts that transaction)
    goes on from the group's committed offsets.  read_committed: each output exactly once, in order;
    read_uncommitted: the killed transaction's records too."""
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer
    from spark_coord.client.transactions import committed_offsets_stable

    source, out = _new_topic(kafka), _new_topic(kafka)
    tid, group = f"ctp-{uuid.uuid4().hex[:6]}", f"ctp-{uuid.uuid4().hex[:6]}"
    inputs = {p: [f"in-{p}-{i}" for i in range(20)] for p in range(PARTITIONS)}
    with ClusterClient(kafka) as cc:
        plain = Producer(cc, acks=-1)
        for p, values in inputs.items():
            for v in values:
                plain.send(source, v.encode(), partition=p)
        plain.flush()
    killed = _loop(kafka, source, out, tid, group, "2")
    try:
        assert killed.stdout.readline().strip() == "MIDTXN"
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(30)
    with ClusterClient(kafka) as cc, GroupClient(cc) as groups:  # the killed loop committed two transactions of 5
        assert sum(c.offset for c in groups.fetch_offsets(group).values()) == 2 * PER_TRANSACTION
    fresh = _loop(kafka, source, out, tid, group, "-1")
    try:
        line = fresh.stdout.readline().split()
        assert line[:1] == ["DONE"] and int(line[1]) == 40 // PER_TRANSACTION - 2, line
        assert fresh.wait(30) == 0
    finally:
        if fresh.poll() is None:
            fresh.kill()
            fresh.wait(10)
    expected = {p: [f"out-{v}" for v in values] for p, values in inputs.items()}
    assert read_confluent(kafka, out) == expected
    assert read_thin(kafka, out) == expected
    with ClusterClient(kafka) as cc:
        assert committed_offsets_stable(cc, group, [(source, p) for p in range(PARTITIONS)]) == \
            {(source, p): 20 for p in range(PARTITIONS)}
    uncommitted = read_confluent(kafka, out, "read_uncommitted")
    assert sum(map(len, uncommitted.values())) == 40 + PER_TRANSACTION  # with the killed transaction's


if __name__ == "__main__":
    _loop_main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
