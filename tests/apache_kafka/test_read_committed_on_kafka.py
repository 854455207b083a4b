"""read_committed in every reader of ours, on Apache Kafka 4.2 (one node) where transactional
producers write: committed transactions, aborted ones, a transaction of another producer
interleaved with them, plain non-transactional records in between, and at the end one transaction
left open with plain records after it.  Two writers write that same pattern, each to a topic of its
own, and every assertion runs for both: confluent-kafka (librdkafka, Kafka's transaction protocol
version 1: AddPartitionsToTxn, one producer epoch for every transaction) and Kafka's own Java
``KafkaProducer`` 4.2 (``tests/peers/java/TxnProducer.java``; against a 4.2 cluster it takes
transaction version 2, KIP-890: no AddPartitionsToTxn, and the epoch bumped at every commit or
abort, so markers and aborted transactions carry a new epoch each time).

With ``isolation.level=read_committed`` the thin consumer (Kafka 4's consumer group protocol), a
coordkafka batch read and a coordkafka stream (``Trigger.AvailableNow``) return exactly the
committed and the non-transactional records, in offset order, and stop at the last stable offset
while the transaction is open; once it commits, the rest appears (the stream goes on from its
checkpoint).  With read_uncommitted they return every data record, aborted and open ones too, and
never a transaction marker.  Spark's own Kafka source (``format("kafka")``, its jars on
``spark.jars``) reads the same topic in both isolation levels, batch and stream, and gives the
same records (topic, partition, offset, key, value) as coordkafka.

Spark runs in a process of its own (``spark_reads.SparkReads``, shared by both writers' topics):
``spark.jars`` can only be set when a JVM starts, and the test session's SparkSession may already be
up without them.

On our brokers: without transactions read_committed reads every record (the last stable offset is
the high watermark); with transactions written by hand (the partition side alone: markers sent with
WriteTxnMarkers, as a transaction coordinator sends them) our readers read the committed records
only, up to the last stable offset (tests/integration/test_transactions.py has our brokers'
transaction coordinator with real transactional producers).  And the options:
bad values are refused naming the option."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import local_cluster, wait_until
from spark_reads import SparkReads

PARTITIONS = 2
#: Kafka's Java transactional producer writing Topic's pattern (run from source with Kafka's jars).
JAVA_WRITER = Path(__file__).resolve().parents[1] / "peers" / "java" / "TxnProducer.java"


# ---------------------------------------------------------------------------------------- options

def test_isolation_level_options_are_checked():
    from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED
    from spark_coord.consumer.fetcher import FetchSettings
    from spark_coord.spark.options import parse_sink_options, parse_source_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    assert parse_source_options(base, False).isolation_level == READ_UNCOMMITTED
    for value, level in (("read_committed", READ_COMMITTED), ("READ_UNCOMMITTED", READ_UNCOMMITTED)):
        assert parse_source_options({**base, "kafka.isolation.level": value}, False).isolation_level == level
    with pytest.raises(ValueError, match=r"kafka\.isolation\.level must be read_uncommitted or read_committed"):
        parse_source_options({**base, "kafka.isolation.level": "serializable"}, False)
    with pytest.raises(ValueError, match=r"kafka\.isolation\.level: not with kafka\.share\.group\.id"):
        parse_source_options({**base, "kafka.share.group.id": "q", "kafka.isolation.level": "read_committed"},
                             streaming=True)
    with pytest.raises(ValueError, match=r"kafka\.isolation\.level: not taken by coordkafka: a consumer setting"):
        parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t",
                            "kafka.isolation.level": "read_committed"})
    with pytest.raises(ValueError, match="isolation_level must be"):
        FetchSettings(isolation_level=2)


def test_consumer_isolation_level_is_checked_and_defaults_to_read_uncommitted():
    from spark_coord import config
    from spark_coord.consumer.consumer import Consumer

    assert config.load(config.CONSUMER, None, {})["isolation.level"] == "read_uncommitted"
    with pytest.raises(ValueError, match=r"isolation_level \(isolation.level\) must be read_uncommitted or "
                                         r"read_committed, got 'committed'"):
        Consumer("127.0.0.1:9", "g", topics=["t"], isolation_level="committed")
    with pytest.raises(ValueError, match=r"isolation.level\) must be .* got 'dirty'"):
        Consumer("127.0.0.1:9", "g", topics=["t"], config={"isolation.level": "dirty"})


# ------------------------------------------------------------------------------ writing the topic

class Log:
    """What the producers wrote, per partition in offset order: (key, value, kind) with kind one of
    plain, committed, aborted, open."""

    def __init__(self) -> None:
        self.rows: dict[int, list[tuple[str, str, str]]] = {p: [] for p in range(PARTITIONS)}
        self.n = 0

    def record(self, partition: int, kind: str) -> tuple[str, str]:
        self.n += 1
        key, value = f"k{self.n}", f"{kind}-{self.n}"
        self.rows[partition].append((key, value, kind))
        return key, value

    def add(self, partition: int, offset: int, key: str, value: str, kind: str) -> None:
        """A record another process wrote (the Java writer), numbered as ``record`` numbers them."""
        self.n += 1
        assert (key, value) == (f"k{self.n}", f"{kind}-{self.n}"), (partition, offset, key, value, self.n)
        self.rows[partition].append((key, value, kind))


#: How long the transaction left open may stay open before Kafka's coordinator aborts it: the test
#: reads while it is open, and with librdkafka's default (60 s) a loaded machine starting Spark and
#: the thin readers saw it aborted mid-test (its records gone, the plain ones after it readable).
#: Kafka's transaction.max.timeout.ms is 15 min.
OPEN_TIMEOUT_MS = 900_000


def _transactional(bootstrap: str, name: str, timeout_ms: int = 60_000):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{uuid.uuid4().hex[:6]}",
                         "linger.ms": 0, "transaction.timeout.ms": timeout_ms})
    producer.init_transactions(60)
    return producer


def _send(producer, topic: str, log: Log, kind: str, per_partition: int = 2) -> None:
    failed: list = []
    for p in range(PARTITIONS):
        for _ in range(per_partition):
            key, value = log.record(p, kind)
            producer.produce(topic, value.encode(), key.encode(), partition=p,
                             on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed


def _offsets(bootstrap: str, topic: str, level: int) -> dict[int, int]:
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return dict(AdminClient(cc).list_offsets(topic, None, LATEST, level))


def _settled(bootstrap: str, topic: str) -> dict[int, int]:
    """Wait until every transaction's marker is written (last stable offset = high watermark)."""
    def stable():
        hw = _offsets(bootstrap, topic, 0)
        return hw if _offsets(bootstrap, topic, 1) == hw else None
    return wait_until(stable, 30, message="the last stable offsets reach the high watermarks")


