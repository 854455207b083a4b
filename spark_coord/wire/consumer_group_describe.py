"""ConsumerGroupDescribe (key 69): groups as Kafka 4's consumer group protocol describes them (KIP-848).

Served: v0-1 (both flexible).  The group's epoch, its assignment epoch and assignor,
and each member with its epoch, subscription, current and target assignment (topics by
id and name).
- v1: the response's MemberType per member (KIP-1099): 0 for a classic member, 1 for
  a consumer-protocol member (-1 unknown); the request is unchanged.

Clients (admin): librdkafka 2.16's DescribeConsumerGroups.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message


def _assignment() -> list[Field]:
    return [Field("TopicPartitions", "[]TopicPartitions", "0+", fields=[
        Field("TopicId", "uuid", "0+"),
        Field("TopicName", "string", "0+"),
        Field("Partitions", "[]int32", "0+"),
    ])]


REQUEST = Message("ConsumerGroupDescribeRequest", valid="0-1", flexible="0+", fields=[
    Field("GroupIds", "[]string", "0+"),
    Field("IncludeAuthorizedOperations", "bool", "0+"),
])

RESPONSE = Message("ConsumerGroupDescribeResponse", valid="0-1", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Groups", "[]DescribedGroup", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("GroupId", "string", "0+"),
        Field("GroupState", "string", "0+"),
        Field("GroupEpoch", "int32", "0+"),
        Field("AssignmentEpoch", "int32", "0+"),
        Field("AssignorName", "string", "0+"),
        Field("Members", "[]Member", "0+", fields=[
            Field("MemberId", "string", "0+"),
            Field("InstanceId", "string", "0+", nullable="0+", default=None),
            Field("RackId", "string", "0+", nullable="0+", default=None),
            Field("MemberEpoch", "int32", "0+"),
            Field("ClientId", "string", "0+"),
            Field("ClientHost", "string", "0+"),
            Field("SubscribedTopicNames", "[]string", "0+"),
            Field("SubscribedTopicRegex", "string", "0+", nullable="0+", default=None),
            Field("Assignment", "Assignment", "0+", fields=_assignment()),
            Field("TargetAssignment", "Assignment", "0+", fields=_assignment()),
            Field("MemberType", "int8", "1+", default=-1),
        ]),
        Field("AuthorizedOperations", "int32", "0+", default=-2147483648),
    ]),
])

register(ApiKey.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", REQUEST, RESPONSE, (0, 1))
