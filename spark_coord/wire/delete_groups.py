"""DeleteGroups (key 42): delete empty groups and their committed offsets.

Served: v0-2.
- v0: group ids; per group an error code (NON_EMPTY_GROUP while it has members,
  GROUP_ID_NOT_FOUND when unknown).
- v1: same shape (throttling semantics only).
- v2: first flexible version.

Clients (admin), when offered v0-2: librdkafka 2.16 and kafka-python 3.0 send v2,
kafkajs 2.2 v1, the Java client v2.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DeleteGroupsRequest", valid="0-2", flexible="2+", fields=[
    Field("GroupsNames", "[]string", "0+"),
])

RESPONSE = Message("DeleteGroupsResponse", valid="0-2", flexible="2+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("Results", "[]DeletableGroupResult", "0+", fields=[
        Field("GroupId", "string", "0+"),
        Field("ErrorCode", "int16", "0+"),
    ]),
])

register(ApiKey.DELETE_GROUPS, "DeleteGroups", REQUEST, RESPONSE, (0, 2))
