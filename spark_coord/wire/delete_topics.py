"""DeleteTopics (key 20): delete topics by name, or by id from v6.

Served: v0-6.
- v0-3: the same shape (v1 adds response ThrottleTimeMs; v3 may answer
  TOPIC_DELETION_DISABLED).
- v4: first flexible version.  v5: response ErrorMessage (and quota errors).
- v6: Topics, each named by Name or by TopicId (KIP-516); the response carries both.
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

register(ApiKey.DELETE_TOPICS, "DeleteTopics", REQUEST, RESPONSE, (0, 6))
