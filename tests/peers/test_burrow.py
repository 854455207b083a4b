"""Burrow, LinkedIn's consumer lag checker, against a 3-broker cluster of ours.

Burrow's ``kafka`` cluster module reads every partition's log end from our brokers
through the Kafka protocol (Metadata, ListOffsets to each leader) and its ``kafka_zk``
consumer module reads the offsets our coordinator commits to ZooKeeper in Kafka 0.8's
layout.  Its HTTP API must then show each group with the offsets ZooKeeper holds and
the lag (log end minus committed offset) we compute ourselves, for a group of our thin
consumers and for a group of a Kafka client (confluent-kafka), and follow both commits
and new records.  Its cluster and consumer modules log no warning or error doing so, but
for a new topic settling: a leader that has not learned the topic yet when Burrow first asks
it for a log end answers UNKNOWN_TOPIC_OR_PARTITION, as a Kafka broker does (a broker whose
link to ZooKeeper is held shows it on purpose).
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import threading
import uuid
from pathlib import Path

import pytest
from helpers import fresh_chroot, group_offsets, local_cluster, wait_until
from peers.burrow import (
    OFFSET_RESPONSE_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    Burrow,
    BurrowUnavailable,
    burrow_binary,
    partition_view,
    problems_in,
)

from spark_coord.client.admin import LATEST, AdminClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.consumer.consumer import Consumer as OurConsumer

PARTITIONS = 3
N = 90
MORE = 30
TIMEOUT = 30  # Burrow refreshes every second; this is the deadline for a change to show

try:
    BURROW = burrow_binary()
except BurrowUnavailable as e:
    BURROW = None
    pytestmark = pytest.mark.skip(reason=str(e))


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("burrow-cluster"), 3, "burrow") as c:
        yield c


@pytest.fixture(scope="module")
def burrow(cluster, zookeeper, tmp_path_factory):
    """Burrow watching ``cluster``: its brokers for log ends, its ZooKeeper chroot for
    group offsets; its own znodes in a chroot of their own.  It must exit 0 on SIGTERM."""
    b = Burrow(BURROW, tmp_path_factory.mktemp("burrow"), cluster.bootstrap.split(","), cluster.zk_connect,
               fresh_chroot(zookeeper, "burrow-own")).start()
    try:
        yield b
    finally:
        b.alive()  # a known crash since the last request: restarted, so the SIGTERM is checked
        status = b.stop()
    assert status == 0, f"Burrow exited with {status} on SIGTERM:\n{b.log_tail()}"


def _produce(cluster, topic: str, start: int, count: int) -> dict[int, int]:
    """``count`` keyed records into ``topic``; returns every partition's log end afterwards."""
    with ClusterClient(cluster.bootstrap) as cc:
        p = Producer(cc)
        for i in range(start, start + count):
            p.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        p.flush()
        return AdminClient(cc).list_offsets(topic, None, LATEST)


