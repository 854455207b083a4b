"""The share-group codecs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
ShareAcknowledge, DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets.

- Round trips of every served version, request and response, with realistic values,
  nulls and empty arrays (the schema-driven round trips of test_wire_roundtrip and the
  fuzzing of test_wire_fuzz cover them too, with generated values).
- Golden bytes of what librdkafka writes (ShareGroupHeartbeat v1, ShareFetch v1) and
  reads (ShareGroupHeartbeat v1 answers), assembled by hand from its writer code
  (``rd_kafka_ShareGroupHeartbeatRequest``, ``rd_kafka_ShareFetchRequest``) and its
  mock broker's answer writer; and the frames the installed librdkafka actually sends.
- Hostile input: counts larger than the bytes left are refused before anything is
  allocated; every truncation of a valid frame is refused.
"""

from __future__ import annotations

import struct
import tempfile
import time

import pytest
from wire_samples import message_of, normalize, restrict, sample_body, served

from spark_coord.records.region import FileRegion
from spark_coord.wire import protocol, registry
from spark_coord.wire.protocol import ProtocolError, RequestHeader
from spark_coord.wire.registry import ApiKey
from spark_coord.wire.schema import StructCodec

SHARE_KEYS = {ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE,
              ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
              ApiKey.DELETE_SHARE_GROUP_OFFSETS}
SHARE_SERVED = [(k, v) for k, v in served() if k in SHARE_KEYS]

TOPIC_A = bytes.fromhex("5a1f0c7e9b2d4c3a8e6f01d2c3b4a596")
TOPIC_B = bytes.fromhex("00112233445566778899aabbccddeeff")
MEMBER = "A1b2C3d4E5f6G7h8I9j0Kw"  # librdkafka's member ids: a random uuid, base64 without padding (22 chars)


def _join(parts) -> bytes:
    return b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)


def _request_round_trip(api_key: int, version: int, body: dict) -> dict:
    frame = protocol.encode_request(api_key, version, 42, "client-1", body)
    header, decoded = protocol.decode_request(memoryview(frame)[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 42)
    fields = message_of(api_key, "request").fields
    assert normalize(restrict(decoded, fields, version)) == _complete(body, fields, version)
    assert protocol.encode_request(api_key, version, 42, "client-1", decoded) == frame
    return decoded


def _response_round_trip(api_key: int, version: int, body: dict) -> dict:
    header = RequestHeader(api_key, version, 42, None)
    frame = _join(protocol.encode_response(header, body))
    corr, decoded = protocol.decode_response(api_key, version, frame[4:])
    assert corr == 42
    fields = message_of(api_key, "response").fields
    assert normalize(restrict(decoded, fields, version)) == _complete(body, fields, version)
    assert _join(protocol.encode_response(header, decoded)) == frame
    return decoded


def _complete(body: dict, fields, version: int) -> dict:
    """What the decoder gives back for ``body``: every field of the version, keys the body
    left out at their defaults (so a test body need not spell out every zero)."""
    codec_default = StructCodec("t", fields, version, True).default()
    out = {}
    for f in fields:
        if not f.in_version(version):
            continue
        v = body.get(f.key, codec_default[f.key])
        if f.fields is not None and v is not None:
            v = [_complete(x, f.fields, version) for x in v] if f.type.startswith("[]") else \
                _complete(v, f.fields, version)
        out[f.key] = v
    return out


# ------------------------------------------------------------------ round trips, every served version
def test_every_share_api_is_registered_at_its_versions():
    assert {k: protocol.served_versions(k) for k in SHARE_KEYS} == {
        76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)}
    for key, version in SHARE_SERVED:  # all flexible: request header v2, response header v1
        entry = registry.lookup(key, version)
        assert (entry.request_header_version, entry.response_header_version) == (2, 1)


