"""The share-group admin APIs at the coordinator (KIP-932): DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups of a share group, on a real
``Coordinator`` with the in-memory store; the handlers through a fake front door (routing,
Kafka's ACL rules, the group's configs deleted with it)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from coord_harness import Harness, async_test

from spark_coord.coordinator.doors import share_admin
from spark_coord.coordinator.doors.share_group import ShareGroups
from spark_coord.coordinator.handlers import (
    alter_share_group_offsets,
    delete_groups,
    delete_share_group_offsets,
    describe_share_group_offsets,
)
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, ResourceType
from spark_coord.share.partition import SharePartition
from spark_coord.share.store import encode

TID, UID, OLD = b"\x01" * 16, b"\x02" * 16, b"\x09" * 16
ZERO = bytes(16)


def state(start: int, ranges=(), topic_id: bytes | None = TID) -> bytes:
    return encode({"version": 1, "start": start, "ranges": [list(r) for r in ranges]}, topic_id)


async def started() -> Harness:
    h = await Harness({"t": 2, "u": 1}).start()
    h.coord.on_topics_changed({"t": 2, "u": 1}, ids={"t": TID, "u": UID})
    return h


def join(h: Harness, group: str, member: str, topics=("t",)) -> dict:
    answer = ShareGroups(h.coord).heartbeat({"group_id": group, "member_id": member, "member_epoch": 0,
                                             "subscribed_topic_names": list(topics)}, "client-" + member, "10.0.0.9")
    assert answer["error_code"] == 0, answer
    return answer


def leave(h: Harness, group: str, member: str) -> None:
    g = h.coord.share_groups[group]
    ShareGroups(h.coord).heartbeat({"group_id": group, "member_id": member, "member_epoch": g.members[member].epoch},
                                   "c", "h")
    ShareGroups(h.coord).heartbeat({"group_id": group, "member_id": member, "member_epoch": -1}, "c", "h")


# ---------------------------------------------------------------- what a znode says

def test_lag_is_the_log_end_minus_the_start_minus_what_is_done():
    s = share_admin.parse_state(state(5, [(5, 6, 2, 1), (8, 8, 4, 3), (9, 9, 0, 1)]))
    assert (s.start, s.done, s.topic_id) == (5, ((5, 6), (8, 8)), TID)
    assert s.lag(12) == 12 - 5 - 3  # 7, 9, 10, 11 are still to be done
    assert s.lag(7) == 0
    assert s.lag(3) == 0  # a log end below the start offset (truncated): never negative
    assert share_admin.parse_state(state(0)).lag(10) == 10


@pytest.mark.parametrize("data", [b"not json", b"[]", json.dumps({"version": 1, "start": -1, "ranges": []}).encode(),
                                  json.dumps({"version": 1, "start": 0, "ranges": [[1, 2]]}).encode()])
def test_an_unreadable_znode_is_a_value_error(data):
    with pytest.raises(ValueError):
        share_admin.parse_state(data)


def test_a_fresh_state_is_what_a_leader_restores_at_the_new_start():
    data = share_admin.fresh_state(42, TID)
    snap = json.loads(data)
    assert snap == {"version": 1, "start": 42, "ranges": [], "topic_id": TID.hex()}
    snap.pop("topic_id")
    sp = SharePartition.restore(snap)
    assert (sp.start_offset, sp.end_offset) == (42, 42)


# ---------------------------------------------------------------- DescribeShareGroupOffsets

@async_test
async def test_describe_every_partition_with_state_with_lag_from_the_log_ends():
    h = await started()
    h.store.share_states["sg"] = {("t", 0): state(10, [(10, 11, 2, 1)]), ("t", 1): state(4),
                                  ("gone", 0): state(3, topic_id=None), ("u", 0): state(7, topic_id=OLD)}
    asked = []

    async def log_ends(tps):
        asked.append(sorted(tps))
        return {("t", 0): 15}  # t-1's leader did not answer

    g = await share_admin.describe_offsets(h.coord, "sg", None, log_ends)
    assert g["error_code"] == 0
    # a topic the cluster no longer has, and state written for an older topic of the name, are left out
    assert [(t["topic_name"], t["topic_id"]) for t in g["topics"]] == [("t", TID)]
    rows = {p["partition_index"]: p for p in g["topics"][0]["partitions"]}
    assert (rows[0]["start_offset"], rows[0]["lag"], rows[0]["leader_epoch"]) == (10, 15 - 10 - 2, -1)
    assert (rows[1]["start_offset"], rows[1]["lag"]) == (4, -1)
    assert asked == [[("t", 0), ("t", 1)]]


@async_test
async def test_describe_named_partitions_unknown_topics_and_refused_topics():
    h = await started()
    h.store.share_states["sg"] = {("t", 0): state(3), ("u", 0): state(2, topic_id=UID)}

    async def log_ends(tps):
        return {tp: 9 for tp in tps}

    def refused(t):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED if t == "u" else ErrorCode.NONE

    g = await share_admin.describe_offsets(h.coord, "sg", [
        {"topic_name": "t", "partitions": [0, 1]}, {"topic_name": "nope", "partitions": [0]},
        {"topic_name": "u", "partitions": [0]}], log_ends, refused)
    t, nope, u = g["topics"]
    assert [(p["start_offset"], p["lag"], p["error_code"]) for p in t["partitions"]] == [(3, 6, 0), (-1, -1, 0)]
    # a topic the cluster does not have: no data, no error (Kafka's rule, as OffsetFetch)
    assert nope["topic_id"] == ZERO and nope["partitions"] == [
        {"partition_index": 0, "start_offset": -1, "leader_epoch": -1, "lag": -1, "error_code": 0,
         "error_message": None}]
    assert [(p["start_offset"], p["error_code"]) for p in u["partitions"]] == [
        (-1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    # asked for all, a refused topic is left out
    g = await share_admin.describe_offsets(h.coord, "sg", None, log_ends, refused)
    assert [t["topic_name"] for t in g["topics"]] == ["t"]


@async_test
async def test_describe_an_unknown_group_is_empty_and_an_unreachable_store_says_so():
    h = await started()
    g = await share_admin.describe_offsets(h.coord, "nobody", None, None)
    assert (g["error_code"], g["topics"]) == (0, [])
    h.store.fail_writes = True
    g = await share_admin.describe_offsets(h.coord, "nobody", None, None)
    assert g["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await share_admin.describe_offsets(h.coord, "", None, None))["error_code"] == ErrorCode.INVALID_GROUP_ID


# ---------------------------------------------------------------- AlterShareGroupOffsets

def alter_body(group="sg", **offsets) -> dict:
    topics: dict[str, list] = {}
    for key, offset in offsets.items():
        topic, partition = key.rsplit("_", 1)
        topics.setdefault(topic, []).append({"partition_index": int(partition), "start_offset": offset})
    return {"group_id": group, "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]}


@async_test
async def test_alter_writes_fresh_states_and_refuses_what_the_cluster_lacks():
    h = await started()
    h.store.share_states["sg"] = {("t", 0): state(50, [(50, 60, 2, 1)])}
    answer = await share_admin.alter_offsets(h.coord, alter_body(t_0=0, t_1=7, t_5=1, u_0=-3, nope_0=0))
    assert answer["error_code"] == 0
    codes = {(t["topic_name"], p["partition_index"]): p["error_code"] for t in answer["responses"]
             for p in t["partitions"]}
    assert codes == {("t", 0): 0, ("t", 1): 0, ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("u", 0): ErrorCode.INVALID_REQUEST, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert {t["topic_name"]: t["topic_id"] for t in answer["responses"]} == {"t": TID, "u": UID, "nope": ZERO}
    stored = h.store.share_states["sg"]
    assert set(stored) == {("t", 0), ("t", 1)}
    assert share_admin.parse_state(stored[("t", 0)]) == share_admin.ShareState(0, (), TID)  # in-flight gone
    assert share_admin.parse_state(stored[("t", 1)]).start == 7
    # a group id nobody used yet gets the state too (its first consumers start there)
    answer = await share_admin.alter_offsets(h.coord, alter_body("fresh", t_0=3))
    assert answer["error_code"] == 0 and ("t", 0) in h.store.share_states["fresh"]


@async_test
async def test_alter_needs_an_empty_share_group():
    h = await started()
    join(h, "sg", "m1")
    answer = await share_admin.alter_offsets(h.coord, alter_body(t_0=0))
    assert answer["error_code"] == ErrorCode.NON_EMPTY_GROUP
    assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
    assert "sg" not in h.store.share_states
    leave(h, "sg", "m1")
    assert h.coord.share_groups["sg"].state == "Empty"
    assert (await share_admin.alter_offsets(h.coord, alter_body(t_0=0)))["error_code"] == 0


@async_test
async def test_alter_of_a_consumer_group_and_a_fenced_write():
    h = await started()
    h.coord.groups["cg"] = object()  # a consumer group of this id
    answer = await share_admin.alter_offsets(h.coord, alter_body("cg", t_0=0))
    assert answer["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    del h.coord.groups["cg"]
    h.store.fenced = True
    answer = await share_admin.alter_offsets(h.coord, alter_body("sg", t_0=0, nope_0=0))
    assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
    codes = [p["error_code"] for t in answer["responses"] for p in t["partitions"]]
    assert codes == [ErrorCode.NOT_COORDINATOR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


# ---------------------------------------------------------------- DeleteShareGroupOffsets

@async_test
async def test_delete_offsets_of_topics():
    h = await started()
    # a share group known by its state only (the coordinator that held its members went away)
    h.store.share_states["sg"] = {("t", 0): state(1), ("t", 1): state(2), ("u", 0): state(3, topic_id=UID)}
    answer = await share_admin.delete_offsets(h.coord, {"group_id": "sg", "topics": [
        {"topic_name": "t"}, {"topic_name": "nope"}]})
    assert answer["error_code"] == 0
    assert [(t["topic_name"], t["topic_id"], t["error_code"]) for t in answer["responses"]] == [
        ("t", TID, 0), ("nope", ZERO, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert set(h.store.share_states["sg"]) == {("u", 0)}
    assert ("delete_share_states", "sg", ["t"]) in h.store.writes


@async_test
async def test_delete_offsets_needs_an_empty_share_group():
    h = await started()
    answer = await share_admin.delete_offsets(h.coord, {"group_id": "nobody", "topics": [{"topic_name": "t"}]})
    assert (answer["error_code"], answer["responses"]) == (ErrorCode.GROUP_ID_NOT_FOUND, [])
    join(h, "sg", "m1")
    answer = await share_admin.delete_offsets(h.coord, {"group_id": "sg", "topics": [{"topic_name": "t"}]})
    assert answer["error_code"] == ErrorCode.NON_EMPTY_GROUP


# ---------------------------------------------------------------- DeleteGroups

@async_test
async def test_delete_share_group_takes_its_state_along():
    h = await started()
    join(h, "sg", "m1")
    h.store.share_states["sg"] = {("t", 0): state(1)}
    assert await share_admin.delete_share_group(h.coord, "sg") == ErrorCode.NON_EMPTY_GROUP
    leave(h, "sg", "m1")
    assert await share_admin.delete_share_group(h.coord, "sg") == ErrorCode.NONE
    assert "sg" not in h.coord.share_groups and "sg" not in h.store.share_states
    # known by its state only
    h.store.share_states["old"] = {("t", 1): state(5)}
    assert await share_admin.delete_share_group(h.coord, "old") == ErrorCode.NONE
    assert "old" not in h.store.share_states
    # not a share group: DeleteGroups goes on to the other types
    assert await share_admin.delete_share_group(h.coord, "nobody") is None


# ---------------------------------------------------------------- the front door

class Door:
    """A front door serving every group from ``h``'s coordinator (or refusing all with ``code``)."""

    def __init__(self, h: Harness, code: int | None = None, ends: dict | None = None):
        self.role = SimpleNamespace(coordinator=h.coord, share=ShareGroups(h.coord),
                                    admin=SimpleNamespace(delete_groups=self._admin_delete))
        self.code = code
        self.ends = ends or {}
        self.admin_deleted: list[str] = []

    def for_group(self, group_id):
        return (None, self.code) if self.code is not None else (self.role, None)

    async def log_ends(self, partitions):
        return {tp: self.ends[tp] for tp in partitions if tp in self.ends}

    async def _admin_delete(self, body):
        self.admin_deleted.extend(body["groups_names"])
        return {"results": [{"group_id": g, "error_code": ErrorCode.GROUP_ID_NOT_FOUND} for g in body["groups_names"]]}


