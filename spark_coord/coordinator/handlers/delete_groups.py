"""DeleteGroups (Kafka api 42): forget empty groups, offsets included (Delete on each group)."""

from __future__ import annotations

from spark_coord.coordinator.handlers import GroupApi, authz
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code}
                                               for g in body.get("groups_names") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    names = body.get("groups_names") or []
    results = []
    for g in names:
        role, code = door.for_group(g)
        code = code or authz.group_refused(ctx, conn, AclOperation.DELETE, g)
        if code:
            results.append({"group_id": g, "error_code": code})
        else:
            results.extend((await role.classic.delete_groups({"groups_names": [g]}))["results"])
    return {"throttle_time_ms": 0, "results": results}


API = GroupApi(ApiKey.DELETE_GROUPS, "DeleteGroups", handle, error_response)
