"""ListTransactions (key 66): the transactional ids a coordinator holds (KIP-664).

Served: v0-1 (flexible from v0).
- v0: filters by state name and by producer id (empty: all) -> the ids with their producer id and
  state, and the state filters the coordinator does not know.
- v1: DurationFilter (KIP-994): only transactions running longer than that many milliseconds (-1: all).
- v2 (a regular expression over the transactional ids, KIP-1152) is not served.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ListTransactionsRequest", valid="0-1", flexible="0+", fields=[
    Field("StateFilters", "[]string", "0+"),
    Field("ProducerIdFilters", "[]int64", "0+"),
    Field("DurationFilter", "int64", "1+", default=-1),
])

RESPONSE = Message("ListTransactionsResponse", valid="0-1", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("UnknownStateFilters", "[]string", "0+"),
    Field("TransactionStates", "[]TransactionState", "0+", fields=[
        Field("TransactionalId", "string", "0+"),
        Field("ProducerId", "int64", "0+"),
        Field("TransactionState", "string", "0+"),
    ]),
])

register(ApiKey.LIST_TRANSACTIONS, "ListTransactions", REQUEST, RESPONSE, (0, 1))
