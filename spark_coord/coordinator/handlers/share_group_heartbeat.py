"""ShareGroupHeartbeat (Kafka api 76, version 1): share groups (KIP-932, "Queues for Kafka").

Served by the coordinator of the group's shard only.  Joining, and changing the subscription,
needs Read on the group and on the topics named; every heartbeat needs Read on the group.  A
member's partitions come only from topics its principal may Read.  See
``share_group.ShareGroups.heartbeat``.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "member_id": body.get("member_id"),
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}


async def handle(door, ctx, conn, header, body) -> dict:
    role, code = door.for_group(body.get("group_id"))
    if code is None:
        code = authz.refuse_member(ctx, conn, body.get("group_id"), body.get("subscribed_topic_names") or []) or None
    if code is not None:
        return error_response(body, code)
    return role.share.heartbeat(body, header.client_id or "", conn.auth.host, authz.topic_filter(ctx, conn))


API = GroupApi(ApiKey.SHARE_GROUP_HEARTBEAT, "ShareGroupHeartbeat", handle, error_response)
