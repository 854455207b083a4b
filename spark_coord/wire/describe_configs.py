"""DescribeConfigs (key 32): the configs of topics, brokers and groups, with their sources.

Served: v0-4.
- v0: per resource (type, name, the keys wanted or null for all) each config's
  name, value, read-only, is-default and is-sensitive flags.
- v1: the request asks for synonyms (IncludeSynonyms); the answer gives each
  config's source (Kafka's ConfigSource: 1 dynamic topic, 4 static broker, 5
  default, 8 group...) and its synonyms (the names it is also set under, highest
  precedence first) instead of is-default.
- v2: same shape (throttling semantics only).
- v3: the request asks for documentation (IncludeDocumentation); the answer adds
  each config's type (Kafka's ConfigType: 1 boolean, 2 string, 3 int, 5 long,
  7 list, 9 password...) and documentation.
- v4: first flexible version.

Resource types are Kafka's ``ConfigResource.Type`` codes (2 topic, 4 broker, 8
broker logger, 16 client metrics, 32 group), not the ACL codes.  Clients seen:
librdkafka 2.16 (confluent-kafka) sends v1 and puts its ``ResourceType.GROUP`` (3,
the ACL code) on the wire as 32; kafka-python 3.0 sends v4.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DescribeConfigsRequest", valid="0-4", flexible="4+", fields=[
    Field("Resources", "[]DescribeConfigsResource", "0+", fields=[
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
        Field("ConfigurationKeys", "[]string", "0+", nullable="0+"),
    ]),
    Field("IncludeSynonyms", "bool", "1+", default=False),
    Field("IncludeDocumentation", "bool", "3+", default=False),
])

RESPONSE = Message("DescribeConfigsResponse", valid="0-4", flexible="4+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Results", "[]DescribeConfigsResult", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("ResourceType", "int8", "0+"),
        Field("ResourceName", "string", "0+"),
        Field("Configs", "[]DescribeConfigsResourceResult", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("Value", "string", "0+", nullable="0+", default=None),
            Field("ReadOnly", "bool", "0+"),
            Field("IsDefault", "bool", "0"),
            Field("ConfigSource", "int8", "1+", default=-1),
            Field("IsSensitive", "bool", "0+"),
            Field("Synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                Field("Name", "string", "1+"),
                Field("Value", "string", "1+", nullable="0+", default=None),
                Field("Source", "int8", "1+"),
            ]),
            Field("ConfigType", "int8", "3+", default=0),
            Field("Documentation", "string", "3+", nullable="0+", default=None),
        ]),
    ]),
])

register(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", REQUEST, RESPONSE, (0, 4))
