"""The coordinator protocol (seeds 003 sections 7 and 11, generation ids from 004).

Api keys 1000-1006, non-flexible: Kafka 0.8 framing (request header v1: api_key,
api_version, correlation_id, client_id; response header v0: correlation_id).  No
Kafka version uses these keys.  Versions:

- RegisterConsumer 0-2.  v1 adds the member's claim: the epoch and partitions it
  still holds, with its positions, and in the answer the epoch the coordinator
  accepted it into.  v2 has v1's fields; a member that registers with v2 serves
  StopFetcher and StartFetcher v1 (incremental hand-over), and is sent those.
- StopFetcher 0-1.  v0 stops everything the member holds.  v1 adds Partitions:
  the ones to stop (the member keeps fetching the others); null stops everything.
- StartFetcher 0-1.  Same fields.  v0 follows a StopFetcher of everything: the
  member starts what it is given at the offsets given.  v1 gives the member's
  complete assignment: partitions it already fetches go on from its own
  position (their offset is ignored), the others start at the offset given, and
  nothing it holds is missing from it (partitions leave only through StopFetcher).
- ClusterMetadata 0-1.  v1 names the member's group (nullable): the coordinator
  answered is the holder of the group's coordinator shard; v0 (or a null group)
  answers shard 0's holder.
- Every other API: version 0.

A member's epoch (the GenerationId of these messages) is its own, not the
group's: the coordinator gives a member a new epoch with each StopFetcher v1 and
StartFetcher it sends it, from one counter per group, so a member whose
partitions do not move keeps its epoch while others are rebalanced.

Who sends what:

- ClusterMetadata (1000): member -> any broker.  Where its group's coordinator is,
  and the live brokers.
- RegisterConsumer (1001): member -> coordinator, on a fresh connection.  A member
  that lost its coordinator (a failover, a broken connection) registers again with
  a claim; the coordinator accepts it back into that generation when the claim
  matches what it knows (restored owners after a failover), so nobody stops.  After
  a successful answer frames flow BOTH ways on the connection:
- Ping (1002), StopFetcher (1003), StartFetcher (1004) are SENT BY THE BROKER (the
  coordinator) to the member, on the member's own connection.  The member reads
  them as requests (``protocol.decode_request``) and answers each with a response
  frame carrying the same correlation id (``protocol.encode_response``).  So the
  member needs no server socket, and the coordinator needs no second connection.
- CommitOffsets (1006): member -> coordinator, on the same connection, any time
  after registration (seeds 003 section 13, "Active CommitOffset").  Same checks as
  offsets in a Ping answer (generation, ownership, never backwards); the answer
  comes once the offsets are in ZooKeeper, with an error code per partition.  With
  ``leave`` set it is the member's last word: it has stopped fetching and leaves
  the group, which is rebalanced at once.
- DescribeGroups (1005): admin tool -> coordinator (``spark-coord groups``): the
  groups, their members and assignments, committed offsets and owners.

Telling requests from responses on a member's connection: **every correlation id
on it is negative**, in both directions (``correlation_ids()``).  A response frame
starts with its correlation id, so its first int32 is negative; a request frame
starts with int16 api_key and int16 api_version, so its first int32,
``api_key << 16 | api_version``, is never negative (api keys are 0..32767).  Each
side reads a frame's first four bytes (``is_response_frame``) and knows which it
is, whatever the other side has outstanding.

Fencing: everything the coordinator sends carries its ``coordinator_epoch`` (the
election znode's czxid, an int64); a member refuses a request whose epoch is older
than the newest it has seen (STALE_COORDINATOR_EPOCH).  Offsets in Ping and
StopFetcher answers carry the member's ``generation_id`` so the coordinator can
refuse offsets of a stale generation.

Offsets are "the next offset to consume" (Kafka 0.8's ZK convention).  In
StartFetcher, an offset of -1 means "no committed offset: apply your
auto.offset.reset".
"""

from __future__ import annotations

import itertools
from enum import IntEnum
from typing import Iterator

from spark_coord.wire.registry import register
from spark_coord.wire.schema import Field, Message

__all__ = ["CoordinatorApiKey", "CLUSTER_METADATA", "REGISTER_CONSUMER", "PING", "STOP_FETCHER", "START_FETCHER",
           "DESCRIBE_GROUPS", "COMMIT_OFFSETS", "VERSION", "REGISTER_VERSION", "INCREMENTAL_REGISTER_VERSION",
           "INCREMENTAL_VERSION", "METADATA_VERSION", "NO_OFFSET", "NO_GENERATION", "MESSAGES",
           "correlation_id", "correlation_ids", "is_response_frame"]


class CoordinatorApiKey(IntEnum):
    """Api keys of the coordinator protocol."""

    CLUSTER_METADATA = 1000
    REGISTER_CONSUMER = 1001
    PING = 1002
    STOP_FETCHER = 1003
    START_FETCHER = 1004
    DESCRIBE_GROUPS = 1005
    COMMIT_OFFSETS = 1006


