"""DescribeTransactions (key 65): the state of transactional ids, asked of their coordinator (KIP-664).

Served: v0 (the only version; flexible from v0).  Per transactional id: an error code, the state's
name as Kafka spells it (``Empty``, ``Ongoing``, ``PrepareCommit``, ...), the timeout, the start time
(-1 when no transaction is open), the producer id and epoch, and the partitions of the transaction.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DescribeTransactionsRequest", valid="0", flexible="0+", fields=[
    Field("TransactionalIds", "[]string", "0+"),
])

RESPONSE = Message("DescribeTransactionsResponse", valid="0", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("TransactionStates", "[]TransactionState", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("TransactionalId", "string", "0+"),
        Field("TransactionState", "string", "0+"),
        Field("TransactionTimeoutMs", "int32", "0+"),
        Field("TransactionStartTimeMs", "int64", "0+"),
        Field("ProducerId", "int64", "0+"),
        Field("ProducerEpoch", "int16", "0+"),
        Field("Topics", "[]TopicData", "0+", fields=[
            Field("Topic", "string", "0+"),
            Field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])

register(ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", REQUEST, RESPONSE, (0, 0))
