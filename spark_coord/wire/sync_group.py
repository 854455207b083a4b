"""SyncGroup (key 14): after a join, every member asks for its assignment.

Served: v0-5.
- v0: group, generation, member id, and (from the leader) one assignment per
  member; the response carries this member's assignment bytes (for consumers, a
  ``consumer_protocol`` assignment).  v1: response ThrottleTimeMs.  v2: same shape.
- v3: GroupInstanceId (static membership, KIP-345).
- v4: first flexible version.
- v5: ProtocolType and ProtocolName in the request and the response (KIP-559).

Clients, when offered v0-5: librdkafka 2.0 and 2.16 and kafkajs 2.2 send v3,
kafka-python 3.0 and the Java client v5.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("SyncGroupRequest", valid="0-5", flexible="4+", fields=[
    Field("GroupId", "string", "0+"),
    Field("GenerationId", "int32", "0+"),
    Field("MemberId", "string", "0+"),
    Field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    Field("ProtocolType", "string", "5+", nullable="5+", default=None),
    Field("ProtocolName", "string", "5+", nullable="5+", default=None),
    Field("Assignments", "[]SyncGroupRequestAssignment", "0+", fields=[
        Field("MemberId", "string", "0+"),
        Field("Assignment", "bytes", "0+"),
    ]),
])

RESPONSE = Message("SyncGroupResponse", valid="0-5", flexible="4+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ProtocolType", "string", "5+", nullable="5+", default=None),
    Field("ProtocolName", "string", "5+", nullable="5+", default=None),
    Field("Assignment", "bytes", "0+"),
])

register(ApiKey.SYNC_GROUP, "SyncGroup", REQUEST, RESPONSE, (0, 5))
