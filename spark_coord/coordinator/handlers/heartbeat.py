"""Heartbeat (Kafka api 12): a Kafka consumer is alive; REBALANCE_IN_PROGRESS asks it to join again.

A heartbeat answers the member's pending ping and renews its lease; its answer is
how a StopFetcher or StartFetcher reaches it.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code}


async def handle(door, ctx, conn, header, body) -> dict:
    code = authz.refused(door, ctx, conn, body.get("group_id"))
    if code is not None:
        return error_response(body, code)
    role, _ = door.for_group(body.get("group_id"))
    return role.classic.heartbeat(body)


API = GroupApi(ApiKey.HEARTBEAT, "Heartbeat", handle, error_response)
