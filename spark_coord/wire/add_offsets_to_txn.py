"""AddOffsetsToTxn (key 25): a transactional producer adds a group's offsets to its transaction (KIP-98).

Served: v0-4 (v5 does not exist; TransactionVersion 2 leaves this API unchanged).
- v0: TransactionalId, ProducerId, ProducerEpoch, GroupId -> an error code.
- v1: same shape (throttling answered before it is applied).
- v2: same shape; PRODUCER_FENCED may be answered.
- v3: first flexible version.
- v4: same shape; TRANSACTION_ABORTABLE may be answered (KIP-890).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("AddOffsetsToTxnRequest", valid="0-4", flexible="3+", fields=[
    Field("TransactionalId", "string", "0+"),
    Field("ProducerId", "int64", "0+"),
    Field("ProducerEpoch", "int16", "0+"),
    Field("GroupId", "string", "0+"),
])

RESPONSE = Message("AddOffsetsToTxnResponse", valid="0-4", flexible="3+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
])

register(ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", REQUEST, RESPONSE, (0, 4))