def test_share_group_heartbeat_v1():
    join = {"group_id": "orders-q", "member_id": MEMBER, "member_epoch": 0, "rack_id": "rack-a",
            "subscribed_topic_names": ["orders", "audit"]}
    _request_round_trip(76, 1, join)
    steady = _request_round_trip(76, 1, {"group_id": "orders-q", "member_id": MEMBER, "member_epoch": 7,
                                         "rack_id": None, "subscribed_topic_names": None})
    assert steady["rack_id"] is None and steady["subscribed_topic_names"] is None
    _request_round_trip(76, 1, {"group_id": "g", "member_id": MEMBER, "member_epoch": -1,
                                "subscribed_topic_names": []})
    assigned = _response_round_trip(76, 1, {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": MEMBER, "member_epoch": 8,
        "heartbeat_interval_ms": 5000, "assignment": {"topic_partitions": [
            {"topic_id": TOPIC_A, "partitions": [0, 1, 2]}, {"topic_id": TOPIC_B, "partitions": []}]}})
    assert assigned["assignment"]["topic_partitions"][0]["partitions"] == [0, 1, 2]
    unchanged = _response_round_trip(76, 1, {"member_id": None, "member_epoch": 8, "heartbeat_interval_ms": 5000,
                                             "assignment": None})
    assert unchanged["assignment"] is None and unchanged["member_id"] is None
    _response_round_trip(76, 1, {"error_code": 25, "error_message": "unknown member", "member_epoch": -1,
                                 "assignment": {"topic_partitions": []}})


def test_share_group_describe_v1():
    _request_round_trip(77, 1, {"group_ids": ["orders-q", "audit-q"], "include_authorized_operations": True})
    _request_round_trip(77, 1, {"group_ids": [], "include_authorized_operations": False})
    body = {"throttle_time_ms": 3, "groups": [
        {"error_code": 0, "error_message": None, "group_id": "orders-q", "group_state": "Stable", "group_epoch": 5,
         "assignment_epoch": 5, "assignor_name": "simple", "authorized_operations": 0x0B8, "members": [
             {"member_id": MEMBER, "rack_id": None, "member_epoch": 5, "client_id": "rdkafka",
              "client_host": "/10.0.0.7", "subscribed_topic_names": ["orders"], "assignment": {"topic_partitions": [
                  {"topic_id": TOPIC_A, "topic_name": "orders", "partitions": [0, 1]}]}},
             {"member_id": "m2", "rack_id": "rack-b", "member_epoch": 4, "client_id": "java", "client_host": "/::1",
              "subscribed_topic_names": [], "assignment": {"topic_partitions": []}}]},
        {"error_code": 69, "error_message": "Group audit-q not found.", "group_id": "audit-q", "members": []}]}
    decoded = _response_round_trip(77, 1, body)
    assert decoded["groups"][1]["authorized_operations"] == -2147483648  # the JSON's default: not asked


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch(version):
    open_session = {"group_id": "orders-q", "member_id": MEMBER, "share_session_epoch": 0, "max_wait_ms": 500,
                    "min_bytes": 1, "max_bytes": 52428800, "max_records": 500, "batch_size": 500,
                    "topics": [{"topic_id": TOPIC_A, "partitions": [
                        {"partition_index": 0, "acknowledgement_batches": []},
                        {"partition_index": 1, "acknowledgement_batches": []}]}],
                    "forgotten_topics_data": []}
    _request_round_trip(78, version, open_session)
    acks = {"group_id": None, "member_id": None, "share_session_epoch": 3, "max_wait_ms": 0, "min_bytes": 0,
            "max_bytes": 0, "max_records": 0, "batch_size": 0, "share_acquire_mode": 1, "is_renew_ack": True,
            "topics": [{"topic_id": TOPIC_A, "partitions": [{"partition_index": 1, "acknowledgement_batches": [
                {"first_offset": 10, "last_offset": 14, "acknowledge_types": [1]},
                {"first_offset": 15, "last_offset": 17, "acknowledge_types": [1, 0, 4 if version >= 2 else 3]}]}]}],
            "forgotten_topics_data": [{"topic_id": TOPIC_B, "partitions": [0, 2]}]}
    decoded = _request_round_trip(78, version, acks)
    if version == 1:  # v2's fields are not on v1's wire: they decode to their defaults
        assert (decoded["share_acquire_mode"], decoded["is_renew_ack"]) == (0, False)
    else:
        assert (decoded["share_acquire_mode"], decoded["is_renew_ack"]) == (1, True)
    # a missing MaxBytes takes the JSON's default
    assert protocol.decode_request(protocol.encode_request(78, version, 1, None, {})[4:])[1]["max_bytes"] == 0x7FFFFFFF
    response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 30000,
                "responses": [{"topic_id": TOPIC_A, "partitions": [
                    {"partition_index": 0, "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
                     "acknowledge_error_message": None, "current_leader": {"leader_id": 1, "leader_epoch": 3},
                     "records": b"\x00" * 61, "acquired_records": [
                         {"first_offset": 0, "last_offset": 4, "delivery_count": 1},
                         {"first_offset": 7, "last_offset": 7, "delivery_count": 3}]},
                    {"partition_index": 1, "error_code": 6, "error_message": "not the leader",
                     "acknowledge_error_code": 121, "acknowledge_error_message": "invalid record state",
                     "current_leader": {"leader_id": 2, "leader_epoch": 4}, "records": None,
                     "acquired_records": []},
                    {"partition_index": 2, "current_leader": {"leader_id": -1, "leader_epoch": -1},
                     "records": b"", "acquired_records": []}]}],
                "node_endpoints": [{"node_id": 2, "host": "broker-2", "port": 9092, "rack": None},
                                   {"node_id": 3, "host": "broker-3", "port": 9093, "rack": "rack-c"}]}
    decoded = _response_round_trip(78, version, response)
    parts = decoded["responses"][0]["partitions"]
    assert isinstance(parts[0]["records"], memoryview)  # zero-copy view of the frame, as Fetch's
    assert parts[1]["records"] is None and bytes(parts[2]["records"]) == b""
    _response_round_trip(78, version, {"error_code": 122, "error_message": "share session not found",
                                       "responses": [], "node_endpoints": []})