def _topic_with_records(cluster, burrow: Burrow, prefix: str) -> tuple[str, dict[int, int]]:
    """A topic with N records in every partition, once Burrow has read its log ends from
    our brokers (Burrow drops the offsets of a group for a topic it does not know yet)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
    ends = _produce(cluster, topic, 0, N)
    assert sorted(ends) == list(range(PARTITIONS)) and all(ends.values()), ends
    expected = [ends[p] for p in range(PARTITIONS)]
    # its HTTP API is asked once every log end is stored (NIL_BROKER_OFFSET)
    wait_until(lambda: (burrow.stored_partitions(topic) == set(range(PARTITIONS))
                        and burrow.topic_offsets(topic) == expected), timeout=TIMEOUT,
               message=lambda: f"Burrow to read the log ends {expected} of {topic} from our brokers; it has "
                               f"{burrow.topic_offsets(topic)}\n{burrow.log_tail()}")
    return topic, ends


def _burrow_shows(burrow: Burrow, group: str, topic: str, committed: dict[int, int], ends: dict[int, int]):
    """Wait until Burrow lists ``group`` and its lag status has, for every partition, the
    ``committed`` offset and the lag ``ends - committed``, and that sum as the total lag."""
    expected = {p: (committed[p], ends[p] - committed[p]) for p in range(PARTITIONS)}
    seen = {}

    def shows() -> bool:
        seen["consumers"] = burrow.consumers()
        seen["status"] = status = burrow.lag(group)
        return (group in seen["consumers"] and status is not None
                and partition_view(status, topic) == expected
                and status["totallag"] == sum(lag for _, lag in expected.values()))

    wait_until(shows, timeout=TIMEOUT,
               message=lambda: f"Burrow to show {group} at (offset, lag) {expected} on {topic}; it lists "
                               f"{seen.get('consumers')} with {seen.get('status')}\n{burrow.log_tail()}")
    status = seen["status"]
    assert status["group"] == group and status["partition_count"] == PARTITIONS
    assert "coordinator" not in seen["consumers"]  # /consumers/coordinator is our election, not a group
    return status


def _assert_no_problems(burrow: Burrow) -> None:
    """No warning or error from Burrow's cluster and consumer modules (reading our brokers
    and ZooKeeper); the storage's "unknown topic"/"unknown consumer" answers to the test's
    own polling before a topic or group is known are not problems, and neither is a new
    topic settling (``Burrow.problems``)."""
    problems = [e for e in burrow.problems() if not str(e.get("request", "")).startswith("StorageFetch")]
    assert problems == [], f"Burrow logged problems reading our cluster: {problems}"


def test_burrow_reads_offsets_and_lag_of_a_group_of_our_consumers(cluster, burrow):
    topic, ends = _topic_with_records(cluster, burrow, "burrow-ours")
    group = f"burrow-ours-{uuid.uuid4().hex[:8]}"
    consumer = OurConsumer(cluster.bootstrap, group, topics=[topic], auto_offset_reset="smallest",
                           auto_commit=False, session_timeout_ms=6000)
    try:
        # part of it: a third of the records, then commit where the consumer is
        got = []

        def take(until: int) -> bool:
            for record in consumer.messages(timeout=0.5):
                got.append(record)
                if len(got) >= until:
                    break
            return len(got) >= until

        wait_until(lambda: take(N // 3), timeout=TIMEOUT, message=lambda: f"{N // 3} records; have {len(got)}")
        wait_until(lambda: len(consumer.positions()) == PARTITIONS, timeout=TIMEOUT,
                   message=lambda: f"a position on every partition; have {consumer.positions()}")
        committed = {p: off for (t, p), off in consumer.positions().items() if t == topic}
        assert sum(ends[p] - committed[p] for p in committed) == N - len(got) > 0
        assert all(error == 0 for error in consumer.commit({(topic, p): o for p, o in committed.items()},
                                                           timeout=10).values())
        assert group_offsets(cluster.zk_connect, group, topic) == committed
        _burrow_shows(burrow, group, topic, committed, ends)

        # catch up: everything, commit the log ends; Burrow's total lag drops to 0
        wait_until(lambda: take(N), timeout=TIMEOUT, message=lambda: f"{N} records; have {len(got)}")
        assert {p: off for (t, p), off in consumer.positions().items() if t == topic} == ends
        assert all(error == 0 for error in consumer.commit(consumer.positions(), timeout=10).values())
        assert group_offsets(cluster.zk_connect, group, topic) == ends
        status = _burrow_shows(burrow, group, topic, ends, ends)
        assert status["totallag"] == 0 and status["status"] == "OK"
    finally:
        consumer.close()
    _assert_no_problems(burrow)


def test_burrow_reads_offsets_and_lag_of_a_confluent_kafka_group(cluster, burrow):
    from confluent_kafka import Consumer

    topic, ends = _topic_with_records(cluster, burrow, "burrow-ck")
    group = f"burrow-ck-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "log_level": 3})
    c.subscribe([topic])
    seen = set()

    def poll() -> int:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.add((m.partition(), m.offset()))
        return len(seen)

    try:
        wait_until(lambda: poll() >= N, timeout=60, message=lambda: f"{N} records; have {len(seen)}")
        done = c.commit(asynchronous=False)
        assert {tp.partition: tp.offset for tp in done if tp.error is None} == ends
    finally:
        c.close()
    # Kafka's OffsetCommit lands in the same znodes as our consumers' commits
    assert group_offsets(cluster.zk_connect, group, topic) == ends
    status = _burrow_shows(burrow, group, topic, ends, ends)
    assert status["totallag"] == 0

    # the group stays where it is while the log grows: Burrow's lag follows the new log ends
    new_ends = _produce(cluster, topic, N, MORE)
    assert sum(new_ends.values()) == sum(ends.values()) + MORE
    status = _burrow_shows(burrow, group, topic, ends, new_ends)
    assert status["totallag"] == MORE
    _assert_no_problems(burrow)


#: The first lines Burrow 1.2 printed when it crashed on a topic read while its log ends
#: were stored for one partition of three (seen in a CI run; see NIL_BROKER_OFFSET).
NIL_BROKER_OFFSET_CRASH = """panic: interface conversion: interface {} is nil, not *storage.brokerOffset

