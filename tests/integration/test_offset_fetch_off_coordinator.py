"""OffsetFetch at a broker that does not coordinate the group: answered from ZooKeeper.

A nemesis run (seed 27) left a partition unread for 94 s: a KIP-848 librdkafka consumer was
given it while the group's coordinator moved, its OffsetFetch came back NOT_COORDINATOR, and
librdkafka does not ask again when the assignment changed meanwhile -- the partition stays
assigned and never fetched until it is taken away (``rd_kafka_assignment_handle_OffsetFetch``).
Every commit a coordinator acknowledges is in ZooKeeper first (Kafka's layout,
``/consumers/<group>/offsets/<topic>/<partition>``), so any broker can answer a group's
OffsetFetch, whichever shard it holds; and an error, where one is due, is the group's (v2+),
not one per partition, as Kafka answers it.
"""

from __future__ import annotations

import pytest
from support import BROKER_OVERRIDES

from spark_coord.client.groups import GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.coordinator.handlers.offset_fetch import error_response
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

SHARDED = dict(BROKER_OVERRIDES, **{"coordinator.shards": 6})


def _asked(version: int, group: str, topic: str) -> dict:
    topics = [{"name": topic, "partition_indexes": [0, 1, 2]}]
    if version >= 8:
        return {"groups": [{"group_id": group, "topics": topics}], "require_stable": False}
    return {"group_id": group, "topics": topics, "require_stable": False}


def _answered(version: int, resp: dict) -> tuple[int, dict[int, int]]:
    one = resp["groups"][0] if version >= 8 else resp
    offsets = {p["partition_index"]: p["committed_offset"] for t in one["topics"] for p in t["partitions"]
               if p["error_code"] == 0}
    codes = {p["error_code"] for t in one["topics"] for p in t["partitions"]} - {0}
    return (one.get("error_code", 0) or next(iter(codes), 0)), offsets


@pytest.mark.parametrize("cluster", [SHARDED], indirect=True)
def test_every_broker_answers_a_groups_offset_fetch_with_what_its_coordinator_committed(cluster, create):
    topic, group = "fetch-anywhere", "fetch-anywhere-group"
    create(topic, 3)
    client = ClusterClient(cluster.bootstrap)
    try:
        with GroupClient(client) as groups:
            groups.commit_offsets(group, {(topic, 0): 5, (topic, 1): 7})
            coordinator = groups.coordinator(group).node_id
        client.refresh()
        others = sorted(b for b in client.brokers if b != coordinator)
        assert others, "a cluster of one broker has no other broker to ask"
        for broker in [coordinator, *others]:
            conn = client.connection(broker)
            for version in (1, 3, 7, 8, 9):
                code, offsets = _answered(version, conn.request(ApiKey.OFFSET_FETCH, _asked(version, group, topic),
                                                                version=version))
                assert (code, offsets) == (0, {0: 5, 1: 7, 2: -1}), (broker, coordinator, version)
            # every partition the group has an offset for (topics null, v2+)
            resp = conn.request(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": group, "topics": None}]}, version=8)
            assert _answered(8, resp) == (0, {0: 5, 1: 7}), broker
            # a group nobody committed for: no offsets, no error, from any broker
            assert _answered(8, conn.request(ApiKey.OFFSET_FETCH, _asked(8, "never-committed", topic), version=8)) \
                == (0, {0: -1, 1: -1, 2: -1})
    finally:
        client.close()


def test_an_offset_fetch_error_is_the_groups_from_v2_on_as_kafka_answers_it():
    """Kafka's ``OffsetFetchRequest.getErrorResponse``: per partition before v2 (the answer has no other
    place for it), then only the response's (v2-v7) or the group's (v8+) error code.  librdkafka takes a
    per-partition error for that partition's final answer and never fetches it."""
    asked = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}],
             "groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}]}
    code = int(ErrorCode.NOT_COORDINATOR)
    old = error_response(asked, code, version=1)
    assert [p["error_code"] for t in old["topics"] for p in t["partitions"]] == [code, code]
    for version in (2, 7):
        resp = error_response(asked, code, version=version)
        assert resp["error_code"] == code and resp["topics"] == []
    resp = error_response(asked, code, version=8)
    assert resp["groups"] == [{"group_id": "g", "topics": [], "error_code": code}]
