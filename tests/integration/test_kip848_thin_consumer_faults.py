"""The KIP-848 thin consumer (``group_protocol="consumer"``) through faults on our brokers:

* its heartbeats stop (the heartbeat thread stalls) until the coordinator fences it
  (``group.consumer.session.timeout.ms``): the other member takes its partitions from the
  committed offsets, it delivers nothing once its lease ran out, and when it comes back it
  rejoins with epoch 0 and the same member id -- nothing committed is read twice;
* bad coordinator answers -- an assignment of a topic it did not subscribe to, an epoch going
  backwards, an error code Kafka does not define -- are logged with the member and the group
  and end in a rejoin, after which it reads on.

The faults are made between the member and the cluster (``MemberIo``), the rest is real."""

from __future__ import annotations

import logging
import threading
from collections import Counter

import pytest
from helpers import wait_until
from kip848_readers import ThinReader, committed, produce
from support import log_end

PARTITIONS = 12


class SteeredIo:
    """A member's ``MemberIo`` whose heartbeats can be held back (``pause``) or whose next answer
    is rewritten (``rewrite``)."""

    def __init__(self, io):
        self.io = io
        self.running = threading.Event()
        self.running.set()
        self.rewrite = None
        self.rewritten = threading.Event()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def heartbeat(self, body: dict) -> dict:
        self.running.wait()
        answer = self.io.heartbeat(body)
        rewrite, self.rewrite = self.rewrite, None
        if rewrite is None:
            return answer
        self.rewritten.set()
        return rewrite(dict(answer))

    def __getattr__(self, name: str):
        return getattr(self.io, name)


def _thin(bootstrap: str, group: str, topic: str, name: str, **kwargs) -> tuple[ThinReader, SteeredIo]:
    from spark_coord.consumer.consumer import Consumer

    consumer = Consumer(bootstrap, group, topics=[topic], group_protocol="consumer", auto_offset_reset="smallest",
                        auto_commit_interval_ms=200, **kwargs)
    io = consumer.connector.io = SteeredIo(consumer.connector.io)
    return ThinReader(consumer, name), io


def test_a_fenced_member_rejoins_and_nothing_committed_is_read_twice(cluster, create):
    group, topic = "g-kip848-fenced", "k848fenced"
    bootstrap = cluster.bootstrap
    create(topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS, 20)
    # the lease (3 s) runs out before the coordinator's session (6 s, BROKER_OVERRIDES) fences it
    (t1, io1), (t2, _) = (_thin(bootstrap, group, topic, n, session_timeout_ms=3000) for n in ("t1", "t2"))
    readers = [t1, t2]
    try:
        for r in readers:
            r.start()
        wait_until(lambda: sorted(t1.owned() | t2.owned()) == list(range(PARTITIONS)) and t1.owned()
                   and t2.owned(), timeout=60, message=lambda: f"t1 {t1.owned()} and t2 {t2.owned()} to split")
        ends = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group) == ends, timeout=60,
                   message=lambda: f"commits at {ends}: {committed(bootstrap, group)}")
        held, member_id = t1.owned(), t1.consumer.consumer_id
        io1.pause()  # t1's heartbeats stop; its application reads on
        produce(bootstrap, topic, PARTITIONS, 20, start=PARTITIONS * 20)
        wait_until(lambda: t2.owned() == set(range(PARTITIONS)), timeout=60,
                   message=lambda: f"t2 to take t1's partitions once t1 is fenced: {t2.owned()}")
        ends = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group) == ends, timeout=60,
                   message=lambda: f"t2 to read and commit t1's partitions: {committed(bootstrap, group)}")
        assert t1.consumer.connector.rejoins == 0
        io1.resume()
        wait_until(lambda: t1.consumer.connector.rejoins >= 1 and t1.owned() and t2.owned()
                   and sorted(t1.owned() | t2.owned()) == list(range(PARTITIONS)), timeout=60,
                   message=lambda: f"t1 to rejoin and share again: t1 {t1.owned()}, t2 {t2.owned()}")
        assert t1.consumer.consumer_id == member_id  # the same member id, epoch 0 again
        produce(bootstrap, topic, PARTITIONS, 20, start=PARTITIONS * 40)
        ends = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group) == ends, timeout=60,
                   message=lambda: f"commits at {ends}: {committed(bootstrap, group)}")
    finally:
        for r in readers:
            if not r.closed:
                r.stop()
    reads = Counter(x for r in readers for x in r.read())
    assert set(reads) == {(p, o) for (_, p), end in ends.items() for o in range(end)}
    twice = sorted(x for x, n in reads.items() if n > 1)
    # only what t1 read after its last commit and before its lease ran out may be read again: records
    # of the partitions it held, produced while it was paused; nothing committed before the pause
    assert all(p in held and 20 <= o < 40 for p, o in twice), twice
    assert not any(o < 20 or o >= 40 for _, o in twice)


def _other_topic_id(bootstrap: str, topic: str) -> bytes:
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        return cc.topic(topic, refresh=True, wait=30).topic_id


@pytest.mark.parametrize("fault", ["unsubscribed", "backwards", "unknown-error"])
def test_bad_coordinator_answers_end_in_a_rejoin(cluster, create, caplog, fault):
    group, topic = f"g-kip848-bad-{fault}", f"k848bad{fault.replace('-', '')}"
    bootstrap = cluster.bootstrap
    create(topic, 3)
    create(f"{topic}x", 3)
    other = _other_topic_id(bootstrap, f"{topic}x")
    produce(bootstrap, topic, 3, 10)
    rewrites = {
        "unsubscribed": lambda a: {**a, "assignment": {"topic_partitions": [{"topic_id": other, "partitions": [0]}]}},
        "backwards": lambda a: {**a, "member_epoch": a["member_epoch"] - 1},
        "unknown-error": lambda a: {**a, "error_code": 9999, "error_message": None},
    }
    reasons = {"unsubscribed": f"topic '{topic}x', which the member did not subscribe to",
               "backwards": "member epoch went backwards", "unknown-error": "UNKNOWN_ERROR_9999"}
    caplog.set_level(logging.INFO, logger="spark_coord.consumer.kip848")
    reader, io = _thin(bootstrap, group, topic, "t1")
    reader.start()
    try:
        wait_until(lambda: reader.owned() == {0, 1, 2} and len(reader.read()) == 30, timeout=60,
                   message=lambda: f"t1 to read the topic: {reader.owned()}, {len(reader.read())} records")
        member = reader.consumer.connector
        io.rewrite = rewrites[fault]
        wait_until(lambda: member.rejoins >= 1, timeout=30, message="a rejoin after the bad answer")
        assert io.rewritten.is_set()
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(group in m and member.member_id in m and reasons[fault] in m for m in errors), errors
        wait_until(lambda: reader.owned() == {0, 1, 2} and member.epoch >= 1, timeout=60,
                   message=lambda: f"t1 to be assigned again: {reader.owned()}")
        produce(bootstrap, topic, 3, 10, start=30)
        wait_until(lambda: len(set(reader.read())) == 60, timeout=60,
                   message=lambda: f"t1 to read on after rejoining: {len(set(reader.read()))} records")
    finally:
        reader.stop()
    assert reader.error is None
    assert sorted(set(reader.read())) == [(p, o) for p in range(3) for o in range(20)]
    assert Counter(reader.read()).most_common(1)[0][1] == 1, "a record read twice"
    assert committed(bootstrap, group) == {(topic, p): 20 for p in range(3)}
