"""ShareGroupDescribe (key 77): the state, members and assignments of share groups (KIP-932).

Served: v1 only (flexible).  One entry per group asked for, each with its own error
(GROUP_ID_NOT_FOUND for a group the coordinator does not know, or one that is not a share
group); members carry their subscription and assignment (topics by id and by name).
AuthorizedOperations is the bitfield of KIP-430 when asked for, else -2^31.
- v0: Kafka 4.0's early access only (removed in Kafka 4.1, not served).  Same layout.
- v1 (Kafka 4.1, the first stable version; Kafka 4.2 adds no version): the layout
  below.  Answers may be TOPIC_AUTHORIZATION_FAILED.  Where the layout was checked:
  docs/reference/protocol.md, "ShareGroupDescribe (key 77)".

Clients: the Java admin client (Kafka 4.1+, ``Admin.describeShareGroups``,
``kafka-share-groups.sh --describe``) sends v1.  librdkafka 2.15/2.16 has no share-group
admin API and sends none.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ShareGroupDescribeRequest", valid="1", flexible="1+", fields=[
    Field("GroupIds", "[]string", "1+"),
    Field("IncludeAuthorizedOperations", "bool", "1+"),
])

RESPONSE = Message("ShareGroupDescribeResponse", valid="1", flexible="1+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("Groups", "[]DescribedGroup", "1+", fields=[
        Field("ErrorCode", "int16", "1+"),
        Field("ErrorMessage", "string", "1+", nullable="1+", default=None),
        Field("GroupId", "string", "1+"),
        Field("GroupState", "string", "1+"),
        Field("GroupEpoch", "int32", "1+"),
        Field("AssignmentEpoch", "int32", "1+"),
        Field("AssignorName", "string", "1+"),
        Field("Members", "[]Member", "1+", fields=[
            Field("MemberId", "string", "1+"),
            Field("RackId", "string", "1+", nullable="1+", default=None),
            Field("MemberEpoch", "int32", "1+"),
            Field("ClientId", "string", "1+"),
            Field("ClientHost", "string", "1+"),
            Field("SubscribedTopicNames", "[]string", "1+"),
            Field("Assignment", "Assignment", "1+", fields=[
                Field("TopicPartitions", "[]TopicPartitions", "1+", fields=[
                    Field("TopicId", "uuid", "1+"),
                    Field("TopicName", "string", "1+"),
                    Field("Partitions", "[]int32", "1+"),
                ]),
            ]),
        ]),
        Field("AuthorizedOperations", "int32", "1+", default=-2147483648),
    ]),
])

register(ApiKey.SHARE_GROUP_DESCRIBE, "ShareGroupDescribe", REQUEST, RESPONSE, (1, 1))
