"""DescribeClientQuotas (key 48): the client quotas matching a filter (KIP-546).

Served: v0-v1 (flexible from v1).  Components are filters (entity type ``user``, ``client-id`` or
``ip``; match type 0 exact name, 1 the default entity, 2 any named entity) and ``Strict`` keeps
only entities with no other component.  The answer lists, per matching entity, its quota values
(``Value`` is a float64).  Our brokers enforce and store no quotas, so every valid filter matches
nothing: an empty list (Kafka's answer on a cluster without quotas), which is what
``kafka-configs --describe --entity-type users`` asks before it shows a user's SCRAM credentials.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
ENTITY_TYPES = ("user", "client-id", "ip")

REQUEST = Message("DescribeClientQuotasRequest", valid="0-1", flexible="1+", fields=[
    Field("Components", "[]ComponentData", "0+", fields=[
        Field("EntityType", "string", "0+"),
        Field("MatchType", "int8", "0+"),
        Field("Match", "string", "0+", nullable="0+", default=None),
    ]),
    Field("Strict", "bool", "0+"),
])

RESPONSE = Message("DescribeClientQuotasResponse", valid="0-1", flexible="1+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("Entries", "[]EntryData", "0+", nullable="0+", default=None, fields=[
        Field("Entity", "[]EntityData", "0+", fields=[
            Field("EntityType", "string", "0+"),
            Field("EntityName", "string", "0+", nullable="0+", default=None),
        ]),
        Field("Values", "[]ValueData", "0+", fields=[
            Field("Key", "string", "0+"),
            Field("Value", "float64", "0+"),
        ]),
    ]),
])

register(ApiKey.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", REQUEST, RESPONSE, (0, 1))
