"""SyncGroup (Kafka api 14): a Kafka consumer takes the assignment of its generation.

What a client leader sends is ignored (no member is leader: the coordinator
assigns); the answer is the member's assignment in the consumer protocol, and it
answers the member's StartFetcher.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}


async def handle(door, ctx, conn, header, body) -> dict:
    code = authz.refused(door, ctx, conn, body.get("group_id"))
    if code is not None:
        return error_response(body, code)
    role, _ = door.for_group(body.get("group_id"))
    return role.classic.sync_group(body)


API = GroupApi(ApiKey.SYNC_GROUP, "SyncGroup", handle, error_response)
