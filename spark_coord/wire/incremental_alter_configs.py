"""IncrementalAlterConfigs (key 44): change some configs of resources (KIP-339).

Served: v0-1.
- v0: per resource (type, name) a list of (name, operation, value) and
  ValidateOnly; operations are Kafka's ``AlterConfigOp.OpType``: 0 SET, 1 DELETE
  (back to the default), 2 APPEND and 3 SUBTRACT (list-typed keys only).  Per
  resource an error code and message.
- v1: first flexible version.

Resource types are Kafka's ``ConfigResource.Type`` codes (2 topic, 4 broker, 32
group).  librdkafka 2.16 (confluent-kafka's ``incremental_alter_configs``) and
kafka-python 3.0 send v1.  It is how a share group is configured
(``share.auto.offset.reset``...).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("IncrementalAlterConfigsRequest", valid="0-1", flexible="1+", fields=[
    Field("Resources", "[]AlterConfigsResource", "0+", fields=[
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
        Field("Configs", "[]AlterableConfig", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("ConfigOperation", "int8", "0+"),
            Field("Value", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
    Field("ValidateOnly", "bool", "0+"),
])

RESPONSE = Message("IncrementalAlterConfigsResponse", valid="0-1", flexible="1+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
    ]),
])

register(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", REQUEST, RESPONSE, (0, 1))
