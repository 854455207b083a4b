"""ApiVersions (key 18): the APIs and version ranges this broker dispatches.

The list is the wire registry's ranges restricted to the API keys that have a
handler installed, so what we advertise is exactly what we serve.  An
unsupported ApiVersions version never reaches here: the connection answers it
with the v0 fallback (KIP-511).
"""

from __future__ import annotations

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

API_KEY = ApiKey.API_VERSIONS


async def handle(ctx, conn, header, body: dict) -> dict:
    return {"error_code": ErrorCode.NONE, "api_keys": ctx.server.api_versions(), "throttle_time_ms": 0}


def error_response(body: dict, code: int) -> dict:
    return {"error_code": code, "api_keys": [], "throttle_time_ms": 0}


HANDLER = Handler(API_KEY, "ApiVersions", handle, error_response)
