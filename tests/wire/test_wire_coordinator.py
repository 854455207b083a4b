"""The coordinator protocol (api keys 1000-1005): registration, classic headers, round trips
with every field set, the exact field names both sides use, and hostile input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_coord.wire import coordinator as api
from spark_coord.wire import protocol, registry
from spark_coord.wire.protocol import ProtocolError, RequestHeader, UnsupportedRequest

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = sorted(api.MESSAGES)

OFFSETS = [{"topic": "t1", "partition": 0, "offset": 2**40}, {"topic": "é", "partition": 7, "offset": 0}]
BROKERS = [{"node_id": 0, "host": "h0", "port": 9092}, {"node_id": 3, "host": "::1", "port": 1}]

SAMPLES = {
    api.CLUSTER_METADATA: (
        {},
        {"error_code": 0, "coordinator_id": 3, "coordinator_epoch": 2**35 + 1, "brokers": BROKERS}),
    api.REGISTER_CONSUMER: (
        {"group_id": "g", "consumer_id": "host-1-abc", "topics": [{"topic": "a", "streams": 2}, {"topic": "b",
                                                                                                "streams": 1}],
         "pattern": "evt\\..*", "pattern_streams": 3, "auto_commit": False, "auto_offset_reset": "smallest",
         "session_timeout_ms": 6000},
        {"error_code": 1001, "error_message": "already registered", "coordinator_epoch": 99}),
    api.PING: (
        {"coordinator_epoch": 99, "generation_id": 4, "consumer_id": "c", "num_retries": 1},
        {"error_code": 0, "consumer_id": "c", "generation_id": 4, "offsets": OFFSETS}),
    api.STOP_FETCHER: (
        {"coordinator_epoch": 99, "generation_id": 4, "consumer_id": "c"},
        {"error_code": 0, "consumer_id": "c", "generation_id": 4, "offsets": OFFSETS}),
    api.START_FETCHER: (
        {"coordinator_epoch": 99, "generation_id": 5, "consumer_id": "c",
         "ownership": [{"consumer_thread_id": "c-0", "partitions": OFFSETS},
                       {"consumer_thread_id": "c-1", "partitions": [{"topic": "x", "partition": 1, "offset": -1}]}],
         "brokers": BROKERS},
        {"error_code": 1005, "consumer_id": "c", "generation_id": 5}),
    api.DESCRIBE_GROUPS: (
        {"group_ids": ["g1", "g2"]},
        {"error_code": 0, "groups": [{
            "group_id": "g1", "state": "STABLE", "generation_id": 5,
            "members": [{"consumer_id": "c", "host": "/10.0.0.1", "assigned": [{"topic": "t", "partition": 0}]}],
            "offsets": [{"topic": "t", "partition": 0, "committed_offset": 12, "owner": "c-0"},
                        {"topic": "t", "partition": 1, "committed_offset": -1, "owner": None}]}]}),
}


def test_registered_at_version_0_with_classic_headers():
    for key in KEYS:
        assert protocol.served_versions(key) == (0, 0)
        entry = registry.lookup(key, 0)
        assert (entry.request_header_version, entry.response_header_version) == (1, 0)
    assert [int(k) for k in api.CoordinatorApiKey] == list(range(1000, 1006))
    assert registry.api_name(api.START_FETCHER) == "StartFetcher"


@pytest.mark.parametrize("api_key", KEYS, ids=[api.MESSAGES[k][0] for k in KEYS])
def test_round_trip(api_key):
    request, response = SAMPLES[api_key]
    frame = protocol.encode_request(api_key, 0, 31, "coordinator", request)
    header, decoded = protocol.decode_request(frame[4:])
    assert header == RequestHeader(api_key, 0, 31, "coordinator") and decoded == request
    assert protocol.encode_request(api_key, 0, 31, "coordinator", decoded) == frame
    out = b"".join(protocol.encode_response(header, response))
    corr, decoded_resp = protocol.decode_response(api_key, 0, out[4:])
    assert corr == 31 and decoded_resp == response


@pytest.mark.parametrize("api_key", KEYS, ids=[api.MESSAGES[k][0] for k in KEYS])
def test_empty_bodies_take_defaults(api_key):
    _, req = protocol.decode_request(protocol.encode_request(api_key, 0, 1, None, {})[4:])
    _, resp = protocol.decode_response(api_key, 0, b"".join(protocol.encode_response(
        RequestHeader(api_key, 0, 1, None), {}))[4:])
    assert set(req) == set(SAMPLES[api_key][0]) and set(resp) == set(SAMPLES[api_key][1])


def test_defaults_that_carry_meaning():
    _, reg = protocol.decode_request(protocol.encode_request(api.REGISTER_CONSUMER, 0, 1, None, {})[4:])
    assert reg["pattern"] is None and reg["auto_commit"] is True and reg["auto_offset_reset"] == "largest"
    _, meta = protocol.decode_response(api.CLUSTER_METADATA, 0, b"".join(protocol.encode_response(
        RequestHeader(api.CLUSTER_METADATA, 0, 1, None), {"error_code": 15}))[4:])
    assert meta["coordinator_id"] == -1 and meta["coordinator_epoch"] == -1


def test_ping_bytes_are_the_classic_layout():
    frame = protocol.encode_request(api.PING, 0, 5, "k", {"coordinator_epoch": 2, "generation_id": 3,
                                                          "consumer_id": "c", "num_retries": 1})
    assert frame[4:] == (struct.pack(">hhih", 1002, 0, 5, 1) + b"k" + struct.pack(">qih", 2, 3, 1) + b"c"
                         + struct.pack(">i", 1))


@pytest.mark.parametrize("api_key", KEYS, ids=[api.MESSAGES[k][0] for k in KEYS])
@FUZZ
@given(data=st.data())
def test_mutated_frames_raise_protocol_error_only(api_key, data):
    request, response = SAMPLES[api_key]
    for kind, frame in (("request", protocol.encode_request(api_key, 0, 1, "c", request)[4:]),
                        ("response", b"".join(protocol.encode_response(RequestHeader(api_key, 0, 1, None),
                                                                       response))[4:])):
        buf = bytearray(frame)
        cut = data.draw(st.integers(0, len(buf)))
        flips = data.draw(st.lists(st.tuples(st.integers(0, max(0, len(buf) - 1)), st.integers(0, 255)),
                                   max_size=3))
        for pos, byte in flips:
            if buf:
                buf[pos % len(buf)] = byte
        buf = buf[:cut] if data.draw(st.booleans()) else buf
        try:
            if kind == "request":
                protocol.decode_request(bytes(buf))
            else:
                protocol.decode_response(api_key, 0, bytes(buf))
        except (ProtocolError, UnsupportedRequest):
            pass


def test_huge_counts_are_refused_before_allocating():
    # StartFetcher claiming 2**31-1 ownership entries in a 40-byte frame
    head = struct.pack(">hhih", api.START_FETCHER, 0, 1, -1) + struct.pack(">qih", 1, 1, 1) + b"c"
    with pytest.raises(ProtocolError):
        protocol.decode_request(head + struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
    # a Ping answer claiming a 2 GB topic name
    body = struct.pack(">i", 1) + struct.pack(">hh", 0, 1) + b"c" + struct.pack(">ii", 1, 1) + struct.pack(">h", 32767)
    with pytest.raises(ProtocolError):
        protocol.decode_response(api.PING, 0, body)
