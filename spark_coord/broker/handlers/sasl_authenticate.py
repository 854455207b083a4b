"""SaslAuthenticate (key 36): one SASL token of the client's, answered with the broker's (KIP-152).

PLAIN completes in one round, SCRAM in two (client-first -> server-first,
client-final -> server-final).  When the mechanism completes, the connection's
principal becomes ``User:<name>`` and every API is served from then on.  A failed
round answers SASL_AUTHENTICATION_FAILED (or ILLEGAL_SASL_STATE out of order)
with a message that names neither the password nor whether the user exists, and
the connection closes after that answer, with nothing else served.
"""

from __future__ import annotations

import logging

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

API_KEY = ApiKey.SASL_AUTHENTICATE


def _answer(code: int, message: str | None = None, token: bytes = b"") -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime_ms": 0}


async def handle(ctx, conn, header, body: dict) -> dict:
    auth = conn.auth
    if auth.sasl is None or auth.authenticated:
        return _answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate is only expected during SASL authentication")
    step = await auth.sasl.authenticate(body.get("auth_bytes") or b"")
    if step.error_code != ErrorCode.NONE:
        conn.close_after_response = True
    elif step.principal is not None:
        auth.authenticated_as(step.principal)
        log.info("%r: authenticated as %s (%s on %s)", conn, step.principal, auth.sasl.mechanism,
                 auth.listener_name)
    return _answer(step.error_code, step.message, step.token)


def error_response(body: dict, code: int) -> dict:
    return _answer(code)


HANDLER = Handler(API_KEY, "SaslAuthenticate", handle, error_response)
