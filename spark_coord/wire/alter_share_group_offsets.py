"""AlterShareGroupOffsets (key 91): set where an empty share group starts on partitions (KIP-932).

Served: v0 (flexible).  Sent to the group's coordinator: a share-partition start offset
per partition (topics by name).  The group must have no member (NON_EMPTY_GROUP); the
answer has a top-level error and one per partition, topics by name and id.
- v0 (Kafka 4.1; Kafka 4.2 adds no version): the response's top-level ErrorCode and
  ErrorMessage come after ThrottleTimeMs.
Where the layout was checked: docs/reference/protocol.md, "AlterShareGroupOffsets (key 91)".

Clients: the Java admin client (Kafka 4.1+, ``Admin.alterShareGroupOffsets``,
``kafka-share-groups.sh --reset-offsets``).  librdkafka 2.15/2.16 sends none.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("AlterShareGroupOffsetsRequest", valid="0", flexible="0+", fields=[
    Field("GroupId", "string", "0+"),
    Field("Topics", "[]AlterShareGroupOffsetsRequestTopic", "0+", fields=[
        Field("TopicName", "string", "0+"),
        Field("Partitions", "[]AlterShareGroupOffsetsRequestPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("StartOffset", "int64", "0+"),
        ]),
    ]),
])

RESPONSE = Message("AlterShareGroupOffsetsResponse", valid="0", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("Responses", "[]AlterShareGroupOffsetsResponseTopic", "0+", fields=[
        Field("TopicName", "string", "0+"),
        Field("TopicId", "uuid", "0+"),
        Field("Partitions", "[]AlterShareGroupOffsetsResponsePartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
])

register(ApiKey.ALTER_SHARE_GROUP_OFFSETS, "AlterShareGroupOffsets", REQUEST, RESPONSE, (0, 0))
