"""CreatePartitions (key 37): grow a topic's partition count, optionally placing the new partitions.

Served: v0-3.
- v0: per topic the new total Count and, optionally, one replica list per *new*
  partition (Assignments, null for "let the broker place them"); TimeoutMs,
  ValidateOnly.  The answer: per topic ErrorCode and ErrorMessage.
- v1: same shape (throttling is answered before it is applied).
- v2: first flexible version.
- v3: same shape (may answer THROTTLING_QUOTA_EXCEEDED, KIP-599).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("CreatePartitionsRequest", valid="0-3", flexible="2+", fields=[
    Field("Topics", "[]CreatePartitionsTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Count", "int32", "0+"),
        Field("Assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", default=None, fields=[
            Field("BrokerIds", "[]int32", "0+"),
        ]),
    ]),
    Field("TimeoutMs", "int32", "0+"),
    Field("ValidateOnly", "bool", "0+"),
])

RESPONSE = Message("CreatePartitionsResponse", valid="0-3", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Results", "[]CreatePartitionsTopicResult", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

register(ApiKey.CREATE_PARTITIONS, "CreatePartitions", REQUEST, RESPONSE, (0, 3))
