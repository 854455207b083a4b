"""DescribeShareGroupOffsets (key 90): where share groups stand on their partitions (KIP-932).

Served: v0-1 (flexible).  Sent to each group's coordinator: per partition the
share-partition start offset (the first offset the group is not done with) and the leader
epoch it was written with; a null Topics asks for every partition the group holds state
for.  Errors per group (GROUP_ID_NOT_FOUND...) and per partition.
- v0 (Kafka 4.1).
- v1 (Kafka 4.2, KIP-1226): response Lag per partition (the records the group has still
  to deliver; -1 when not known).  The request is v0's.
Where the layout was checked: docs/reference/protocol.md, "DescribeShareGroupOffsets (key 90)".

Clients: the Java admin client (Kafka 4.1+, ``Admin.listShareGroupOffsets``,
``kafka-share-groups.sh --describe --offsets``).  librdkafka 2.15/2.16 sends none.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DescribeShareGroupOffsetsRequest", valid="0-1", flexible="0+", fields=[
    Field("Groups", "[]DescribeShareGroupOffsetsRequestGroup", "0+", fields=[
        Field("GroupId", "string", "0+"),
        Field("Topics", "[]DescribeShareGroupOffsetsRequestTopic", "0+", nullable="0+", fields=[
            Field("TopicName", "string", "0+"),
            Field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])

RESPONSE = Message("DescribeShareGroupOffsetsResponse", valid="0-1", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Groups", "[]DescribeShareGroupOffsetsResponseGroup", "0+", fields=[
        Field("GroupId", "string", "0+"),
        Field("Topics", "[]DescribeShareGroupOffsetsResponseTopic", "0+", fields=[
            Field("TopicName", "string", "0+"),
            Field("TopicId", "uuid", "0+"),
            Field("Partitions", "[]DescribeShareGroupOffsetsResponsePartition", "0+", fields=[
                Field("PartitionIndex", "int32", "0+"),
                Field("StartOffset", "int64", "0+"),
                Field("LeaderEpoch", "int32", "0+"),
                Field("Lag", "int64", "1+", default=-1),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            ]),
        ]),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

register(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsets", REQUEST, RESPONSE, (0, 1))