class Topic:
    """The topic and what ``writer`` wrote to it (``confluent-kafka``, or ``java``: Kafka's Java
    producer, ``JavaWriter``), with the transaction left open."""

    def __init__(self, bootstrap: str, writer: str = "confluent-kafka", jars: Path | None = None,
                 workdir: Path | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        self.bootstrap = bootstrap
        self.writer = writer
        self.name = f"txn-{writer.split('-')[0]}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.name, PARTITIONS, 1)])[self.name].result(30)
        self.log = Log()
        self.committed_open = False
        if writer == "java":
            assert jars is not None and workdir is not None
            self._java: JavaWriter | None = JavaWriter(bootstrap, self.name, jars, workdir)
            self._java.until("written", self.log)
            self.stable = _settled(bootstrap, self.name)
            self._java.tell("open")
            self._java.until("open", self.log)
        else:
            self._java = None
            self._write_with_confluent_kafka()

    def _write_with_confluent_kafka(self) -> None:
        from confluent_kafka import Producer

        bootstrap = self.bootstrap
        plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        a, b = _transactional(bootstrap, "a"), _transactional(bootstrap, "b")
        _send(plain, self.name, self.log, "plain")
        for kind in ("committed", "aborted", "committed"):
            a.begin_transaction()
            _send(a, self.name, self.log, kind)
            _send(plain, self.name, self.log, "plain", 1)
            if kind == "committed":
                a.commit_transaction(60)
            else:
                a.abort_transaction(60)
        # two producers interleaved: a aborts, b commits
        a.begin_transaction()
        b.begin_transaction()
        _send(a, self.name, self.log, "aborted", 1)
        _send(b, self.name, self.log, "committed", 1)
        _send(a, self.name, self.log, "aborted", 1)
        _send(plain, self.name, self.log, "plain", 1)
        _send(b, self.name, self.log, "committed", 1)
        a.abort_transaction(60)
        b.commit_transaction(60)
        self.stable = _settled(bootstrap, self.name)
        # left open, with plain records after it
        self.open = _transactional(bootstrap, "open", OPEN_TIMEOUT_MS)
        self.open.begin_transaction()
        _send(self.open, self.name, self.log, "open")
        _send(plain, self.name, self.log, "plain")

    def commit_open(self) -> None:
        if self._java is not None:
            self._java.tell("commit")
            self._java.until("committed", self.log)
        else:
            self.open.commit_transaction(60)
        self.committed_open = True
        _settled(self.bootstrap, self.name)

    def close(self) -> None:
        """Abort the transaction left open unless it was committed; the Java writer ends either way."""
        if self._java is not None:
            if not self.committed_open:
                self._java.tell("abort")
                self._java.until("aborted", self.log)
            self._java.close()
        elif not self.committed_open:
            self.open.abort_transaction(60)

    def expected(self, committed: bool, phase: int) -> list[tuple]:
        """(partition, key, value) of what a reader should return, in the order the producers wrote
        them: read_committed leaves out aborted transactions and, in phase 1, everything from the
        open transaction on."""
        out = []
        for p, rows in self.log.rows.items():
            for i, (key, value, kind) in enumerate(rows):
                if committed and (kind == "aborted" or (phase == 1 and i >= self._first_open(p))):
                    continue
                out.append((p, key, value))
        return sorted(out)

    def _first_open(self, partition: int) -> int:
        return next(i for i, (_, _, kind) in enumerate(self.log.rows[partition]) if kind == "open")


class JavaWriter:
    """Kafka's Java transactional producer (``tests/peers/java/TxnProducer.java``) writing Topic's
    pattern in a process of its own: its JSON lines go through a thread into a queue; ``tell``
    gives it the word to open the last transaction and to commit or abort it."""

    def __init__(self, bootstrap: str, topic: str, jars: Path, workdir: Path) -> None:
        from peers.apache_kafka import JVM_FLAGS, TOOL_HEAP, TOOLS_LOG4J, java_binary

        self.stderr = workdir / f"{topic}-java.stderr"
        self._err = open(self.stderr, "wb")
        command = [java_binary(), *TOOL_HEAP, *JVM_FLAGS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
                   "-cp", f"{jars}/*", str(JAVA_WRITER), bootstrap, topic, str(PARTITIONS)]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"java-writer-{topic}", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def tell(self, word: str) -> None:
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def until(self, event: str, log: Log, timeout: float = 120.0) -> None:
        """Put the records it reports into ``log`` until it says ``event``; AssertionError with its
        stderr if it ends or the deadline passes first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the Java producer did not say {event!r} within {timeout} s: "
                                     f"{self._tail()}") from None
            if line is None:
                raise AssertionError(f"the Java producer ended ({self.proc.wait(10)}) before {event!r}: "
                                     f"{self._tail()}")
            if not line.startswith("{"):
                continue
            said = json.loads(line)
            if said["event"] == "record":
                log.add(said["partition"], said["offset"], said["key"], said["value"], said["kind"])
            elif said["event"] == event:
                return

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


def _without_offsets(rows: list[tuple], topic: str) -> list[tuple]:
    """(partition, key, value) of reader rows, checking they are of ``topic`` and in offset order."""
    assert all(r[0] == topic for r in rows)
    for p in range(PARTITIONS):
        offsets = [r[2] for r in rows if r[1] == p]
        assert offsets == sorted(set(offsets)), (p, offsets)
    return sorted((r[1], r[3], r[4]) for r in rows)


# ------------------------------------------------------------------------------------- the readers

class ThinReader(threading.Thread):
    """The thin consumer (Kafka 4's group protocol) reading the topic into ``rows`` until stopped."""

    def __init__(self, bootstrap: str, topic: str, isolation: str) -> None:
        from spark_coord.consumer.consumer import Consumer

        super().__init__(name=f"thin-{isolation}", daemon=True)
        self.group = f"g-{isolation}-{uuid.uuid4().hex[:6]}"
        self.consumer = Consumer(bootstrap, self.group, topics=[topic],
                                 group_protocol="consumer", auto_offset_reset="smallest", isolation_level=isolation)
        self.rows: list[tuple] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                for r in self.consumer.messages(timeout=0.1):
                    with self._lock:
                        self.rows.append((r.topic, r.partition, r.offset, r.key.decode(), r.value.decode()))
                    if self._halt.is_set():
                        break
        except BaseException as e:  # noqa: BLE001 -- the test asserts on it
            self.error = e

    def read(self) -> list[tuple]:
        assert self.error is None, self.error
        with self._lock:
            return list(self.rows)

    def wait_for(self, expected: list[tuple], topic: str) -> list[tuple]:
        wait_until(lambda: len(self.read()) >= len(expected), 60,
                   message=lambda: f"{self.name}: {len(self.read())} of {len(expected)} records")
        rows = self.read()
        assert _without_offsets(rows, topic) == expected
        return sorted(rows, key=lambda r: (r[1], r[2]))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.consumer.close()


# ------------------------------------------------------------------------------------------- tests

@pytest.fixture(scope="module", params=["confluent-kafka", "java"])
def topic(request, apache_kafka, spark_reads, tmp_path_factory):
    """The pattern written by each writer in turn, to a topic of its own, on the module's Kafka node
    and read by the module's Spark process; written once Spark is up, so the open transaction is
    open for the reads only."""
    t = Topic(apache_kafka.bootstrap, request.param, apache_kafka.jars, tmp_path_factory.mktemp("writer"))
    yield t
    t.close()


@pytest.fixture(scope="module")
def spark_reads(spark_kafka_jars, tmp_path_factory):
    reads = SparkReads(spark_kafka_jars, tmp_path_factory.mktemp("spark-read-committed"))
    yield reads
    reads.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_read_committed_and_uncommitted_on_apache_kafka(apache_kafka, topic, spark_reads, tmp_path):
    """Every reader of ours in both isolation levels against the transactional topic, the open
    transaction open, then committed; Spark's Kafka source reads the same records."""
    from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED

    bootstrap, name = apache_kafka.bootstrap, topic.name
    hw, lso = _offsets(bootstrap, name, READ_UNCOMMITTED), _offsets(bootstrap, name, READ_COMMITTED)
    assert all(lso[p] < hw[p] for p in hw) and lso == topic.stable, (lso, hw, topic.stable)
    thin = {level: ThinReader(bootstrap, name, level) for level in ("read_committed", "read_uncommitted")}
    for reader in thin.values():
        reader.start()
    checkpoints = {(s, level): str(tmp_path / f"cp-{s}-{level}") for s in ("coordkafka", "kafka")
                   for level in ("read_committed", "read_uncommitted")}
    streamed: dict[tuple, list] = {key: [] for key in checkpoints}
    try:
        for phase in (1, 2):
            if phase == 2:
                topic.commit_open()
            for level in ("read_committed", "read_uncommitted"):
                expected = topic.expected(level == "read_committed", phase)
                rows = {}
                for source in ("coordkafka", "kafka"):
                    rows[source] = spark_reads.read(source, name, bootstrap, level, "batch")
                    assert _without_offsets(rows[source], name) == expected, (phase, level, source, "batch")
                    streamed[(source, level)] += spark_reads.read(source, name, bootstrap, level, "stream",
                                                                  checkpoints[(source, level)])
                    got = sorted(streamed[(source, level)])
                    assert got == rows[source], (phase, level, source, "stream")
                assert rows["coordkafka"] == rows["kafka"], (phase, level)
                assert thin[level].wait_for(expected, name) == rows["kafka"], (phase, level, "thin consumer")
                # its position passes the transaction markers after its last record: at the last stable
                # offset while the transaction is open, else at the log end (the open one's commit marker)
                end = lso if level == "read_committed" and phase == 1 else _offsets(bootstrap, name, READ_UNCOMMITTED)
                _wait_position(thin[level], {(name, p): o for p, o in end.items()})
                if level == "read_committed" and phase == 1:  # stopped at the last stable offset
                    assert all(r[2] < lso[r[1]] for r in rows["kafka"])
                    assert max(r[2] for r in rows["kafka"] if r[1] == 0) < lso[0] - 1  # markers are not data
            if phase == 1:  # the reads above saw the transaction open, not aborted by its timeout
                assert _offsets(bootstrap, name, READ_COMMITTED) == lso, "the open transaction ended during phase 1"
        # read_uncommitted: the commit of the open transaction added no row (its marker is not data)
        assert len(streamed[("coordkafka", "read_uncommitted")]) == sum(len(r) for r in topic.log.rows.values())
    finally:
        for reader in thin.values():
            reader.stop()
    # closing, the members committed the log end, not the offset of a marker
    log_end = _offsets(bootstrap, name, READ_UNCOMMITTED)
    assert {level: _committed(bootstrap, reader.group) for level, reader in thin.items()} == \
        {level: log_end for level in thin}


def _wait_position(reader: ThinReader, want: dict) -> None:
    wait_until(lambda: reader.consumer.positions() == want, 30,
               message=lambda: f"{reader.name}: positions {reader.consumer.positions()}, not {want}")


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    from spark_coord.client.groups import GroupClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc, GroupClient(cc) as gc:
        return {p: c.offset for (_, p), c in gc.fetch_offsets(group).items()}


def test_read_committed_on_our_brokers(zookeeper, tmp_path):
    """Our brokers, no transaction written: the last stable offset is the high watermark, a
    read_committed fetch lists no aborted transaction, and every reader of ours (the thin consumer,
    the driver's latest offsets, an executor's range read) returns every record."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.fetcher import READ_COMMITTED, fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer
    from spark_coord.consumer.consumer import Consumer
    from spark_coord.spark.offsets import OffsetResolver, make_partition
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.partition import read_partition

    topic = "rc"
    with local_cluster(zookeeper, tmp_path / "cluster", 1, "read-committed") as cluster:
        with ClusterClient(cluster.bootstrap) as cc:
            AdminClient(cc).create_topic(topic, PARTITIONS)
            cc.topic(topic, refresh=True, wait=30)
            producer = Producer(cc)
            for i in range(40):
                producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % PARTITIONS)
            producer.flush()
            answer = fetch(cc.connection(cc.leader(topic, 0)), {(topic, 0): 0}, isolation_level=READ_COMMITTED)
            assert [(a.error, a.high_watermark, a.last_stable_offset, a.aborted_transactions) for a in answer] == \
                [(0, 20, 20, None)]
        opts = parse_source_options({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                                     "kafka.isolation.level": "read_committed"}, False)
        resolver = OffsetResolver(opts)
        try:
            tps = resolver.topic_partitions()
            latest = resolver.latest(tps)
            assert latest == {(topic, 0): 20, (topic, 1): 20}
            leaders = resolver.leaders(tps)
        finally:
            resolver.close()
        rows = [r for tp in tps for rb in read_partition(make_partition(opts, tp, 0, latest[tp], leaders[tp]))
                for r in rb.to_pylist()]
        assert sorted((r["partition"], r["offset"]) for r in rows) == [(p, o) for p in range(2) for o in range(20)]
        consumer = Consumer(cluster.bootstrap, "rc-group", topics=[topic], auto_offset_reset="smallest",
                            isolation_level="read_committed")
        try:
            seen: list = []
            wait_until(lambda: seen.extend(consumer.messages(timeout=0.2)) or len(seen) >= 40, 60,
                       message=lambda: f"{len(seen)} of 40 records")
            assert sorted(r.value for r in seen) == sorted(b"v%d" % i for i in range(40))
        finally:
            consumer.close()


def test_read_committed_on_our_brokers_with_transactions_written_by_hand(zookeeper, tmp_path):
    """The partition side of transactions on our brokers, without their transaction coordinator (the
    markers are sent by hand, with WriteTxnMarkers, as a coordinator sends them): an aborted transaction, a
    committed one interleaved with it, plain records, and one left open.  The driver's latest offsets,
    an executor's range read and the thin consumer read the committed and plain records only, up to the
    last stable offset; the consumer's position passes the markers; after the commit the rest appears."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.consumer.consumer import Consumer
    from spark_coord.records.builder import BatchBuilder
    from spark_coord.spark.offsets import OffsetResolver, make_partition
    from spark_coord.spark.options import parse_source_options
    from spark_coord.spark.partition import read_partition
    from spark_coord.wire.registry import ApiKey

    topic = "rc-txn"

    def batch(values, pid=-1, epoch=-1, seq=-1):
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=pid >= 0)
        for v in values:
            b.append(v.encode(), key=v.encode())
        return b.build()

    with local_cluster(zookeeper, tmp_path / "cluster", 1, "read-committed-txn") as cluster, \
            ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, 1)
        cc.topic(topic, refresh=True, wait=30)
        conn = cc.connection(cc.leader(topic, 0))

        def produce(records: bytes) -> None:
            r = conn.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0

        def marker(pid: int, epoch: int, commit: bool) -> None:
            r = conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [
                {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit, "coordinator_epoch": 0,
                 "topics": [{"name": topic, "partition_indexes": [0]}]}]})
            assert [p["error_code"] for t in r["markers"][0]["topics"] for p in t["partitions"]] == [0]

        pids = []
        for _ in range(3):
            r = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
            pids.append((r["producer_id"], r["producer_epoch"]))
        (aborted, a_epoch), (committed, c_epoch), (open_, o_epoch) = pids
        produce(batch(["p0", "p1"]))                      # 0-1
        produce(batch(["a0", "a1"], aborted, a_epoch, 0))  # 2-3, aborted
        produce(batch(["c0"], committed, c_epoch, 0))      # 4, committed
        produce(batch(["a2"], aborted, a_epoch, 2))        # 5, aborted
        marker(aborted, a_epoch, False)                    # 6
        marker(committed, c_epoch, True)                   # 7
        produce(batch(["p2"]))                             # 8
        produce(batch(["o0"], open_, o_epoch, 0))          # 9, open
        produce(batch(["p3"]))                             # 10
        committed_values = ["p0", "p1", "c0", "p2"]

        def source(level: str):
            return parse_source_options({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                                         "kafka.isolation.level": level}, False)

        def spark_read(level: str) -> tuple[int, list[str]]:
            opts = source(level)
            resolver = OffsetResolver(opts)
            try:
                tp = (topic, 0)
                latest = resolver.latest([tp])[tp]
                rows = [r for rb in read_partition(make_partition(opts, tp, 0, latest, resolver.leaders([tp])[tp]))
                        for r in rb.to_pylist()]
            finally:
                resolver.close()
            offsets = [r["offset"] for r in rows]
            assert offsets == sorted(offsets)
            return latest, [r["value"].decode() for r in rows]

        assert spark_read("read_committed") == (9, committed_values)
        assert spark_read("read_uncommitted") == (11, ["p0", "p1", "a0", "a1", "c0", "a2", "p2", "o0", "p3"])
        assert AdminClient(cc).list_offsets(topic, [0], -1, READ_COMMITTED) == {0: 9}
        consumer = Consumer(cluster.bootstrap, "rc-txn-group", topics=[topic], auto_offset_reset="smallest",
                            isolation_level="read_committed", config={"fetch.wait.max.ms": 100})
        try:
            seen: list = []

            def read(n: int, position: int):
                seen.extend(r.value.decode() for r in consumer.messages(timeout=0.2))
                return len(seen) >= n and consumer.positions().get((topic, 0)) == position

            wait_until(lambda: read(4, 9), 60, message=lambda: f"{seen}, position {consumer.positions()}")
            assert seen == committed_values
            marker(open_, o_epoch, True)                   # 11
            wait_until(lambda: read(6, 12), 60, message=lambda: f"{seen}, position {consumer.positions()}")
            assert seen == committed_values + ["o0", "p3"]
        finally:
            consumer.close()
        assert spark_read("read_committed") == (12, committed_values + ["o0", "p3"])
        assert AdminClient(cc).list_offsets(topic, [0], -1, READ_UNCOMMITTED) == {0: 12}



