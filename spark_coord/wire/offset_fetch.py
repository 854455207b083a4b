"""OffsetFetch (key 9): a group's committed offsets.

Served: v0-9.
- v0: group and topics with partition indexes (offsets that Kafka 0.8 kept in
  ZooKeeper).  v1: same shape (offsets in Kafka's offsets topic).
- v2: a null topic array asks for every partition the group has committed; the
  response gains a top-level ErrorCode.  v3: response ThrottleTimeMs.  v4: same shape.
- v5: per-partition CommittedLeaderEpoch in the response.
- v6: first flexible version.  v7: RequireStable (KIP-447).
- v8: several groups per request (``Groups``, each with its own topics or null for
  all) and per-group answers with their own ErrorCode (KIP-709); the single-group
  fields of v0-7 are gone.
- v9: per-group MemberId and MemberEpoch (KIP-848 groups).

No committed offset reads as offset -1 with an empty or null metadata string.

Clients, when offered v0-9: librdkafka 2.0 sends v7, librdkafka 2.16 v9 (consumer
and admin), kafkajs 2.2 v4, kafka-python 3.0 v8 (one group per request from its
consumer, one per coordinator from its admin), the Java client v9.  Versions after
Kafka 3.9's definitions are not declared: newer clients negotiate down to v9.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

#: The first version with several groups per request.
MULTI_GROUP_VERSION = 8
#: The offset of a partition with nothing committed.
NO_OFFSET = -1

REQUEST = Message("OffsetFetchRequest", valid="0-9", flexible="6+", fields=[
    Field("GroupId", "string", "0-7"),
    Field("Topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
        Field("Name", "string", "0-7"),
        Field("PartitionIndexes", "[]int32", "0-7"),
    ]),
    Field("Groups", "[]OffsetFetchRequestGroup", "8+", fields=[
        Field("GroupId", "string", "8+"),
        Field("MemberId", "string", "9+", nullable="9+", default=None),
        Field("MemberEpoch", "int32", "9+", default=-1),
        Field("Topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=[
            Field("Name", "string", "8+"),
            Field("PartitionIndexes", "[]int32", "8+"),
        ]),
    ]),
    Field("RequireStable", "bool", "7+", default=False),
])

RESPONSE = Message("OffsetFetchResponse", valid="0-9", flexible="6+", fields=[
    Field("ThrottleTimeMs", "int32", "3+"),
    Field("Topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
        Field("Name", "string", "0-7"),
        Field("Partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
            Field("PartitionIndex", "int32", "0-7"),
            Field("CommittedOffset", "int64", "0-7"),
            Field("CommittedLeaderEpoch", "int32", "5-7", default=-1),
            Field("Metadata", "string", "0-7", nullable="0-7"),
            Field("ErrorCode", "int16", "0-7"),
        ]),
    ]),
    Field("ErrorCode", "int16", "2-7", default=0),
    Field("Groups", "[]OffsetFetchResponseGroup", "8+", fields=[
        Field("GroupId", "string", "8+"),
        Field("Topics", "[]OffsetFetchResponseTopics", "8+", fields=[
            Field("Name", "string", "8+"),
            Field("Partitions", "[]OffsetFetchResponsePartitions", "8+", fields=[
                Field("PartitionIndex", "int32", "8+"),
                Field("CommittedOffset", "int64", "8+"),
                Field("CommittedLeaderEpoch", "int32", "8+", default=-1),
                Field("Metadata", "string", "8+", nullable="8+"),
                Field("ErrorCode", "int16", "8+"),
            ]),
        ]),
        Field("ErrorCode", "int16", "8+", default=0),
    ]),
])

register(ApiKey.OFFSET_FETCH, "OffsetFetch", REQUEST, RESPONSE, (0, 9))
