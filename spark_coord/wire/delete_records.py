"""DeleteRecords (key 21): move partitions' log start offset forward (records below it are gone).

Served: v0-2.
- v0: per partition the offset before which records are deleted (-1: the high
  watermark, i.e. everything); the answer gives the partition's new low
  watermark (log start offset).
- v1: same shape (throttling is answered before it is applied).
- v2: first flexible version.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

#: The offset that means "up to the high watermark".
HIGH_WATERMARK = -1

REQUEST = Message("DeleteRecordsRequest", valid="0-2", flexible="2+", fields=[
    Field("Topics", "[]DeleteRecordsTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]DeleteRecordsPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("Offset", "int64", "0+"),
        ]),
    ]),
    Field("TimeoutMs", "int32", "0+"),
])

RESPONSE = Message("DeleteRecordsResponse", valid="0-2", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Topics", "[]DeleteRecordsTopicResult", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]DeleteRecordsPartitionResult", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("LowWatermark", "int64", "0+", default=-1),
            Field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

register(ApiKey.DELETE_RECORDS, "DeleteRecords", REQUEST, RESPONSE, (0, 2))
