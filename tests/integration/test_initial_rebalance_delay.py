"""Kafka's ``group.initial.rebalance.delay.ms`` seen from librdkafka: five confluent-kafka consumers
(default eager assignors) of a new group, started within a second on a 10-partition topic, each
get their share in the first assignment and nothing is revoked afterwards; with the delay off
the first consumer takes everything and hands most of it on."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from helpers import local_cluster, wait_until

from spark_coord.client.admin import AdminClient
from spark_coord.client.metadata import ClusterClient

PARTITIONS = 10
RECORDS = 5000
CONSUMERS = 5
DELAY_MS = 3000


@pytest.fixture(scope="module")
def delayed_cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("initial-delay"), 1, "initial-delay",
                       {"group.initial.rebalance.delay.ms": DELAY_MS}) as c:
        yield c


@pytest.fixture(scope="module")
def undelayed_cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("no-initial-delay"), 1, "no-initial-delay") as c:
        yield c  # test clusters run with the delay off (tests/helpers.py)


def _topic_with_records(bootstrap: str) -> str:
    from confluent_kafka import Producer

    topic = f"delay-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors: list = []
    for i in range(RECORDS):
        p.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0 and not errors, errors
    return topic


class GroupConsumer(threading.Thread):
    """A confluent-kafka consumer of ``group`` polling in its own thread, recording its rebalance
    callbacks (time, partitions) and its deliveries (partition, offset, partition held then)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.assigned: list[tuple[float, set[int]]] = []
        self.revoked: list[tuple[float, set[int]]] = []
        self.held: set[int] = set()
        self.deliveries: list[tuple[int, int, bool]] = []
        self.errors: list = []
        self.subscribed_at: float | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
                      "auto.offset.reset": "earliest", "log_level": 3})

        def on_assign(_c, parts):
            self.assigned.append((time.monotonic(), {p.partition for p in parts}))
            self.held |= {p.partition for p in parts}

        def on_revoke(_c, parts):
            if not self._stop_event.is_set():  # closing revokes everything: not a rebalance
                self.revoked.append((time.monotonic(), {p.partition for p in parts}))
            self.held -= {p.partition for p in parts}

        self.subscribed_at = time.monotonic()
        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self._stop_event.is_set():
                msg = c.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(msg.error())
                    continue
                self.deliveries.append((msg.partition(), msg.offset(), msg.partition() in self.held))
        finally:
            c.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)


def _start_consumers(bootstrap: str, group: str, topic: str, gap: float) -> list[GroupConsumer]:
    consumers = []
    for i in range(CONSUMERS):
        c = GroupConsumer(f"delay-c{i}", bootstrap, group, topic)
        c.start()
        consumers.append(c)
        time.sleep(gap)  # the start schedule under test (within one second), not a wait for something
    return consumers


def _read(consumers: list[GroupConsumer]) -> set[tuple[int, int]]:
    return {(p, o) for c in consumers for p, o, _ in c.deliveries}


def test_consumers_started_together_share_the_first_generation(delayed_cluster):
    topic = _topic_with_records(delayed_cluster.bootstrap)
    group = f"g-{topic}"
    consumers = _start_consumers(delayed_cluster.bootstrap, group, topic, gap=0.2)
    try:
        wait_until(lambda: all(c.assigned for c in consumers), 60, message=lambda: "a first assignment for each: "
                   + str({c.name: c.assigned for c in consumers}))
        first = min(c.assigned[0][0] for c in consumers)
        wait_until(lambda: len(_read(consumers)) == RECORDS and time.monotonic() >= first + 5, 60,
                   message=lambda: f"all {RECORDS} records read ({len(_read(consumers))} so far) and 5 s passed")
        assert min(c.subscribed_at for c in consumers) + DELAY_MS / 1000 <= first  # the first join waited
        shares = [c.assigned[0][1] for c in consumers]
        assert [len(s) for s in shares] == [PARTITIONS // CONSUMERS] * CONSUMERS, shares
        assert set().union(*shares) == set(range(PARTITIONS))
        assert [c.revoked for c in consumers] == [[]] * CONSUMERS  # nothing moved, 5 s and more after
        for c in consumers:
            assert not c.errors, c.errors
            assert all(held for _, _, held in c.deliveries), f"{c.name} read a partition it did not hold"
            assert {p for p, _, _ in c.deliveries} <= shares[consumers.index(c)]
        assert sum(len(c.deliveries) for c in consumers) == RECORDS  # each record once
    finally:
        for c in consumers:
            c.stop()


def test_without_the_delay_the_first_consumer_takes_everything_and_hands_it_on(undelayed_cluster):
    topic = _topic_with_records(undelayed_cluster.bootstrap)
    group = f"g-{topic}"
    first = GroupConsumer("nodelay-c0", undelayed_cluster.bootstrap, group, topic)
    first.start()
    consumers = [first]
    try:
        wait_until(lambda: first.assigned, 30, message="the first consumer's assignment")
        assert first.assigned[0][1] == set(range(PARTITIONS))
        second = GroupConsumer("nodelay-c1", undelayed_cluster.bootstrap, group, topic)
        second.start()
        consumers.append(second)
        wait_until(lambda: first.revoked and second.assigned, 30, message="the first hands partitions on")
        assert first.revoked[0][1] == set(range(PARTITIONS))  # eager: it gives everything up and joins again
    finally:
        for c in consumers:
            c.stop()
