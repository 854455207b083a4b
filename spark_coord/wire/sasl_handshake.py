"""SaslHandshake (key 17): the client names its SASL mechanism; the answer lists the enabled ones.

Served: v0-1.  v1 (KIP-152) says the SASL tokens that follow travel in
SaslAuthenticate requests.  After a v0 handshake they are raw size-prefixed
tokens outside Kafka's request framing (``broker.connection`` reads them); clients
pick v1 when offered, but librdkafka only believes a broker does SASL at all when
its ApiVersions range of SaslHandshake includes v0.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("SaslHandshakeRequest", valid="0-1", flexible="none", fields=[
    Field("Mechanism", "string", "0+"),
])

RESPONSE = Message("SaslHandshakeResponse", valid="0-1", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("Mechanisms", "[]string", "0+"),
])

register(ApiKey.SASL_HANDSHAKE, "SaslHandshake", REQUEST, RESPONSE, (0, 1))
