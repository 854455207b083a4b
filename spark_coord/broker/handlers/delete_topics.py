"""DeleteTopics (key 20): delete topics' znodes; every broker drops their logs.

Versions served per the wire registry (0-6): v1 adds throttle_time_ms, v4 is
flexible, v5 adds error_message, v6 names each topic by name or by id (KIP-516)
and answers both.  Kafka's rules for what a request names: neither a name nor an
id, or both, is INVALID_REQUEST; so is a name or an id listed twice (one answer
for it), and a name whose topic's id the request also lists.  An id that names
no topic (unknown, the zero uuid, a deleted topic's) answers UNKNOWN_TOPIC_ID; a
topic deleted by id is deleted only while it still has that id (a topic created
again under the name is left alone).  Deleting needs Delete on the topic, else
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections import Counter

from spark_coord.broker import topics as topic_admin
from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey
from spark_coord.zk.model import ZERO_TOPIC_ID

API_KEY = ApiKey.DELETE_TOPICS


def _requested(body: dict) -> list[tuple[str | None, bytes]]:
    """(name, id) of every entry: v6's ``topics``, or the names of v0-5's ``topic_names``."""
    if body.get("topics"):
        return [(t.get("name"), t.get("topic_id") or ZERO_TOPIC_ID) for t in body["topics"]]
    return [(name, ZERO_TOPIC_ID) for name in body.get("topic_names") or []]


def _answer(name: str | None, topic_id: bytes, code: int, message: str | None = None) -> dict:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


async def handle(ctx, conn, header, body: dict) -> dict:
    requested = _requested(body)
    timeout_ms = body.get("timeout_ms", 30000)
    names = Counter(n for n, i in requested if n is not None and i == ZERO_TOPIC_ID)
    ids = Counter(i for n, i in requested if n is None and i != ZERO_TOPIC_ID)
    id_of_name = {ctx.view.topic_name(i): i for i in ids}  # looked up before anything is deleted
    id_of_name.pop(None, None)
    responses = []
    reported: set = set()
    for name, topic_id in requested:
        if name is None and topic_id == ZERO_TOPIC_ID:
            responses.append(_answer(None, ZERO_TOPIC_ID, ErrorCode.INVALID_REQUEST,
                                     "Neither topic name nor id were specified."))
        elif name is not None and topic_id != ZERO_TOPIC_ID:
            responses.append(_answer(name, topic_id, ErrorCode.INVALID_REQUEST,
                                     "You may not specify both topic name and topic id."))
        elif name is not None and names[name] > 1:
            if ("name", name) not in reported:
                reported.add(("name", name))
                responses.append(_answer(name, ZERO_TOPIC_ID, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
        elif name is None and ids[topic_id] > 1:
            if ("id", topic_id) not in reported:
                reported.add(("id", topic_id))
                responses.append(_answer(None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id."))
        elif name is not None and name in id_of_name:
            responses.append(_answer(name, id_of_name[name], ErrorCode.INVALID_REQUEST,
                                     "The provided topic name maps to an ID that was already supplied."))
        elif name is None:
            responses.append(await _delete_by_id(ctx, conn, topic_id, timeout_ms))
        else:
            responses.append(await _delete_by_name(ctx, conn, name, timeout_ms))
    return {"throttle_time_ms": 0, "responses": responses}


async def _delete_by_name(ctx, conn, name: str, timeout_ms: int) -> dict:
    if not ctx.authorized(conn, AclOperation.DELETE, Resource.topic(name)):
        return _answer(name, ZERO_TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to delete this topic")
    r = await topic_admin.delete_topic(ctx, name, timeout_ms)
    return _answer(name, r.topic_id, r.code, r.message)


async def _delete_by_id(ctx, conn, topic_id: bytes, timeout_ms: int) -> dict:
    name = ctx.view.topic_name(topic_id)
    if name is None:
        return _answer(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, "no topic has this id")
    if not ctx.authorized(conn, AclOperation.DELETE, Resource.topic(name)):
        return _answer(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to delete this topic")
    r = await topic_admin.delete_topic(ctx, name, timeout_ms, topic_id=topic_id)
    return _answer(None if r.code == ErrorCode.UNKNOWN_TOPIC_ID else name, topic_id, r.code, r.message)


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "responses": [_answer(n, i, code) for n, i in _requested(body)]}


HANDLER = Handler(API_KEY, "DeleteTopics", handle, error_response)
