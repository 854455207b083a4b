"""OffsetDelete (Kafka api 47): delete a group's committed offsets of some partitions (KIP-496).

Routed like OffsetCommit: only the coordinator of the group's shard serves it
(NOT_COORDINATOR elsewhere, top-level).  Delete on the group is needed, else
GROUP_AUTHORIZATION_FAILED (top-level); Read on each topic, else TOPIC_AUTHORIZATION_FAILED
for its partitions.  An unknown group (or a share group) is GROUP_ID_NOT_FOUND; a
partition of no existing topic UNKNOWN_TOPIC_OR_PARTITION; a topic a member of the
group subscribes to GROUP_SUBSCRIBED_TO_TOPIC (the group consumes it: stop the
consumers, or change their subscription, first).  The others' offsets are deleted
from ``/consumers/<group>/offsets/<topic>/<partition>``, so lag tools stop
reporting them and a consumer of the group starts those partitions by its
auto.offset.reset.
"""

from __future__ import annotations

from spark_coord.coordinator.doors.common import not_served
from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int, per_partition: dict | None = None) -> dict:
    """``code`` at the top when ``per_partition`` is None, else each partition's code."""
    top = code if per_partition is None else ErrorCode.NONE
    return {"error_code": top, "throttle_time_ms": 0, "topics": [
        {"name": t.get("name"), "partitions": [
            {"partition_index": p.get("partition_index"),
             "error_code": int((per_partition or {}).get((t.get("name"), p.get("partition_index")), ErrorCode.NONE))}
            for p in t.get("partitions") or []]}
        for t in body.get("topics") or []] if per_partition is not None else []}


async def handle(door, ctx, conn, header, body) -> dict:
    group_id = body.get("group_id")
    role, code = door.for_group(group_id)
    code = code or not_served(role.coordinator, group_id) or authz.group_refused(ctx, conn, AclOperation.DELETE,
                                                                                  group_id)
    if code:
        return error_response(body, code)
    wanted = [(t.get("name"), p.get("partition_index")) for t in body.get("topics") or []
              for p in t.get("partitions") or []]
    codes = await role.offsets.offset_delete(group_id, wanted, authz.topic_refusals(ctx, conn, AclOperation.READ))
    if isinstance(codes, ErrorCode):
        return error_response(body, codes)
    return error_response(body, ErrorCode.NONE, codes)


API = GroupApi(ApiKey.OFFSET_DELETE, "OffsetDelete", handle, error_response)
