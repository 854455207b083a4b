"""ShareAcknowledge (key 79): acknowledge records a share group's member acquired, without fetching (KIP-932).

Served: v1-2 (flexible).  It goes along the member's share session like ShareFetch (the
next epoch, or -1 to close the session with these last acknowledgements; it never opens
one: epoch 0 is INVALID_SHARE_SESSION_EPOCH).  AcknowledgementBatches are ShareFetch's:
an offset range and one type per offset or one for the whole range (0 Gap, 1 Accept,
2 Release, 3 Reject, 4 Renew from v2).  The answer has an error per partition
(INVALID_RECORD_STATE for a record this member does not hold).
- v0: Kafka 4.0's early access only (removed in Kafka 4.1, not served).  Same layout as v1.
- v1 (Kafka 4.1, the first stable version).
- v2 (Kafka 4.2, KIP-1222): request IsRenewAck (the batches include type 4 Renew, which
  extends the acquisition lock of a record instead of ending its delivery); response
  AcquisitionLockTimeoutMs (the lock a renewal gives).
Where the layout was checked: docs/reference/protocol.md, "ShareAcknowledge (key 79)".

Clients: librdkafka 2.15+ (confluent-kafka's ``ShareConsumer``, a preview: acknowledgements
with nothing to fetch, and at close) sends v1 only; the Java share consumer v1 (Kafka 4.1)
or v2 (Kafka 4.2).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ShareAcknowledgeRequest", valid="1-2", flexible="0+", fields=[
    Field("GroupId", "string", "0+", nullable="0+", default=None),
    Field("MemberId", "string", "0+", nullable="0+"),
    Field("ShareSessionEpoch", "int32", "0+"),
    Field("IsRenewAck", "bool", "2+", default=False),
    Field("Topics", "[]AcknowledgeTopic", "0+", fields=[
        Field("TopicId", "uuid", "0+"),
        Field("Partitions", "[]AcknowledgePartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("AcknowledgementBatches", "[]AcknowledgementBatch", "0+", fields=[
                Field("FirstOffset", "int64", "0+"),
                Field("LastOffset", "int64", "0+"),
                Field("AcknowledgeTypes", "[]int8", "0+"),
            ]),
        ]),
    ]),
])

RESPONSE = Message("ShareAcknowledgeResponse", valid="1-2", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("AcquisitionLockTimeoutMs", "int32", "2+"),
    Field("Responses", "[]ShareAcknowledgeTopicResponse", "0+", fields=[
        Field("TopicId", "uuid", "0+"),
        Field("Partitions", "[]PartitionData", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            Field("CurrentLeader", "LeaderIdAndEpoch", "0+", fields=[
                Field("LeaderId", "int32", "0+"),
                Field("LeaderEpoch", "int32", "0+"),
            ]),
        ]),
    ]),
    Field("NodeEndpoints", "[]NodeEndpoint", "0+", fields=[
        Field("NodeId", "int32", "0+"),
        Field("Host", "string", "0+"),
        Field("Port", "int32", "0+"),
        Field("Rack", "string", "0+", nullable="0+", default=None),
    ]),
])

register(ApiKey.SHARE_ACKNOWLEDGE, "ShareAcknowledge", REQUEST, RESPONSE, (1, 2))
