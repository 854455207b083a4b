"""SaslAuthenticate (key 36): one SASL token each way (KIP-152).

Served: v0-2.  v1 adds the response's SessionLifetimeMs (we answer 0: no
re-authentication deadline, ``connections.max.reauth.ms`` is not served); v2 is
the first flexible version.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("SaslAuthenticateRequest", valid="0-2", flexible="2+", fields=[
    Field("AuthBytes", "bytes", "0+"),
])

RESPONSE = Message("SaslAuthenticateResponse", valid="0-2", flexible="2+", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("AuthBytes", "bytes", "0+"),
    Field("SessionLifetimeMs", "int64", "1+"),
])

register(ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", REQUEST, RESPONSE, (0, 2))
