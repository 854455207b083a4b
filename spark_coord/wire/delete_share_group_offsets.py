"""DeleteShareGroupOffsets (key 92): forget an empty share group's state for whole topics (KIP-932).

Served: v0 (flexible).  Sent to the group's coordinator with topic names; the group must
have no member (NON_EMPTY_GROUP).  The answer has a top-level error and one per topic
(UNKNOWN_TOPIC_OR_PARTITION...), topics by name and id.
- v0 (Kafka 4.1; Kafka 4.2 adds no version): each topic of the response has an ErrorCode
  and ErrorMessage, no Partitions array.
Where the layout was checked: docs/reference/protocol.md, "DeleteShareGroupOffsets (key 92)".

Clients: the Java admin client (Kafka 4.1+, ``Admin.deleteShareGroupOffsets``,
``kafka-share-groups.sh --delete-offsets``).  librdkafka 2.15/2.16 sends none.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DeleteShareGroupOffsetsRequest", valid="0", flexible="0+", fields=[
    Field("GroupId", "string", "0+"),
    Field("Topics", "[]DeleteShareGroupOffsetsRequestTopic", "0+", fields=[
        Field("TopicName", "string", "0+"),
    ]),
])

RESPONSE = Message("DeleteShareGroupOffsetsResponse", valid="0", flexible="0+", fields=[
    Field("ThrottleTimeMs", "int32", "0+"),
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("Responses", "[]DeleteShareGroupOffsetsResponseTopic", "0+", fields=[
        Field("TopicName", "string", "0+"),
        Field("TopicId", "uuid", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

register(ApiKey.DELETE_SHARE_GROUP_OFFSETS, "DeleteShareGroupOffsets", REQUEST, RESPONSE, (0, 0))
