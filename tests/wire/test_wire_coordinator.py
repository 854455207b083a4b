"""The coordinator protocol (api keys 1000-1006): registration, classic headers, round trips
with every field set at every served version, the exact field names both sides use, the
request/response rule of a member's connection, and hostile input."""

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
#: (api key, version) for every served version
SERVED = [(k, v) for k in KEYS for v in range(api.VERSIONS[k][0], api.VERSIONS[k][1] + 1)]

OFFSETS = [{"topic": "t1", "partition": 0, "offset": 2**40}, {"topic": "é", "partition": 7, "offset": 0}]
BROKERS = [{"node_id": 0, "host": "h0", "port": 9092}, {"node_id": 3, "host": "::1", "port": 1}]

SAMPLES = {
    api.CLUSTER_METADATA: (
        {"group_id": "g"},
        {"error_code": 0, "coordinator_id": 3, "coordinator_epoch": 2**35 + 1, "brokers": BROKERS}),
    api.REGISTER_CONSUMER: (
        {"group_id": "g", "consumer_id": "host-1-abc", "topics": [{"topic": "a", "streams": 2}, {"topic": "b",
                                                                                                "streams": 1}],
         "pattern": "evt\\..*", "pattern_streams": 3, "auto_commit": False, "auto_offset_reset": "smallest",
         "session_timeout_ms": 6000, "generation_id": 4,
         "owned": [{"consumer_thread_id": "host-1-abc-0", "partitions": OFFSETS}]},
        {"error_code": 1001, "error_message": "already registered", "coordinator_epoch": 99, "generation_id": 4}),
    api.PING: (
        {"coordinator_epoch": 99, "generation_id": 4, "consumer_id": "c", "num_retries": 1},
        {"error_code": 0, "consumer_id": "c", "generation_id": 4, "offsets": OFFSETS}),
    api.STOP_FETCHER: (
        {"coordinator_epoch": 99, "generation_id": 4, "consumer_id": "c",
         "partitions": [{"topic": "t1", "partitions": [0, 3]}, {"topic": "é", "partitions": [7]}]},
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
    api.COMMIT_OFFSETS: (
        {"group_id": "g", "consumer_id": "c", "generation_id": 4, "leave": True, "offsets": OFFSETS},
        {"error_code": 0, "error_message": None, "partitions": [{"topic": "t1", "partition": 0, "error_code": 0},
                                                                {"topic": "é", "partition": 7, "error_code": 1006}]}),
}
#: fields each version lacks
V0_LACKS = {api.CLUSTER_METADATA: ({"group_id"}, set()),
            api.REGISTER_CONSUMER: ({"generation_id", "owned"}, {"generation_id"}),
            api.STOP_FETCHER: ({"partitions"}, set())}


def _sample(api_key: int, version: int) -> tuple[dict, dict]:
    request, response = SAMPLES[api_key]
    if version == 0 and api_key in V0_LACKS:
        req_gone, resp_gone = V0_LACKS[api_key]
        request = {k: v for k, v in request.items() if k not in req_gone}
        response = {k: v for k, v in response.items() if k not in resp_gone}
    if api_key == api.DESCRIBE_GROUPS:  # v1: each member's protocol (v0 reads as the default)
        protocol_ = "consumer" if version >= 1 else "coordinator"
        response = dict(response, groups=[dict(g, members=[dict(m, protocol=protocol_) for m in g["members"]])
                                          for g in response["groups"]])
    return request, response


def test_registered_with_classic_headers():
    for key in KEYS:
        expected = {api.CLUSTER_METADATA: (0, 1), api.REGISTER_CONSUMER: (0, 2), api.STOP_FETCHER: (0, 1),
                    api.START_FETCHER: (0, 1),
                    api.DESCRIBE_GROUPS: (0, 1)}.get(key, (0, 0))
        assert protocol.served_versions(key) == expected
        for v in range(expected[0], expected[1] + 1):
            entry = registry.lookup(key, v)
            assert (entry.request_header_version, entry.response_header_version) == (1, 0)
    assert [int(k) for k in api.CoordinatorApiKey] == list(range(1000, 1007))
    assert registry.api_name(api.START_FETCHER) == "StartFetcher"
    assert registry.api_name(api.COMMIT_OFFSETS) == "CommitOffsets"


@pytest.mark.parametrize("api_key,version", SERVED, ids=[f"{api.MESSAGES[k][0]}-v{v}" for k, v in SERVED])
def test_round_trip(api_key, version):
    request, response = _sample(api_key, version)
    frame = protocol.encode_request(api_key, version, -31, "coordinator", request)
    header, decoded = protocol.decode_request(frame[4:])
    assert header == RequestHeader(api_key, version, -31, "coordinator")
    assert {k: v for k, v in decoded.items() if k in request} == request
    assert protocol.encode_request(api_key, version, -31, "coordinator", decoded) == frame
    out = b"".join(protocol.encode_response(header, response))
    corr, decoded_resp = protocol.decode_response(api_key, version, out[4:])
    assert corr == -31 and {k: v for k, v in decoded_resp.items() if k in response} == response


def test_stop_fetcher_v1_names_the_partitions_or_null_for_all():
    body = {"coordinator_epoch": 9, "generation_id": 4, "consumer_id": "c", "partitions": None}
    frame = protocol.encode_request(api.STOP_FETCHER, 1, -3, None, body)
    assert protocol.decode_request(frame[4:])[1]["partitions"] is None
    v0 = protocol.encode_request(api.STOP_FETCHER, 0, -3, None,
                                 dict(body, partitions=[{"topic": "t", "partitions": [1]}]))
    assert protocol.decode_request(v0[4:])[1]["partitions"] is None  # v0 has no list: it stops everything
    assert len(v0) < len(frame) + 100


def test_register_consumer_v0_has_no_claim():
    request, _ = SAMPLES[api.REGISTER_CONSUMER]
    v0 = protocol.encode_request(api.REGISTER_CONSUMER, 0, 1, None, request)
    _, decoded = protocol.decode_request(v0[4:])
    assert decoded["generation_id"] == api.NO_GENERATION and decoded["owned"] == []
    assert len(v0) < len(protocol.encode_request(api.REGISTER_CONSUMER, 1, 1, None, request))


@pytest.mark.parametrize("api_key", KEYS, ids=[api.MESSAGES[k][0] for k in KEYS])
def test_empty_bodies_take_defaults(api_key):
    _, req = protocol.decode_request(protocol.encode_request(api_key, 0, 1, None, {})[4:])
    _, resp = protocol.decode_response(api_key, 0, b"".join(protocol.encode_response(
        RequestHeader(api_key, 0, 1, None), {}))[4:])
    assert set(req) == set(SAMPLES[api_key][0]) and set(resp) == set(SAMPLES[api_key][1])


def test_requests_and_responses_on_a_member_connection_tell_themselves_apart():
    ids = api.correlation_ids()
    first = [next(ids) for _ in range(3)]
    assert first == [-1, -2, -3]
    for key in KEYS:  # every request frame starts with api_key << 16 | version >= 0
        for cid in (-1, -(2**31), 7, 2**31 - 1):
            frame = protocol.encode_request(key, 0, cid, "x", {})[4:]
            assert not api.is_response_frame(frame)
            answer = b"".join(protocol.encode_response(RequestHeader(key, 0, cid, None), {}))[4:]
            assert api.is_response_frame(answer) == (cid < 0)
    assert not api.is_response_frame(b"")


def test_correlation_ids_wrap_around_and_stay_negative():
    around = [api.correlation_id(n) for n in range(2**31 - 3, 2**31 + 1)]
    assert around == [-(2**31 - 2), -(2**31 - 1), -1, -2]


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
    request, response = _sample(api_key, 0)
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
