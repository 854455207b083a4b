"""JoinGroup (key 11): a member joins (or rejoins) a group and proposes its protocols.

Served: v0-9.
- v0: session timeout, member id, protocol type and protocols (name + metadata
  bytes: for consumers, a ``consumer_protocol`` subscription).
- v1: RebalanceTimeoutMs.  v2: response ThrottleTimeMs.  v3: same shape.
- v4: same shape; a member joining with an empty member id is answered
  MEMBER_ID_REQUIRED with its new id and must join again with it (KIP-394).
- v5: GroupInstanceId (static membership, KIP-345), in the request and in each
  member of the response.
- v6: first flexible version.
- v7: response ProtocolType; ProtocolName becomes nullable (KIP-559).
- v8: request Reason (KIP-800).
- v9: response SkipAssignment (the leader must not compute an assignment).

Clients, when offered v0-9: librdkafka 2.0 and 2.16 and kafkajs 2.2 send v5,
kafka-python 3.0 v7, the Java client v9.  All of them handle MEMBER_ID_REQUIRED.
(Recorded in tests/wire/golden/group_requests.json.)
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

#: The protocol type of Kafka consumers (their protocols carry consumer_protocol metadata).
CONSUMER_PROTOCOL_TYPE = "consumer"

REQUEST = Message("JoinGroupRequest", valid="0-9", flexible="6+", fields=[
    Field("GroupId", "string", "0+"),
    Field("SessionTimeoutMs", "int32", "0+"),
    Field("RebalanceTimeoutMs", "int32", "1+", default=-1),
    Field("MemberId", "string", "0+"),
    Field("GroupInstanceId", "string", "5+", nullable="5+", default=None),
    Field("ProtocolType", "string", "0+"),
    Field("Protocols", "[]JoinGroupRequestProtocol", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Metadata", "bytes", "0+"),
    ]),
    Field("Reason", "string", "8+", nullable="8+", default=None),
])

RESPONSE = Message("JoinGroupResponse", valid="0-9", flexible="6+", fields=[
    Field("ThrottleTimeMs", "int32", "2+"),
    Field("ErrorCode", "int16", "0+"),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("ProtocolType", "string", "7+", nullable="7+", default=None),
    Field("ProtocolName", "string", "0+", nullable="7+"),
    Field("Leader", "string", "0+"),
    Field("SkipAssignment", "bool", "9+", default=False),
    Field("MemberId", "string", "0+"),
    Field("Members", "[]JoinGroupResponseMember", "0+", fields=[
        Field("MemberId", "string", "0+"),
        Field("GroupInstanceId", "string", "5+", nullable="5+", default=None),
        Field("Metadata", "bytes", "0+"),
    ]),
])

register(ApiKey.JOIN_GROUP, "JoinGroup", REQUEST, RESPONSE, (0, 9))
