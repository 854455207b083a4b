"""CreateTopics (key 19): create topics with a partition count or explicit assignments.

Served: v0-7.
- v1: ValidateOnly; response ErrorMessage.  v2: response ThrottleTimeMs.  v3: same shape.
- v4: NumPartitions / ReplicationFactor may be -1 (broker defaults, KIP-464).
- v5: first flexible version; the response returns the topic's partitions,
  replication factor and configs (KIP-525).  v6: same shape (quota error).
- v7: response TopicId.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("CreateTopicsRequest", valid="0-7", flexible="5+", fields=[
    Field("Topics", "[]CreatableTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("NumPartitions", "int32", "0+"),
        Field("ReplicationFactor", "int16", "0+"),
        Field("Assignments", "[]CreatableReplicaAssignment", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("BrokerIds", "[]int32", "0+"),
        ]),
        Field("Configs", "[]CreatableTopicConfig", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    Field("timeoutMs", "int32", "0+", default=60000),
    Field("validateOnly", "bool", "1+", default=False),
])

RESPONSE = Message("CreateTopicsResponse", valid="0-7", flexible="5+", fields=[
    Field("ThrottleTimeMs", "int32", "2+"),
    Field("Topics", "[]CreatableTopicResult", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("TopicId", "uuid", "7+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "1+", nullable="0+"),
        Field("TopicConfigErrorCode", "int16", "5+", tag=0, tagged="5+"),
        Field("NumPartitions", "int32", "5+", default=-1),
        Field("ReplicationFactor", "int16", "5+", default=-1),
        Field("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=[
            Field("Name", "string", "5+"),
            Field("Value", "string", "5+", nullable="5+"),
            Field("ReadOnly", "bool", "5+"),
            Field("ConfigSource", "int8", "5+", default=-1),
            Field("IsSensitive", "bool", "5+"),
        ]),
    ]),
])

register(ApiKey.CREATE_TOPICS, "CreateTopics", REQUEST, RESPONSE, (0, 7))