def test_share_fetch_records_take_file_regions():
    """The broker may answer with slices of segment files, as for Fetch: same field type."""
    with tempfile.TemporaryFile() as f:
        f.write(b"HEAD" + b"BATCH-ONE" + b"BATCH-TWO" + b"TAIL")
        f.flush()
        r1, r2 = FileRegion(f, 4, 9), FileRegion(f, 13, 9)
        body = {"acquisition_lock_timeout_ms": 30000, "responses": [{"topic_id": TOPIC_A, "partitions": [
            {"partition_index": 0, "records": [r1, b"-mid-", r2],
             "acquired_records": [{"first_offset": 0, "last_offset": 9, "delivery_count": 1}]},
            {"partition_index": 1, "records": r1}]}]}
        for version in (1, 2):
            parts = protocol.encode_response(RequestHeader(78, version, 5, None), body)
            assert [p for p in parts if isinstance(p, FileRegion)] == [r1, r2, r1]
            frame = _join(parts)
            assert int.from_bytes(frame[:4], "big") == sum(len(p) for p in parts) - 4
            _, decoded = protocol.decode_response(78, version, frame[4:])
            out = decoded["responses"][0]["partitions"]
            assert bytes(out[0]["records"]) == b"BATCH-ONE-mid-BATCH-TWO" and bytes(out[1]["records"]) == b"BATCH-ONE"


@pytest.mark.parametrize("version", [1, 2])
def test_share_acknowledge(version):
    body = {"group_id": "orders-q", "member_id": MEMBER, "share_session_epoch": 4, "is_renew_ack": version >= 2,
            "topics": [{"topic_id": TOPIC_A, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]},
                    {"first_offset": 5, "last_offset": 6, "acknowledge_types": [2, 4 if version >= 2 else 3]}]},
                {"partition_index": 3, "acknowledgement_batches": []}]}]}
    decoded = _request_round_trip(79, version, body)
    assert decoded["is_renew_ack"] is (version >= 2)
    closing = _request_round_trip(79, version, {"group_id": None, "member_id": MEMBER, "share_session_epoch": -1,
                                                "topics": []})
    assert closing["group_id"] is None and closing["is_renew_ack"] is False
    response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 15000,
                "responses": [{"topic_id": TOPIC_A, "partitions": [
                    {"partition_index": 0, "error_code": 0, "error_message": None,
                     "current_leader": {"leader_id": 1, "leader_epoch": 3}},
                    {"partition_index": 3, "error_code": 121, "error_message": "invalid record state",
                     "current_leader": {"leader_id": -1, "leader_epoch": -1}}]}],
                "node_endpoints": [{"node_id": 1, "host": "broker-1", "port": 9092, "rack": None}]}
    decoded = _response_round_trip(79, version, response)
    # AcquisitionLockTimeoutMs is v2's: not on v1's wire
    assert decoded["acquisition_lock_timeout_ms"] == (15000 if version >= 2 else 0)
    v1 = _join(protocol.encode_response(RequestHeader(79, 1, 1, None), response))
    v2 = _join(protocol.encode_response(RequestHeader(79, 2, 1, None), response))
    assert len(v2) == len(v1) + 4


