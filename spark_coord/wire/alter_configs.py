"""AlterConfigs (key 33): replace the whole set of configs of resources (Kafka's legacy API).

Served: v0-2.
- v0: per resource (type, name) the complete new set of name/value pairs (keys
  left out are removed), and ValidateOnly; per resource an error code and message.
- v1: same shape (throttling semantics only).
- v2: first flexible version.

Resource types are Kafka's ``ConfigResource.Type`` codes (2 topic, 4 broker, 32
group).  librdkafka 2.16 (confluent-kafka's ``alter_configs``) sends v2.
IncrementalAlterConfigs (key 44) is what current admin clients use.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("AlterConfigsRequest", valid="0-2", flexible="2+", fields=[
    Field("Resources", "[]AlterConfigsResource", "0+", fields=[
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
        Field("Configs", "[]AlterableConfig", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("Value", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
    Field("ValidateOnly", "bool", "0+"),
])

RESPONSE = Message("AlterConfigsResponse", valid="0-2", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
    ]),
])

register(ApiKey.ALTER_CONFIGS, "AlterConfigs", REQUEST, RESPONSE, (0, 2))
