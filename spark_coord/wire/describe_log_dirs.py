"""DescribeLogDirs (key 35): a broker's log directories and the size of every partition in them.

Served: v0-4 (Kafka 4.0 dropped v0 and added v5, IsCordoned; neither change is needed here).
- v0: per log dir its ErrorCode, path and per topic-partition the size in bytes,
  the offset lag (always 0: one replica, no future logs) and IsFutureKey.  A null
  topic list asks for every partition.
- v1: same shape (throttling is answered before it is applied).
- v2: first flexible version.
- v3: response top-level ErrorCode.
- v4: response per log dir TotalBytes and UsableBytes (the file system's, -1 unknown).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DescribeLogDirsRequest", valid="0-4", flexible="2+", fields=[
    Field("Topics", "[]DescribableLogDirTopic", "0+", nullable="0+", default=None, fields=[
        Field("Topic", "string", "0+"),
        Field("Partitions", "[]int32", "0+"),
    ]),
])

RESPONSE = Message("DescribeLogDirsResponse", valid="0-4", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "3+"),
    Field("Results", "[]DescribeLogDirsResult", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("LogDir", "string", "0+"),
        Field("Topics", "[]DescribeLogDirsTopic", "0+", fields=[
            Field("Name", "string", "0+"),
            Field("Partitions", "[]DescribeLogDirsPartition", "0+", fields=[
                Field("PartitionIndex", "int32", "0+"),
                Field("PartitionSize", "int64", "0+"),
                Field("OffsetLag", "int64", "0+"),
                Field("IsFutureKey", "bool", "0+"),
            ]),
        ]),
        Field("TotalBytes", "int64", "4+", default=-1),
        Field("UsableBytes", "int64", "4+", default=-1),
    ]),
])

register(ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", REQUEST, RESPONSE, (0, 4))
