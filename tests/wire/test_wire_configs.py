"""The config APIs' codecs: DescribeConfigs (32, v0-4), AlterConfigs (33, v0-2),
IncrementalAlterConfigs (44, v0-1).

Every served version round-trips a realistic request and response (the generic
round trips of tests/wire/test_wire_roundtrip.py fill fields with noise); the
bytes of a few frames are spelled out by hand from Kafka's JSON definitions, so a
field in the wrong place or of the wrong width shows; and what each version drops
(v0's is-default, v1's sources and synonyms, v3's types and documentation) is
dropped.
"""

from __future__ import annotations

import struct

import pytest

from spark_coord.configs.model import ConfigEntry, ConfigSource, ConfigType, Synonym
from spark_coord.wire import protocol, registry
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.registry import ApiKey

GROUP, TOPIC, BROKER = 32, 2, 4


def _join(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


def _request_round_trip(api_key: int, version: int, body: dict) -> dict:
    frame = protocol.encode_request(api_key, version, 7, "cfg", body)
    header, decoded = protocol.decode_request(memoryview(frame)[4:])
    assert header == RequestHeader(api_key, version, 7, "cfg")
    assert protocol.encode_request(api_key, version, 7, "cfg", decoded) == frame
    return decoded


def _response_round_trip(api_key: int, version: int, body: dict) -> dict:
    frame = _join(protocol.encode_response(RequestHeader(api_key, version, 9, None), body))
    corr, decoded = protocol.decode_response(api_key, version, frame[4:])
    assert corr == 9
    assert _join(protocol.encode_response(RequestHeader(api_key, version, 9, None), decoded)) == frame
    return decoded


def test_served_versions():
    assert registry.served_versions(ApiKey.DESCRIBE_CONFIGS) == (0, 4)
    assert registry.served_versions(ApiKey.ALTER_CONFIGS) == (0, 2)
    assert registry.served_versions(ApiKey.INCREMENTAL_ALTER_CONFIGS) == (0, 1)
    assert [registry.lookup(32, v).request_header_version for v in range(5)] == [1, 1, 1, 1, 2]
    assert [registry.lookup(33, v).response_header_version for v in range(3)] == [0, 0, 1]
    assert [registry.lookup(44, v).request_header_version for v in range(2)] == [1, 2]


# ------------------------------------------------------------------ DescribeConfigs

DESCRIBE_REQUEST = {"resources": [
    {"resource_type": GROUP, "resource_name": "orders", "configuration_keys": None},
    {"resource_type": TOPIC, "resource_name": "clicks", "configuration_keys": ["retention.ms", "segment.bytes"]},
    {"resource_type": BROKER, "resource_name": "0", "configuration_keys": []},
], "include_synonyms": True, "include_documentation": True}

ENTRIES = [
    ConfigEntry("share.auto.offset.reset", "earliest", ConfigSource.GROUP_CONFIG, ConfigType.STRING,
                "The strategy to initialize the share-partition start offset.",
                synonyms=(Synonym("share.auto.offset.reset", "earliest", ConfigSource.GROUP_CONFIG),)),
    ConfigEntry("retention.ms", "3600000", ConfigSource.STATIC_BROKER_CONFIG, ConfigType.LONG, "doc", read_only=True,
                synonyms=(Synonym("log.retention.ms", "3600000", ConfigSource.STATIC_BROKER_CONFIG),
                          Synonym("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG))),
    ConfigEntry("ssl.key.password", "secret", ConfigSource.STATIC_BROKER_CONFIG, ConfigType.PASSWORD, "doc",
                read_only=True, sensitive=True,
                synonyms=(Synonym("ssl.key.password", "secret", ConfigSource.STATIC_BROKER_CONFIG),)),
    ConfigEntry("share.isolation.level", "read_uncommitted", ConfigSource.DEFAULT_CONFIG, ConfigType.STRING),
]


def _describe_response(synonyms: bool = True, documentation: bool = True) -> dict:
    return {"throttle_time_ms": 5, "results": [
        {"error_code": 0, "error_message": None, "resource_type": GROUP, "resource_name": "orders",
         "configs": [e.to_wire(synonyms, documentation) for e in ENTRIES]},
        {"error_code": 3, "error_message": "topic 'gone' does not exist", "resource_type": TOPIC,
         "resource_name": "gone", "configs": []},
    ]}


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_request_round_trip(version):
    decoded = _request_round_trip(32, version, DESCRIBE_REQUEST)
    assert [(r["resource_type"], r["resource_name"], r["configuration_keys"]) for r in decoded["resources"]] == \
        [(GROUP, "orders", None), (TOPIC, "clicks", ["retention.ms", "segment.bytes"]), (BROKER, "0", [])]
    assert decoded["include_synonyms"] is (version >= 1)          # v0 has no such field: its default
    assert decoded["include_documentation"] is (version >= 3)


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_response_round_trip(version):
    decoded = _response_round_trip(32, version, _describe_response())
    assert decoded["throttle_time_ms"] == 5
    ok, gone = decoded["results"]
    assert (gone["error_code"], gone["error_message"], gone["configs"]) == (3, "topic 'gone' does not exist", [])
    reset, retention, password, level = ok["configs"]
    assert (reset["name"], reset["value"], reset["read_only"]) == ("share.auto.offset.reset", "earliest", False)
    assert (password["value"], password["is_sensitive"]) == (None, True)  # a sensitive value never leaves
    assert retention["read_only"] is True
    if version == 0:
        assert [c["is_default"] for c in ok["configs"]] == [False, False, False, True]
        assert reset["config_source"] == -1 and reset["synonyms"] == []   # not in v0: defaults
    else:
        assert [c["config_source"] for c in ok["configs"]] == [8, 4, 4, 5]
        assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == \
            [("log.retention.ms", "3600000", 4), ("log.retention.ms", "604800000", 5)]
        assert password["synonyms"][0]["value"] is None
    if version >= 3:
        assert [c["config_type"] for c in ok["configs"]] == [2, 5, 9, 2]
        assert reset["documentation"].startswith("The strategy")
        assert level["documentation"] is None
    else:
        assert reset["config_type"] == 0 and reset["documentation"] is None


def test_synonyms_and_documentation_only_when_asked():
    decoded = _response_round_trip(32, 3, _describe_response(synonyms=False, documentation=False))
    for config in decoded["results"][0]["configs"]:
        assert config["synonyms"] == [] and config["documentation"] is None
        assert config["config_source"] in (4, 5, 8) and config["config_type"] in (2, 5, 9)


def _s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _compact(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def test_describe_configs_v1_request_bytes():
    """v1 (what librdkafka 2.16 sends): array of (int8 type, string name, nullable array of keys), bool."""
    frame = protocol.encode_request(32, 1, 3, "rd", {"resources": [
        {"resource_type": GROUP, "resource_name": "g", "configuration_keys": None}], "include_synonyms": True})
    body = (struct.pack(">i", 1) + struct.pack(">b", 32) + _s16("g") + struct.pack(">i", -1) + b"\x01")
    assert frame[4:] == struct.pack(">hhi", 32, 1, 3) + _s16("rd") + body


def test_describe_configs_v1_response_bytes():
    entry = ConfigEntry("share.isolation.level", "read_committed", ConfigSource.GROUP_CONFIG, ConfigType.STRING,
                        synonyms=(Synonym("share.isolation.level", "read_committed", ConfigSource.GROUP_CONFIG),))
    parts = protocol.encode_response(RequestHeader(32, 1, 3, None), {"throttle_time_ms": 0, "results": [
        {"error_code": 0, "error_message": None, "resource_type": GROUP, "resource_name": "g",
         "configs": [entry.to_wire(True, True)]}]})
    config = (_s16("share.isolation.level") + _s16("read_committed") + b"\x00"  # name, value, read-only
              + struct.pack(">b", 8) + b"\x00"                                   # source, sensitive
              + struct.pack(">i", 1) + _s16("share.isolation.level") + _s16("read_committed") + struct.pack(">b", 8))
    result = struct.pack(">h", 0) + struct.pack(">h", -1) + struct.pack(">b", 32) + _s16("g") + \
        struct.pack(">i", 1) + config
    body = struct.pack(">i", 3) + struct.pack(">i", 0) + struct.pack(">i", 1) + result
    assert _join(parts) == struct.pack(">i", len(body)) + body


def test_describe_configs_v4_is_flexible():
    parts = protocol.encode_response(RequestHeader(32, 4, 1, None), {"throttle_time_ms": 0, "results": [
        {"error_code": 0, "error_message": None, "resource_type": BROKER, "resource_name": "0", "configs": [
            ConfigEntry("broker.id", "0", ConfigSource.STATIC_BROKER_CONFIG, ConfigType.INT, None, True)
            .to_wire(False, False)]}]})
    config = (_compact("broker.id") + _compact("0") + b"\x01" + struct.pack(">b", 4) + b"\x00"
              + b"\x01"                                   # no synonyms (compact array of 0)
              + struct.pack(">b", 3) + b"\x00" + b"\x00")  # type INT, null documentation, no tags
    result = struct.pack(">h", 0) + b"\x00" + struct.pack(">b", 4) + _compact("0") + b"\x02" + config + b"\x00"
    body = struct.pack(">i", 1) + b"\x00" + struct.pack(">i", 0) + b"\x02" + result + b"\x00"
    assert _join(parts) == struct.pack(">i", len(body)) + body


# ------------------------------------------------------------------ AlterConfigs, IncrementalAlterConfigs

ALTER_REQUEST = {"resources": [
    {"resource_type": GROUP, "resource_name": "orders", "configs": [
        {"name": "share.auto.offset.reset", "value": "by_duration:PT1H"},
        {"name": "share.record.lock.duration.ms", "value": None}]},
    {"resource_type": TOPIC, "resource_name": "clicks", "configs": []},
], "validate_only": True}

ALTER_RESPONSE = {"throttle_time_ms": 0, "responses": [
    {"error_code": 0, "error_message": None, "resource_type": GROUP, "resource_name": "orders"},
    {"error_code": 42, "error_message": "read-only", "resource_type": TOPIC, "resource_name": "clicks"},
]}


@pytest.mark.parametrize("version", range(3))
def test_alter_configs_round_trip(version):
    decoded = _request_round_trip(33, version, ALTER_REQUEST)
    assert decoded["validate_only"] is True
    assert [(c["name"], c["value"]) for c in decoded["resources"][0]["configs"]] == \
        [("share.auto.offset.reset", "by_duration:PT1H"), ("share.record.lock.duration.ms", None)]
    out = _response_round_trip(33, version, ALTER_RESPONSE)
    assert [(r["error_code"], r["error_message"], r["resource_type"], r["resource_name"]) for r in out["responses"]] \
        == [(0, None, GROUP, "orders"), (42, "read-only", TOPIC, "clicks")]


@pytest.mark.parametrize("version", range(2))
def test_incremental_alter_configs_round_trip(version):
    request = {"resources": [{"resource_type": GROUP, "resource_name": "orders", "configs": [
        {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"},
        {"name": "share.isolation.level", "config_operation": 1, "value": None}]}], "validate_only": False}
    decoded = _request_round_trip(44, version, request)
    assert [(c["name"], c["config_operation"], c["value"]) for c in decoded["resources"][0]["configs"]] == \
        [("share.auto.offset.reset", 0, "earliest"), ("share.isolation.level", 1, None)]
    out = _response_round_trip(44, version, ALTER_RESPONSE)
    assert [r["error_code"] for r in out["responses"]] == [0, 42]


def test_incremental_alter_configs_v1_request_bytes():
    """v1 (what librdkafka 2.16 and kafka-python 3.0 send): the flexible layout, byte by byte."""
    frame = protocol.encode_request(44, 1, 3, "rd", {"resources": [{"resource_type": GROUP, "resource_name": "g",
                                                                    "configs": [{"name": "share.auto.offset.reset",
                                                                                 "config_operation": 0,
                                                                                 "value": "earliest"}]}]})
    config = _compact("share.auto.offset.reset") + b"\x00" + _compact("earliest") + b"\x00"
    resource = struct.pack(">b", 32) + _compact("g") + b"\x02" + config + b"\x00"
    body = b"\x02" + resource + b"\x00" + b"\x00"  # resources, validate_only false, no tags
    assert frame[4:] == struct.pack(">hhi", 44, 1, 3) + _s16("rd") + b"\x00" + body


def test_incremental_alter_configs_v0_response_bytes():
    parts = protocol.encode_response(RequestHeader(44, 0, 2, None), {"throttle_time_ms": 0, "responses": [
        {"error_code": 40, "error_message": "bad", "resource_type": GROUP, "resource_name": "g"}]})
    body = (struct.pack(">i", 2) + struct.pack(">i", 0) + struct.pack(">i", 1) + struct.pack(">h", 40)
            + _s16("bad") + struct.pack(">b", 32) + _s16("g"))
    assert _join(parts) == struct.pack(">i", len(body)) + body
