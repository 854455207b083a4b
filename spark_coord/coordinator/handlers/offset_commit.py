"""OffsetCommit (Kafka api 8): a Kafka consumer's commit, into the group's ZooKeeper offsets.

Read on the group and on each topic; refused topics answer TOPIC_AUTHORIZATION_FAILED
and the others are committed.  Answered once the offsets are in ZooKeeper.
"""

from __future__ import annotations

from spark_coord.coordinator.handlers import authz
from spark_coord.coordinator.handlers.base import GroupApi
from spark_coord.security.acl import AclOperation
from spark_coord.wire.registry import ApiKey


def error_response(body: dict, code: int, per_topic: dict[str, int] | None = None) -> dict:
    """``code`` (or ``per_topic[name]``) for every partition of the request."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.get("name"), "partitions": [{"partition_index": p.get("partition_index"),
                                                "error_code": (per_topic or {}).get(t.get("name"), code)}
                                               for p in t.get("partitions") or []]}
        for t in body.get("topics") or []]}


async def handle(door, ctx, conn, header, body) -> dict:
    role, code = door.for_group(body.get("group_id"))
    if code is not None:
        return error_response(body, code)
    topics = body.get("topics") or []
    codes = authz.topic_codes(ctx, conn, AclOperation.READ, body.get("group_id"), [t.get("name") for t in topics])
    refused = {t: c for t, c in codes.items() if c}
    if not refused:
        return await role.offsets.offset_commit(body, header.api_version)
    allowed = [t for t in topics if t.get("name") not in refused]
    answer = await role.offsets.offset_commit(dict(body, topics=allowed), header.api_version) if allowed \
        else {"throttle_time_ms": 0, "topics": []}
    answer["topics"] = list(answer["topics"]) + error_response(
        {"topics": [t for t in topics if t.get("name") in refused]}, 0, refused)["topics"]
    return answer


API = GroupApi(ApiKey.OFFSET_COMMIT, "OffsetCommit", handle, error_response)
