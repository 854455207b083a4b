"""Round trips of every served version of every API, request and response."""

from __future__ import annotations

import tempfile

import pytest
from wire_samples import message_of, normalize, restrict, sample_body, served

from spark_coord.records.region import FileRegion
from spark_coord.wire import protocol, registry
from spark_coord.wire.protocol import RequestHeader

SERVED = served()
IDS = [f"{registry.api_name(k)}-v{v}" for k, v in SERVED]


def _join(parts) -> bytes:
    return b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)


def test_every_kafka_api_is_served_at_the_documented_versions():
    table = {row["api_key"]: (row["min_version"], row["max_version"]) for row in protocol.api_versions_table()}
    assert table == {0: (3, 9), 1: (4, 17), 2: (0, 7), 3: (0, 12), 18: (0, 4), 19: (0, 7), 20: (0, 6), 22: (0, 4),
                     # Kafka's classic group APIs, and Kafka 4's consumer group protocol (KIP-848)
                     8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5),
                     16: (0, 5), 42: (0, 2), 68: (0, 1), 69: (0, 1),
                     # share groups (KIP-932): codecs only, no handler yet
                     76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0),
                     # SASL (KIP-152) and the ACL APIs
                     17: (0, 1), 36: (0, 2), 29: (0, 3), 30: (0, 3), 31: (0, 3),
                     # the config APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
                     32: (0, 4), 33: (0, 2), 44: (0, 1),
                     # the admin surface (issue 30): CreatePartitions, DeleteRecords, OffsetDelete,
                     # DescribeLogDirs, Describe/AlterUserScramCredentials, DescribeProducers, DescribeClientQuotas
                     37: (0, 3), 21: (0, 2), 47: (0, 0), 35: (0, 4), 50: (0, 0), 51: (0, 0), 61: (0, 0), 48: (0, 1),
                     # a transaction coordinator's markers, and the transaction coordinator's APIs (KIP-98, KIP-664)
                     27: (0, 1), 24: (0, 3), 25: (0, 4), 26: (0, 4), 28: (0, 4), 65: (0, 0), 66: (0, 1),
                     **{key: {1000: (0, 1), 1001: (0, 2), 1003: (0, 1), 1004: (0, 1), 1005: (0, 1)}.get(key, (0, 0))
                        for key in range(1000, 1007)}}
    assert protocol.served_versions(1) == (4, 17)
    assert protocol.served_versions(999) is None


@pytest.mark.parametrize("with_nulls", [True, False], ids=["nulls", "values"])
@pytest.mark.parametrize("api_key,version", SERVED, ids=IDS)
def test_request_round_trip(api_key, version, with_nulls):
    body = sample_body(api_key, version, "request", seed=version + 3, with_nulls=with_nulls)
    frame = protocol.encode_request(api_key, version, 12345, "client-é", body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, decoded = protocol.decode_request(memoryview(frame)[4:])
    assert header == RequestHeader(api_key, version, 12345, "client-é")
    fields = message_of(api_key, "request").fields
    assert normalize(restrict(decoded, fields, version)) == body
    # every schema field is present, including those absent in this version
    assert {f.key for f in fields} <= decoded.keys()
    # re-encoding the decoded dict gives the same bytes
    assert protocol.encode_request(api_key, version, 12345, "client-é", decoded) == frame


@pytest.mark.parametrize("with_nulls", [True, False], ids=["nulls", "values"])
@pytest.mark.parametrize("api_key,version", SERVED, ids=IDS)
def test_response_round_trip(api_key, version, with_nulls):
    body = sample_body(api_key, version, "response", seed=version + 11, with_nulls=with_nulls)
    header = RequestHeader(api_key, version, 777, None)
    parts = protocol.encode_response(header, body)
    frame = _join(parts)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert protocol.peek_correlation_id(frame[4:]) == 777
    corr, decoded = protocol.decode_response(api_key, version, frame[4:])
    assert corr == 777
    fields = message_of(api_key, "response").fields
    assert normalize(restrict(decoded, fields, version)) == body
    assert _join(protocol.encode_response(header, decoded)) == frame


@pytest.mark.parametrize("api_key,version", SERVED, ids=IDS)
def test_empty_bodies_take_defaults(api_key, version):
    """A handler may omit anything: missing keys encode as defaults and decode back to them."""
    frame = protocol.encode_request(api_key, version, 1, None, {})
    _, decoded = protocol.decode_request(frame[4:])
    parts = protocol.encode_response(RequestHeader(api_key, version, 1, None), {})
    _, decoded_resp = protocol.decode_response(api_key, version, _join(parts)[4:])
    assert isinstance(decoded, dict) and isinstance(decoded_resp, dict)


def test_defaults_follow_the_json_definitions():
    _, req = protocol.decode_request(protocol.encode_request(1, 4, 1, None, {})[4:])
    assert req["max_bytes"] == 0x7FFFFFFF and req["session_epoch"] == -1 and req["replica_id"] == -1
    assert req["rack_id"] == "" and req["forgotten_topics_data"] == [] and req["cluster_id"] is None
    assert req["replica_state"] == {"replica_id": -1, "replica_epoch": -1}
    _, meta = protocol.decode_request(protocol.encode_request(3, 4, 1, None, {"topics": None})[4:])
    assert meta["topics"] is None and meta["allow_auto_topic_creation"] is True
    _, ct = protocol.decode_request(protocol.encode_request(19, 0, 1, None, {})[4:])
    assert ct["timeout_ms"] == 60000 and ct["validate_only"] is False


def test_superset_body_serves_every_version():
    """One dict with every field of every version encodes at each version (tests/wire/test_wire_strict.py:
    a key of no version raises in the suite's strict mode, and is ignored without it)."""
    body = {"throttle_time_ms": 5, "controller_id": 1, "cluster_id": "c1",
            "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "topics": [{"error_code": 0, "name": "t", "topic_id": bytes(16), "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                                        "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}]}
    for version in range(0, 13):
        parts = protocol.encode_response(RequestHeader(3, version, 9, None), body)
        _, decoded = protocol.decode_response(3, version, _join(parts)[4:])
        assert decoded["brokers"][0]["host"] == "h"
        assert decoded["topics"][0]["partitions"][0]["replica_nodes"] == [1]
        assert decoded["controller_id"] == (1 if version >= 1 else -1)
        assert decoded["cluster_id"] == ("c1" if version >= 2 else None)
        assert decoded["topics"][0]["partitions"][0]["leader_epoch"] == (3 if version >= 7 else -1)


def test_metadata_v0_all_topics_none_encodes_as_empty_array():
    frame = protocol.encode_request(3, 0, 1, "c", {"topics": None})
    _, body = protocol.decode_request(frame[4:])
    assert body["topics"] == []


def test_fetch_response_keeps_file_regions_unread():
    with tempfile.TemporaryFile() as f:
        f.write(b"HEAD" + b"BATCH-ONE" + b"BATCH-TWO" + b"TAIL")
        f.flush()
        r1 = FileRegion(f, 4, 9)
        r2 = FileRegion(f, 13, 9)
        body = {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "high_watermark": 10, "records": [r1, b"-mid-", r2]},
            {"partition_index": 1, "high_watermark": 0, "records": None},
            {"partition_index": 2, "high_watermark": 0, "records": r1},
        ]}]}
        for version in (4, 11, 12):
            parts = protocol.encode_response(RequestHeader(1, version, 5, None), body)
            regions = [p for p in parts if isinstance(p, FileRegion)]
            assert regions == [r1, r2, r1]
            frame = _join(parts)
            assert int.from_bytes(frame[:4], "big") == sum(len(p) for p in parts) - 4
            _, decoded = protocol.decode_response(1, version, frame[4:])
            parts_out = decoded["responses"][0]["partitions"]
            assert bytes(parts_out[0]["records"]) == b"BATCH-ONE-mid-BATCH-TWO"
            assert parts_out[1]["records"] is None
            assert bytes(parts_out[2]["records"]) == b"BATCH-ONE"
            assert isinstance(parts_out[0]["records"], memoryview)


