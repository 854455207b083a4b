"""EndTxn (key 26): a transactional producer commits or aborts its transaction (KIP-98).

Served: v0-4.
- v0: TransactionalId, ProducerId, ProducerEpoch, Committed -> an error code.
- v1: same shape (throttling answered before it is applied).
- v2: same shape; PRODUCER_FENCED may be answered (older versions get INVALID_PRODUCER_EPOCH).
- v3: first flexible version.
- v4: same shape; TRANSACTION_ABORTABLE may be answered (KIP-890).
- v5 (KIP-890 part 2, TransactionVersion 2: the epoch bumped at every EndTxn, the answer carrying the
  new producer id and epoch) is not served: the brokers finalize ``transaction.version`` 1 at most.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("EndTxnRequest", valid="0-4", flexible="3+", fields=[
    Field("TransactionalId", "string", "0+"),
    Field("ProducerId", "int64", "0+"),
    Field("ProducerEpoch", "int16", "0+"),
    Field("Committed", "bool", "0+"),
])

RESPONSE = Message("EndTxnResponse", valid="0-4", flexible="3+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
])

register(ApiKey.END_TXN, "EndTxn", REQUEST, RESPONSE, (0, 4))