goroutine 23 [running]:
github.com/linkedin/Burrow/core/internal/storage.(*InMemoryStorage).fetchTopic(0xa?, 0xc000099600, 0xc0000e55e0?)
"""


def test_a_burrow_that_crashes_on_a_bug_of_its_own_is_restarted_and_asked_again(cluster, zookeeper,
                                                                                tmp_path):
    """Burrow ends with a known crash of its own between two requests, and again in the
    middle of one: each time the peer restarts it and the request is answered by the new
    process.  Any other exit fails the request with Burrow's output."""
    from peers.burrow import MAX_RESTARTS, known_crash

    assert known_crash("Reading configuration\n" + NIL_BROKER_OFFSET_CRASH).startswith("panic: interface")
    assert known_crash("fatal error: concurrent map read and map write\n").startswith("fatal error")
    assert known_crash("panic: runtime error: index out of range\n") is None

    b = Burrow(BURROW, tmp_path, cluster.bootstrap.split(","), cluster.zk_connect,
               fresh_chroot(zookeeper, "burrow-own")).start()
    try:
        def crash() -> int:
            proc = b.proc  # a request waiting meanwhile sees the exit and restarts Burrow (b.proc changes)
            with open(b.out_path, "a") as out:
                out.write(NIL_BROKER_OFFSET_CRASH)
            proc.kill()
            proc.wait(10)
            return proc.pid

        # between two requests
        first = crash()
        status, body = b.get(b._cluster_path("topic"))
        assert status == 200 and not body["error"], body
        assert b.restarts == 1 and b.proc.pid != first

        # during one: Burrow is stopped (SIGSTOP) while the request waits on its accepted
        # connection, then crashes; the connection is reset and the request asked again
        second = b.proc.pid
        os.kill(second, signal.SIGSTOP)
        # the stop reaches every thread a moment after kill() returns: a loaded CI run sent the
        # request in that moment and had it answered
        wait_until(lambda: _all_threads_stopped(second), timeout=10, message=f"Burrow ({second}) stopped")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(b.get, b._cluster_path("topic"))
            wait_until(lambda: _established_to(b.port), timeout=10,
                       message=lambda: f"the request's connection to Burrow (port {b.port}; request done: "
                                       f"{pending.done()}, {pending.exception() if pending.done() else ''}; "
                                       f"connections: {_connections(b.port)})")
            assert not pending.done()
            crash()
            status, body = pending.result(timeout=60)
        assert status == 200 and not body["error"], body
        assert b.restarts == 2 and b.proc.pid not in (first, second)

        # any other exit is the test's failure, with what Burrow printed
        b.proc.kill()
        b.proc.wait(10)
        with pytest.raises(RuntimeError, match="Burrow exited with -9 while in use"):
            b.get(b._cluster_path("topic"))
        assert b.restarts == 2 < MAX_RESTARTS
    finally:
        b.stop()


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (``T`` in /proc/<pid>/task/*/stat)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, IndexError):
            continue
    return bool(states) and all(s == "T" for s in states)


def _connections(port: int) -> list[tuple[str, str, str]]:
    """(local, remote, state) of every TCP socket with ``port`` at either end (from /proc/net/tcp)."""
    want = f":{port:04X}"
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in list(f)[1:]]
    return [(r[1], r[2], r[3]) for r in rows if r[1].endswith(want) or r[2].endswith(want)]


def _established_to(port: int) -> bool:
    """Whether a TCP connection to 127.0.0.1:``port`` is established (from /proc/net/tcp)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(line.split()[2] == want and line.split()[3] == "01" for line in list(f)[1:])


class _HeldLink:
    """A loopback TCP forwarder to ``target`` (host, port) whose answers can be held back.

    Between ``hold()`` and ``release()`` what the target sends waits (in the pump and the
    kernel's buffers) and then arrives in order; what the client sends always goes through.
    Put between a broker and ZooKeeper it keeps the broker's watches from firing, so that
    broker's view of the cluster stays where it was while the other brokers' move on; the
    broker's pings still reach ZooKeeper, so its session lives on."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="held-link-accept", daemon=True).start()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.set()
        self.listener.close()
        for s in self._sockets:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                return
            server.settimeout(None)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, held: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if held:
                    self._open.wait()
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _offset_response_errors(burrow: Burrow, topic: str) -> list[dict]:
    return [e for e in burrow.log_entries() if e.get("msg") == OFFSET_RESPONSE_ERROR and e.get("topic") == topic]


def test_burrow_reads_a_new_topic_that_a_leader_learns_late_and_that_is_no_problem(zookeeper, tmp_path_factory):
    """Each broker learns of a new topic from its own ZooKeeper watch, so for a moment one
    broker's Metadata lists the topic while the leader of one of its partitions does not know
    it yet.  Broker 2's link to ZooKeeper is held while a topic is created at broker 0 with a
    partition on each broker: Burrow (told of broker 0 only, so that is where its Metadata
    comes from) asks broker 2 for the log end of partition 2, and broker 2 answers
    UNKNOWN_TOPIC_OR_PARTITION, as a Kafka broker does before it hears that it leads the
    partition; Burrow logs "error in OffsetResponse" (what failed a CI run) and asks again at
    its next refresh.  Once broker 2 learns the topic Burrow reads every log end, and the
    warnings before that are the topic settling, not a problem of our cluster."""
    from helpers import BrokerThread
    from peers.burrow import split_zk_connect

    from spark_coord.wire.registry import ApiKey

    with local_cluster(zookeeper, tmp_path_factory.mktemp("burrow-late"), 2, "burrow-late") as cluster:
        (zk_server, *_), chroot = split_zk_connect(cluster.zk_connect)
        host, port = zk_server.rsplit(":", 1)
        link = _HeldLink((host, int(port)))
        # no coordinator in broker 2: a shard election starting while the link is held would wait on
        # ZooKeeper on its event loop (the shard's DataWatch reads at once), and no request would be answered
        late = BrokerThread(f"127.0.0.1:{link.port}{chroot}", tmp_path_factory.mktemp("burrow-late-2"), 2,
                            **{"zookeeper.session.timeout.ms": 30000, "coordinator.enable": False}).start()
        host0, port0 = cluster.brokers[0]
        b = None
        try:
            with ClusterClient(f"{host0}:{port0}") as cc:
                def lists_every_broker() -> bool:
                    cc.refresh()
                    return sorted(cc.brokers) == [0, 1, 2]

                wait_until(lists_every_broker, timeout=TIMEOUT,
                           message=lambda: f"broker 0 to list brokers 0, 1, 2; it lists {sorted(cc.brokers)}")
                b = Burrow(BURROW, tmp_path_factory.mktemp("burrow-late-burrow"), [f"{host0}:{port0}"],
                           cluster.zk_connect, fresh_chroot(zookeeper, "burrow-own")).start()
                topic = f"burrow-late-{uuid.uuid4().hex[:8]}"
                link.hold()
                body = {"topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                                    "assignments": [{"partition_index": p, "broker_ids": [p]}
                                                    for p in range(PARTITIONS)]}],
                        "timeout_ms": 30000, "validate_only": False}
                answer = cc.connection(0).request(ApiKey.CREATE_TOPICS, body)
                assert answer["topics"][0]["error_code"] == 0, answer

            # broker 2 does not know the topic: Burrow's read of partition 2 fails there
            wait_until(lambda: any(e.get("broker") == 2 and e.get("partition") == 2
                                   for e in _offset_response_errors(b, topic)), timeout=TIMEOUT,
                       message=lambda: f"Burrow to be told by broker 2 that it does not know {topic}\n{b.log_tail()}")
            assert {e["sarama_error"] for e in _offset_response_errors(b, topic)} == {UNKNOWN_TOPIC_OR_PARTITION}
            assert 2 not in b.stored_partitions(topic)

            # broker 2 learns it: Burrow reads every log end, and the warnings were the settling
            link.release()
            wait_until(lambda: b.stored_partitions(topic) == set(range(PARTITIONS)), timeout=TIMEOUT,
                       message=lambda: f"Burrow to read every log end of {topic}; it has "
                                       f"{b.stored_partitions(topic)}\n{b.log_tail()}")
            assert b.topic_offsets(topic) == [0] * PARTITIONS
            _assert_no_problems(b)
        finally:
            if b is not None:
                b.stop()
            link.release()
            late.stop()
            link.close()


def test_a_new_partition_s_unknown_topic_is_its_settling_until_burrow_has_stored_its_log_end():
    """``problems_in`` leaves out Burrow's UNKNOWN_TOPIC_OR_PARTITION warning for a partition
    whose log end it has not stored yet, and nothing else: the same warning once it has, or
    another error code, is a problem."""
    def unknown(partition: int, error: str = UNKNOWN_TOPIC_OR_PARTITION) -> dict:
        return {"level": "warn", "msg": OFFSET_RESPONSE_ERROR, "sarama_error": error, "broker": 2, "topic": "t",
                "partition": partition}

    def stored(partition: int) -> dict:
        return {"level": "debug", "msg": "ok", "request": "StorageSetBrokerOffset", "topic": "t",
                "partition": partition, "topic_partition_count": 2}

    not_leader = "kafka server: Tried to send a message to a replica that is not the leader for some partition. " \
                 "Your metadata is out of date."
    failed = {"level": "error", "msg": "failed to fetch offsets from broker", "broker": 2}
    assert problems_in([unknown(0), unknown(1), stored(0), unknown(1), stored(1)]) == []
    assert problems_in([unknown(0), stored(0), unknown(0)]) == [unknown(0)]             # a leader forgot it
    assert problems_in([stored(0), unknown(1), stored(1), unknown(1)]) == [unknown(1)]
    assert problems_in([unknown(0, not_leader), failed, stored(0)]) == [unknown(0, not_leader), failed]
    assert problems_in([{**unknown(0), "topic": "other"}, stored(0)]) == []              # settling of "other"
