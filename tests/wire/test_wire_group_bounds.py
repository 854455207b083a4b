"""Hostile input to the group APIs' decoders: oversized counts and lengths are refused
before anything is allocated, and every truncation of a valid frame is refused."""

from __future__ import annotations

import struct
import time

import pytest
from wire_samples import sample_body, served

from spark_coord.records.region import FileRegion
from spark_coord.wire import protocol
from spark_coord.wire.protocol import ProtocolError, RequestHeader
from spark_coord.wire.registry import ApiKey

GROUP_KEYS = {ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
              ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS,
              ApiKey.DELETE_GROUPS}
GROUP_SERVED = [(k, v) for k, v in served() if k in GROUP_KEYS]


def _head(api_key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, -1) + (b"\x00" if flexible else b"")


@pytest.mark.parametrize("api_key,version", GROUP_SERVED, ids=[f"{k}-v{v}" for k, v in GROUP_SERVED])
def test_every_truncation_is_refused(api_key, version):
    request = protocol.encode_request(api_key, version, 9, "c", sample_body(api_key, version, "request"))[4:]
    for cut in range(len(request)):
        with pytest.raises(ProtocolError):
            protocol.decode_request(request[:cut])
    parts = protocol.encode_response(RequestHeader(api_key, version, 9, None),
                                     sample_body(api_key, version, "response"))
    response = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)[4:]
    for cut in range(len(response)):
        with pytest.raises(ProtocolError):
            protocol.decode_response(api_key, version, response[:cut])


@pytest.mark.parametrize("frame,match", [
    # OffsetCommit v2: group "g", generation, member "", retention, then 2^31-1 topics
    (_head(8, 2, False) + struct.pack(">h", 1) + b"g" + struct.pack(">ihq", 1, 0, -1) + struct.pack(">i", 0x7FFFFFFF),
     "array of 2147483647"),
    # JoinGroup v5: ..., protocol type "consumer", then a million protocols
    (_head(11, 5, False) + struct.pack(">h", 1) + b"g" + struct.pack(">iih", 10000, 10000, 0) + struct.pack(">h", -1)
     + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 1_000_000), "array of 1000000"),
    # JoinGroup v5: one protocol whose metadata claims 2 GiB
    (_head(11, 5, False) + struct.pack(">h", 1) + b"g" + struct.pack(">iih", 10000, 10000, 0) + struct.pack(">h", -1)
     + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 1) + struct.pack(">h", 5) + b"range"
     + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8, "bytes length 2147483647 exceeds"),
    # OffsetFetch v8 (flexible): compact array of 2^32-2 groups
    (_head(9, 8, True) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 8, "array of 4294967294"),
    # SyncGroup v4 (flexible): compact string "g", generation, member "", instance null, then a huge assignment count
    (_head(14, 4, True) + b"\x02g" + struct.pack(">i", 1) + b"\x01" + b"\x00" + b"\xfe\xff\xff\x7f", "array of"),
    # DeleteGroups v0: 2^31-1 group names
    (_head(42, 0, False) + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 4, "array of 2147483647"),
], ids=["OffsetCommit-topics", "JoinGroup-protocols", "JoinGroup-metadata", "OffsetFetch-groups",
        "SyncGroup-assignments", "DeleteGroups-names"])
def test_oversized_counts_and_lengths_are_refused_fast(frame, match):
    start = time.monotonic()
    with pytest.raises(ProtocolError, match=match):
        protocol.decode_request(frame)
    assert time.monotonic() - start < 0.5


def test_oversized_member_list_in_a_response_is_refused():
    # DescribeGroups v0 response: one group, then 2^31-1 members (a client trusts no broker)
    body = (struct.pack(">i", 7) + struct.pack(">i", 1) + struct.pack(">h", 0)
            + b"".join(struct.pack(">h", len(s)) + s for s in (b"g", b"Stable", b"consumer", b"range"))
            + struct.pack(">i", 0x7FFFFFFF))
    with pytest.raises(ProtocolError, match="array of 2147483647"):
        protocol.decode_response(ApiKey.DESCRIBE_GROUPS, 0, body)