CLUSTER_METADATA = CoordinatorApiKey.CLUSTER_METADATA
REGISTER_CONSUMER = CoordinatorApiKey.REGISTER_CONSUMER
PING = CoordinatorApiKey.PING
STOP_FETCHER = CoordinatorApiKey.STOP_FETCHER
START_FETCHER = CoordinatorApiKey.START_FETCHER
DESCRIBE_GROUPS = CoordinatorApiKey.DESCRIBE_GROUPS
COMMIT_OFFSETS = CoordinatorApiKey.COMMIT_OFFSETS

#: The version of every coordinator API but RegisterConsumer.
VERSION = 0
#: The newest RegisterConsumer version (members send it; 0 and 1 are still served).
REGISTER_VERSION = 2
#: RegisterConsumer versions whose members are sent StopFetcher/StartFetcher v1 (incremental).
INCREMENTAL_REGISTER_VERSION = 2
#: The StopFetcher/StartFetcher version of incremental hand-over.
INCREMENTAL_VERSION = 1
#: A StartFetcher start offset meaning "apply auto.offset.reset".
NO_OFFSET = -1
#: "No generation": a member that holds no assignment, or a claim that was not accepted.
NO_GENERATION = -1

_ID_SPACE = 0x7FFFFFFF


def correlation_id(n: int) -> int:
    """The ``n``-th correlation id (from 0) of a member's connection: -1, -2, ... -(2**31 - 1), then -1 again."""
    return -(n % _ID_SPACE + 1)


def correlation_ids() -> Iterator[int]:
    """Correlation ids for requests on a member's connection (see ``correlation_id``)."""
    return map(correlation_id, itertools.count())


def is_response_frame(frame) -> bool:
    """On a member's connection: does this frame (after the size prefix) hold a response?

    A response starts with its (negative) correlation id; a request with
    ``api_key << 16 | api_version``, which is never negative."""
    return len(frame) >= 1 and frame[0] >= 0x80


def _broker_fields() -> list[Field]:
    return [Field("NodeId", "int32", "0+"), Field("Host", "string", "0+"), Field("Port", "int32", "0+")]


def _offset_fields() -> list[Field]:
    return [Field("Topic", "string", "0+"), Field("Partition", "int32", "0+"), Field("Offset", "int64", "0+")]


# ------------------------------------------------------------------ ClusterMetadata
# v1: the group the member belongs to; the answer's coordinator is the holder of the group's
# shard (v0, or a null group: shard 0's holder).
CLUSTER_METADATA_REQUEST = Message("ClusterMetadataRequest", valid="0-1", flexible="none", fields=[
    Field("GroupId", "string", "1+", nullable="1+", default=None),
])
CLUSTER_METADATA_RESPONSE = Message("ClusterMetadataResponse", valid="0-1", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("CoordinatorId", "int32", "0+", default=-1),   # -1: no coordinator elected right now
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("Brokers", "[]Broker", "0+", fields=_broker_fields()),
])

def _ownership_fields() -> list[Field]:
    return [Field("ConsumerThreadId", "string", "0+"),
            Field("Partitions", "[]AssignedPartition", "0+", fields=_offset_fields())]


# ----------------------------------------------------------------- RegisterConsumer
# v1: the member's claim (GenerationId, Owned: the partitions it still holds per thread, each
# with the member's position), and in the answer the generation it was accepted into.
REGISTER_CONSUMER_REQUEST = Message("RegisterConsumerRequest", valid="0-2", flexible="none", fields=[
    Field("GroupId", "string", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("Topics", "[]TopicCount", "0+", fields=[   # static subscription: topic -> streams
        Field("Topic", "string", "0+"),
        Field("Streams", "int32", "0+", default=1),
    ]),
    Field("Pattern", "string", "0+", nullable="0+", default=None),  # wildcard subscription (regex)
    Field("PatternStreams", "int32", "0+", default=1),
    Field("AutoCommit", "bool", "0+", default=True),
    Field("AutoOffsetReset", "string", "0+", default="largest"),      # "smallest" | "largest"
    Field("SessionTimeoutMs", "int32", "0+", default=10000),
    Field("GenerationId", "int32", "1+", default=NO_GENERATION),   # -1: no claim
    Field("Owned", "[]Ownership", "1+", fields=_ownership_fields()),
])
REGISTER_CONSUMER_RESPONSE = Message("RegisterConsumerResponse", valid="0-2", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("GenerationId", "int32", "1+", default=NO_GENERATION),   # the claim accepted: keep fetching
])

# ----------------------------------------------------------------------------- Ping
PING_REQUEST = Message("PingRequest", valid="0", flexible="none", fields=[
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("ConsumerId", "string", "0+"),
    Field("NumRetries", "int32", "0+"),
])
PING_RESPONSE = Message("PingResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("Offsets", "[]OffsetInfo", "0+", fields=_offset_fields()),  # empty without auto-commit or commits
])

