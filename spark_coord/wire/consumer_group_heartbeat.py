"""ConsumerGroupHeartbeat (key 68): Kafka 4's consumer group protocol (KIP-848).

Served: v0-1 (both flexible).  The member joins with epoch 0, heartbeats with the
epoch it was given, leaves with -1 (a static member's temporary leave: -2).  Fields
it did not change since its last heartbeat are null.  The answer carries the member's
epoch, the heartbeat interval the coordinator wants and, when it changed, the
member's assignment (topics by id) -- the partitions it may use now.
- v0: the coordinator makes up the member id of a joining member.
- v1: SubscribedTopicRegex (a regular expression over topic names, full match, as
  Kafka's RE2/J); the consumer makes up its own member id (KIP-1082); the answer may
  be INVALID_REGULAR_EXPRESSION.

Clients: librdkafka 2.12+ with ``group.protocol=consumer`` sends v1 when offered it.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message


def _topic_partitions(versions: str) -> list[Field]:
    return [Field("TopicId", "uuid", versions), Field("Partitions", "[]int32", versions)]


REQUEST = Message("ConsumerGroupHeartbeatRequest", valid="0-1", flexible="0+", fields=[
    Field("GroupId", "string", "0+"),
    Field("MemberId", "string", "0+"),
    Field("MemberEpoch", "int32", "0+"),
    Field("InstanceId", "string", "0+", nullable="0+", default=None),
    Field("RackId", "string", "0+", nullable="0+", default=None),
    Field("RebalanceTimeoutMs", "int32", "0+", default=-1),
    Field("SubscribedTopicNames", "[]string", "0+", nullable="0+", default=None),
    Field("SubscribedTopicRegex", "string", "1+", nullable="1+", default=None),
    Field("ServerAssignor", "string", "0+", nullable="0+", default=None),
    Field("TopicPartitions", "[]TopicPartitions", "0+", nullable="0+", default=None,
          fields=_topic_partitions("0+")),
])

RESPONSE = Message("ConsumerGroupHeartbeatResponse", valid="0-1", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("MemberId", "string", "0+", nullable="0+", default=None),
    Field("MemberEpoch", "int32", "0+"),
    Field("HeartbeatIntervalMs", "int32", "0+"),
    Field("Assignment", "Assignment", "0+", nullable="0+", default=None, fields=[
        Field("TopicPartitions", "[]TopicPartitions", "0+", fields=_topic_partitions("0+")),
    ]),
])

register(ApiKey.CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat", REQUEST, RESPONSE, (0, 1))
