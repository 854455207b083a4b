"""OffsetFetch (Kafka api 9): a group's committed offsets, as lag tools and consumers read them.

Describe on each group (else GROUP_AUTHORIZATION_FAILED) and on each topic: asked-for
topics it may not describe answer TOPIC_AUTHORIZATION_FAILED, and when all offsets
are asked for, those topics are left out (Kafka's rules).  v8+ ask for several groups.

A group whose shard this process does not serve now (another broker coordinates it, or its
coordinator here is loading or has lost its election) is answered from ZooKeeper, where every
commit a coordinator acknowledges is written first: Kafka would answer NOT_COORDINATOR, and
librdkafka, given that while its assignment changes, never fetches the partitions it asked
for.  Only when ZooKeeper cannot be read does the coordinator's error go back -- the group's
(v2+), as Kafka answers it, not one per partition.

With ``require_stable`` (v7+, KIP-447) a partition whose offset is pending in a transaction (a
TxnOffsetCommit whose marker has not come yet) answers UNSTABLE_OFFSET_COMMIT with offset -1, at
the partition (the group's error stays NONE, as Kafka answers it); read from ZooKeeper's
``/consumers/<group>/pending`` too when another broker coordinates the group.
"""

from __future__ import annotations

from spark_coord.coordinator.doors.group_offsets import offsets_answer
from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int, version: int = 8) -> dict:
    """The error answer, as Kafka's ``OffsetFetchRequest.getErrorResponse``: the error on every asked
    partition before v2 (the answer has no other place for it), from v2 on the response's (v2-v7)
    and each group's (v8+) error code and no partitions."""
    def partitions(topics) -> list[dict]:
        if version >= 2:
            return []
        return [{"name": t.get("name"), "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
            for p in t.get("partition_indexes") or []]} for t in topics or []]

    return {"throttle_time_ms": 0, "error_code": code, "topics": partitions(body.get("topics")),
            "groups": [{"group_id": g.get("group_id"), "topics": partitions(g.get("topics")), "error_code": code}
                       for g in body.get("groups") or []]}


async def _group_answer(door, body: dict, g: dict) -> dict:
    """One group's answer (the v8+ shape): from the coordinator of its shard here, else from ZooKeeper
    (``FrontDoor.stored_offsets``), else the coordinator's error."""
    gid = g.get("group_id") or ""
    role, code = door.for_group(gid)
    if code is None:
        one = role.offsets.offset_fetch(dict(body, groups=[g]), 8)["groups"][0]
        if one["error_code"] != ErrorCode.NOT_COORDINATOR:
            return one
        code = ErrorCode.NOT_COORDINATOR
    stored = await door.stored_offsets(gid)
    unstable = None
    if stored is not None and body.get("require_stable"):
        unstable = await door.stored_pending(gid)
        stored = None if unstable is None else stored
    if stored is not None:
        return offsets_answer(gid, stored, g.get("topics"), unstable)
    return {"group_id": gid, "topics": [], "error_code": int(code)}


async def handle(door, ctx, conn, header, body) -> dict:
    version = header.api_version
    asked = body.get("groups") if version >= 8 else [{"group_id": body.get("group_id"), "topics": body.get("topics")}]
    out = []
    for g in asked or []:
        gid = g.get("group_id") or ""
        one = await _group_answer(door, body, g)
        if one["error_code"] or not ctx.authorizer.enabled:
            out.append(one)
            continue
        refused = authz.group_refused(ctx, conn, AclOperation.DESCRIBE, gid)
        if refused:
            out.append({"group_id": gid, "topics": [], "error_code": refused})
            continue
        codes = authz.topic_codes(ctx, conn, AclOperation.DESCRIBE, gid, [t["name"] for t in one["topics"]])
        topics = []
        for t in one["topics"]:
            if not codes.get(t["name"]):
                topics.append(t)
            elif g.get("topics") is not None:
                topics.append({"name": t["name"], "partitions": [
                    dict(p, committed_offset=-1, error_code=codes[t["name"]]) for p in t["partitions"]]})
        out.append(dict(one, topics=topics))
    if version >= 8:
        return {"throttle_time_ms": 0, "groups": out}
    first = out[0] if out else {"topics": [], "error_code": 0}
    if first["error_code"]:
        return error_response(body, first["error_code"], version)
    return {"throttle_time_ms": 0, "topics": first["topics"], "error_code": 0}


API = GroupApi(ApiKey.OFFSET_FETCH, "OffsetFetch", handle, error_response)
