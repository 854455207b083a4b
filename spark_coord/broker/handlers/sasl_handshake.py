"""SaslHandshake (key 17): the client picks a SASL mechanism (KIP-152).

After a v1 handshake the tokens come in SaslAuthenticate requests; after a v0
handshake as raw size-prefixed frames, which the connection hands to the same
``SaslServer`` (``ConnectionAuth.expects_raw_token``).

On a SASL listener before authentication: the mechanism must be one the listener
enables, else UNSUPPORTED_SASL_MECHANISM (the answer lists the enabled ones) and
the connection closes after the answer, as Kafka's does.  Anywhere else (a
non-SASL listener, or a second handshake after authenticating: we do not
re-authenticate, ``connections.max.reauth.ms`` is not served) ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from spark_coord.broker.handlers.base import Handler
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

API_KEY = ApiKey.SASL_HANDSHAKE


async def handle(ctx, conn, header, body: dict) -> dict:
    sasl = conn.auth.sasl
    if sasl is None or conn.auth.authenticated:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(sasl.mechanisms) if sasl else []}
    code = sasl.handshake(str(body.get("mechanism") or ""))
    if code != ErrorCode.NONE:
        conn.close_after_response = True
    elif header.api_version == 0:
        sasl.raw_tokens = True
    return {"error_code": code, "mechanisms": list(sasl.mechanisms)}


def error_response(body: dict, code: int) -> dict:
    return {"error_code": code, "mechanisms": []}


HANDLER = Handler(API_KEY, "SaslHandshake", handle, error_response)
