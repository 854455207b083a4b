"""ShareFetch (key 78): fetch records a share group's member acquires, and acknowledge others (KIP-932).

Served: v1-2 (flexible).  A share session (KIP-227's fetch session, keyed by group and
member on the broker) opens with ShareSessionEpoch 0 and the partitions to fetch, goes on
with the next epoch and only the partitions it adds (ForgottenTopicsData removes some),
and closes with -1.  Any request may carry acknowledgements of records acquired before
(AcknowledgementBatches: an offset range and one type per offset, or one type for the
whole range; 0 Gap, 1 Accept, 2 Release, 3 Reject, 4 Renew from v2).  The answer gives,
per partition, the records (record batches, as Fetch) and the ranges of them this member
acquired, with their delivery counts, for AcquisitionLockTimeoutMs.
- v0: Kafka 4.0's early access only (removed in Kafka 4.1, not served); it had a
  per-partition PartitionMaxBytes and neither MaxRecords nor BatchSize.
- v1 (Kafka 4.1, the first stable version): MaxRecords (the records to acquire; batch
  boundaries may exceed it) and BatchSize (the preferred size of acquired ranges).
- v2 (Kafka 4.2, KIP-1206 and KIP-1222): ShareAcquireMode (0 batch-optimized, v1's only
  behaviour; 1 record-limit: at most MaxRecords records) and IsRenewAck (the
  acknowledgements may include type 4 Renew, which extends a record's acquisition lock
  instead of ending its delivery; such a fetch must set MaxWaitMs, MinBytes, MaxBytes and
  MaxRecords to 0 and acquires nothing).  The answer is v1's.
The response's Records may be FileRegion slices of segment files (sent with sendfile), as
Fetch's.  A broker answers empty Records (``b""``), never null (Kafka's and librdkafka's
clients refuse a null); the schema keeps it nullable so that a null still decodes.
Where the layout was checked: docs/reference/protocol.md, "ShareFetch (key 78)".

Clients: librdkafka 2.15+ (confluent-kafka's ``ShareConsumer``, a preview) sends v1 only;
the Java share consumer v1 (Kafka 4.1) or v2 (Kafka 4.2).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ShareFetchRequest", valid="1-2", flexible="0+", fields=[
    Field("GroupId", "string", "0+", nullable="0+", default=None),
    Field("MemberId", "string", "0+", nullable="0+"),
    Field("ShareSessionEpoch", "int32", "0+"),
    Field("MaxWaitMs", "int32", "0+"),
    Field("MinBytes", "int32", "0+"),
    Field("MaxBytes", "int32", "0+", default=0x7FFFFFFF),
    Field("MaxRecords", "int32", "1+"),
    Field("BatchSize", "int32", "1+"),
    Field("ShareAcquireMode", "int8", "2+"),
    Field("IsRenewAck", "bool", "2+", default=False),
    Field("Topics", "[]FetchTopic", "0+", fields=[
        Field("TopicId", "uuid", "0+"),
        Field("Partitions", "[]FetchPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("AcknowledgementBatches", "[]AcknowledgementBatch", "0+", fields=[
                Field("FirstOffset", "int64", "0+"),
                Field("LastOffset", "int64", "0+"),
                Field("AcknowledgeTypes", "[]int8", "0+"),
            ]),
        ]),
    ]),
    Field("ForgottenTopicsData", "[]ForgottenTopic", "0+", fields=[
        Field("TopicId", "uuid", "0+"),
        Field("Partitions", "[]int32", "0+"),
    ]),
])

RESPONSE = Message("ShareFetchResponse", valid="1-2", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("AcquisitionLockTimeoutMs", "int32", "0+"),
    Field("Responses", "[]ShareFetchableTopicResponse", "0+", fields=[
        Field("TopicId", "uuid", "0+"),
        Field("Partitions", "[]PartitionData", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            Field("AcknowledgeErrorCode", "int16", "0+"),
            Field("AcknowledgeErrorMessage", "string", "0+", nullable="0+", default=None),
            Field("CurrentLeader", "LeaderIdAndEpoch", "0+", fields=[
                Field("LeaderId", "int32", "0+"),
                Field("LeaderEpoch", "int32", "0+"),
            ]),
            Field("Records", "records", "0+", nullable="0+"),
            Field("AcquiredRecords", "[]AcquiredRecords", "0+", fields=[
                Field("FirstOffset", "int64", "0+"),
                Field("LastOffset", "int64", "0+"),
                Field("DeliveryCount", "int16", "0+"),
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

register(ApiKey.SHARE_FETCH, "ShareFetch", REQUEST, RESPONSE, (1, 2))
