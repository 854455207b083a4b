"""ShareGroupHeartbeat (key 76): membership of a share group (KIP-932, queues for Kafka).

Served: v1 only (flexible).  A share consumer joins with epoch 0 (its member id is one
it made up, as KIP-1082's consumers do), heartbeats with the epoch it was given and
leaves with -1.  RackId and SubscribedTopicNames are null when unchanged since its last
heartbeat.  The answer carries the member's epoch, the heartbeat interval the
coordinator wants and, when it changed, the member's assignment (topics by id): a share
group's partitions are shared, several members may be given the same one.
- v0: Kafka 4.0's early access only (removed in Kafka 4.1, not served).
- v1 (Kafka 4.1, the first stable version): the layout below.  The answer may be
  TOPIC_AUTHORIZATION_FAILED (a subscribed topic the member may not describe).
Where the layout was checked: docs/reference/protocol.md, "ShareGroupHeartbeat (key 76)".

Clients: librdkafka 2.15+ (``rd_kafka_share_consumer_new``, confluent-kafka's
``ShareConsumer``, a preview) sends exactly v1 and refuses a coordinator without it; the
Java share consumer (Kafka 4.1+) v1.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ShareGroupHeartbeatRequest", valid="1", flexible="0+", fields=[
    Field("GroupId", "string", "0+"),
    Field("MemberId", "string", "0+"),
    Field("MemberEpoch", "int32", "0+"),
    Field("RackId", "string", "0+", nullable="0+", default=None),
    Field("SubscribedTopicNames", "[]string", "0+", nullable="0+", default=None),
])

RESPONSE = Message("ShareGroupHeartbeatResponse", valid="1", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("MemberId", "string", "0+", nullable="0+", default=None),
    Field("MemberEpoch", "int32", "0+"),
    Field("HeartbeatIntervalMs", "int32", "0+"),
    Field("Assignment", "Assignment", "0+", nullable="0+", default=None, fields=[
        Field("TopicPartitions", "[]TopicPartitions", "0+", fields=[
            Field("TopicId", "uuid", "0+"),
            Field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])

register(ApiKey.SHARE_GROUP_HEARTBEAT, "ShareGroupHeartbeat", REQUEST, RESPONSE, (1, 1))
