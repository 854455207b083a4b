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

import logging

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.coordinator.storage.store import Fenced, StoreError
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)


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
    code = code or role.classic.not_served(group_id) or authz.group_refused(ctx, conn, AclOperation.DELETE, group_id)
    if code:
        return error_response(body, code)
    coordinator = role.coordinator
    if group_id not in coordinator.groups:
        return error_response(body, ErrorCode.GROUP_ID_NOT_FOUND)
    topics = body.get("topics") or []
    topic_code = authz.topic_refusals(ctx, conn, AclOperation.READ)
    codes: dict = {}
    wanted = []
    for t in topics:
        name = t.get("name")
        for p in t.get("partitions") or []:
            tp = (name, p.get("partition_index"))
            if topic_code(name):
                codes[tp] = topic_code(name)
            elif not isinstance(tp[1], int) or not 0 <= tp[1] < coordinator.topics.get(name, 0):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)
    if wanted:
        try:
            result = await coordinator.delete_offsets(group_id, wanted)
        except Fenced:
            return error_response(body, ErrorCode.NOT_COORDINATOR)
        except StoreError as e:
            log.warning("group %s: deleting offsets failed: %s", group_id, e)
            return error_response(body, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if isinstance(result, ErrorCode):
            return error_response(body, result)
        codes.update(result)
    return error_response(body, ErrorCode.NONE, codes)


API = GroupApi(ApiKey.OFFSET_DELETE, "OffsetDelete", handle, error_response)
