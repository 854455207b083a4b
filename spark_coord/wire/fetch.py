"""Fetch (key 1): read record batches from partition logs.

Served: v4-17 (record batch v2; topics by name up to v12, by id from v13).
- v4: IsolationLevel; response LastStableOffset and AbortedTransactions.
- v5: LogStartOffset (request and response).  v6: same shape.
- v7: incremental fetch sessions (SessionId, SessionEpoch, ForgottenTopicsData;
  response ErrorCode and SessionId).  v8: same shape.
- v9: CurrentLeaderEpoch.  v10: zstd allowed.  v11: RackId; PreferredReadReplica.
- v12: first flexible version; LastFetchedEpoch; response tagged DivergingEpoch,
  CurrentLeader, SnapshotId.
- v13: topics (and forgotten topics) by TopicId instead of by name (KIP-516);
  per-partition UNKNOWN_TOPIC_ID.  v14: same shape (OFFSET_MOVED_TO_TIERED_STORAGE).
- v15: ReplicaId moves into the tagged ReplicaState (KIP-903).
- v16: response tagged NodeEndpoints (KIP-951).  v17: tagged ReplicaDirectoryId (KIP-853).
The response's Records may be FileRegion slices of segment files (sent with sendfile).
"""

from __future__ import annotations

from spark_coord.wire.registry import ApiKey, register
from spark_coord.wire.schema import Field, Message

REQUEST = Message("FetchRequest", valid="0-17", flexible="12+", fields=[
    Field("ClusterId", "string", "12+", nullable="12+", default=None, tag=0, tagged="12+"),
    Field("ReplicaId", "int32", "0-14", default=-1),
    Field("ReplicaState", "ReplicaState", "15+", tag=1, tagged="15+", fields=[
        Field("ReplicaId", "int32", "15+", default=-1),
        Field("ReplicaEpoch", "int64", "15+", default=-1),
    ]),
    Field("MaxWaitMs", "int32", "0+"),
    Field("MinBytes", "int32", "0+"),
    Field("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
    Field("IsolationLevel", "int8", "4+", default=0),
    Field("SessionId", "int32", "7+", default=0),
    Field("SessionEpoch", "int32", "7+", default=-1),
    Field("Topics", "[]FetchTopic", "0+", fields=[
        Field("Topic", "string", "0-12"),
        Field("TopicId", "uuid", "13+"),
        Field("Partitions", "[]FetchPartition", "0+", fields=[
            Field("Partition", "int32", "0+"),
            Field("CurrentLeaderEpoch", "int32", "9+", default=-1),
            Field("FetchOffset", "int64", "0+"),
            Field("LastFetchedEpoch", "int32", "12+", default=-1),
            Field("LogStartOffset", "int64", "5+", default=-1),
            Field("PartitionMaxBytes", "int32", "0+"),
            Field("ReplicaDirectoryId", "uuid", "17+", tag=0, tagged="17+"),
        ]),
    ]),
    Field("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=[
        Field("Topic", "string", "7-12"),
        Field("TopicId", "uuid", "13+"),
        Field("Partitions", "[]int32", "7+"),
    ]),
    Field("RackId", "string", "11+", default=""),
])

RESPONSE = Message("FetchResponse", valid="0-17", flexible="12+", fields=[
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("ErrorCode", "int16", "7+"),
    Field("SessionId", "int32", "7+", default=0),
    Field("Responses", "[]FetchableTopicResponse", "0+", fields=[
        Field("Topic", "string", "0-12"),
        Field("TopicId", "uuid", "13+"),
        Field("Partitions", "[]PartitionData", "0+", fields=[
            Field("PartitionIndex", "int32", "0+"),
            Field("ErrorCode", "int16", "0+"),
            Field("HighWatermark", "int64", "0+"),
            Field("LastStableOffset", "int64", "4+", default=-1),
            Field("LogStartOffset", "int64", "5+", default=-1),
            Field("DivergingEpoch", "EpochEndOffset", "12+", tag=0, tagged="12+", fields=[
                Field("Epoch", "int32", "12+", default=-1),
                Field("EndOffset", "int64", "12+", default=-1),
            ]),
            Field("CurrentLeader", "LeaderIdAndEpoch", "12+", tag=1, tagged="12+", fields=[
                Field("LeaderId", "int32", "12+", default=-1),
                Field("LeaderEpoch", "int32", "12+", default=-1),
            ]),
            Field("SnapshotId", "SnapshotId", "12+", tag=2, tagged="12+", fields=[
                Field("EndOffset", "int64", "0+", default=-1),
                Field("Epoch", "int32", "0+", default=-1),
            ]),
            Field("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                Field("ProducerId", "int64", "4+"),
                Field("FirstOffset", "int64", "4+"),
            ]),
            Field("PreferredReadReplica", "int32", "11+", default=-1),
            Field("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
    Field("NodeEndpoints", "[]NodeEndpoint", "16+", tag=0, tagged="16+", fields=[
        Field("NodeId", "int32", "16+"),
        Field("Host", "string", "16+"),
        Field("Port", "int32", "16+"),
        Field("Rack", "string", "16+", nullable="16+", default=None),
    ]),
])

register(ApiKey.FETCH, "Fetch", REQUEST, RESPONSE, (4, 17))
