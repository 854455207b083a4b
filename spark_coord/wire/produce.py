"""Produce (key 0): append record batches to partitions.

Served: v3-9 (record batch v2 only; v0-2 carry message format v0/v1, which we do
not store, so a client asking for them gets UNSUPPORTED_VERSION).
- v3: TransactionalId; message format v2.  v4-6: same shape (new error codes).
- v7: zstd allowed.  v8: response RecordErrors and ErrorMessage (KIP-467).
- v9: first flexible version.
- v10 (KIP-951, CurrentLeader/NodeEndpoints tagged fields) and v11 (KIP-890 error
  code) are declared in the schema but not served.
An acks=0 request gets no response at all (Kafka's rule, in every version).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ProduceRequest", valid="0-11", flexible="9+", fields=[
    Field("TransactionalId", "string", "3+", nullable="3+", default=None),
    Field("Acks", "int16", "0+"),
    Field("TimeoutMs", "int32", "0+"),
    Field("TopicData", "[]TopicProduceData", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("PartitionData", "[]PartitionProduceData", "0+", fields=[
            Field("Index", "int32", "0+"),
            Field("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

RESPONSE = Message("ProduceResponse", valid="0-11", flexible="9+", fields=[
    Field("Responses", "[]TopicProduceResponse", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=[
            Field("Index", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("BaseOffset", "int64", "0+"),
            Field("LogAppendTimeMs", "int64", "2+", default=-1),
            Field("LogStartOffset", "int64", "5+", default=-1),
            Field("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                Field("BatchIndex", "int32", "8+"),
                Field("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
            ]),
            Field("ErrorMessage", "string", "8+", nullable="8+", default=None),
            Field("CurrentLeader", "LeaderIdAndEpoch", "10+", tag=0, tagged="10+", fields=[
                Field("LeaderId", "int32", "10+", default=-1),
                Field("LeaderEpoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    Field("ThrottleTimeMs", "int32", "1+", default=0),
    Field("NodeEndpoints", "[]NodeEndpoint", "10+", tag=0, tagged="10+", fields=[
        Field("NodeId", "int32", "10+"),
        Field("Host", "string", "10+"),
        Field("Port", "int32", "10+"),
        Field("Rack", "string", "10+", nullable="10+", default=None),
    ]),
])

register(ApiKey.PRODUCE, "Produce", REQUEST, RESPONSE, (3, 9))
