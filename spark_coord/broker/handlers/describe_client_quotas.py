"""DescribeClientQuotas (key 48): our brokers keep no client quotas, so a valid filter matches
nothing (an empty list, as Kafka answers on a cluster without quotas); a malformed filter gets
INVALID_REQUEST naming what is wrong, as Kafka's checks do.  Describe-configs on the cluster is
needed, else CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.security.acl import CLUSTER, AclOperation
from spark_coord.wire.describe_client_quotas import ENTITY_TYPES, MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT
from spark_coord.wire.registry import ApiKey


def _invalid(components: list[dict]) -> str | None:
    """What is wrong with the filter, None when it is valid."""
    seen = set()
    for c in components:
        kind, match, name = c.get("entity_type"), c.get("match_type"), c.get("match")
        if kind not in ENTITY_TYPES:
            return f"Custom entity type '{kind}' not supported"
        if kind in seen:
            return f"Duplicate {kind} filter component entity type"
        seen.add(kind)
        if match == MATCH_EXACT and name is None:
            return f"Unexpected null match for an exact {kind} component"
        if match in (MATCH_DEFAULT, MATCH_ANY) and name is not None:
            return f"Unexpected match '{name}' for a {kind} component of match type {match}"
        if match not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return f"Unknown match type {match}"
    return None


async def handle(ctx, conn, header, body: dict) -> dict:
    if not ctx.authorized(conn, AclOperation.DESCRIBE_CONFIGS, CLUSTER):
        return error_response(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    problem = _invalid(list(body.get("components") or []))
    if problem is not None:
        return error_response(body, ErrorCode.INVALID_REQUEST, problem)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "entries": []}


def error_response(body: dict, code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}


HANDLER = Handler(ApiKey.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", handle, error_response)