# ---------------------------------------------------------------------- StopFetcher
# v1: Partitions, the ones to stop (null: all); GenerationId is the member's epoch once they stopped.
STOP_FETCHER_REQUEST = Message("StopFetcherRequest", valid="0-1", flexible="none", fields=[
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("ConsumerId", "string", "0+"),
    Field("Partitions", "[]StopTopic", "1+", nullable="1+", default=None, fields=[
        Field("Topic", "string", "1+"),
        Field("Partitions", "[]int32", "1+"),
    ]),
])
STOP_FETCHER_RESPONSE = Message("StopFetcherResponse", valid="0-1", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("Offsets", "[]OffsetInfo", "0+", fields=_offset_fields()),
])

# --------------------------------------------------------------------- StartFetcher
# v1: the same fields; the member's complete assignment, applied incrementally (module docstring).
START_FETCHER_REQUEST = Message("StartFetcherRequest", valid="0-1", flexible="none", fields=[
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("ConsumerId", "string", "0+"),
    Field("Ownership", "[]Ownership", "0+", fields=_ownership_fields()),  # offset -1: apply the reset
    Field("Brokers", "[]Broker", "0+", fields=_broker_fields()),
])
START_FETCHER_RESPONSE = Message("StartFetcherResponse", valid="0-1", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("GenerationId", "int32", "0+", default=-1),
])

# ------------------------------------------------------------------- DescribeGroups
# v1: each member's protocol (coordinator, spark, classic or consumer)
DESCRIBE_GROUPS_REQUEST = Message("CoordinatorDescribeGroupsRequest", valid="0-1", flexible="none", fields=[
    Field("GroupIds", "[]string", "0+"),  # empty: every group
])
DESCRIBE_GROUPS_RESPONSE = Message("CoordinatorDescribeGroupsResponse", valid="0-1", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("Groups", "[]DescribedGroup", "0+", fields=[
        Field("GroupId", "string", "0+"),
        Field("State", "string", "0+"),
        Field("GenerationId", "int32", "0+", default=-1),
        Field("Members", "[]DescribedMember", "0+", fields=[
            Field("ConsumerId", "string", "0+"),
            Field("Host", "string", "0+"),
            Field("Protocol", "string", "1+", default="coordinator"),
            Field("Assigned", "[]AssignedTopicPartition", "0+", fields=[
                Field("Topic", "string", "0+"),
                Field("Partition", "int32", "0+"),
            ]),
        ]),
        Field("Offsets", "[]CommittedOffset", "0+", fields=[
            Field("Topic", "string", "0+"),
            Field("Partition", "int32", "0+"),
            Field("CommittedOffset", "int64", "0+", default=-1),
            Field("Owner", "string", "0+", nullable="0+", default=None),  # owning consumer thread id
        ]),
    ]),
])

# -------------------------------------------------------------------- CommitOffsets
COMMIT_OFFSETS_REQUEST = Message("CommitOffsetsRequest", valid="0", flexible="none", fields=[
    Field("GroupId", "string", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("GenerationId", "int32", "0+", default=NO_GENERATION),
    Field("Leave", "bool", "0+", default=False),   # final commit: stopped fetching, leaving the group
    Field("Offsets", "[]OffsetInfo", "0+", fields=_offset_fields()),
])
COMMIT_OFFSETS_RESPONSE = Message("CommitOffsetsResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("Partitions", "[]PartitionResult", "0+", fields=[
        Field("Topic", "string", "0+"),
        Field("Partition", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
    ]),
])

#: api key -> (name, request schema, response schema)
MESSAGES: dict[int, tuple[str, Message, Message]] = {
    CLUSTER_METADATA: ("ClusterMetadata", CLUSTER_METADATA_REQUEST, CLUSTER_METADATA_RESPONSE),
    REGISTER_CONSUMER: ("RegisterConsumer", REGISTER_CONSUMER_REQUEST, REGISTER_CONSUMER_RESPONSE),
    PING: ("Ping", PING_REQUEST, PING_RESPONSE),
    STOP_FETCHER: ("StopFetcher", STOP_FETCHER_REQUEST, STOP_FETCHER_RESPONSE),
    START_FETCHER: ("StartFetcher", START_FETCHER_REQUEST, START_FETCHER_RESPONSE),
    DESCRIBE_GROUPS: ("CoordinatorDescribeGroups", DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE),
    COMMIT_OFFSETS: ("CommitOffsets", COMMIT_OFFSETS_REQUEST, COMMIT_OFFSETS_RESPONSE),
}

#: api key -> (lowest, highest) version served
VERSIONS: dict[int, tuple[int, int]] = {key: (VERSION, VERSION) for key in MESSAGES}
VERSIONS[REGISTER_CONSUMER] = (0, REGISTER_VERSION)
#: The newest ClusterMetadata version (1: the coordinator of a group's shard).
METADATA_VERSION = 1
VERSIONS[CLUSTER_METADATA] = (0, METADATA_VERSION)
VERSIONS[STOP_FETCHER] = (0, INCREMENTAL_VERSION)
VERSIONS[START_FETCHER] = (0, INCREMENTAL_VERSION)
#: The newest coordinator DescribeGroups version (1: each member's protocol).
DESCRIBE_VERSION = 1
VERSIONS[DESCRIBE_GROUPS] = (0, DESCRIBE_VERSION)

for _key, (_name, _request, _response) in MESSAGES.items():
    register(_key, _name, _request, _response, VERSIONS[_key])
