"""Kafka's Java transactional producer and read_committed consumer (Apache Kafka 4.2's clients,
``tests/peers/java/TxnDriver.java``) on three broker processes of ours.

Against our brokers (``transaction.version=1``) Kafka's Java producer sends AddPartitionsToTxn itself
and keeps one producer epoch for its transactions.  Each topic has partition i led by broker i, so
most markers cross the wire.  What each client saw is asserted, record by record and exception by
exception:

- commits, aborts and plain records interleaved: Kafka's KafkaConsumer with read_committed reads the
  committed and plain records, in offset order, and with a transaction open stops at the last stable
  offset (its ``endOffsets``) with every record before the open transaction and none after;
  read_uncommitted reads every data record;
- a zombie: a second producer of the transactional id fences the first (its open transaction is
  aborted by the second's initTransactions); the first's next send fails and its commit throws
  InvalidProducerEpochException (Produce answered INVALID_PRODUCER_EPOCH, abortable in Kafka's
  client), its commit throws that again and its abort ProducerFencedException (EndTxn answered
  PRODUCER_FENCED); read_committed never sees the zombie's records.  The same steps on Apache
  Kafka 4.2 (one node, where the producer takes transaction version 2) throw the same exceptions;
- a transaction past its ``transaction.timeout.ms`` (3 s) is aborted by the coordinator; the
  producer's commit then throws (ProducerFencedException: the abort bumped the epoch), and the last
  stable offset moves past it;
- the broker holding the id's coordinator shard is SIGKILLed once commitTransaction() is called: the
  client finds the next holder and its commit completes; once the killed broker (which leads one of
  the transaction's partitions) is back, read_committed reads every record of it exactly once.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import wait_until
from txn_cluster import describe as _state
from txn_cluster import holder as _holder
from txn_cluster import topic as new_topic
from txn_cluster import txn_cluster
from txn_cluster import wait_balanced as _wait_balanced

pytestmark = pytest.mark.slow

PARTITIONS = 3
DRIVER = Path(__file__).resolve().parents[1] / "peers" / "java" / "TxnDriver.java"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with txn_cluster(zookeeper, tmp_path_factory, "java_txn", {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}) as c:
        yield c


@pytest.fixture(scope="module")
def java(cluster, kafka_jars, tmp_path_factory):
    driver = JavaDriver(cluster.bootstrap, kafka_jars, tmp_path_factory.mktemp("java-driver"))
    yield driver
    driver.close()


class JavaDriver:
    """``TxnDriver.java`` in a process of its own: ``do`` sends a command and returns its JSON answer."""

    def __init__(self, bootstrap: str, jars: Path, workdir: Path) -> None:
        from peers.apache_kafka import JVM_FLAGS, TOOL_HEAP, TOOLS_LOG4J, java_binary, java_env

        self.stderr = workdir / "driver.stderr"
        self._err = open(self.stderr, "wb")
        self.proc = subprocess.Popen(
            [java_binary(), *TOOL_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}", "-cp", f"{jars}/*",
             str(DRIVER), bootstrap], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
            env=java_env())
        self._lines: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._read, name="java-txn-driver", daemon=True).start()
        self.until(lambda said: said.get("event") == "ready", 120)

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def until(self, matches, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                said = self._lines.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer from the Java clients in {timeout} s: {self._tail()}") from None
            if said is None:
                raise AssertionError(f"the Java clients ended ({self.proc.wait(10)}): {self._tail()}")
            if matches(said):
                return said

    def tell(self, *words) -> None:
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()

    def answer(self, command: str, timeout: float = 120) -> dict:
        return self.until(lambda said: said.get("cmd") == command, timeout)

    def do(self, *words, timeout: float = 120) -> dict:
        self.tell(*words)
        return self.answer(words[0], timeout)

    def ok(self, *words, timeout: float = 120) -> dict:
        said = self.do(*words, timeout=timeout)
        assert said["ok"], (words, said, self._tail())
        return said

    def read(self, topic: str, isolation: str) -> tuple[dict[int, list[str]], dict[int, int]]:
        """What a KafkaConsumer with ``isolation`` read of ``topic`` up to its end offsets: values by
        partition (checked in offset order), and the end offsets."""
        said = self.ok("read", topic, PARTITIONS, isolation)
        values: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        for partition, offset, key, value in said["records"]:
            assert key == value
            values[partition].append(value)
            offsets[partition].append(offset)
        assert all(o == sorted(set(o)) for o in offsets.values()), offsets
        return values, {int(p): end for p, end in said["ends"].items()}

    def _tail(self) -> str:
        self._err.flush()
        return self.stderr.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._err.close()


# ------------------------------------------------------------------------------------------ helpers

def _topic(cluster) -> str:
    return new_topic(cluster, "jtx")


def _wait_state(cluster, tid: str, wanted: str, timeout: float = 30) -> dict:
    return wait_until(lambda: (s := _state(cluster, tid))["transaction_state"] == wanted and s, timeout=timeout,
                      message=f"{tid} in {wanted}")


def _values(tag: str, partition: int, n: int) -> list[str]:
    return [f"{tag}-p{partition}-{i}" for i in range(n)]


def _send_all(java: JavaDriver, producer: str, topic: str, tag: str, n: int = 2) -> dict[int, list[str]]:
    """``n`` records of ``tag`` to each partition through ``producer``, each acknowledged."""
    sent = {}
    for p in range(PARTITIONS):
        sent[p] = _values(tag, p, n)
        java.ok("send", producer, topic, p, *sent[p])
    return sent


def _merged(*parts: dict[int, list[str]]) -> dict[int, list[str]]:
    return {p: [v for part in parts for v in part.get(p, [])] for p in range(PARTITIONS)}


# ------------------------------------------------------------------------------------------- tests

def test_java_read_committed_reads_exactly_the_committed_records_and_stops_at_the_lso(cluster, java):
    topic = _topic(cluster)
    tid_a, tid_b = f"ja-{uuid.uuid4().hex[:6]}", f"jb-{uuid.uuid4().hex[:6]}"
    java.ok("plain", "plain")
    java.ok("producer", "a", tid_a, 60000)
    java.ok("producer", "b", tid_b, 60000)
    written = [_send_all(java, "plain", topic, "plain0")]
    kinds = ["plain"]
    for i, outcome in enumerate(("commit", "abort", "commit")):
        java.ok("begin", "a")
        written.append(_send_all(java, "a", topic, f"{outcome}{i}"))
        kinds.append(outcome)
        written.append(_send_all(java, "plain", topic, f"plain{i + 1}", 1))
        kinds.append("plain")
        java.ok(outcome, "a")
    # two producers interleaved: a aborts, b commits, a plain record between
    java.ok("begin", "a")
    java.ok("begin", "b")
    for tag, producer, kind in (("ia1", "a", "abort"), ("ib1", "b", "commit"), ("ia2", "a", "abort"),
                                ("plain9", "plain", "plain"), ("ib2", "b", "commit")):
        written.append(_send_all(java, producer, topic, tag, 1))
        kinds.append(kind)
    java.ok("abort", "a")
    java.ok("commit", "b")
    committed = _merged(*(w for w, k in zip(written, kinds, strict=True) if k != "abort"))
    everything = _merged(*written)
    wait_until(lambda: java.read(topic, "read_committed")[0] == committed, 30,
               message="read_committed reads every committed and plain record")
    values, ends = java.read(topic, "read_uncommitted")
    assert values == everything
    stable = dict(ends)

    # a transaction left open, plain records after it: read_committed stops at its first offset
    java.ok("begin", "a")
    opened = _send_all(java, "a", topic, "open")
    after = _send_all(java, "plain", topic, "after")
    values, lso = java.read(topic, "read_committed")
    assert values == committed and lso == stable, (lso, stable)
    values, hw = java.read(topic, "read_uncommitted")
    assert values == _merged(everything, opened, after)
    assert all(hw[p] == lso[p] + 4 for p in range(PARTITIONS)), (hw, lso)  # 2 open, 2 plain each
    java.ok("commit", "a")
    wait_until(lambda: java.read(topic, "read_committed")[0] == _merged(committed, opened, after), 30,
               message="the open transaction's records once committed")
    assert _state(cluster, tid_a)["transaction_state"] == "CompleteCommit"
    for name in ("a", "b", "plain"):
        java.ok("close", name)


def test_a_second_java_producer_fences_the_first(cluster, java):
    topic = _topic(cluster)
    tid = f"jz-{uuid.uuid4().hex[:6]}"
    java.ok("producer", "zombie", tid, 60000)
    java.ok("begin", "zombie")
    _send_all(java, "zombie", topic, "zombie")
    assert _state(cluster, tid)["transaction_state"] == "Ongoing"
    before = _state(cluster, tid)["producer_epoch"]

    java.ok("producer", "fresh", tid, 60000)  # initTransactions aborts the zombie's transaction first
    state = _state(cluster, tid)
    assert state["producer_epoch"] == before + 2, state  # the abort's bump, then the fresh producer's
    java.ok("begin", "fresh")
    fresh = _send_all(java, "fresh", topic, "fresh")
    java.ok("commit", "fresh")

    # the zombie still believes its transaction open: its next record and its commit are refused
    late = java.do("send", "zombie", topic, 0, "zombie-late")
    assert not late["ok"] and late["offsets"] == [-1], late
    assert late["error"] == "InvalidProducerEpochException", late  # Produce answered INVALID_PRODUCER_EPOCH
    # that error is abortable in Kafka's client (KIP-588): commitTransaction() throws it again, and the
    # abort's EndTxn is answered PRODUCER_FENCED, which is fatal
    commit = java.do("commit", "zombie")
    assert not commit["ok"] and commit["error"] == "InvalidProducerEpochException", commit
    abort = java.do("abort", "zombie")
    assert not abort["ok"] and abort["error"] == "ProducerFencedException", abort
    print(f"zombie's send: {late['chain']}; its commit: {commit['chain']}; its abort: {abort['chain']}")

    values, _ = java.read(topic, "read_committed")
    assert values == fresh
    uncommitted, _ = java.read(topic, "read_uncommitted")
    assert uncommitted == _merged(_merged(*({p: _values("zombie", p, 2)} for p in range(PARTITIONS))), fresh)
    assert _state(cluster, tid)["producer_epoch"] == before + 2  # the zombie moved nothing
    java.ok("close", "fresh")
    java.ok("close", "zombie")


def test_a_java_transaction_past_its_timeout_is_aborted(cluster, java):
    topic = _topic(cluster)
    tid = f"jt-{uuid.uuid4().hex[:6]}"
    java.ok("producer", "slow", tid, 3000)
    java.ok("plain", "plain")
    java.ok("begin", "slow")
    late = _send_all(java, "slow", topic, "late")
    after = _send_all(java, "plain", topic, "after", 1)
    values, lso = java.read(topic, "read_committed")
    assert values == {p: [] for p in range(PARTITIONS)} and lso == {p: 0 for p in range(PARTITIONS)}
    state = _wait_state(cluster, tid, "CompleteAbort", 30)
    assert state["topics"] == []
    commit = java.do("commit", "slow")
    assert not commit["ok"] and commit["error"] == "ProducerFencedException", commit  # EndTxn: PRODUCER_FENCED
    print(f"the timed-out producer's commit: {commit['chain']}: {commit['message']}")
    values, lso = java.read(topic, "read_committed")
    assert values == after and lso == {p: 4 for p in range(PARTITIONS)}  # 2 aborted, 1 plain, the marker
    assert java.read(topic, "read_uncommitted")[0] == _merged(late, after)
    java.ok("close", "slow")
    java.ok("close", "plain")


def test_a_java_commit_survives_its_coordinator_sigkilled(cluster, java):
    topic = _topic(cluster)
    tid = f"jk-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    java.ok("producer", "p", tid, 60000)
    java.ok("begin", "p")
    sent = _send_all(java, "p", topic, "kept", 3)
    java.tell("commit", "p")
    java.until(lambda said: said.get("event") == "committing", 30)
    cluster.kill_broker(holder)
    started = time.monotonic()
    try:
        commit = java.answer("commit", 90)
        took = time.monotonic() - started
        assert commit["ok"], commit
        new_holder = _holder(cluster, tid)
        assert new_holder != holder
        # the killed broker leads one of the partitions: its marker waits for it
        assert _state(cluster, tid)["transaction_state"] in ("PrepareCommit", "CompleteCommit")
    finally:
        cluster.start_broker(holder)
    _wait_state(cluster, tid, "CompleteCommit", 60)
    values, _ = java.read(topic, "read_committed")
    assert values == sent  # every record once
    assert java.read(topic, "read_uncommitted")[0] == sent
    java.ok("begin", "p")  # the producer goes on with the next holder
    more = _send_all(java, "p", topic, "more", 1)
    java.ok("commit", "p")
    wait_until(lambda: java.read(topic, "read_committed")[0] == _merged(sent, more), 30,
               message="the next transaction committed")
    java.ok("close", "p")
    print(f"coordinator {holder} SIGKILLed in commitTransaction(); it returned {took:.1f} s later via {new_holder}")
    _wait_balanced(cluster)


def _zombie_errors(java: JavaDriver, topic: str, tid: str) -> tuple[str, ...]:
    """The zombie's steps of ``test_a_second_java_producer_fences_the_first``: what its late send, its
    commit and its abort threw, once a second producer of ``tid`` fenced it and committed."""
    java.ok("producer", "zombie", tid, 60000)
    java.ok("begin", "zombie")
    _send_all(java, "zombie", topic, "zombie")
    java.ok("producer", "fresh", tid, 60000)
    java.ok("begin", "fresh")
    _send_all(java, "fresh", topic, "fresh")
    java.ok("commit", "fresh")
    said = [java.do("send", "zombie", topic, 0, "zombie-late"), java.do("commit", "zombie"),
            java.do("abort", "zombie")]
    assert not any(s["ok"] for s in said), said
    java.ok("close", "fresh")
    java.ok("close", "zombie")
    return tuple(s["error"] for s in said)


def test_a_java_zombie_is_told_what_apache_kafka_tells_it(apache_kafka, kafka_jars, tmp_path_factory):
    """The same steps on Apache Kafka 4.2 (one node; Kafka's producer takes transaction version 2
    there, ours version 1): Kafka's client throws the same exceptions at the same steps."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"jz-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    driver = JavaDriver(apache_kafka.bootstrap, kafka_jars, tmp_path_factory.mktemp("java-driver-kafka"))
    try:
        on_kafka = _zombie_errors(driver, topic, f"jz-{uuid.uuid4().hex[:6]}")
    finally:
        driver.close()
    print(f"on Apache Kafka the zombie's send, commit and abort threw {on_kafka}")
    assert on_kafka == ("InvalidProducerEpochException", "InvalidProducerEpochException", "ProducerFencedException")