@pytest.mark.parametrize("version", [0, 1])
def test_describe_share_group_offsets(version):
    request = {"groups": [{"group_id": "orders-q", "topics": [{"topic_name": "orders", "partitions": [0, 1]}]},
                          {"group_id": "audit-q", "topics": None}]}
    decoded = _request_round_trip(90, version, request)
    assert decoded["groups"][1]["topics"] is None  # every partition the group has state for
    response = {"throttle_time_ms": 0, "groups": [
        {"group_id": "orders-q", "error_code": 0, "error_message": None, "topics": [
            {"topic_name": "orders", "topic_id": TOPIC_A, "partitions": [
                {"partition_index": 0, "start_offset": 120, "leader_epoch": 2, "lag": 30, "error_code": 0,
                 "error_message": None},
                {"partition_index": 1, "start_offset": -1, "leader_epoch": -1, "error_code": 0}]}]},
        {"group_id": "audit-q", "error_code": 69, "error_message": "Group audit-q not found.", "topics": []}]}
    decoded = _response_round_trip(90, version, response)
    lags = [p["lag"] for p in decoded["groups"][0]["topics"][0]["partitions"]]
    assert lags == ([30, -1] if version >= 1 else [-1, -1])  # v1's Lag, -1 by default (and before v1)


def test_alter_share_group_offsets_v0():
    _request_round_trip(91, 0, {"group_id": "orders-q", "topics": [
        {"topic_name": "orders", "partitions": [{"partition_index": 0, "start_offset": 100},
                                                {"partition_index": 1, "start_offset": 0}]},
        {"topic_name": "audit", "partitions": []}]})
    _request_round_trip(91, 0, {"group_id": "orders-q", "topics": []})
    _response_round_trip(91, 0, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
        {"topic_name": "orders", "topic_id": TOPIC_A, "partitions": [
            {"partition_index": 0, "error_code": 0, "error_message": None},
            {"partition_index": 1, "error_code": 3, "error_message": "unknown partition"}]}]})
    _response_round_trip(91, 0, {"error_code": 68, "error_message": "The group is not empty.", "responses": []})


def test_delete_share_group_offsets_v0():
    _request_round_trip(92, 0, {"group_id": "orders-q", "topics": [{"topic_name": "orders"},
                                                                    {"topic_name": "audit"}]})
    _request_round_trip(92, 0, {"group_id": "orders-q", "topics": []})
    _response_round_trip(92, 0, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
        {"topic_name": "orders", "topic_id": TOPIC_A, "error_code": 0, "error_message": None},
        {"topic_name": "gone", "topic_id": bytes(16), "error_code": 3, "error_message": "unknown topic"}]})
    _response_round_trip(92, 0, {"error_code": 68, "error_message": "The group is not empty.", "responses": []})


@pytest.mark.parametrize("api_key,version", SHARE_SERVED, ids=[f"{k}-v{v}" for k, v in SHARE_SERVED])
def test_empty_bodies_take_defaults(api_key, version):
    _, req = protocol.decode_request(protocol.encode_request(api_key, version, 1, None, {})[4:])
    frame = _join(protocol.encode_response(RequestHeader(api_key, version, 1, None), {}))
    _, resp = protocol.decode_response(api_key, version, frame[4:])
    assert isinstance(req, dict) and isinstance(resp, dict)


# ------------------------------------------------------------------ golden bytes: librdkafka's layouts
def _cstr(s: str | None) -> bytes:
    """A COMPACT_(NULLABLE_)STRING as rd_kafka_buf_write_kstr/str writes it in a flexible request."""
    if s is None:
        return b"\x00"
    raw = s.encode()
    return bytes([len(raw) + 1]) + raw


