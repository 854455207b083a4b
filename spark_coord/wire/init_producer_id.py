"""InitProducerId (key 22): hand an idempotent producer its producer id and epoch.

Served: v0-4 (what Kafka clients send today; kafka-python 3.x producers are
idempotent by default and give up without this API).
- v0: TransactionalId, TransactionTimeoutMs -> ProducerId, ProducerEpoch.
- v1: same shape (throttling is answered before it is applied).
- v2: first flexible version.
- v3: request ProducerId and ProducerEpoch (KIP-360: a producer may ask to resume
  its id after an error).  v4: same shape (PRODUCER_FENCED may be answered).
- v5-6 (KIP-890, KIP-939: transaction v2 and two-phase commit) are not declared.
Transactions are not supported: a non-null TransactionalId is answered with an
error (see ``broker.handlers.init_producer_id``).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("InitProducerIdRequest", valid="0-4", flexible="2+", fields=[
    Field("TransactionalId", "string", "0+", nullable="0+", default=None),
    Field("TransactionTimeoutMs", "int32", "0+"),
    Field("ProducerId", "int64", "3+", default=-1),
    Field("ProducerEpoch", "int16", "3+", default=-1),
])

RESPONSE = Message("InitProducerIdResponse", valid="0-4", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ProducerId", "int64", "0+", default=-1),
    Field("ProducerEpoch", "int16", "0+"),
])

register(ApiKey.INIT_PRODUCER_ID, "InitProducerId", REQUEST, RESPONSE, (0, 4))
