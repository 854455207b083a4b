"""Registering codecs does not change what a broker serves: ApiVersions (and its KIP-511
fallback) lists only the APIs with a handler, and a group request a client sends anyway
closes that connection as any unserved API does, while other clients keep being served."""

from __future__ import annotations

import struct

import pytest

from kafka_io import connect, is_closed, recv_exactly, roundtrip
from spark_coord.client.connection import BrokerConnection
from spark_coord.errors import ErrorCode
from spark_coord.wire import protocol, registry
from spark_coord.wire.registry import ApiKey

#: What a broker dispatches today: Kafka's data APIs, SASL, and the coordinator protocol's requests to it
#: (ClusterMetadata, RegisterConsumer, DescribeGroups, CommitOffsets).
DISPATCHED = {0, 1, 2, 3, 17, 18, 19, 20, 22, 36, 1000, 1001, 1005, 1006}
#: Kafka's group APIs, registered as codecs only.
GROUP_APIS = {ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP,
              ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS,
              ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS}


def test_group_codecs_are_registered():
    for key in GROUP_APIS:
        assert registry.served_versions(key) is not None, registry.api_name(key)


def test_api_versions_advertises_no_group_api(broker):
    with BrokerConnection(*broker.address, timeout=10) as conn:
        assert set(conn.broker_versions) == DISPATCHED
        assert conn.version_for(ApiKey.JOIN_GROUP) is None
    s = connect(broker.address)
    out = roundtrip(s, 18, 0, {})
    assert {e["api_key"] for e in out["api_keys"]} == DISPATCHED


def test_api_versions_fallback_advertises_no_group_api(broker):
    s = connect(broker.address)
    s.sendall(protocol.encode_request(18, 0, 42, "t", {})[:6] + struct.pack(">h", 99)
              + protocol.encode_request(18, 0, 42, "t", {})[8:])  # ApiVersions v99
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    cid, body = protocol.decode_response(18, 0, recv_exactly(s, size))
    assert cid == 42 and body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {e["api_key"] for e in body["api_keys"]} == DISPATCHED


@pytest.mark.parametrize("api_key,version,body", [
    (ApiKey.FIND_COORDINATOR, 2, {"key": "g"}),
    (ApiKey.JOIN_GROUP, 5, {"group_id": "g", "session_timeout_ms": 10000, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}]}),
    (ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5}]}]}),
], ids=["FindCoordinator", "JoinGroup", "OffsetCommit"])
def test_a_group_request_closes_only_its_connection(broker, api_key, version, body):
    with BrokerConnection(*broker.address, timeout=10) as good:
        s = connect(broker.address)
        s.sendall(protocol.encode_request(api_key, version, 3, "eager", body))
        assert is_closed(s)
        out = good.request(ApiKey.METADATA, {"topics": None})
        assert [b["node_id"] for b in out["brokers"]] == [0]
