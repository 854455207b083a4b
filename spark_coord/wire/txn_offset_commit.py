"""TxnOffsetCommit (key 28): a transactional producer commits a group's offsets inside its transaction.

Served: v0-4 (sent to the group's coordinator, after AddOffsetsToTxn to the transaction's).
- v0: TransactionalId, GroupId, ProducerId, ProducerEpoch, offsets by topic and partition (offset,
  metadata) -> an error code per partition.
- v1: same shape (throttling answered before it is applied).
- v2: CommittedLeaderEpoch per partition.
- v3: first flexible version; GenerationId, MemberId and GroupInstanceId (KIP-447: the group's member
  the offsets come from, so a zombie of an older generation is fenced).
- v4: same shape; TRANSACTION_ABORTABLE may be answered (KIP-890).
- v5 (TransactionVersion 2) is not served.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("TxnOffsetCommitRequest", valid="0-4", flexible="3+", fields=[
    Field("TransactionalId", "string", "0+"),
    Field("GroupId", "string", "0+"),
    Field("ProducerId", "int64", "0+"),
    Field("ProducerEpoch", "int16", "0+"),
    Field("GenerationId", "int32", "3+", default=-1),
    Field("MemberId", "string", "3+", default=""),
    Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    Field("Topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("CommittedOffset", "int64", "0+"),
            Field("CommittedLeaderEpoch", "int32", "2+", default=-1),
            Field("CommittedMetadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])

RESPONSE = Message("TxnOffsetCommitResponse", valid="0-4", flexible="3+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

register(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", REQUEST, RESPONSE, (0, 4))
