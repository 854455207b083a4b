"""LeaveGroup (Kafka api 13): Kafka consumers leave; the group is rebalanced at once (v3+: a batch)."""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "members": []}


async def handle(door, ctx, conn, header, body) -> dict:
    code = authz.refused(door, ctx, conn, body.get("group_id"))
    if code is not None:
        return error_response(body, code)
    role, _ = door.for_group(body.get("group_id"))
    return role.classic.leave_group(body, header.api_version)


API = GroupApi(ApiKey.LEAVE_GROUP, "LeaveGroup", handle, error_response)
