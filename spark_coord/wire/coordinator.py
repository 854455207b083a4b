"""The coordinator protocol (seeds 003 sections 7 and 11, generation ids from 004).

Api keys 1000-1005, version 0 each, non-flexible: Kafka 0.8 framing (request
header v1: api_key, api_version, correlation_id, client_id; response header v0:
correlation_id).  No Kafka version uses these keys.

Who sends what:

- ClusterMetadata (1000): member -> any broker.  Where the coordinator is, and the
  live brokers.
- RegisterConsumer (1001): member -> coordinator, on a fresh connection.  After a
  successful answer the connection *changes direction*:
- Ping (1002), StopFetcher (1003), StartFetcher (1004) are SENT BY THE BROKER (the
  coordinator) to the member, on the member's own connection.  The member reads
  them as requests (``protocol.decode_request``) and answers each with a response
  frame carrying the same correlation id (``protocol.encode_response``).  So the
  member needs no server socket, and the coordinator needs no second connection.
- DescribeGroups (1005): admin tool -> coordinator (``spark-coord groups``): the
  groups, their members and assignments, committed offsets and owners.

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

from enum import IntEnum

from spark_coord.wire.registry import register
from spark_coord.wire.schema import Field, Message

__all__ = ["CoordinatorApiKey", "CLUSTER_METADATA", "REGISTER_CONSUMER", "PING", "STOP_FETCHER", "START_FETCHER",
           "DESCRIBE_GROUPS", "VERSION", "NO_OFFSET", "MESSAGES"]


class CoordinatorApiKey(IntEnum):
    """Api keys of the coordinator protocol."""

    CLUSTER_METADATA = 1000
    REGISTER_CONSUMER = 1001
    PING = 1002
    STOP_FETCHER = 1003
    START_FETCHER = 1004
    DESCRIBE_GROUPS = 1005


CLUSTER_METADATA = CoordinatorApiKey.CLUSTER_METADATA
REGISTER_CONSUMER = CoordinatorApiKey.REGISTER_CONSUMER
PING = CoordinatorApiKey.PING
STOP_FETCHER = CoordinatorApiKey.STOP_FETCHER
START_FETCHER = CoordinatorApiKey.START_FETCHER
DESCRIBE_GROUPS = CoordinatorApiKey.DESCRIBE_GROUPS

#: The only version of every coordinator API.
VERSION = 0
#: A StartFetcher start offset meaning "apply auto.offset.reset".
NO_OFFSET = -1


def _broker_fields() -> list[Field]:
    return [Field("NodeId", "int32", "0+"), Field("Host", "string", "0+"), Field("Port", "int32", "0+")]


def _offset_fields() -> list[Field]:
    return [Field("Topic", "string", "0+"), Field("Partition", "int32", "0+"), Field("Offset", "int64", "0+")]


# ------------------------------------------------------------------ ClusterMetadata
CLUSTER_METADATA_REQUEST = Message("ClusterMetadataRequest", valid="0", flexible="none", fields=[])
CLUSTER_METADATA_RESPONSE = Message("ClusterMetadataResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("CoordinatorId", "int32", "0+", default=-1),   # -1: no coordinator elected right now
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("Brokers", "[]Broker", "0+", fields=_broker_fields()),
])

# ----------------------------------------------------------------- RegisterConsumer
REGISTER_CONSUMER_REQUEST = Message("RegisterConsumerRequest", valid="0", flexible="none", fields=[
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
])
REGISTER_CONSUMER_RESPONSE = Message("RegisterConsumerResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
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
STOP_FETCHER_REQUEST = Message("StopFetcherRequest", valid="0", flexible="none", fields=[
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("ConsumerId", "string", "0+"),
])
STOP_FETCHER_RESPONSE = Message("StopFetcherResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("Offsets", "[]OffsetInfo", "0+", fields=_offset_fields()),
])

# --------------------------------------------------------------------- StartFetcher
START_FETCHER_REQUEST = Message("StartFetcherRequest", valid="0", flexible="none", fields=[
    Field("CoordinatorEpoch", "int64", "0+", default=-1),
    Field("GenerationId", "int32", "0+", default=-1),
    Field("ConsumerId", "string", "0+"),
    Field("Ownership", "[]Ownership", "0+", fields=[
        Field("ConsumerThreadId", "string", "0+"),
        Field("Partitions", "[]AssignedPartition", "0+", fields=_offset_fields()),  # offset -1: apply the reset
    ]),
    Field("Brokers", "[]Broker", "0+", fields=_broker_fields()),
])
START_FETCHER_RESPONSE = Message("StartFetcherResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ConsumerId", "string", "0+"),
    Field("GenerationId", "int32", "0+", default=-1),
])

# ------------------------------------------------------------------- DescribeGroups
DESCRIBE_GROUPS_REQUEST = Message("CoordinatorDescribeGroupsRequest", valid="0", flexible="none", fields=[
    Field("GroupIds", "[]string", "0+"),  # empty: every group
])
DESCRIBE_GROUPS_RESPONSE = Message("CoordinatorDescribeGroupsResponse", valid="0", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("Groups", "[]DescribedGroup", "0+", fields=[
        Field("GroupId", "string", "0+"),
        Field("State", "string", "0+"),
        Field("GenerationId", "int32", "0+", default=-1),
        Field("Members", "[]DescribedMember", "0+", fields=[
            Field("ConsumerId", "string", "0+"),
            Field("Host", "string", "0+"),
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

#: api key -> (name, request schema, response schema)
MESSAGES: dict[int, tuple[str, Message, Message]] = {
    CLUSTER_METADATA: ("ClusterMetadata", CLUSTER_METADATA_REQUEST, CLUSTER_METADATA_RESPONSE),
    REGISTER_CONSUMER: ("RegisterConsumer", REGISTER_CONSUMER_REQUEST, REGISTER_CONSUMER_RESPONSE),
    PING: ("Ping", PING_REQUEST, PING_RESPONSE),
    STOP_FETCHER: ("StopFetcher", STOP_FETCHER_REQUEST, STOP_FETCHER_RESPONSE),
    START_FETCHER: ("StartFetcher", START_FETCHER_REQUEST, START_FETCHER_RESPONSE),
    DESCRIBE_GROUPS: ("CoordinatorDescribeGroups", DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE),
}

for _key, (_name, _request, _response) in MESSAGES.items():
    register(_key, _name, _request, _response, (VERSION, VERSION))