def _request_head(api_key: int, corr: int) -> bytes:
    # request header v2: ApiKey, ApiVersion 1, CorrelationId, ClientId (a classic int16 string),
    # then the header's empty tagged fields (rd_kafka_buf_upgrade_flexver_request)
    return struct.pack(">hhi", api_key, 1, corr) + struct.pack(">h", 9) + b"golden-rd" + b"\x00"


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_golden_share_group_heartbeat_v1_request_as_librdkafka_writes_it():
    # Assembled by hand from librdkafka's rd_kafka_ShareGroupHeartbeatRequest (v1 only):
    # kstr GroupId, kstr MemberId, i32 MemberEpoch, kstr RackId (null: 0), then the
    # subscribed topics as a compact array (null: 0) of compact strings -- written from the
    # end of its list, so the wire order is the reverse of the subscription -- and the
    # body's empty tagged fields (rd_kafka_buf_finalize).
    join = (_request_head(76, 7) + _cstr("orders-q") + _cstr(MEMBER) + struct.pack(">i", 0) + b"\x00"
            + b"\x03" + _cstr("audit") + _cstr("orders") + b"\x00")
    body = {"group_id": "orders-q", "member_id": MEMBER, "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["audit", "orders"]}
    assert protocol.encode_request(76, 1, 7, "golden-rd", body) == _framed(join)
    header, decoded = protocol.decode_request(join)
    assert header == RequestHeader(76, 1, 7, "golden-rd") and decoded == body
    # a heartbeat of a member in the group, subscription unchanged: a null array; a rack
    steady = (_request_head(76, 8) + _cstr("orders-q") + _cstr(MEMBER) + struct.pack(">i", 12) + _cstr("rack-a")
              + b"\x00" + b"\x00")
    body = {"group_id": "orders-q", "member_id": MEMBER, "member_epoch": 12, "rack_id": "rack-a",
            "subscribed_topic_names": None}
    assert protocol.encode_request(76, 1, 8, "golden-rd", body) == _framed(steady)
    assert protocol.decode_request(steady)[1] == body


def test_golden_share_group_heartbeat_v1_response_as_librdkafka_reads_it():
    # Assembled by hand from what rd_kafka_cgrp_handle_ShareGroupHeartbeat reads (and
    # rd_kafka_mock_handle_ShareGroupHeartbeat writes): response header v1 (CorrelationId,
    # empty tagged fields), i32 ThrottleTimeMs, i16 ErrorCode, compact ErrorMessage,
    # compact MemberId, i32 MemberEpoch, i32 HeartbeatIntervalMs, then the Assignment: an
    # i8 presence marker (1 present, -1 null) and, when present, its topics
    # (rd_kafka_buf_read_topic_partitions by id: uuid, compact array of i32, the topic's
    # tagged fields) and the assignment struct's tagged fields; the body's tagged fields.
    assigned = (struct.pack(">i", 7) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00" + _cstr(MEMBER)
                + struct.pack(">ii", 1, 5000) + b"\x01"
                + b"\x03" + TOPIC_A + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00" + TOPIC_B + b"\x01" + b"\x00"
                + b"\x00" + b"\x00")
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": MEMBER, "member_epoch": 1,
            "heartbeat_interval_ms": 5000, "assignment": {"topic_partitions": [
                {"topic_id": TOPIC_A, "partitions": [0, 2]}, {"topic_id": TOPIC_B, "partitions": []}]}}
    assert _join(protocol.encode_response(RequestHeader(76, 1, 7, None), body)) == _framed(assigned)
    assert protocol.decode_response(76, 1, assigned) == (7, body)
    # an error: a message, no member id, no assignment (marker -1)
    refused = (struct.pack(">i", 8) + b"\x00" + struct.pack(">ih", 0, 25) + _cstr("unknown member") + b"\x00"
               + struct.pack(">ii", -1, 5000) + b"\xff" + b"\x00")
    body = {"throttle_time_ms": 0, "error_code": 25, "error_message": "unknown member", "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 5000, "assignment": None}
    assert _join(protocol.encode_response(RequestHeader(76, 1, 8, None), body)) == _framed(refused)
    assert protocol.decode_response(76, 1, refused) == (8, body)


def test_golden_share_fetch_v1_request_as_librdkafka_writes_it():
    # Assembled by hand from librdkafka's rd_kafka_ShareFetchRequest (v1 only): kstr GroupId,
    # kstr MemberId, i32 ShareSessionEpoch, MaxWaitMs (fetch.wait.max.ms, 500), MinBytes
    # (1), MaxBytes (fetch.max.bytes, 52428800), MaxRecords and BatchSize (max.poll.records,
    # 500); Topics: uuid, its partitions (i32, the acknowledgement batches: i64 FirstOffset,
    # i64 LastOffset, a one-element compact array of i8 types, the batch's tagged fields;
    # the partition's tagged fields), the topic's tagged fields; ForgottenTopicsData: uuid,
    # compact array of i32, the topic's tagged fields; the body's tagged fields.
    head = (_cstr("orders-q") + _cstr(MEMBER))
    limits = struct.pack(">iiiii", 500, 1, 52428800, 500, 500)
    # the session's first request (epoch 0): the partitions to fetch, no acknowledgement
    first = (_request_head(78, 11) + head + struct.pack(">i", 0) + limits
             + b"\x02" + TOPIC_A + b"\x03" + struct.pack(">i", 0) + b"\x01" + b"\x00"
             + struct.pack(">i", 1) + b"\x01" + b"\x00" + b"\x00"
             + b"\x01" + b"\x00")
    body = {"group_id": "orders-q", "member_id": MEMBER, "share_session_epoch": 0, "max_wait_ms": 500,
            "min_bytes": 1, "max_bytes": 52428800, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": TOPIC_A, "partitions": [{"partition_index": 0, "acknowledgement_batches": []},
                                                            {"partition_index": 1, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []}
    assert protocol.encode_request(78, 1, 11, "golden-rd", body) == _framed(first)
    header, decoded = protocol.decode_request(first)
    assert header == RequestHeader(78, 1, 11, "golden-rd")
    assert decoded == dict(body, share_acquire_mode=0, is_renew_ack=False)  # v2's fields, at their defaults
    # a later one (epoch 1): acknowledges offsets 0-4 (Accept) and 5-5 (Release) of partition 0,
    # and forgets partitions 0 and 2 of another topic
    later = (_request_head(78, 12) + head + struct.pack(">i", 1) + limits
             + b"\x02" + TOPIC_A + b"\x02" + struct.pack(">i", 0)
             + b"\x03" + struct.pack(">qq", 0, 4) + b"\x02\x01" + b"\x00"
             + struct.pack(">qq", 5, 5) + b"\x02\x02" + b"\x00"
             + b"\x00" + b"\x00"
             + b"\x02" + TOPIC_B + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00"
             + b"\x00")
    body = dict(body, share_session_epoch=1, topics=[{"topic_id": TOPIC_A, "partitions": [
        {"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]},
            {"first_offset": 5, "last_offset": 5, "acknowledge_types": [2]}]}]}],
        forgotten_topics_data=[{"topic_id": TOPIC_B, "partitions": [0, 2]}])
    assert protocol.encode_request(78, 1, 12, "golden-rd", body) == _framed(later)
    assert protocol.decode_request(later)[1] == dict(body, share_acquire_mode=0, is_renew_ack=False)


def test_share_fetch_v2_puts_the_acquire_mode_and_the_renew_flag_behind_the_batch_size():
    body = {"group_id": "g", "member_id": "m", "share_session_epoch": 2, "max_records": 0, "batch_size": 0,
            "share_acquire_mode": 1, "is_renew_ack": True, "topics": [], "forgotten_topics_data": []}
    v1 = protocol.encode_request(78, 1, 1, None, body)
    v2 = protocol.encode_request(78, 2, 1, None, body)
    # v1's body ends ... BatchSize, Topics (empty), ForgottenTopicsData (empty), tags;
    # v2's ... BatchSize, ShareAcquireMode (1), IsRenewAck (1), Topics, ForgottenTopicsData, tags
    assert v1.endswith(struct.pack(">ii", 0, 0) + b"\x01\x01\x00")
    assert v2.endswith(struct.pack(">ii", 0, 0) + b"\x01\x01" + b"\x01\x01\x00")
    assert len(v2) == len(v1) + 2
    # ShareAcknowledge v2: IsRenewAck behind ShareSessionEpoch
    ack = {"group_id": "g", "member_id": "m", "share_session_epoch": 2, "is_renew_ack": True, "topics": []}
    assert protocol.encode_request(79, 2, 1, None, ack).endswith(b"\x02g\x02m" + struct.pack(">i", 2) + b"\x01\x01\x00")
    assert protocol.encode_request(79, 1, 1, None, ack).endswith(b"\x02g\x02m" + struct.pack(">i", 2) + b"\x01\x00")


# ------------------------------------------------------------------ hostile input
def _head(api_key: int, version: int) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, -1) + b"\x00"


