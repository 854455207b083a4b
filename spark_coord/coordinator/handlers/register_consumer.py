"""RegisterConsumer (coordinator api 1001, versions 0-2): a member joins its group.

v1 carries the member's claim (what it still holds after it lost its coordinator);
v2 members hand partitions over incrementally (StopFetcher/StartFetcher v1).  The
member needs Read on the group and on every topic it names; its partitions then
come only from topics its principal may Read.  After a successful answer the
connection carries the coordinator's Ping/StopFetcher/StartFetcher to the member.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.errors import ErrorCode
from spark_coord.wire import coordinator as api


async def handle(door, ctx, conn, header, body) -> dict:
    role, _ = door.for_group(body.get("group_id"))
    if role is None:
        return {"error_code": ErrorCode.NOT_COORDINATOR, "error_message":
                f"not the coordinator of the group (its coordinator is {door.holder_of(body.get('group_id'))[0]})"}
    coordinator = role.coordinator
    refused = authz.refuse_member(ctx, conn, body.get("group_id"),
                                  [t.get("topic") for t in body.get("topics") or [] if isinstance(t, dict)])
    if refused:
        return {"error_code": refused, "error_message": "not authorized"}
    answer = coordinator.register(door.member_channel(conn, role), body, header.api_version)
    if answer.get("error_code") == ErrorCode.NONE:
        group, consumer = body.get("group_id"), body.get("consumer_id")
        if isinstance(group, str) and isinstance(consumer, str):
            coordinator.set_topic_filter(group, consumer, authz.topic_filter(ctx, conn))
    return answer


API = GroupApi(api.REGISTER_CONSUMER, "RegisterConsumer", handle, lambda body, code: {"error_code": code})
