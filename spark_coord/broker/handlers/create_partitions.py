"""CreatePartitions (key 37): grow topics' partition counts in ZooKeeper.

Versions served per the wire registry (0-3).  Kafka's answers: a count not above the
topic's is INVALID_PARTITIONS; an unknown topic UNKNOWN_TOPIC_OR_PARTITION;
assignments that are not one replica list per new partition, with one replica (the
topic's replication factor) on a live broker, INVALID_REPLICA_ASSIGNMENT; a topic
listed twice INVALID_REQUEST.  validate_only checks everything and writes nothing.
Alter on the topic is needed, else TOPIC_AUTHORIZATION_FAILED.  Partitions are only
ever added: a group reading the topic is rebalanced by the coordinator, which
follows the topic's znode (``broker.topics.add_partitions``).
"""

from __future__ import annotations

from collections import Counter

from spark_coord.broker import topics as topic_admin
from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import AclOperation, Resource
from spark_coord.wire.registry import ApiKey

API_KEY = ApiKey.CREATE_PARTITIONS


def _result(name, code: int, message: str | None = None) -> dict:
    return {"name": name, "error_code": code, "error_message": message}


async def handle(ctx, conn, header, body: dict) -> dict:
    topics = body.get("topics") or []
    counts = Counter(t.get("name") for t in topics)
    results, reported = [], set()
    for t in topics:
        name = t.get("name")
        if counts[name] > 1:
            if name not in reported:
                reported.add(name)
                results.append(_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic in request."))
            continue
        if not ctx.authorized(conn, AclOperation.ALTER, Resource.topic(name or "")):
            results.append(_result(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to alter this topic"))
            continue
        r = await topic_admin.add_partitions(ctx, name, t.get("count", 0), t.get("assignments"),
                                             bool(body.get("validate_only", False)), body.get("timeout_ms", 30000))
        results.append(_result(name, r.code, r.message))
    return {"throttle_time_ms": 0, "results": results}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "results": [_result(t.get("name"), code) for t in body.get("topics") or []]}


HANDLER = Handler(API_KEY, "CreatePartitions", handle, error_response)