HUGE = b"\xff\xff\xff\xff\x0f"  # compact array length 2^32-1 => 4294967294 elements


@pytest.mark.parametrize("frame,match", [
    # ShareGroupHeartbeat v1: group "g", member "m", epoch 0, rack null, then 2^32-2 subscribed topics
    (_head(76, 1) + b"\x02g\x02m" + struct.pack(">i", 0) + b"\x00" + HUGE + b"\x00" * 8, "array of 4294967294"),
    # ShareGroupDescribe v1: 2^32-2 group ids
    (_head(77, 1) + HUGE + b"\x00" * 8, "array of 4294967294"),
    # ShareFetch v1: the fixed part, then 2^32-2 topics
    (_head(78, 1) + b"\x02g\x02m" + struct.pack(">iiiiii", 0, 500, 1, 1 << 20, 500, 500) + HUGE + b"\x00" * 8,
     "array of 4294967294"),
    # ShareFetch v2: one topic, one partition, one acknowledgement batch claiming a million types
    (_head(78, 2) + b"\x02g\x02m" + struct.pack(">iiiiii", 1, 500, 1, 1 << 20, 500, 500) + b"\x00\x00"
     + b"\x02" + TOPIC_A + b"\x02" + struct.pack(">i", 0) + b"\x02" + struct.pack(">qq", 0, 9)
     + b"\xc1\x84\x3d" + b"\x00" * 16, "array of 1000000"),
    # ShareAcknowledge v2: the fixed part, IsRenewAck, then 2^31-1 topics
    (_head(79, 2) + b"\x02g\x02m" + struct.pack(">i", 1) + b"\x00" + b"\x80\x80\x80\x80\x08" + b"\x00" * 8,
     "array of 2147483647"),
    # DescribeShareGroupOffsets v1: 2^32-2 groups
    (_head(90, 1) + HUGE + b"\x00" * 8, "array of 4294967294"),
    # DescribeShareGroupOffsets v0: one group whose topics claim 2^20
    (_head(90, 0) + b"\x02" + b"\x02g" + b"\x81\x80\x40" + b"\x00" * 8, "array of 1048576"),
    # AlterShareGroupOffsets v0: group "g", then 2^32-2 topics
    (_head(91, 0) + b"\x02g" + HUGE + b"\x00" * 8, "array of 4294967294"),
    # DeleteShareGroupOffsets v0: group "g", then 2^32-2 topics
    (_head(92, 0) + b"\x02g" + HUGE + b"\x00" * 8, "array of 4294967294"),
], ids=["ShareGroupHeartbeat-topics", "ShareGroupDescribe-groups", "ShareFetch-topics", "ShareFetch-ack-types",
        "ShareAcknowledge-topics", "DescribeShareGroupOffsets-groups", "DescribeShareGroupOffsets-topics",
        "AlterShareGroupOffsets-topics", "DeleteShareGroupOffsets-topics"])
