"""WriteTxnMarkers (key 27): a transaction coordinator has partition leaders write its markers (KIP-98).

Served: v0-1 (Kafka 4 keeps v1 and adds v2's TransactionVersion, which we do not take yet).
- v0: per marker the producer id and epoch, the result (false = ABORT, true = COMMIT), the
  partitions by topic, and the coordinator's epoch; the answer per marker and partition an error code.
- v1: first flexible version.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("WriteTxnMarkersRequest", valid="0-1", flexible="1+", fields=[
    Field("Markers", "[]WritableTxnMarker", "0+", fields=[
        Field("ProducerId", "int64", "0+"),
        Field("ProducerEpoch", "int16", "0+"),
        Field("TransactionResult", "bool", "0+"),
        Field("Topics", "[]WritableTxnMarkerTopic", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("PartitionIndexes", "[]int32", "0+"),
        ]),
        Field("CoordinatorEpoch", "int32", "0+"),
    ]),
])

RESPONSE = Message("WriteTxnMarkersResponse", valid="0-1", flexible="1+", fields=[
    Field("Markers", "[]WritableTxnMarkerResult", "0+", fields=[
        Field("ProducerId", "int64", "0+"),
        Field("Topics", "[]WritableTxnMarkerTopicResult", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("Partitions", "[]WritableTxnMarkerPartitionResult", "0+", fields=[
                Field("PartitionIndex", "int32", "0+"),
                Field("ErrorCode", "int16", "0+"),
            ]),
        ]),
    ]),
])

register(ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", REQUEST, RESPONSE, (0, 1))
