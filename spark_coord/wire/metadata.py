"""Metadata (key 3): brokers, topics, partition leaders.

Served: v0-12.
- v0: topics array; an EMPTY array means all topics.
- v1: a NULL topics array means all topics, empty means none; the response gains
  broker racks, the controller id and IsInternal.
- v2: response ClusterId.  v3: response ThrottleTimeMs.  v4: request
  AllowAutoTopicCreation.  v5: per-partition OfflineReplicas.  v6: same shape.
- v7: partition LeaderEpoch.  v8: authorized-operations flags (request and response).
- v9: first flexible version.  v10: topic ids (request and response).
- v11: drops IncludeClusterAuthorizedOperations / ClusterAuthorizedOperations (KIP-700).
- v12: topic names may be null (lookup by topic id).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

AUTHORIZED_OPERATIONS_UNKNOWN = -2147483648

REQUEST = Message("MetadataRequest", valid="0-12", flexible="9+", fields=[
    Field("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        Field("TopicId", "uuid", "10+"),
        Field("Name", "string", "0+", nullable="10+"),
    ]),
    Field("AllowAutoTopicCreation", "bool", "4+", default=True),
    Field("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    Field("IncludeTopicAuthorizedOperations", "bool", "8+"),
])

RESPONSE = Message("MetadataResponse", valid="0-12", flexible="9+", fields=[
    Field("ThrottleTimeMs", "int32", "3+"),
    Field("Brokers", "[]MetadataResponseBroker", "0+", fields=[
        Field("NodeId", "int32", "0+"),
        Field("Host", "string", "0+"),
        Field("Port", "int32", "0+"),
        Field("Rack", "string", "1+", nullable="1+", default=None),
    ]),
    Field("ClusterId", "string", "2+", nullable="2+", default=None),
    Field("ControllerId", "int32", "1+", default=-1),
    Field("Topics", "[]MetadataResponseTopic", "0+", fields=[
        Field("ErrorCode", "int16", "0+"),
        Field("Name", "string", "0+", nullable="12+"),
        Field("TopicId", "uuid", "10+"),
        Field("IsInternal", "bool", "1+", default=False),
        Field("Partitions", "[]MetadataResponsePartition", "0+", fields=[
            Field("ErrorCode", "int16", "0+"),
            Field("PartitionIndex", "int32", "0+"),
            Field("LeaderId", "int32", "0+"),
            Field("LeaderEpoch", "int32", "7+", default=-1),
            Field("ReplicaNodes", "[]int32", "0+"),
            Field("IsrNodes", "[]int32", "0+"),
            Field("OfflineReplicas", "[]int32", "5+"),
        ]),
        Field("TopicAuthorizedOperations", "int32", "8+", default=AUTHORIZED_OPERATIONS_UNKNOWN),
    ]),
    Field("ClusterAuthorizedOperations", "int32", "8-10", default=AUTHORIZED_OPERATIONS_UNKNOWN),
])

register(ApiKey.METADATA, "Metadata", REQUEST, RESPONSE, (0, 12))
