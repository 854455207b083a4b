"""FindCoordinator (key 10): which broker coordinates a group (or a transactional id).

Served: v0-6.
- v0: one group id (``Key``), always a group key.
- v1: KeyType (0 group, 1 transaction); the response gains ThrottleTimeMs and
  ErrorMessage.  v2: same shape (throttling semantics only).
- v3: first flexible version.
- v4: batched lookups (KIP-699): the request carries ``CoordinatorKeys`` instead of
  ``Key`` and the response one ``Coordinators`` entry per key, each with its own
  error, instead of the top-level NodeId/Host/Port/ErrorCode.
- v5: same shape; may answer TRANSACTION_ABORTABLE (KIP-890, transactions only).
- v6: same shape; KeyType 2 (share groups, KIP-932) becomes legal.

Clients, when offered v0-6: librdkafka 2.0 and 2.16 and kafkajs 2.2 send v2 (one
key per request), kafka-python 3.0 v6 (a batch of one key); the Java client sends
v4+ (batches from its admin client).
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2

#: The first version whose request and response are batched.
BATCHED_VERSION = 4

REQUEST = Message("FindCoordinatorRequest", valid="0-6", flexible="3+", fields=[
    Field("Key", "string", "0-3"),
    Field("KeyType", "int8", "1+", default=KEY_TYPE_GROUP),
    Field("CoordinatorKeys", "[]string", "4+"),
])

RESPONSE = Message("FindCoordinatorResponse", valid="0-6", flexible="3+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("ErrorCode", "int16", "0-3"),
    Field("ErrorMessage", "string", "1-3", nullable="1-3"),
    Field("NodeId", "int32", "0-3"),
    Field("Host", "string", "0-3"),
    Field("Port", "int32", "0-3"),
    Field("Coordinators", "[]Coordinator", "4+", fields=[
        Field("Key", "string", "4+"),
        Field("NodeId", "int32", "4+"),
        Field("Host", "string", "4+"),
        Field("Port", "int32", "4+"),
        Field("ErrorCode", "int16", "4+"),
        Field("ErrorMessage", "string", "4+", nullable="4+"),
    ]),
])

register(ApiKey.FIND_COORDINATOR, "FindCoordinator", REQUEST, RESPONSE, (0, 6))
