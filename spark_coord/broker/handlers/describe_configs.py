"""DescribeConfigs (key 32): the configs of groups, topics and this broker.

Versions per the wire registry (0-4; ``wire.describe_configs`` says what each
adds).  Every resource is answered on its own (``broker.config_admin``): a GROUP
from this broker's cache of ZooKeeper's group configs (values the group set have
source GROUP_CONFIG, the rest the broker's defaults, DEFAULT_CONFIG), a TOPIC and
this broker (named by its id) with the broker's real settings, Kafka's names and
sources.  Synonyms only when asked for (v1+), documentation only when asked for
(v3+).  Needs DescribeConfigs on the group, the topic or the cluster.
"""

from __future__ import annotations

from spark_coord.broker import config_admin
from spark_coord.broker.handlers.base import Handler
from spark_coord.wire.registry import ApiKey


async def handle(ctx, conn, header, body: dict) -> dict:
    synonyms = bool(body.get("include_synonyms"))
    documentation = bool(body.get("include_documentation"))
    return {"throttle_time_ms": 0,
            "results": [config_admin.describe(ctx, conn, r, synonyms, documentation)
                        for r in body.get("resources") or []]}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0,
            "results": [{"error_code": code, "error_message": None, "resource_type": r.get("resource_type", 0),
                         "resource_name": r.get("resource_name") or "", "configs": []}
                        for r in body.get("resources") or []]}


HANDLER = Handler(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", handle, error_response)
