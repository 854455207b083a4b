"""DescribeGroups (key 15): groups' state, protocol and members with their metadata and assignments.

Served: v0-5.
- v0: group ids; per group its state, protocol type and name (``ProtocolData``)
  and members (member id, client id and host, metadata and assignment bytes).
- v1: response ThrottleTimeMs.  v2: same shape.
- v3: request IncludeAuthorizedOperations, response AuthorizedOperations.
- v4: each member's GroupInstanceId (KIP-345).
- v5: first flexible version.

Not to be confused with the coordinator protocol's own DescribeGroups (key 1005,
``coordinator``), which ``spark-coord groups`` uses.

Clients (admin), when offered v0-5: librdkafka 2.16 and kafka-python 3.0 send v5,
kafkajs 2.2 v2, the Java client v5.  Versions after Kafka 3.9's definitions are
not declared: newer clients negotiate down to v5.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

AUTHORIZED_OPERATIONS_UNKNOWN = -2147483648

REQUEST = Message("DescribeGroupsRequest", valid="0-5", flexible="5+", fields=[
    Field("Groups", "[]string", "0+"),
    Field("IncludeAuthorizedOperations", "bool", "3+"),
])

RESPONSE = Message("DescribeGroupsResponse", valid="0-5", flexible="5+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("Groups", "[]DescribedGroup", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("GroupId", "string", "0+"),
        Field("GroupState", "string", "0+"),
        Field("ProtocolType", "string", "0+"),
        Field("ProtocolData", "string", "0+"),
        Field("Members", "[]DescribedGroupMember", "0+", fields=[
            Field("MemberId", "string", "0+"),
            Field("GroupInstanceId", "string", "4+", nullable="4+", default=None),
            Field("ClientId", "string", "0+"),
            Field("ClientHost", "string", "0+"),
            Field("MemberMetadata", "bytes", "0+"),
            Field("MemberAssignment", "bytes", "0+"),
        ]),
        Field("AuthorizedOperations", "int32", "3+", default=AUTHORIZED_OPERATIONS_UNKNOWN),
    ]),
])

register(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", REQUEST, RESPONSE, (0, 5))