@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("writer", ["confluent-kafka", "java"])
def test_kafka_transactional_producers_on_our_brokers(writer, zookeeper, kafka_jars, tmp_path):
    """Kafka's own transactional producers (librdkafka's, and the Java KafkaProducer 4.2) write the
    pattern to three of our brokers, whose transaction coordinator ends their transactions: our
    readers see exactly the committed and plain records, in offset order, up to the last stable
    offset while a transaction is open, and the rest once it commits; read_uncommitted sees every
    data record and never a marker."""
    from spark_coord.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED

    with local_cluster(zookeeper, tmp_path / "cluster", 3, "txn-writers") as cluster:
        topic = Topic(cluster.bootstrap, writer, kafka_jars, tmp_path)
        readers = {level: ThinReader(cluster.bootstrap, topic.name, level)
                   for level in ("read_committed", "read_uncommitted")}
        try:
            hw = _offsets(cluster.bootstrap, topic.name, READ_UNCOMMITTED)
            lso = _offsets(cluster.bootstrap, topic.name, READ_COMMITTED)
            assert lso == topic.stable and all(lso[p] < hw[p] for p in hw), (lso, hw, topic.stable)
            for reader in readers.values():
                reader.start()
            for phase in (1, 2):
                if phase == 2:
                    topic.commit_open()
                for level, reader in readers.items():
                    rows = reader.wait_for(topic.expected(level == "read_committed", phase), topic.name)
                    if level == "read_committed" and phase == 1:
                        assert all(r[2] < lso[r[1]] for r in rows), (rows, lso)
            assert _offsets(cluster.bootstrap, topic.name, READ_COMMITTED) == \
                _offsets(cluster.bootstrap, topic.name, READ_UNCOMMITTED)
        finally:
            for reader in readers.values():
                if reader.is_alive():
                    reader.stop()
            topic.close()
