"""The whole Consumer against a REAL broker (LocalCluster, one broker process), with the
in-test coordinator handing out the assignment: fetching into Arrow, the -1 start
offset (auto.offset.reset), out-of-range reset, revocation, offsets in answers, close."""

from __future__ import annotations

import threading

import pytest
from consumer_fakes import FakeCoordinator
from helpers import local_cluster, wait_until

TOPIC = "events"
EPOCH = 7


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = local_cluster(zookeeper, tmp_path_factory.mktemp("consumer-cluster"), 1, "consumer",
                      {"coordinator.enable": False, "num.partitions": 2})
    c.start()
    try:
        _produce(c, {0: 30, 1: 20})
        yield c
    finally:
        c.stop()


def _produce(cluster, counts: dict[int, int], start: int = 0) -> None:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(TOPIC, partitions=2, if_not_exists=True)
        producer = Producer(cc)
        for p, n in counts.items():
            for i in range(start, start + n):
                producer.send(TOPIC, b"p%d-%d" % (p, i), key=b"k%d" % i, partition=p)
        producer.flush()


@pytest.fixture
def fake():
    f = FakeCoordinator(epoch=EPOCH)
    yield f
    f.close()


@pytest.fixture
def consumer(cluster, fake):
    from spark_coord.consumer import Consumer

    made = []

    def make(**kw):
        kw.setdefault("auto_offset_reset", "smallest")
        c = Consumer(f"{cluster.bootstrap},127.0.0.1:{fake.port}", "g", topics=[TOPIC], session_timeout_ms=5000,
                     consumer_id=f"c-{len(made)}", config={"fetch.wait.max.ms": 100}, **kw)
        made.append(c)
        return c

    yield make
    fake.close()
    for c in made:
        c.close(timeout=10)


def _take_until(consumer, wanted: dict[tuple[str, int], int], timeout: float = 20.0) -> list:
    """Batches until each partition in ``wanted`` reached that next offset."""
    got = []
    positions: dict = {}

    def more():
        for batch in consumer.batches(timeout=0.2):
            got.append(batch)
            break
        positions.update(consumer.positions())
        return all(positions.get(tp, -1) >= off for tp, off in wanted.items())

    wait_until(more, timeout, interval=0, message=lambda: f"positions {consumer.positions()}, wanted {wanted}")
    return got


def test_consumes_assignment_from_a_real_broker(consumer, fake):
    c = consumer()
    session = fake.next_session()
    assert session.start_fetcher(EPOCH, 1, {(TOPIC, 0): -1, (TOPIC, 1): 5})["error_code"] == 0
    assert c.generation == 1 and c.assignment() == [(TOPIC, 0), (TOPIC, 1)]
    batches = _take_until(c, {(TOPIC, 0): 30, (TOPIC, 1): 20})
    rows = [r for b in batches for r in b.to_pylist()]
    assert batches[0].schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    by_part = {p: sorted(r["offset"] for r in rows if r["partition"] == p) for p in (0, 1)}
    assert by_part[0] == list(range(30))          # -1 + smallest: from the beginning
    assert by_part[1] == list(range(5, 20))       # from the given start offset
    assert {r["value"] for r in rows if r["offset"] == 7 and r["partition"] == 0} == {b"p0-7"}
    # the ping answer carries what the application took
    answer = session.ping(EPOCH, 1)
    assert answer["offsets"] == [{"topic": TOPIC, "partition": 0, "offset": 30},
                                 {"topic": TOPIC, "partition": 1, "offset": 20}]
    assert answer["generation_id"] == 1


def test_stop_revoke_and_restart(consumer, fake, cluster):
    c = consumer()
    session = fake.next_session()
    session.start_fetcher(EPOCH, 1, {(TOPIC, 0): 0, (TOPIC, 1): 0})
    _take_until(c, {(TOPIC, 0): 30})
    stop = session.stop_fetcher(EPOCH, 1)
    reported = {(o["topic"], o["partition"]): o["offset"] for o in stop["offsets"]}
    assert reported[(TOPIC, 0)] == 30
    assert len(c._buffer) == 0  # buffered data dropped
    # the next generation keeps only partition 1, from what was reported
    start = reported.get((TOPIC, 1), 0)
    session.start_fetcher(EPOCH, 2, {(TOPIC, 1): start})
    assert c.assignment() == [(TOPIC, 1)] and c.generation == 2
    got = _take_until(c, {(TOPIC, 1): 20})
    assert {r["partition"] for b in got for r in b.to_pylist()} == {1}
    assert session.ping(EPOCH, 2)["offsets"] == [{"topic": TOPIC, "partition": 1, "offset": 20}]