def test_oversized_counts_are_refused_before_allocation(frame, match):
    start = time.monotonic()
    with pytest.raises(ProtocolError, match=match):
        protocol.decode_request(frame)
    assert time.monotonic() - start < 0.5


def test_oversized_counts_in_responses_are_refused():
    # a client trusts no broker either
    fetch = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00" + struct.pack(">i", 30000) + HUGE
    with pytest.raises(ProtocolError, match="array of 4294967294"):
        protocol.decode_response(78, 1, fetch + b"\x00" * 8)
    # a partition whose records claim 2 GiB
    records = (struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00" + struct.pack(">i", 30000)
               + b"\x02" + TOPIC_A + b"\x02" + struct.pack(">ih", 0, 0) + b"\x00" + struct.pack(">h", 0) + b"\x00"
               + struct.pack(">ii", 1, 1) + b"\x00" + b"\x80\x80\x80\x80\x08" + b"\x00" * 8)
    with pytest.raises(ProtocolError, match="exceeds"):
        protocol.decode_response(78, 2, records)
    heartbeat = (struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00\x00" + struct.pack(">ii", 1, 5000)
                 + b"\x01" + HUGE + b"\x00" * 8)
    with pytest.raises(ProtocolError, match="array of 4294967294"):
        protocol.decode_response(76, 1, heartbeat)
    with pytest.raises(ProtocolError, match="presence marker"):
        protocol.decode_response(76, 1, heartbeat[:-len(HUGE) - 9] + b"\x05" + b"\x00" * 8)


@pytest.mark.parametrize("api_key,version", SHARE_SERVED, ids=[f"{k}-v{v}" for k, v in SHARE_SERVED])
def test_every_truncation_is_refused(api_key, version):
    request = protocol.encode_request(api_key, version, 9, "c", sample_body(api_key, version, "request"))[4:]
    for cut in range(len(request)):
        with pytest.raises(ProtocolError):
            protocol.decode_request(request[:cut])
    response = _join(protocol.encode_response(RequestHeader(api_key, version, 9, None),
                                              sample_body(api_key, version, "response")))[4:]
    for cut in range(len(response)):
        with pytest.raises(ProtocolError):
            protocol.decode_response(api_key, version, response[:cut])


