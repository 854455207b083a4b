"""CreateTopics (key 19): create topics in ZooKeeper.

Versions served per the wire registry (0-7): v1 adds validate_only and the
per-topic error_message; v5 (flexible) answers num_partitions,
replication_factor and configs; v7 answers the new topic's id (the zero uuid when
nothing was created: an error, or validate_only).
Kafka's legal names ([a-zA-Z0-9._-], 1..249 chars, not "." or "..") else
INVALID_TOPIC_EXCEPTION; num_partitions -1 means num.partitions; one replica
per partition (replication_factor -1 or 1); explicit assignments are honoured.
Creating needs Create on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from spark_coord.broker import topics as topic_admin
from spark_coord.broker.handlers.base import Handler, may_create_topic
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey
from spark_coord.zk.model import ZERO_TOPIC_ID

API_KEY = ApiKey.CREATE_TOPICS


async def handle(ctx, conn, header, body: dict) -> dict:
    results = []
    seen: set[str] = set()
    for t in body.get("topics") or []:
        name = t.get("name")
        if name in seen:
            results.append(_result(name, ErrorCode.INVALID_REQUEST, f"topic {name!r} listed twice"))
            continue
        seen.add(name)
        if not may_create_topic(ctx, conn, name or ""):
            results.append(_result(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to create this topic"))
            continue
        r = await topic_admin.create_topic(
            ctx, name, t.get("num_partitions", -1), t.get("replication_factor", -1), t.get("assignments") or None,
            bool(body.get("validate_only", False)), body.get("timeout_ms", 60000))
        results.append(_result(name, r.code, r.message, r.num_partitions, r.topic_id))
    return {"throttle_time_ms": 0, "topics": results}


def _result(name: str, code: int, message: str | None, num_partitions: int = -1,
            topic_id: bytes = ZERO_TOPIC_ID) -> dict:
    ok = code == ErrorCode.NONE
    return {"name": name, "topic_id": topic_id if ok else ZERO_TOPIC_ID, "error_code": code, "error_message": message,
            "num_partitions": num_partitions if ok else -1, "replication_factor": 1 if ok else -1,
            "configs": [] if ok else None}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0,
            "topics": [_result(t.get("name"), code, None) for t in body.get("topics") or []]}


HANDLER = Handler(API_KEY, "CreateTopics", handle, error_response)
