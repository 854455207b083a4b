"""DeleteTopics (key 20): delete topics by name.

Served: v0-5.
- v0-3: the same shape (v1 adds response ThrottleTimeMs; v3 may answer
  TOPIC_DELETION_DISABLED).
- v4: first flexible version.  v5: response ErrorMessage (and quota errors).
- v6 names topics by id or name (KIP-516) and is declared but not served.
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("DeleteTopicsRequest", valid="0-6", flexible="4+", fields=[
    Field("Topics", "[]DeleteTopicState", "6+", fields=[
        Field("Name", "string", "6+", nullable="6+", default=None),
        Field("TopicId", "uuid", "6+"),
    ]),
    Field("TopicNames", "[]string", "0-5"),
    Field("TimeoutMs", "int32", "0+"),
])

RESPONSE = Message("DeleteTopicsResponse", valid="0-6", flexible="4+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("Responses", "[]DeletableTopicResult", "0+", fields=[
        Field("Name", "string", "0+", nullable="6+"),
        Field("TopicId", "uuid", "6+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "5+", nullable="5+", default=None),
    ]),
])

register(ApiKey.DELETE_TOPICS, "DeleteTopics", REQUEST, RESPONSE, (0, 5))
