"""DeleteTopics (key 20): delete topics' znodes; every broker drops their logs.

Versions served per the wire registry (0-5): v1 adds throttle_time_ms, v4 is
flexible, v5 adds error_message.  (v6 names topics by id: not served.)
Deleting needs Delete on the topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from spark_coord.broker import topics as topic_admin
from spark_coord.broker.handlers import Handler
from spark_coord.wire.registry import ApiKey
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource

API_KEY = ApiKey.DELETE_TOPICS


async def handle(ctx, conn, header, body: dict) -> dict:
    responses = []
    for name in body.get("topic_names") or []:
        if not ctx.authorized(conn, AclOperation.DELETE, Resource.topic(name or "")):
            responses.append({"name": name, "topic_id": bytes(16), "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              "error_message": "not authorized to delete this topic"})
            continue
        r = await topic_admin.delete_topic(ctx, name, body.get("timeout_ms", 30000))
        responses.append({"name": name, "topic_id": bytes(16), "error_code": r.code, "error_message": r.message})
    return {"throttle_time_ms": 0, "responses": responses}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0,
            "responses": [{"name": n, "topic_id": bytes(16), "error_code": code, "error_message": None}
                          for n in body.get("topic_names") or []]}


HANDLER = Handler(API_KEY, "DeleteTopics", handle, error_response)
