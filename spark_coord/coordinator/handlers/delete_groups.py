"""DeleteGroups (Kafka api 42): forget empty groups, offsets included (Delete on each group)."""

from __future__ import annotations

from spark_coord.coordinator.handlers import GroupApi, authz
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code}
                                               for g in body.get("groups_names") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    code = door.not_serving()
    if code is not None:
        return error_response(body, code)
    names = body.get("groups_names") or []
    refused = {g: c for g in names if (c := authz.group_refused(ctx, conn, AclOperation.DELETE, g))}
    answer = await door.classic.delete_groups({"groups_names": [g for g in names if g not in refused]})
    answer["results"] = list(answer["results"]) + [{"group_id": g, "error_code": c} for g, c in refused.items()]
    return answer


API = GroupApi(ApiKey.DELETE_GROUPS, "DeleteGroups", handle, error_response)
