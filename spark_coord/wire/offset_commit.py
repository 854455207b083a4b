"""OffsetCommit (key 8): store a group's consumed offsets.

Served: v0-9.
- v0: group, and per partition the offset and a metadata string.
- v1: the member's generation and member id (``GenerationIdOrMemberEpoch``,
  ``MemberId``) and a per-partition CommitTimestamp.
- v2: RetentionTimeMs; CommitTimestamp removed.  v3: response ThrottleTimeMs.
  v4: same shape.
- v5: RetentionTimeMs removed (retention is the broker's setting).
- v6: per-partition CommittedLeaderEpoch.
- v7: GroupInstanceId (static membership, KIP-345).
- v8: first flexible version.
- v9: same shape; usable by KIP-848 groups (the generation field holds their
  member epoch).

A commit from outside the group's membership -- an admin tool, a "simple"
consumer that assigns partitions itself -- sends generation -1 and an empty member
id (``STANDALONE_GENERATION``); from v1 a member sends its generation and id.

Clients, when offered v0-9: librdkafka 2.0 sends v7, librdkafka 2.16 v9, kafkajs
2.2 v5, kafka-python 3.0 v8, the Java client v9.  Versions after Kafka 3.9's
definitions are not declared: newer clients negotiate down to v9.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

#: The generation of a commit made outside the group's membership.
STANDALONE_GENERATION = -1

REQUEST = Message("OffsetCommitRequest", valid="0-9", flexible="8+", fields=[
    Field("GroupId", "string", "0+"),
    Field("GenerationIdOrMemberEpoch", "int32", "1+", default=STANDALONE_GENERATION),
    Field("MemberId", "string", "1+"),
    Field("GroupInstanceId", "string", "7+", nullable="7+", default=None),
    Field("RetentionTimeMs", "int64", "2-4", default=-1),
    Field("Topics", "[]OffsetCommitRequestTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]OffsetCommitRequestPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("CommittedOffset", "int64", "0+"),
            Field("CommittedLeaderEpoch", "int32", "6+", default=-1),
            Field("CommitTimestamp", "int64", "1", default=-1),
            Field("CommittedMetadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])

RESPONSE = Message("OffsetCommitResponse", valid="0-9", flexible="8+", fields=[
    Field("ThrottleTimeMs", "int32", "3+"),
    Field("Topics", "[]OffsetCommitResponseTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]OffsetCommitResponsePartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

register(ApiKey.OFFSET_COMMIT, "OffsetCommit", REQUEST, RESPONSE, (0, 9))
