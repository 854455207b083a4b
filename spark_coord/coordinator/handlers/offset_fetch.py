"""OffsetFetch (Kafka api 9): a group's committed offsets, as lag tools and consumers read them.

Describe on each group (else GROUP_AUTHORIZATION_FAILED) and on each topic: asked-for
topics it may not describe answer TOPIC_AUTHORIZATION_FAILED, and when all offsets
are asked for, those topics are left out (Kafka's rules).  v8+ ask for several groups.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int, version: int = 8) -> dict:
    """One error everywhere the OffsetFetch answer has an error code (partitions before v2)."""
    def partitions(topics) -> list[dict]:
        return [{"name": t.get("name"), "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
            for p in t.get("partition_indexes") or []]} for t in topics or []]

    return {"throttle_time_ms": 0, "error_code": code, "topics": partitions(body.get("topics")),
            "groups": [{"group_id": g.get("group_id"), "topics": partitions(g.get("topics")), "error_code": code}
                       for g in body.get("groups") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    version = header.api_version
    if version < 8:
        role, code = door.for_group(body.get("group_id"))
        if code is not None:
            return error_response(body, code, version)
        if not ctx.authorizer.enabled:
            return role.classic.offset_fetch(body, version)
    asked = body.get("groups") if version >= 8 else [{"group_id": body.get("group_id"), "topics": body.get("topics")}]
    out = []
    for g in asked or []:
        gid = g.get("group_id") or ""
        role, code = door.for_group(gid)  # each group from the coordinator of its shard
        if code is not None:
            out.append(error_response({"groups": [g]}, code)["groups"][0])
            continue
        one = role.classic.offset_fetch(dict(body, groups=[g]), 8)["groups"][0]
        if not ctx.authorizer.enabled:
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
    return {"throttle_time_ms": 0, "topics": first["topics"], "error_code": first["error_code"]}


API = GroupApi(ApiKey.OFFSET_FETCH, "OffsetFetch", handle, error_response)
