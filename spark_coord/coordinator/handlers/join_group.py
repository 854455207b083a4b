"""JoinGroup (Kafka api 11): a Kafka consumer joins, or joins again for a rebalance.

Served by the coordinator of the group's shard only (others answer NOT_COORDINATOR,
one still restoring the shard's groups COORDINATOR_LOAD_IN_PROGRESS).  The member needs Read on the
group and on the topics of its subscription.  The answer waits for the member's
assignment (``classic.ClassicGroups.join_group``); a member whose connection closes
while it waits is no longer waited for.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.wire.consumer_protocol import ConsumerProtocolError, decode_subscription
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1, "protocol_name": None, "leader": "",
            "member_id": body.get("member_id") or "", "members": []}


def subscribed_topics(body: dict) -> list[str]:
    """The topics of a JoinGroup's first consumer-protocol subscription (none if it cannot be read:
    the group API answers that itself)."""
    for p in body.get("protocols") or []:
        try:
            return list(decode_subscription(p.get("metadata") or b"")["topics"])
        except ConsumerProtocolError:
            return []
    return []


async def handle(door, ctx, conn, header, body) -> dict:
    role, code = door.for_group(body.get("group_id"))
    if code is None:
        code = authz.refuse_member(ctx, conn, body.get("group_id"), subscribed_topics(body)) or None
    if code is not None:
        return error_response(body, code)
    return await role.classic.join_group(body, header.api_version, header.client_id or "", conn.auth.host,
                                         door.closed_future(conn), authz.topic_filter(ctx, conn))


API = GroupApi(ApiKey.JOIN_GROUP, "JoinGroup", handle, error_response)
