"""CommitOffsets (coordinator api 1006, version 0): a member's own commit, on its channel.

Answered once the offsets are in ZooKeeper, from a task of its own, so the
connection keeps reading the member's ping answers meanwhile.  Offsets of topics
the member's principal may not Read are refused (TOPIC_AUTHORIZATION_FAILED), the
others committed.
"""

from __future__ import annotations

import logging

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation
from spark_coord.wire import coordinator as api

log = logging.getLogger(__name__)


async def handle(door, ctx, conn, header, body) -> dict:
    role, _ = door.for_group(body.get("group_id"))
    if role is None:
        return {"error_code": ErrorCode.NOT_COORDINATOR, "error_message": "not the coordinator of the group"}
    coordinator = role.coordinator
    channel = door.member_channel(conn, role)
    offsets = [o for o in body.get("offsets") or [] if isinstance(o, dict)]
    codes = authz.topic_codes(ctx, conn, AclOperation.READ, body.get("group_id"), [o.get("topic") for o in offsets])
    refused = {t: c for t, c in codes.items() if c}
    if ErrorCode.GROUP_AUTHORIZATION_FAILED in refused.values():
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": "not authorized",
                "partitions": []}
    if refused:
        body = dict(body, offsets=[o for o in offsets if o.get("topic") not in refused])

    async def answer() -> dict:
        try:
            response = await coordinator.handle_commit(channel, body)
        except Exception:
            log.exception("CommitOffsets from %s failed", conn.peer)
            return {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR}
        response["partitions"] = list(response.get("partitions") or []) + [
            {"topic": o.get("topic"), "partition": o.get("partition"), "error_code": refused[o["topic"]]}
            for o in offsets if o.get("topic") in refused]
        return response

    return door.answer_later(conn, header, answer())


API = GroupApi(api.COMMIT_OFFSETS, "CommitOffsets", handle, lambda body, code: {"error_code": code})
