"""DescribeProducers (key 61): the active idempotent producers of partitions (KIP-664).

Served: v0 (the only version; flexible from v0).  Per partition the producers whose
state the leader keeps: id, epoch, last sequence and the timestamp of their last
batch.  No transactions here, so CoordinatorEpoch is -1 and CurrentTxnStartOffset
-1.  A partition led elsewhere answers NOT_LEADER_OR_FOLLOWER, an unknown one
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DescribeProducersRequest", valid="0", flexible="0+", fields=[
    Field("Topics", "[]TopicRequest", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("PartitionIndexes", "[]int32", "0+"),
    ]),
])

RESPONSE = Message("DescribeProducersResponse", valid="0", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Topics", "[]TopicResponse", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]PartitionResponse", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            Field("ActiveProducers", "[]ProducerState", "0+", fields=[
                Field("ProducerId", "int64", "0+"),
                Field("ProducerEpoch", "int32", "0+"),
                Field("LastSequence", "int32", "0+", default=-1),
                Field("LastTimestamp", "int64", "0+", default=-1),
                Field("CoordinatorEpoch", "int32", "0+"),
                Field("CurrentTxnStartOffset", "int64", "0+", default=-1),
            ]),
        ]),
    ]),
])

register(ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", REQUEST, RESPONSE, (0, 0))
