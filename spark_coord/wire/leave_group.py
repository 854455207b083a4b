"""LeaveGroup (key 13): members leave a group (a clean shutdown, or an admin removing them).

Served: v0-5.
- v0: group and one member id.  v1: response ThrottleTimeMs.  v2: same shape.
- v3: batched: ``Members`` (member id and GroupInstanceId each) replaces
  ``MemberId``, and the response answers each member (KIP-345).
- v4: first flexible version.
- v5: a Reason per member (KIP-800).

Clients, when offered v0-5: librdkafka 2.0 and 2.16 send v1, kafkajs 2.2 v3,
kafka-python 3.0 and the Java client v5.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

#: The first version whose request names its members in a batch.
BATCHED_VERSION = 3

REQUEST = Message("LeaveGroupRequest", valid="0-5", flexible="4+", fields=[
    Field("GroupId", "string", "0+"),
    Field("MemberId", "string", "0-2"),
    Field("Members", "[]MemberIdentity", "3+", fields=[
        Field("MemberId", "string", "3+"),
        Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        Field("Reason", "string", "5+", nullable="5+", default=None),
    ]),
])

RESPONSE = Message("LeaveGroupResponse", valid="0-5", flexible="4+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("ErrorCode", "int16", "0+"),
    Field("Members", "[]MemberResponse", "3+", fields=[
        Field("MemberId", "string", "3+"),
        Field("GroupInstanceId", "string", "3+", nullable="3+"),
        Field("ErrorCode", "int16", "3+"),
    ]),
])

register(ApiKey.LEAVE_GROUP, "LeaveGroup", REQUEST, RESPONSE, (0, 5))
