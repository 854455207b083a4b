"""The producer's retries when a partition has no leader for a while (its broker restarting): the
leader lookup's LEADER_NOT_AVAILABLE is retried like a Produce answer's, with the metadata asked
again, and the batch goes out once a leader is back.  Seen in a clean-clone run: the Spark sink's
write failed at once with LEADER_NOT_AVAILABLE while its broker was being restarted."""

from __future__ import annotations

import pytest

from spark_coord.client.producer import Producer
from spark_coord.errors import ErrorCode, KafkaError

TP = ("t", 0)


class Answering:
    """A leader's connection answering every Produce with success."""

    def __init__(self):
        self.produced: list[dict] = []

    def request(self, api_key, body, timeout=None, version=None):
        self.produced.append(body)
        return {"responses": [{"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": 0} for p in t["partition_data"]]} for t in body["topic_data"]]}


class LeaderlessFor:
    """``ClusterClient`` as the producer uses it: no leader for the first ``n`` lookups."""

    def __init__(self, n: int):
        self.n = n
        self.refreshes = 0
        self.conn = Answering()

    def leader(self, topic, partition):
        if self.n > 0:
            self.n -= 1
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
        return 0

    def refresh(self, topics=None):
        self.refreshes += 1
        return {}

    def connection(self, leader):
        return self.conn

    def drop_connection(self, leader):
        pass


def test_a_partition_without_a_leader_for_a_while_is_retried_until_one_is_back():
    cluster = LeaderlessFor(2)
    producer = Producer(cluster, acks=-1, retries=5)
    producer.send_batches({TP: (b"batch", 3)})
    assert len(cluster.conn.produced) == 1 and cluster.refreshes == 2
    assert producer.sent_records == 3


def test_a_partition_without_a_leader_past_the_retries_fails_naming_why():
    cluster = LeaderlessFor(100)
    producer = Producer(cluster, acks=-1, retries=2)
    with pytest.raises(KafkaError) as e:
        producer.send_batches({TP: (b"batch", 3)})
    assert e.value.code == ErrorCode.REQUEST_TIMED_OUT and "LEADER_NOT_AVAILABLE" in str(e.value)
    assert cluster.conn.produced == []
