"""OffsetDelete (key 47): delete a group's committed offsets of some partitions (KIP-496).

Served: v0 (the only version; not flexible).  The request names the group and its
topics' partitions; the answer has a top-level ErrorCode (the group's: GROUP_ID_NOT_FOUND,
NOT_COORDINATOR, GROUP_AUTHORIZATION_FAILED...) and one per partition
(GROUP_SUBSCRIBED_TO_TOPIC while the group consumes the topic, TOPIC_AUTHORIZATION_FAILED...).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("OffsetDeleteRequest", valid="0", flexible="none", fields=[
    Field("GroupId", "string", "0+"),
    Field("Topics", "[]OffsetDeleteRequestTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]OffsetDeleteRequestPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
        ]),
    ]),
])

RESPONSE = Message("OffsetDeleteResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Topics", "[]OffsetDeleteResponseTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]OffsetDeleteResponsePartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

register(ApiKey.OFFSET_DELETE, "OffsetDelete", REQUEST, RESPONSE, (0, 0))
