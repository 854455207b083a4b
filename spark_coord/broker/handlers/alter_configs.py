"""AlterConfigs (key 33): replace a group's whole set of configs (Kafka's legacy API).

Versions per the wire registry (0-2).  For a GROUP the settings listed become the
group's settings (keys left out go back to the broker's defaults), after Kafka's
validation (``broker.config_admin``; INVALID_CONFIG naming the key), stored in
ZooKeeper and applied on every broker.  TOPIC and BROKER configs are read-only on
this broker for now: INVALID_REQUEST.  ``validate_only`` writes nothing.  Needs
AlterConfigs on the group (the topic, the cluster).
"""

from __future__ import annotations

from spark_coord.broker import config_admin
from spark_coord.broker.handlers.base import Handler
from spark_coord.wire.registry import ApiKey


async def handle(ctx, conn, header, body: dict) -> dict:
    return {"throttle_time_ms": 0, "responses": await config_admin.alter(ctx, conn, body, incremental=False)}


def error_response(body: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "responses": config_admin.error_responses(body, code)}


HANDLER = Handler(ApiKey.ALTER_CONFIGS, "AlterConfigs", handle, error_response)
