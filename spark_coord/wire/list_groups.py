"""ListGroups (key 16): the groups a coordinator knows.

Served: v0-5.
- v0: no request fields; the response lists group id and protocol type.
- v1: response ThrottleTimeMs.  v2: same shape.
- v3: first flexible version.
- v4: request StatesFilter, response GroupState (KIP-518).
- v5: request TypesFilter, response GroupType ("classic", "consumer", KIP-848).

Clients (admin), when offered v0-5: librdkafka 2.16 and kafka-python 3.0 send v5,
kafkajs 2.2 v2, the Java client v5.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("ListGroupsRequest", valid="0-5", flexible="3+", fields=[
    Field("StatesFilter", "[]string", "4+"),
    Field("TypesFilter", "[]string", "5+"),
])

RESPONSE = Message("ListGroupsResponse", valid="0-5", flexible="3+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("ErrorCode", "int16", "0+"),
    Field("Groups", "[]ListedGroup", "0+", fields=[
        Field("GroupId", "string", "0+"),
        Field("ProtocolType", "string", "0+"),
        Field("GroupState", "string", "4+"),
        Field("GroupType", "string", "5+"),
    ]),
])

register(ApiKey.LIST_GROUPS, "ListGroups", REQUEST, RESPONSE, (0, 5))
