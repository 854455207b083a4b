"""What ApiVersions (and its KIP-511 fallback) lists is exactly what the broker dispatches:
Kafka's data APIs, SASL, ACLs, the config APIs, Kafka's group APIs and the coordinator protocol (a request
for an API it does not serve closes only its connection: tests/broker/test_bad_input.py)."""

from __future__ import annotations

import struct

import pytest
from kafka_io import connect, recv_exactly, roundtrip

from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire import protocol, registry
from spark_coord.wire.registry import ApiKey

#: Kafka's group APIs (DESIGN.md "One registry, several doors"): the classic ones, Kafka 4's consumer group
#: protocol (KIP-848) and share groups (KIP-932) with their offsets' admin APIs.
GROUP_APIS = {ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP,
              ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS,
              ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.CONSUMER_GROUP_HEARTBEAT,
              ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE,
              ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS,
              ApiKey.OFFSET_DELETE}
#: The config APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.
CONFIG_APIS = {ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS}
#: The admin surface of issue 30: CreatePartitions, DeleteRecords, DescribeLogDirs, the SCRAM user APIs and
#: DescribeProducers (OffsetDelete is a group API), and DescribeClientQuotas (kafka-configs asks it first).
ADMIN_APIS = {ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_RECORDS, ApiKey.DESCRIBE_LOG_DIRS,
              ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_PRODUCERS,
              ApiKey.DESCRIBE_CLIENT_QUOTAS}
#: What a broker dispatches: Kafka's data APIs, SASL, ACLs, the config APIs, the group APIs, share fetches and
#: acknowledgements (KIP-932), a transaction coordinator's markers (WriteTxnMarkers, 27) and the transaction
#: coordinator's APIs (AddPartitionsToTxn 24, AddOffsetsToTxn 25, EndTxn 26, DescribeTransactions 65,
#: ListTransactions 66), TxnOffsetCommit (28) at the group's coordinator, and the coordinator protocol's
#: requests to it (ClusterMetadata, RegisterConsumer, DescribeGroups, CommitOffsets).
DISPATCHED = ({0, 1, 2, 3, 17, 18, 19, 20, 22, 24, 25, 26, 27, 28, 29, 30, 31, 36, 65, 66, 78, 79,
               1000, 1001, 1005, 1006}
              | {int(k) for k in GROUP_APIS} | {int(k) for k in CONFIG_APIS} | {int(k) for k in ADMIN_APIS})


def test_group_codecs_are_registered():
    for key in GROUP_APIS:
        assert registry.served_versions(key) is not None, registry.api_name(key)


def test_api_versions_advertises_what_is_dispatched(broker):
    with BrokerConnection(*broker.address, timeout=10) as conn:
        assert set(conn.broker_versions) == DISPATCHED
        assert conn.version_for(ApiKey.JOIN_GROUP) == 9 and conn.version_for(ApiKey.OFFSET_FETCH) == 9
    s = connect(broker.address)
    out = roundtrip(s, 18, 0, {})
    assert {e["api_key"] for e in out["api_keys"]} == DISPATCHED


def test_api_versions_fallback_advertises_what_is_dispatched(broker):
    s = connect(broker.address)
    s.sendall(protocol.encode_request(18, 0, 42, "t", {})[:6] + struct.pack(">h", 99)
              + protocol.encode_request(18, 0, 42, "t", {})[8:])  # ApiVersions v99
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    cid, body = protocol.decode_response(18, 0, recv_exactly(s, size))
    assert cid == 42 and body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {e["api_key"] for e in body["api_keys"]} == DISPATCHED


@pytest.mark.parametrize("api_key,version,body,check", [
    (ApiKey.FIND_COORDINATOR, 2, {"key": "g"}, lambda out: out["error_code"] == 0 and out["node_id"] == 0),
    (ApiKey.JOIN_GROUP, 5, {"group_id": "g", "session_timeout_ms": 10000, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}]},
     lambda out: out["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and out["member_id"]),
    (ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5}]}]},
     lambda out: out["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
], ids=["FindCoordinator", "JoinGroup", "OffsetCommit"])
def test_group_requests_are_answered(broker, api_key, version, body, check):
    """A raw group request (the ones that used to close the connection) gets a Kafka answer."""
    from helpers import wait_until

    s = connect(broker.address)
    wait_until(lambda: check(roundtrip(s, api_key, version, body)), timeout=30,
               message=f"{registry.api_name(api_key)} v{version} to be answered as Kafka does")
