"""DescribeShareGroupOffsets of a share group whose members took on a topic created late (KIP-932):
each partition of it that has share state shows its start offset, as the partitions of the topic the
group read first do.  A partition with no state yet (its leader never loaded it) shows start offset
-1 when it is asked for by name -- Kafka's ``PartitionFactory.UNINITIALIZED_START_OFFSET``, what its
share coordinator's ReadShareGroupStateSummary answers for a partition whose start is not decided
yet -- and is left out of the answer for every topic (null Topics), which lists the state there is
(Kafka lists the partitions its coordinator initialized, at -1 until their leader loads them; here a
share partition's state exists only from its leader's first load on).

Once reported (-1 for such a topic's partitions that had state) and not reproduced since; this pins
the expected answer, over the wire, against a real broker."""

from __future__ import annotations

from helpers import wait_until
from test_share_deleted_group import ACCEPT, _acquired, _fetch, _heartbeat, _join, _member, _reset_earliest

from spark_coord.client.connection import BrokerConnection
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey

A, B = "share-early", "share-late"
GROUP = "sg-late"


def _create(c, topic: str, partitions: int, records: int) -> bytes:
    out = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": topic, "num_partitions": partitions,
                                                      "replication_factor": 1}], "timeout_ms": 10000})
    assert out["topics"][0]["error_code"] == 0, out
    b = BatchBuilder()
    for i in range(records):
        b.append(b"v%d" % i)
    batch = b.build()

    def produced():
        r = c.request(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
        return r["responses"][0]["partition_responses"][0]["error_code"] == 0
    wait_until(produced, 30, 0.2, f"records produced to {topic}")
    return c.request(ApiKey.METADATA, {"topics": [{"name": topic}]}, version=12)["topics"][0]["topic_id"]


def _offsets(c, topics) -> dict[tuple[str, int], tuple[int, int]]:
    out = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": GROUP, "topics": topics}]},
                    version=1)
    g = out["groups"][0]
    assert g["error_code"] == 0, out
    return {(t["topic_name"], p["partition_index"]): (p["start_offset"], p["error_code"])
            for t in g["topics"] for p in t["partitions"]}


def test_a_topic_created_late_shows_its_start_offsets(broker):
    with BrokerConnection(*broker.address, timeout=30) as c:
        _reset_earliest(c, GROUP)
        ta = _create(c, A, 1, 10)
        member = _member()
        epoch = _join(c, GROUP, member, [A])
        assert wait_until(lambda: _acquired(_fetch(c, ta, GROUP, member, 0)), 30, 0.2, "A read") == [(0, 9)]
        out = _fetch(c, ta, GROUP, member, -1, acks=[{"first_offset": 0, "last_offset": 4,
                                                      "acknowledge_types": [ACCEPT]}])
        assert out["error_code"] == 0, out

        # later in the cluster's life: topic B, and the member subscribed to both
        tb = _create(c, B, 2, 6)

        def assigned_both():
            nonlocal epoch
            r = _heartbeat(c, GROUP, member, epoch, [A, B])
            epoch = r.get("member_epoch", epoch)
            got = {t["topic_id"] for t in ((r.get("assignment") or {}).get("topic_partitions") or [])}
            return r["error_code"] == 0 and {ta, tb} <= got
        wait_until(assigned_both, 30, 0.2, "assigned A and B")
        assert wait_until(lambda: _acquired(_fetch(c, tb, GROUP, member, 0)), 30, 0.2, "B read") == [(0, 5)]
        out = _fetch(c, tb, GROUP, member, -1, acks=[{"first_offset": 0, "last_offset": 1,
                                                      "acknowledge_types": [ACCEPT]}])
        assert out["error_code"] == 0, out

        # every topic: the state there is (B-1 was never loaded: no state, left out) -- as of the leader's
        # checkpoint of it in ZooKeeper, which follows the acknowledgement within
        # group.share.state.checkpoint.interval.ms
        want = {(A, 0): (5, 0), (B, 0): (2, 0)}
        wait_until(lambda: _offsets(c, None) == want, 10, 0.05, lambda: f"the checkpoint: {_offsets(c, None)}")
        # by name: B-1 shows -1, as Kafka's uninitialized start offset; so does a topic nobody knows
        # (Kafka: "the start offset is returned as -1", no error, as OffsetFetch does)
        asked = [{"topic_name": A, "partitions": [0]}, {"topic_name": B, "partitions": [0, 1]},
                 {"topic_name": "share-nowhere", "partitions": [0]}]
        assert _offsets(c, asked) == {(A, 0): (5, 0), (B, 0): (2, 0), (B, 1): (-1, 0), ("share-nowhere", 0): (-1, 0)}