def _produce_to(cluster, topic: str, counts: dict[int, int]) -> None:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(cluster.bootstrap) as cc:
        AdminClient(cc).create_topic(topic, partitions=2, if_not_exists=True)
        producer = Producer(cc)
        for p, n in counts.items():
            for i in range(n):
                producer.send(topic, b"v%d" % i, partition=p)
        producer.flush()


def test_incremental_hand_over_stops_only_what_is_named(cluster, fake):
    """StopFetcher v1 naming one partition: it is given up (its offset reported, nothing of it
    delivered any more) while the other goes on being fetched and delivered from where it was;
    StartFetcher v1 adds a partition without restarting the one it kept."""
    from spark_coord.consumer import Consumer

    topic = "incremental"
    _produce_to(cluster, topic, {0: 30, 1: 20})
    c = Consumer(f"{cluster.bootstrap},127.0.0.1:{fake.port}", "g", topics=[topic], session_timeout_ms=5000,
                 consumer_id="incr", config={"fetch.wait.max.ms": 100}, auto_offset_reset="smallest")
    try:
        session = fake.next_session()
        assert fake.registrations[-1]["generation_id"] == -1  # no claim
        session.start_fetcher(EPOCH, 1, {(topic, 0): 0, (topic, 1): 0}, version=1)
        _take_until(c, {(topic, 0): 30, (topic, 1): 20})
        stop = session.stop_fetcher(EPOCH, 2, partitions=[(topic, 1)])
        assert stop["error_code"] == 0 and stop["generation_id"] == 2
        assert stop["offsets"] == [{"topic": topic, "partition": 1, "offset": 20}]  # only what it gave up
        assert c.assignment() == [(topic, 0)]
        _produce_to(cluster, topic, {0: 5, 1: 5})
        got = _take_until(c, {(topic, 0): 35})
        assert {r["partition"] for b in got for r in b.to_pylist()} == {0}  # partition 1 is gone
        assert [r["offset"] for b in got for r in b.to_pylist()] == list(range(30, 35))  # 0 was not restarted
        # partition 1 comes back with an offset of its own; partition 0 goes on undisturbed
        assert session.start_fetcher(EPOCH, 3, {(topic, 0): 0, (topic, 1): 22}, version=1)["error_code"] == 0
        assert c.assignment() == [(topic, 0), (topic, 1)] and c.generation == 3
        _produce_to(cluster, topic, {0: 2})
        got = _take_until(c, {(topic, 0): 37, (topic, 1): 25})
        rows = [r for b in got for r in b.to_pylist()]
        assert sorted(r["offset"] for r in rows if r["partition"] == 1) == [22, 23, 24]
        assert sorted(r["offset"] for r in rows if r["partition"] == 0) == [35, 36]
        answer = session.ping(EPOCH, 3)
        assert answer["generation_id"] == 3 and {(o["partition"], o["offset"]) for o in answer["offsets"]} == \
            {(0, 37), (1, 25)}
    finally:
        fake.close()
        c.close(timeout=10)


def test_out_of_range_offset_is_reset(consumer, fake):
    c = consumer(auto_offset_reset="earliest")
    session = fake.next_session()
    session.start_fetcher(EPOCH, 1, {(TOPIC, 0): 10_000})
    batches = _take_until(c, {(TOPIC, 0): 30})
    assert min(r["offset"] for b in batches for r in b.to_pylist()) == 0


def test_largest_reset_and_messages(consumer, fake, cluster):
    c = consumer(auto_offset_reset="largest")
    session = fake.next_session()
    session.start_fetcher(EPOCH, 1, {(TOPIC, 1): -1})
    wait_until(lambda: c.positions().get((TOPIC, 1), -1) >= 20, 20, message="reset to the log end")
    end = c.positions()[(TOPIC, 1)]
    _produce(cluster, {1: 3}, start=1000)
    got = []
    wait_until(lambda: got.extend(c.messages(timeout=0.2)) or len(got) >= 3, 20, interval=0)
    assert [m.value for m in got] == [b"p1-1000", b"p1-1001", b"p1-1002"]
    assert [m.offset for m in got] == [end, end + 1, end + 2] and got[0].key == b"k1000"
    assert c.positions()[(TOPIC, 1)] == end + 3


