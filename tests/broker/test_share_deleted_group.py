"""A share group deleted with DeleteGroups stays deleted: a ShareFetch that arrives for it afterwards
(a straggling client, a raw request) does not bring it back (KIP-932, found in review: the leader's
first state write created the group's znode when it had none).

As in Kafka, only the group coordinator sets a group's share state up (Kafka's
InitializeShareGroupState after a ShareGroupHeartbeat; here the group's znode, saved by the share
door when a member joins): a share partition of a group that has no znode is not served, and its
partitions in the ShareFetch are answered GROUP_ID_NOT_FOUND (Kafka's share-partition leader maps
the persister's GROUP_ID_NOT_FOUND to that error).  Against a real broker, over the wire; another
group's member is served throughout."""

from __future__ import annotations

import base64
import uuid

import pytest
from helpers import wait_until

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.wire.registry import ApiKey
from spark_coord.zk import paths

TOPIC = "share-deleted"
GROUP, OTHER = "sg-deleted", "sg-other"
ACCEPT = 1


def _member() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _heartbeat(c, group: str, member: str, epoch: int, topics) -> dict:
    return c.request(ApiKey.SHARE_GROUP_HEARTBEAT, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                                    "rack_id": None, "subscribed_topic_names": topics})


def _join(c, group: str, member: str, topics: list[str] | None = None) -> int:
    """``member`` joins ``group`` subscribed to ``topics`` (the topic), until it is assigned some; its epoch."""
    topics = [TOPIC] if topics is None else topics
    wait_until(lambda: c.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group]},
                                 version=4)["coordinators"][0]["error_code"] == 0, 60, 0.2, "a group coordinator")
    hb = wait_until(lambda: (lambda r: r if r["error_code"] == 0 else None)(_heartbeat(c, group, member, 0, topics)),
                    30, 0.2, "joined")
    epoch = hb["member_epoch"]
    if not hb.get("assignment"):
        def assigned():
            nonlocal epoch
            r = _heartbeat(c, group, member, epoch, None)
            epoch = r.get("member_epoch", epoch)
            return r["error_code"] == 0 and r.get("assignment")
        wait_until(assigned, 30, 0.2, "assigned")
    return epoch


def _fetch(c, tid: bytes, group: str, member: str, epoch: int, acks=None) -> dict:
    return c.request(ApiKey.SHARE_FETCH, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0, "min_bytes": 0,
        "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": acks or []}]}],
        "forgotten_topics_data": []}, version=1)


def _part(out: dict) -> dict:
    assert out["error_code"] == 0, out
    return out["responses"][0]["partitions"][0]


def _acquired(out: dict) -> list[tuple[int, int]]:
    return [(a["first_offset"], a["last_offset"]) for a in _part(out)["acquired_records"]]


def _listed(c) -> set[str]:
    out = c.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []}, version=5)
    assert out["error_code"] == 0, out
    return {g["group_id"] for g in out["groups"]}


def _described(c, group: str) -> dict:
    return c.request(ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False},
                     version=1)["groups"][0]


def _reset_earliest(c, group: str) -> None:
    out = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": 32, "resource_name": group, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
        "validate_only": False}, version=1)
    assert out["responses"][0]["error_code"] == 0, out


@pytest.fixture
def set_up(broker):
    with BrokerConnection(*broker.address, timeout=30) as c:
        out = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 1,
                                                          "replication_factor": 1}], "timeout_ms": 10000})
        assert out["topics"][0]["error_code"] == 0, out
        b = BatchBuilder()
        for i in range(10):
            b.append(b"v%d" % i)
        records = b.build()

        def produced():
            r = c.request(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}, version=9)
            return r["responses"][0]["partition_responses"][0]["error_code"] == 0
        wait_until(produced, 30, 0.2, "records produced")
        for g in (GROUP, OTHER):
            _reset_earliest(c, g)
        tid = c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}]}, version=12)["topics"][0]["topic_id"]
        yield c, tid


def test_a_share_fetch_after_delete_groups_does_not_bring_the_group_back(set_up, zk):
    c, tid = set_up
    # another group's member, served before, during and after
    other = _member()
    _join(c, OTHER, other)
    assert wait_until(lambda: _acquired(_fetch(c, tid, OTHER, other, 0)), 30, 0.2, "the other group served") == [
        (0, 9)]

    # a member joins, fetches and accepts everything, closes its session and leaves; the group is deleted
    member = _member()
    _join(c, GROUP, member)
    assert wait_until(lambda: _acquired(_fetch(c, tid, GROUP, member, 0)), 30, 0.2, "records acquired") == [(0, 9)]
    out = _fetch(c, tid, GROUP, member, -1, acks=[{"first_offset": 0, "last_offset": 9,
                                                   "acknowledge_types": [ACCEPT]}])
    assert _part(out)["acknowledge_error_code"] == 0, out
    assert _heartbeat(c, GROUP, member, -1, None)["error_code"] == 0
    assert zk.exists(paths.share_partition(GROUP, TOPIC, 0)) is not None
    out = c.request(ApiKey.DELETE_GROUPS, {"groups_names": [GROUP]}, version=2)
    assert out["results"] == [{"group_id": GROUP, "error_code": 0}], out
    assert zk.exists(paths.share_group(GROUP)) is None

    # the straggler's ShareFetch (a new session of the member that left, and a member never seen): the
    # group is unknown, nothing is handed out, its znode does not come back
    for who in (member, _member()):
        out = _fetch(c, tid, GROUP, who, 0)
        assert zk.exists(paths.share_group(GROUP)) is None
        assert out["error_code"] == 0 and [(p["partition_index"], p["error_code"], p["acquired_records"])
                                           for t in out["responses"] for p in t["partitions"]] == [
            (0, ErrorCode.GROUP_ID_NOT_FOUND, [])], out
    # its acknowledgement too
    out = c.request(ApiKey.SHARE_ACKNOWLEDGE, {
        "group_id": GROUP, "member_id": member, "share_session_epoch": 1, "is_renew_ack": False,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [ACCEPT]}]}]}]}, version=1)
    assert out["error_code"] or out["responses"][0]["partitions"][0]["error_code"], out
    assert zk.exists(paths.share_group(GROUP)) is None
    assert GROUP not in _listed(c) and OTHER in _listed(c)
    assert _described(c, GROUP)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert _described(c, OTHER)["error_code"] == 0

    # the other group is still served (its records come back to it: its lock is released on a new session)
    out = _fetch(c, tid, OTHER, other, 1, acks=[{"first_offset": 0, "last_offset": 9, "acknowledge_types": [ACCEPT]}])
    assert _part(out)["acknowledge_error_code"] == 0, out

    # the group's id used again by a new member: a new group (its configs went with the old one: set
    # again), reading afresh from where its reset says -- the old one had accepted everything
    _reset_earliest(c, GROUP)
    again = _member()
    _join(c, GROUP, again)
    assert wait_until(lambda: _acquired(_fetch(c, tid, GROUP, again, 0)), 30, 0.2, "the new group served") == [
        (0, 9)]
    assert zk.exists(paths.share_group(GROUP)) is not None