def test_tagged_fields_written_only_when_not_default():
    base = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]}
    plain = _join(protocol.encode_response(RequestHeader(1, 12, 1, None), base))
    tagged = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "current_leader": {"leader_id": 4, "leader_epoch": 2},
         "diverging_epoch": {"epoch": -1, "end_offset": -1}}]}]}
    with_tag = _join(protocol.encode_response(RequestHeader(1, 12, 1, None), tagged))
    # CurrentLeader: tag 1, size 9 (two int32 and the struct's own empty tagged-field count)
    # => 1 + 1 + 9 more bytes; DivergingEpoch at its default is omitted
    assert len(with_tag) == len(plain) + 11
    _, decoded = protocol.decode_response(1, 12, with_tag[4:])
    p = decoded["responses"][0]["partitions"][0]
    assert p["current_leader"] == {"leader_id": 4, "leader_epoch": 2}
    assert p["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    assert p["snapshot_id"] == {"end_offset": -1, "epoch": -1}


def test_unknown_tagged_fields_are_skipped():
    # ApiVersions v3 request: header v2 with one unknown header tag, body with an unknown tag 7
    frame = (b"\x00\x12\x00\x03\x00\x00\x00\x09\x00\x01c"
             b"\x01\x05\x02zz"                # header tagged fields: tag 5, 2 bytes
             b"\x02n\x02v"                    # client_software_name "n", version "v"
             b"\x01\x07\x03abc")              # body tagged fields: tag 7, 3 bytes
    header, body = protocol.decode_request(frame)
    assert header.correlation_id == 9 and body == {"client_software_name": "n", "client_software_version": "v"}


def test_encode_errors_name_the_field():
    with pytest.raises(ValueError, match=r"topic_data\[0\]\.partition_data\[0\]\.index"):
        protocol.encode_request(0, 3, 1, None, {"topic_data": [{"name": "t", "partition_data": [{"index": 2**40}]}]})
    with pytest.raises(ValueError, match="records"):
        protocol.encode_request(0, 9, 1, None, {"topic_data": [{"name": "t", "partition_data": [{"records": 5}]}]})
    with pytest.raises(ValueError, match="not registered"):
        protocol.encode_request(0, 2, 1, None, {})


def test_api_versions_fallback_is_v0_with_the_api_list():
    parts = protocol.encode_api_versions_fallback(42)
    frame = _join(parts)
    # v0 layout: size, correlation id, error code 35, int32 array count
    assert frame[4:8] == (42).to_bytes(4, "big")
    assert frame[8:10] == (35).to_bytes(2, "big")
    assert int.from_bytes(frame[10:14], "big") == len(protocol.api_versions_table())
    # a client that asked v3 reads it as v0 (KIP-511)
    corr, body = protocol.decode_response(18, 3, frame[4:])
    assert corr == 42 and body["error_code"] == 35
    assert {"api_key": 18, "min_version": 0, "max_version": 4} in body["api_keys"]


def test_api_versions_response_header_is_always_v0():
    parts = protocol.encode_response(RequestHeader(18, 3, 1, None), {"api_keys": []})
    frame = _join(parts)
    # size(4) corr(4) then straight away error_code: no header tagged-field byte
    assert frame[8:10] == b"\x00\x00" and frame[10] == 1  # compact array of 0 elements