def test_manual_commit_is_what_gets_reported(consumer, fake):
    c = consumer(auto_commit=False)
    session = fake.next_session()
    session.start_fetcher(EPOCH, 1, {(TOPIC, 0): 0})
    _take_until(c, {(TOPIC, 0): 30})
    assert session.ping(EPOCH, 1)["offsets"] == []
    result = {}
    committer = threading.Thread(target=lambda: result.update(c.commit({(TOPIC, 0): 12})))
    committer.start()
    header, request = session.member_request()  # sent at once, on the member's connection
    assert request["offsets"] == [{"topic": TOPIC, "partition": 0, "offset": 12}] and not request["leave"]
    assert committer.is_alive()  # commit() returns once the coordinator confirms
    session.commit_answer(header, request, code=1006)
    committer.join(5)
    assert result == {(TOPIC, 0): 1006}
    assert session.ping(EPOCH, 1)["offsets"] == [{"topic": TOPIC, "partition": 0, "offset": 12}]


def test_close_hands_over_the_final_offsets(consumer, fake):
    c = consumer()
    session = fake.next_session()
    session.start_fetcher(EPOCH, 1, {(TOPIC, 0): 0})
    _take_until(c, {(TOPIC, 0): 30})
    closer = threading.Thread(target=c.close)
    closer.start()
    header, request = session.member_request()
    assert request["leave"] and request["offsets"] == [{"topic": TOPIC, "partition": 0, "offset": 30}]
    assert closer.is_alive()
    session.commit_answer(header, request)
    closer.join(10)
    assert not closer.is_alive() and c.connector.left_cleanly
    assert session.is_closed_by_peer()


def _args(**kw):
    import argparse

    return argparse.Namespace(**kw)


def test_cli_consume_prints_records_then_closes(cluster, fake, capsys):
    from spark_coord.consumer.cli import consume

    def coordinator():
        session = fake.next_session()
        session.start_fetcher(EPOCH, 1, {(TOPIC, 0): -1})
        try:
            while True:  # keep pinging until the member leaves
                session.ping(EPOCH, 1)
                if not session.member_requests.empty():
                    header, request = session.member_requests.get()
                    session.commit_answer(header, request)
        except (OSError, ConnectionError, AssertionError):
            pass

    helper = threading.Thread(target=coordinator, daemon=True)
    helper.start()
    rc = consume(_args(bootstrap=f"{cluster.bootstrap},127.0.0.1:{fake.port}", group="g", topic=TOPIC, pattern=None,
                       from_beginning=True, key_separator="=", count=4, config=None,
                       override=["session.timeout.ms=3000", "fetch.wait.max.ms=100"]))
    assert rc == 0
    assert capsys.readouterr().out.splitlines() == ["k0=p0-0", "k1=p0-1", "k2=p0-2", "k3=p0-3"]
    helper.join(10)


def test_cli_groups_describe_with_lag(cluster, fake, capsys):
    import json

    from spark_coord.consumer.cli import groups

    fake.groups = [{"group_id": "g", "state": "STABLE", "generation_id": 3,
                    "members": [{"consumer_id": "c-0", "host": "/127.0.0.1",
                                 "assigned": [{"topic": TOPIC, "partition": 0}]}],
                    "offsets": [{"topic": TOPIC, "partition": 0, "committed_offset": 25, "owner": "c-0-0"}]},
                   {"group_id": "other", "state": "EMPTY", "generation_id": 0, "members": [], "offsets": []}]
    bootstrap = f"127.0.0.1:{fake.port},{cluster.bootstrap}"
    assert groups(_args(bootstrap=bootstrap, action="list", groups=[], json=False)) == 0
    out = capsys.readouterr().out
    assert "STABLE" in out and "other" in out
    assert groups(_args(bootstrap=bootstrap, action="describe", groups=["g"], json=True)) == 0
    described = json.loads(capsys.readouterr().out)
    assert [g["group_id"] for g in described] == ["g"]
    row = described[0]["offsets"][0]
    assert row["committed_offset"] == 25 and row["log_end"] >= 30 and row["lag"] == row["log_end"] - 25
    assert groups(_args(bootstrap=bootstrap, action="describe", groups=["g"], json=False)) == 0
    table = capsys.readouterr().out
    assert "LAG" in table and "c-0-0" in table