# ------------------------------------------------------------------ the installed librdkafka, live
def test_librdkafka_share_consumer_frames():
    """confluent-kafka's ShareConsumer (librdkafka 2.15+) against a scripted broker that serves the
    share APIs with these codecs: it joins (ShareGroupHeartbeat v1), fetches (ShareFetch v1),
    reads the record we answer, acknowledges it on its next fetch, and at close leaves and
    acknowledges (ShareAcknowledge v1).  Its frames decode and re-encode to the same bytes."""
    import confluent_kafka  # a test dependency, 2.16+ (pyproject.toml): it has the share consumer

    assert hasattr(confluent_kafka, "ShareConsumer"), confluent_kafka.version()
    from fake_kafka import ScriptedBroker

    from spark_coord.records.builder import BatchBuilder

    builder = BatchBuilder()
    builder.append(b"hello", timestamp_ms=1_700_000_000_000)
    batch = builder.build()
    fetches = []

    def handle(broker, header, body):
        key, v = header.api_key, header.api_version
        if key == ApiKey.METADATA:
            return {"brokers": [broker.broker_entry()], "cluster_id": "share", "controller_id": 0, "topics": [
                {"name": "orders", "topic_id": TOPIC_A, "error_code": 0, "partitions": [
                    {"partition_index": 0, "leader_id": 0, "leader_epoch": 0, "replica_nodes": [0],
                     "isr_nodes": [0]}]}]}
        if key == ApiKey.FIND_COORDINATOR:
            me = {"error_code": 0, "node_id": 0, "host": "127.0.0.1", "port": broker.port}
            return {"coordinators": [dict(me, key=k) for k in body["coordinator_keys"]]} if v >= 4 else me
        if key == ApiKey.SHARE_GROUP_HEARTBEAT:
            return {"member_id": body["member_id"], "member_epoch": 0 if body["member_epoch"] < 0 else 1,
                    "heartbeat_interval_ms": 3000,
                    "assignment": {"topic_partitions": [{"topic_id": TOPIC_A, "partitions": [0]}]}}
        if key == ApiKey.SHARE_FETCH:
            fetches.append(body)
            first = len(fetches) == 1
            if not first:
                time.sleep(0.05)
            return {"acquisition_lock_timeout_ms": 30000, "responses": [{"topic_id": TOPIC_A, "partitions": [
                {"partition_index": 0, "current_leader": {"leader_id": 0, "leader_epoch": 0},
                 "records": batch if first else b"",
                 "acquired_records": [{"first_offset": 0, "last_offset": 0, "delivery_count": 1}] if first else []}]}]}
        if key == ApiKey.SHARE_ACKNOWLEDGE:
            return {"responses": [{"topic_id": t["topic_id"], "partitions": [
                {"partition_index": p["partition_index"]} for p in t["partitions"]]} for t in body["topics"]]}
        return {}

    broker = ScriptedBroker(handle)
    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.address, "group.id": "orders-q",
                                              "client.id": "golden-rd", "log_level": 0})
    try:
        consumer.subscribe(["orders"])
        values = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(broker.received(ApiKey.SHARE_FETCH)) < 2:
            got = consumer.poll(0.2)
            if got is not None:
                values += [m.value() for m in got.records()]
        assert values == [b"hello"]
    finally:
        consumer.close()
        broker.close()
    (hb, join, frame), *_ = broker.received(ApiKey.SHARE_GROUP_HEARTBEAT)
    assert hb.api_version == 1 and hb.client_id == "golden-rd"
    member = join["member_id"]
    assert join == {"group_id": "orders-q", "member_id": member, "member_epoch": 0, "rack_id": None,
                    "subscribed_topic_names": ["orders"]}
    assert frame == _request_head(76, hb.correlation_id) + _cstr("orders-q") + _cstr(member) \
        + struct.pack(">i", 0) + b"\x00" + b"\x02" + _cstr("orders") + b"\x00"
    assert [b["member_epoch"] for _, b, _ in broker.received(ApiKey.SHARE_GROUP_HEARTBEAT)][-1] == -1  # it left
    sf = broker.received(ApiKey.SHARE_FETCH)
    assert {h.api_version for h, _, _ in sf} == {1}
    assert sf[0][1]["share_session_epoch"] == 0 and sf[0][1]["topics"] == [
        {"topic_id": TOPIC_A, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]
    # it read our answer: the record it got comes back accepted (type 1) on the next fetch
    assert sf[1][1]["share_session_epoch"] == 1 and sf[1][1]["topics"] == [
        {"topic_id": TOPIC_A, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]
    for key in (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
        for header, body, raw in broker.received(key):
            assert header.api_version == 1
            assert protocol.encode_request(key, 1, header.correlation_id, header.client_id, body)[4:] == raw