class Authorizer:
    """Allows everything but the (operation, resource type, name) triples in ``denied``."""

    enabled = True

    def __init__(self, *denied: tuple[AclOperation, ResourceType, str]):
        self.denied = set(denied)

    def authorize(self, principal, host, operation, resource) -> bool:
        return (operation, resource.type, resource.name) not in self.denied


def ctx_conn(authorizer=None, configs=None):
    ctx = SimpleNamespace(authorizer=authorizer or SimpleNamespace(enabled=False), group_configs=configs)
    conn = SimpleNamespace(auth=SimpleNamespace(principal="User:alice", host="10.0.0.1"))
    return ctx, conn


@async_test
async def test_handlers_route_authorize_and_answer():
    h = await started()
    h.store.share_states["sg"] = {("t", 0): state(2), ("u", 0): state(1, topic_id=UID)}
    door = Door(h, ends={("t", 0): 12, ("u", 0): 1})
    ctx, conn = ctx_conn(Authorizer((AclOperation.DESCRIBE, ResourceType.TOPIC, "u"),
                                    (AclOperation.DESCRIBE, ResourceType.GROUP, "secret")))
    answer = await describe_share_group_offsets.handle(door, ctx, conn, None, {"groups": [
        {"group_id": "sg", "topics": None}, {"group_id": "secret", "topics": None}]})
    sg, secret = answer["groups"]
    assert [(t["topic_name"], [(p["start_offset"], p["lag"]) for p in t["partitions"]]) for t in sg["topics"]] == [
        ("t", [(2, 10)])]
    assert secret["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    # another coordinator's group
    answer = await describe_share_group_offsets.handle(Door(h, ErrorCode.NOT_COORDINATOR), ctx, conn, None,
                                                       {"groups": [{"group_id": "sg", "topics": None}]})
    assert answer["groups"][0]["error_code"] == ErrorCode.NOT_COORDINATOR

    # Alter: Read on the group and on each topic
    ctx, conn = ctx_conn(Authorizer((AclOperation.READ, ResourceType.TOPIC, "u")))
    answer = await alter_share_group_offsets.handle(door, ctx, conn, None, alter_body(t_0=0, u_0=0))
    assert [p["error_code"] for t in answer["responses"] for p in t["partitions"]] == [
        0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    ctx, conn = ctx_conn(Authorizer((AclOperation.READ, ResourceType.GROUP, "sg")))
    answer = await alter_share_group_offsets.handle(door, ctx, conn, None, alter_body(t_0=0))
    assert answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED

    # Delete offsets: Delete on the group (Read on it is not enough), Read on each topic
    ctx, conn = ctx_conn(Authorizer((AclOperation.DELETE, ResourceType.GROUP, "sg")))
    answer = await delete_share_group_offsets.handle(door, ctx, conn, None,
                                                     {"group_id": "sg", "topics": [{"topic_name": "t"}]})
    assert answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    ctx, conn = ctx_conn(Authorizer((AclOperation.READ, ResourceType.TOPIC, "u")))
    answer = await delete_share_group_offsets.handle(door, ctx, conn, None, {"group_id": "sg", "topics": [
        {"topic_name": "t"}, {"topic_name": "u"}]})
    assert [(t["topic_name"], t["error_code"]) for t in answer["responses"]] == [
        ("t", 0), ("u", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert set(h.store.share_states["sg"]) == {("u", 0)}


@async_test
async def test_delete_groups_of_a_share_group_deletes_its_state_and_configs():
    h = await started()
    h.store.share_states["sg"] = {("t", 0): state(2)}
    deleted = []

    class Configs:
        async def delete(self, group):
            deleted.append(group)
            return True

    door = Door(h)
    ctx, conn = ctx_conn(configs=Configs())
    answer = await delete_groups.handle(door, ctx, conn, None, {"groups_names": ["sg", "cg"]})
    assert answer["results"] == [{"group_id": "sg", "error_code": 0},
                                 {"group_id": "cg", "error_code": ErrorCode.GROUP_ID_NOT_FOUND}]
    assert deleted == ["sg"] and door.admin_deleted == ["cg"]
    assert "sg" not in h.store.share_states
    # Delete on the group is needed
    ctx, conn = ctx_conn(Authorizer((AclOperation.DELETE, ResourceType.GROUP, "x")))
    answer = await delete_groups.handle(door, ctx, conn, None, {"groups_names": ["x"]})
    assert answer["results"] == [{"group_id": "x", "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}]
