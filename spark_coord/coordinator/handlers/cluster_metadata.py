"""ClusterMetadata (coordinator api 1000, versions 0-1): where a group's coordinator is, and the live brokers.

v1 names the member's group: the coordinator answered holds the group's shard.  v0
(or a null group) answers the holder of shard 0.

Any broker answers it, elected or not: members ask it round-robin to find the
coordinator (seeds 001, 003 section 7).  The nodes are given at their endpoints of
the listener the request came in on: the brokers, or a standalone coordinator's
fellow coordinator processes.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api


async def handle(door, ctx, conn, header, body) -> dict:
    node, epoch = door.holder_of(body.get("group_id") if header.api_version >= 1 else None)
    return {"error_code": ErrorCode.NONE, "coordinator_id": node, "coordinator_epoch": epoch,
            "brokers": [{"node_id": i, "host": h, "port": p}
                        for i, h, p in door.coordinator_nodes(conn.auth.listener_name)]}


API = GroupApi(api.CLUSTER_METADATA, "ClusterMetadata", handle, lambda body, code: {"error_code": code})
