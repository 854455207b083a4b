"""Hostile input: the decoders raise ProtocolError (or UnsupportedRequest), never anything else."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_samples import sample_body, served

from spark_coord.records.region import FileRegion
from spark_coord.wire import protocol, registry
from spark_coord.wire.protocol import ProtocolError, RequestHeader, UnsupportedRequest

SERVED = served()
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _header(api_key: int, version: int) -> bytes:
    entry = registry.lookup(api_key, version)
    head = struct.pack(">hhih", api_key, version, 1, 1) + b"c"
    return head + (b"\x00" if entry.request_header_version >= 2 else b"")


def _valid_frame(api_key: int, version: int, seed: int) -> bytes:
    body = sample_body(api_key, version, "request", seed=seed, with_nulls=seed % 2 == 0)
    return protocol.encode_request(api_key, version, seed, "fuzz", body)[4:]


def _decode_or_protocol_error(frame) -> None:
    try:
        protocol.decode_request(frame)
    except (ProtocolError, UnsupportedRequest):
        pass


def _decode_response_or_protocol_error(api_key, version, frame) -> None:
    try:
        protocol.decode_response(api_key, version, frame)
    except ProtocolError:
        pass


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_frames(data):
    _decode_or_protocol_error(data)


@pytest.mark.parametrize("api_key,version", SERVED, ids=[f"{k}-v{v}" for k, v in SERVED])
@FUZZ
@given(tail=st.binary(max_size=200))
def test_random_bodies_behind_a_valid_header(api_key, version, tail):
    _decode_or_protocol_error(_header(api_key, version) + tail)
    _decode_response_or_protocol_error(api_key, version, b"\x00\x00\x00\x01" + tail)


@pytest.mark.parametrize("api_key,version", SERVED, ids=[f"{k}-v{v}" for k, v in SERVED])
@FUZZ
@given(seed=st.integers(0, 50), edits=st.lists(
    st.tuples(st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
              st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_valid_frames(api_key, version, seed, edits):
    frame = bytearray(_valid_frame(api_key, version, seed))
    for op, pos, byte in edits:
        if not frame:
            break
        i = pos % len(frame)
        if op == "flip":
            frame[i] ^= 1 << (byte % 8)
        elif op == "set":
            frame[i] = byte
        elif op == "cut":
            del frame[i:]
        elif op == "insert":
            frame[i:i] = bytes([byte])
        else:
            del frame[i]
    _decode_or_protocol_error(bytes(frame))
    resp = protocol.encode_response(RequestHeader(api_key, version, 1, None),
                                    sample_body(api_key, version, "response", seed=seed))
    resp_frame = bytearray(b"".join(p.read() if isinstance(p, FileRegion) else p for p in resp)[4:])
    for _op, pos, byte in edits:
        if resp_frame:
            resp_frame[pos % len(resp_frame)] ^= byte | 1
    _decode_response_or_protocol_error(api_key, version, bytes(resp_frame))


@pytest.mark.parametrize("count", [0x7FFFFFFF, 1_000_000])
def test_huge_array_count_in_small_frame_is_refused_fast(count):
    frame = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", count) + b"\x00" * 16
    start = time.monotonic()
    with pytest.raises(ProtocolError, match="array"):
        protocol.decode_request(frame)
    assert time.monotonic() - start < 0.5


def test_huge_compact_array_count_is_refused():
    # Metadata v9 (flexible): compact array length 0xFFFFFFFF - 1 elements
    frame = struct.pack(">hhih", 3, 9, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 8
    with pytest.raises(ProtocolError, match="array"):
        protocol.decode_request(frame)


def test_array_of_structs_is_checked_against_the_element_size():
    # Produce v3: one topic claims 100 partitions, each needs >= 8 bytes (int32 + records length)
    frame = (struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">hhi", -1, 1, 1000)
             + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 100) + b"\x00" * 400)
    with pytest.raises(ProtocolError, match="needs at least 800 bytes"):
        protocol.decode_request(frame)


@pytest.mark.parametrize("body,message", [
    (struct.pack(">i", -2), "invalid array length"),
    (struct.pack(">i", 1) + struct.pack(">h", -5), "invalid string length"),
    (struct.pack(">i", 1) + struct.pack(">h", 50) + b"abc", "exceeds"),
    (struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe", "UTF-8"),
    (struct.pack(">i", 0)[:3], "truncated"),
])
def test_malformed_metadata_v1_bodies(body, message):
    with pytest.raises(ProtocolError, match=message):
        protocol.decode_request(struct.pack(">hhih", 3, 1, 1, -1) + body)


def test_bytes_after_a_complete_request_body_are_ignored():
    # As Kafka's broker does: librdkafka 2.x sends a few after some Metadata v12 requests.
    header, body = protocol.decode_request(struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 0) + b"\x01\x02")
    assert header.api_key == 3 and body["topics"] == []


def test_overlong_varint_and_oversized_tag_are_refused():
    head = struct.pack(">hhih", 18, 3, 1, -1)
    with pytest.raises(ProtocolError, match="varint"):
        protocol.decode_request(head + b"\xff" * 6)
    with pytest.raises(ProtocolError, match="tagged field"):
        protocol.decode_request(head + b"\x01\x00\x50")
    with pytest.raises(ProtocolError, match="tagged fields cannot fit"):
        protocol.decode_request(head + b"\xff\xff\xff\x07")


def test_unsupported_version_keeps_the_header():
    frame = struct.pack(">hhih", 18, 9, 77, 2) + b"cc"
    with pytest.raises(UnsupportedRequest) as info:
        protocol.decode_request(frame)
    assert info.value.header == RequestHeader(18, 9, 77, "cc")
    with pytest.raises(UnsupportedRequest):
        protocol.decode_request(struct.pack(">hhih", 1234, 0, 1, -1))
