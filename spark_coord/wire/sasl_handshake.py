"""SaslHandshake (key 17): the client names its SASL mechanism; the answer lists the enabled ones.

Served: v1 only.  v1 (KIP-152) says the SASL tokens that follow travel in
SaslAuthenticate requests.  v0 would make them raw size-prefixed tokens outside
Kafka's request framing, which no client we know still needs when the broker
offers v1 (librdkafka, kafka-python and the Java client all negotiate v1 through
ApiVersions), so it is declared but not served.
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

register(ApiKey.SASL_HANDSHAKE, "SaslHandshake", REQUEST, RESPONSE, (1, 1))
