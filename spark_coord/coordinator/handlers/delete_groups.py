"""DeleteGroups (Kafka api 42): forget empty groups, offsets included (Delete on each group).

A share group (KIP-932) goes with its share-partition state (``/share-groups/<group>``, every
leader told to drop what it holds) and its group configs (``/config/groups/<group>``); it is
found held by the coordinator or, after a failover (membership is not kept), by its state.
"""

from __future__ import annotations

import logging

from spark_coord.coordinator.doors import share_admin
from spark_coord.coordinator.doors.common import not_served
from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)


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
            continue
        share = None if not_served(role.coordinator, g) else await share_admin.delete_share_group(role.coordinator, g)
        if share is None:
            results.extend((await role.admin.delete_groups({"groups_names": [g]}))["results"])
            continue
        if share == ErrorCode.NONE:
            await _delete_configs(ctx, g)
        results.append({"group_id": g, "error_code": int(share)})
    return {"throttle_time_ms": 0, "results": results}


async def _delete_configs(ctx, group: str) -> None:
    """A deleted share group's own configs go too (a process without group configs -- a standalone
    coordinator -- leaves them)."""
    configs = getattr(ctx, "group_configs", None)
    if configs is None:
        return
    try:
        await configs.delete(group)
    except Exception as e:  # noqa: BLE001 -- the group is deleted; its configs stay, and say so
        log.warning("share group %s deleted, but its configs were not (%s)", group, e)


API = GroupApi(ApiKey.DELETE_GROUPS, "DeleteGroups", handle, error_response)
