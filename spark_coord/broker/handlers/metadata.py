"""Metadata (key 3): live brokers, cluster id, controller, topics and partition leaders.

Versions (served range from the wire registry, 0-12): v0 has no controller or
cluster id and an empty topic list means "all topics"; from v1 a null list means
all topics and [] means none; v4 adds allow_auto_topic_creation; v10+ answer each
topic's id (the zero uuid for a topic that has none yet) and a request may name a
topic by id instead of by name (a null name; Kafka's clients do so from v12): an
id that names no topic -- unknown, the zero uuid, the id of a deleted topic --
answers UNKNOWN_TOPIC_ID with a null name, and is never auto-created.  When a
request names a topic both ways the id decides, as in Kafka.  A partition whose
leader is not live reports LEADER_NOT_AVAILABLE with leader -1; an unknown topic
UNKNOWN_TOPIC_OR_PARTITION (or it is created, when auto.create.topics.enable and
the request allows it).
Brokers are listed at their endpoint of the listener the request came in on.
Authorization (Kafka's rules): a request for all topics lists only those the
principal may Describe; a topic asked for by name without Describe answers
TOPIC_AUTHORIZATION_FAILED, and so does one that would be auto-created without
Create on the cluster or the topic.
"""

from __future__ import annotations

import logging

from spark_coord.broker import topics as topic_admin
from spark_coord.broker.handlers.base import Handler, may_create_topic
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey
from spark_coord.zk.model import ZERO_TOPIC_ID

log = logging.getLogger(__name__)

API_KEY = ApiKey.METADATA


def _requested(header, body: dict) -> list[tuple[str | None, bytes]] | None:
    """(name, topic id) of each topic asked for (the zero uuid when named by name, as before
    v10); None means all topics."""
    topics = body.get("topics")
    if topics is None or (header.api_version == 0 and not topics):
        return None
    return [(t.get("name"), t.get("topic_id") or ZERO_TOPIC_ID) for t in topics]


def _error_entry(code: int, name: str | None, topic_id: bytes = ZERO_TOPIC_ID) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def _topic_entry(ctx, name: str, assignment: dict[int, list[int]]) -> dict:
    live = ctx.view.brokers
    partitions = []
    for p, replicas in sorted(assignment.items()):
        leader = replicas[0]
        ok = leader in live
        partitions.append({
            "error_code": ErrorCode.NONE if ok else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": p,
            "leader_id": leader if ok else -1,
            "leader_epoch": 0,
            "replica_nodes": list(replicas),
            "isr_nodes": [b for b in replicas if b in live],
            "offline_replicas": [b for b in replicas if b not in live],
        })
    return {"error_code": ErrorCode.NONE, "name": name, "topic_id": ctx.view.topic_id(name) or ZERO_TOPIC_ID,
            "is_internal": False, "partitions": partitions}


def _brokers(ctx, listener: str) -> list[dict]:
    """Live brokers at their endpoint of ``listener``, the one the client connected on (Kafka's
    rule: a client is sent where it can speak the same protocol); brokers without it are left out."""
    out = []
    for b in sorted(ctx.view.brokers.values(), key=lambda b: b.id):
        ep = b.endpoint_for(listener)
        if ep is not None:
            out.append({"node_id": b.id, "host": ep.host, "port": ep.port, "rack": b.rack})
    return out


async def handle(ctx, conn, header, body: dict) -> dict:
    names = _requested(header, body)
    topics = []
    if names is None:
        for name in sorted(ctx.view.topics):
            if ctx.authorized(conn, AclOperation.DESCRIBE, Resource.topic(name)):
                topics.append(_topic_entry(ctx, name, ctx.view.topics[name]))
    else:
        auto = ctx.config["auto.create.topics.enable"] and (header.api_version < 4
                                                            or body.get("allow_auto_topic_creation", True))
        for name, topic_id in names:
            if topic_id != ZERO_TOPIC_ID or name is None:
                topics.append(_by_id(ctx, conn, topic_id))
                continue
            topics.append(await _by_name(ctx, conn, name, auto))
    brokers = _brokers(ctx, conn.auth.listener_name)
    return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": ctx.cluster_id or None,
            "controller_id": ctx.view.controller_id, "topics": topics}


def _by_id(ctx, conn, topic_id: bytes) -> dict:
    """The entry of a topic asked for by id (Kafka: topic ids are not secret, so a topic the
    principal may not Describe answers TOPIC_AUTHORIZATION_FAILED with its id and no name)."""
    name = ctx.view.topic_name(topic_id)
    assignment = ctx.view.topics.get(name) if name is not None else None
    if assignment is None:
        return _error_entry(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id)
    if not ctx.authorized(conn, AclOperation.DESCRIBE, Resource.topic(name)):
        return _error_entry(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
    return _topic_entry(ctx, name, assignment)


async def _by_name(ctx, conn, name: str, auto: bool) -> dict:
    """The entry of a topic asked for by name, auto-creating it when allowed."""
    if not ctx.authorized(conn, AclOperation.DESCRIBE, Resource.topic(name)):
        return _error_entry(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
    assignment = ctx.view.topics.get(name)
    if assignment is None and auto and not may_create_topic(ctx, conn, name):
        return _error_entry(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
    if assignment is None and auto:
        code = await topic_admin.auto_create(ctx, name)
        if code != ErrorCode.NONE:
            return _error_entry(code, name)
        assignment = ctx.view.topics.get(name)
        if assignment is None:
            return _error_entry(ErrorCode.LEADER_NOT_AVAILABLE, name)
    if assignment is None:
        return _error_entry(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
    return _topic_entry(ctx, name, assignment)


def error_response(body: dict, code: int) -> dict:
    topics = [_error_entry(code, t.get("name"), t.get("topic_id") or ZERO_TOPIC_ID) for t in (body.get("topics") or [])]
    return {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1, "topics": topics}


HANDLER = Handler(API_KEY, "Metadata", handle, error_response)
