"""Heartbeat (key 12): a member says it is alive; the answer says whether to rejoin.

Served: v0-4.
- v0: group, generation, member id; the response is an error code
  (REBALANCE_IN_PROGRESS tells the member to rejoin).
- v1: response ThrottleTimeMs.  v2: same shape.
- v3: GroupInstanceId (static membership, KIP-345).
- v4: first flexible version.

Clients, when offered v0-4: librdkafka 2.0 and 2.16 and kafkajs 2.2 send v3,
kafka-python 3.0 and the Java client v4.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("HeartbeatRequest", valid="0-4", flexible="4+", fields=[
    Field("GroupId", "string", "0+"),
    Field("GenerationId", "int32", "0+"),
    Field("MemberId", "string", "0+"),
    Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
])

RESPONSE = Message("HeartbeatResponse", valid="0-4", flexible="4+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("ErrorCode", "int16", "0+"),
])

register(ApiKey.HEARTBEAT, "Heartbeat", REQUEST, RESPONSE, (0, 4))
