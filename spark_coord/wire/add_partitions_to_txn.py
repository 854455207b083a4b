"""AddPartitionsToTxn (key 24): a transactional producer names the partitions of its transaction (KIP-98).

Served: v0-3, the client versions.
- v0: TransactionalId, ProducerId, ProducerEpoch, the partitions by topic -> an error code per partition.
- v1: same shape (throttling answered before it is applied).
- v2: same shape; PRODUCER_FENCED may be answered (older versions get INVALID_PRODUCER_EPOCH).
- v3: first flexible version.
- v4-5 (brokers batching several transactions and KIP-890's verify-only check, TRANSACTION_ABORTABLE)
  are not served: Kafka's clients send v3 at most, and only a broker verifying its own Produce sends v4+.
Kafka names the v0-3 fields ``V3AndBelow...``: the wire keys are ``v3_and_below_transactional_id`` and so on.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("AddPartitionsToTxnRequest", valid="0-3", flexible="3+", fields=[
    Field("V3AndBelowTransactionalId", "string", "0-3"),
    Field("V3AndBelowProducerId", "int64", "0-3"),
    Field("V3AndBelowProducerEpoch", "int16", "0-3"),
    Field("V3AndBelowTopics", "[]AddPartitionsToTxnTopic", "0-3", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]int32", "0+"),
    ]),
])

RESPONSE = Message("AddPartitionsToTxnResponse", valid="0-3", flexible="3+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ResultsByTopicV3AndBelow", "[]AddPartitionsToTxnTopicResult", "0-3", fields=[
        Field("Name", "string", "0+"),
        Field("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("PartitionErrorCode", "int16", "0+"),
        ]),
    ]),
])

register(ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", REQUEST, RESPONSE, (0, 3))
