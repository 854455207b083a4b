"""ListOffsets (key 2): the offset for a timestamp (-1 latest, -2 earliest, -3 max timestamp).

Served: v0-7.
- v0: the old shape -- the request carries MaxNumOffsets and the response a list
  ``old_style_offsets`` instead of one ``offset`` and ``timestamp``.
- v1: one offset plus its timestamp.  v2: IsolationLevel; response ThrottleTimeMs.
- v3: same shape.  v4: CurrentLeaderEpoch; response LeaderEpoch.  v5: same shape.
- v6: first flexible version.  v7: same shape; -3 (max timestamp, KIP-734) allowed.
- v8-10 (tiered storage timestamps -4/-5, TimeoutMs) are declared but not served.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ListOffsetsRequest", valid="0-10", flexible="6+", fields=[
    Field("ReplicaId", "int32", "0+"),
    Field("IsolationLevel", "int8", "2+"),
    Field("Topics", "[]ListOffsetsTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]ListOffsetsPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("CurrentLeaderEpoch", "int32", "4+", default=-1),
            Field("Timestamp", "int64", "0+"),
            Field("MaxNumOffsets", "int32", "0", default=1),
        ]),
    ]),
    Field("TimeoutMs", "int32", "10+"),
])

RESPONSE = Message("ListOffsetsResponse", valid="0-10", flexible="6+", fields=[
    Field("ThrottleTimeMs", "int32", "2+"),
    Field("Topics", "[]ListOffsetsTopicResponse", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]ListOffsetsPartitionResponse", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("OldStyleOffsets", "[]int64", "0"),
            Field("Timestamp", "int64", "1+", default=-1),
            Field("Offset", "int64", "1+", default=-1),
            Field("LeaderEpoch", "int32", "4+", default=-1),
        ]),
    ]),
])

register(ApiKey.LIST_OFFSETS, "ListOffsets", REQUEST, RESPONSE, (0, 7))
