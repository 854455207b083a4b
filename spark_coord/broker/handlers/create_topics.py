"""CreateTopics (key 19): create topics in ZooKeeper.

Versions served per the wire registry (0-7): v1 adds validate_only and the
per-topic error_message; v5 (flexible) answers num_partitions,
replication_factor and configs; v7 answers the new topic's id (the zero uuid when
nothing was created: an error, or validate_only).
Kafka's legal names ([a-zA-Z0-9._-], 1..249 chars, not "." or "..") else
INVALID_TOPIC_EXCEPTION; num_partitions -1 means num.partitions; one replica
per partition (replication_factor -1 or 1); explicit assignments are honoured.
Creating needs Create on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED.
Configs given are validated as AlterConfigs validates them (INVALID_CONFIG naming the key and
the reason; validate_only checks them too) and stored at ``/config/topics/<topic>``; from v5
the answer lists every config of the new topic with its value and source.
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
        configs, refused = _configs(t.get("configs") or [])
        if refused is not None:
            results.append(_result(name, ErrorCode.INVALID_REQUEST, refused))
            continue
        r = await topic_admin.create_topic(
            ctx, name, t.get("num_partitions", -1), t.get("replication_factor", -1), t.get("assignments") or None,
            bool(body.get("validate_only", False)), body.get("timeout_ms", 60000), configs)
        results.append(_result(name, r.code, r.message, r.num_partitions, r.topic_id, _described(ctx, name, configs)))
    return {"throttle_time_ms": 0, "topics": results}


def _configs(entries: list[dict]) -> tuple[dict[str, str], str | None]:
    """The requested configs as a dict; the reason to refuse them (a name twice, a null value)."""
    out: dict[str, str] = {}
    for c in entries:
        name, value = c.get("name"), c.get("value")
        if name in out:
            return {}, f"config {name!r} listed twice"
        if value is None:
            return {}, f"Null value not supported for topic configs: {name}"
        out[name] = value
    return out, None


def _described(ctx, name: str, configs: dict[str, str]) -> list[dict]:
    """v5+: every config of the new topic with its value and source (what Kafka answers)."""
    dynamic = getattr(ctx, "dynamic_configs", None)
    if dynamic is None:
        return []
    return [{"name": e.name, "value": e.value, "read_only": e.read_only, "config_source": int(e.source),
             "is_sensitive": e.sensitive} for e in dynamic.model.describe(configs)]


def _result(name: str, code: int, message: str | None, num_partitions: int = -1,
            topic_id: bytes = ZERO_TOPIC_ID, configs: list[dict] | None = None) -> dict:
    ok = code == ErrorCode.NONE
    return {"name": name, "topic_id": topic_id if ok else ZERO_TOPIC_ID, "error_code": code, "error_message": message,
            "num_partitions": num_partitions if ok else -1, "replication_factor": 1 if ok else -1,
            "configs": (configs or []) if ok else None}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0,
            "topics": [_result(t.get("name"), code, None) for t in body.get("topics") or []]}


HANDLER = Handler(API_KEY, "CreateTopics", handle, error_response)
