"""spark_coord.zk.model: Kafka's znode JSON, round trips, other versions, garbage."""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_coord.zk import model
from spark_coord.zk.model import BrokerInfo

# ------------------------------------------------------------------ broker registration

def test_broker_registration_is_kafka_2x_json():
    data = model.broker_registration(1, "h1.example", 9093, timestamp_ms=1700000000123)
    assert json.loads(data) == {
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["PLAINTEXT://h1.example:9093"],
        "jmx_port": -1, "host": "h1.example", "timestamp": "1700000000123", "port": 9093, "version": 4,
    }
    assert model.parse_broker(1, data) == BrokerInfo(1, "h1.example", 9093)


def test_broker_ipv6_round_trip():
    data = model.broker_registration(2, "::1", 9092)
    assert json.loads(data)["endpoints"] == ["PLAINTEXT://[::1]:9092"]
    info = model.parse_broker(2, data)
    assert info == BrokerInfo(2, "::1", 9092)
    assert info.address == "[::1]:9092"


@pytest.mark.parametrize("doc, expected", [
    # version 1 (Kafka 0.8): host and port only
    ({"jmx_port": -1, "timestamp": "1", "host": "old", "version": 1, "port": 9092}, ("old", 9092)),
    # version 2/3: endpoints; host null when PLAINTEXT is not the first listener
    ({"version": 2, "host": None, "port": -1, "endpoints": ["PLAINTEXT://h2:9094"]}, ("h2", 9094)),
    ({"version": 3, "host": "h3", "port": 9092, "endpoints": ["PLAINTEXT://h3:9092"], "rack": "r1"}, ("h3", 9092)),
    # version 4: named listeners mapped to protocols; the PLAINTEXT one wins
    ({"version": 4, "host": None, "port": -1,
      "listener_security_protocol_map": {"SECURE": "SSL", "INTERNAL": "PLAINTEXT"},
      "endpoints": ["SECURE://s:9095", "INTERNAL://i:9096"]}, ("i", 9096)),
    # version 5 adds features
    ({"version": 5, "host": "h5", "port": 9092, "endpoints": ["PLAINTEXT://h5:9092"], "features": {}}, ("h5", 9092)),
])
def test_parse_broker_tolerates_kafka_versions(doc, expected):
    info = model.parse_broker(4, json.dumps(doc).encode())
    assert (info.id, info.host, info.port) == (4, *expected)


def test_registration_of_several_listeners_is_kafkas_json_and_reads_back():
    eps = [("INTERNAL", "SASL_SSL", "10.0.0.1", 9094), ("PLAINTEXT", "PLAINTEXT", "h", 9092), ("SSL", "SSL", "h", 9093)]
    doc = json.loads(model.broker_registration(3, "ignored", 1, endpoints=eps, timestamp_ms=5))
    assert doc["endpoints"] == ["INTERNAL://10.0.0.1:9094", "PLAINTEXT://h:9092", "SSL://h:9093"]
    assert doc["listener_security_protocol_map"] == {"INTERNAL": "SASL_SSL", "PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert (doc["host"], doc["port"]) == ("h", 9092)  # the PLAINTEXT endpoint, as Kafka writes it
    info = model.parse_broker(3, json.dumps(doc))
    assert (info.host, info.port) == ("h", 9092)
    assert info.endpoint_for("SSL") == model.Endpoint("SSL", "SSL", "h", 9093)
    assert info.endpoint_for("INTERNAL").protocol == "SASL_SSL"
    assert info.endpoint_for("OTHER") is None


def test_registration_without_plaintext_has_kafkas_null_host_and_reads_back_at_the_first_endpoint():
    eps = [("SASL_SSL", "SASL_SSL", "h", 9093), ("SSL", "SSL", "h", 9094)]
    doc = json.loads(model.broker_registration(1, "h", 1, endpoints=eps))
    assert (doc["host"], doc["port"]) == (None, -1)
    info = model.parse_broker(1, json.dumps(doc))
    assert (info.host, info.port) == ("h", 9093)


@pytest.mark.parametrize("data, fragment", [
    (None, "no data"),
    (b"", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1,2]", "JSON object"),
    (b'{"version": 9, "host": "h", "port": 1}', "version"),
    (b'{"version": true, "host": "h", "port": 1}', "version"),
    (b'{"version": 1, "host": "h", "port": 70000}', "usable host/port"),
    (b'{"version": 1, "host": "h", "port": "9092"}', "usable host/port"),
    (b'{"version": 1}', "usable host/port"),
    (b'{"version": 4, "endpoints": "PLAINTEXT://h:1"}', "not a list"),
    (b'{"version": 4, "endpoints": ["http://h"]}', "LISTENER://host:port"),
    (b'{"version": 4, "endpoints": ["PLAINTEXT://h:0"]}', "port"),
    (b'{"version": 4, "endpoints": [1]}', "not a string"),
    (b'{"version": 4, "host": null, "port": -1, "endpoints": []}', "no usable endpoint"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
    (b"x" * (model.MAX_ZNODE_BYTES + 1), "more than"),
])
def test_parse_broker_garbage_is_a_clear_value_error(data, fragment):
    with pytest.raises(ValueError) as e:
        model.parse_broker(7, data)
    assert "broker 7" in str(e.value)
    assert fragment in str(e.value)


@pytest.mark.parametrize("args", [(-1, "h", 1), (0, "", 1), (0, "a/b", 1), (0, "h", 0), (0, "h", 65536),
                                  (0, "h", True)])
def test_broker_registration_refuses_bad_input(args):
    with pytest.raises(ValueError):
        model.broker_registration(*args)


# --------------------------------------------------------------------- topic assignment

def test_topic_assignment_is_kafka_json():
    data = model.topic_assignment({1: [2], 0: [1]})
    assert json.loads(data) == {"version": 1, "partitions": {"0": [1], "1": [2]}}
    assert model.parse_topic_assignment(data) == {0: [1], 1: [2]}


def test_topic_assignment_version_2_extra_fields_ignored():
    doc = {"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {}, "removing_replicas": {}}
    assert model.parse_topic_assignment(json.dumps(doc)) == {0: [1, 2]}


@pytest.mark.parametrize("data, fragment", [
    (b"{}", "version"),
    (b'{"version": 1}', "'partitions'"),
    (b'{"version": 1, "partitions": []}', "'partitions'"),
    (b'{"version": 1, "partitions": {}}', "no partitions"),
    (b'{"version": 1, "partitions": {"x": [1]}}', "partition key 'x'"),
    (b'{"version": 1, "partitions": {"-1": [1]}}', "partition key '-1'"),
    (b'{"version": 1, "partitions": {"00": [1]}}', "partition key '00'"),
    (b'{"version": 1, "partitions": {"0": []}}', "no replica list"),
    (b'{"version": 1, "partitions": {"0": 1}}', "no replica list"),
    (b'{"version": 1, "partitions": {"0": ["1"]}}', "illegal broker id"),
    (b'{"version": 1, "partitions": {"0": [-2]}}', "illegal broker id"),
    (b'{"version": 1, "partitions": {"0": [1, 1]}}', "twice"),
    (b'{"version": 1, "partitions": {"0": [1], "2": [1]}}', "no gaps"),
    (b"nope", "not JSON"),
])
def test_parse_topic_assignment_garbage(data, fragment):
    with pytest.raises(ValueError) as e:
        model.parse_topic_assignment(data, "orders")
    assert "'orders'" in str(e.value)
    assert fragment in str(e.value)


@pytest.mark.parametrize("bad", [{}, {0: []}, {1: [1]}, {-1: [1]}, {0: [1], 1: "2"}, [[1]], {"0": [1]}])
def test_topic_assignment_refuses_bad_input(bad):
    with pytest.raises(ValueError):
        model.topic_assignment(bad)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=4, unique=True), min_size=1, max_size=50))
def test_topic_assignment_round_trip_property(replica_lists):
    assignment = dict(enumerate(replica_lists))
    assert model.parse_topic_assignment(model.topic_assignment(assignment)) == assignment


# ---------------------------------------------------------------------------- topic ids

#: Bytes 0x00..0x0f and their text as Kafka's Uuid.toString writes it (base64url, no padding).
SEQUENTIAL_ID = bytes(range(16))
SEQUENTIAL_TEXT = "AAECAwQFBgcICQoLDA0ODw"


def test_topic_id_text_is_kafkas_base64url_without_padding():
    assert model.format_topic_id(SEQUENTIAL_ID) == SEQUENTIAL_TEXT
    assert model.parse_topic_id(SEQUENTIAL_TEXT) == SEQUENTIAL_ID
    assert model.parse_topic_id(SEQUENTIAL_TEXT + "==") == SEQUENTIAL_ID  # Uuid.fromString accepts padding
    # '-' and '_' are base64url's 62 and 63: an id from Kafka's own tests
    raw = model.parse_topic_id("vZKYST0pSA2HO5x_6hoO2Q")
    assert raw == base64.urlsafe_b64decode("vZKYST0pSA2HO5x_6hoO2Q==") and len(raw) == 16
    assert model.format_topic_id(raw) == "vZKYST0pSA2HO5x_6hoO2Q"


@pytest.mark.parametrize("text", [
    "", "AAECAwQFBgcICQoLDA0O", "AAECAwQFBgcICQoLDA0ODwAA", "AAECAwQFBgcICQoLDA0OD+", "AAECAwQFBgcICQoLDA0OD/",
    "AAECAwQFBgcICQoLDA0OD=", "AAECAwQFBgcICQoLDA0ODw=", " AAECAwQFBgcICQoLDA0ODw", "AAECAwQFBgcICQoLDA0ODé",
    "AAAAAAAAAAAAAAAAAAAAAA", None, 7, ["AAECAwQFBgcICQoLDA0ODw"],
])
def test_parse_topic_id_refuses_what_is_not_a_topic_id(text):
    with pytest.raises(ValueError):
        model.parse_topic_id(text)


@pytest.mark.parametrize("raw", [b"", bytes(15), bytes(17), "AAECAwQFBgcICQoLDA0ODw", None])
def test_format_topic_id_refuses_what_is_not_16_bytes(raw):
    with pytest.raises(ValueError):
        model.format_topic_id(raw)


def test_new_topic_ids_are_random_version_4_uuids_never_reserved():
    ids = [model.new_topic_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for raw in ids:
        u = uuid.UUID(bytes=raw)
        assert (u.version, u.variant) == (4, uuid.RFC_4122)
        assert raw not in (bytes(16), bytes(15) + b"\x01")
        assert not model.format_topic_id(raw).startswith("-")  # Kafka's randomUuid avoids these too
        assert model.parse_topic_id(model.format_topic_id(raw)) == raw


def test_topic_znode_with_an_id_is_kafka_2_8_json():
    data = model.topic_assignment({1: [2], 0: [1]}, SEQUENTIAL_ID)
    assert data == (b'{"version":3,"topic_id":"AAECAwQFBgcICQoLDA0ODw","partitions":{"0":[1],"1":[2]},'
                    b'"adding_replicas":{},"removing_replicas":{}}')
    assert model.parse_topic(data, "orders") == model.TopicZNode({0: [1], 1: [2]}, SEQUENTIAL_ID)
    assert model.parse_topic_assignment(data) == {0: [1], 1: [2]}


def test_topic_znode_as_kafka_writes_it_is_read():
    # ZooKeeper-mode Kafka 2.8+ (TopicZNode.encode), with a reassignment in progress
    doc = {"partitions": {"0": [1, 2], "1": [2, 3]}, "topic_id": "vZKYST0pSA2HO5x_6hoO2Q",
           "adding_replicas": {"0": [2]}, "removing_replicas": {}, "version": 3}
    znode = model.parse_topic(json.dumps(doc).encode(), "orders")
    assert znode.partitions == {0: [1, 2], 1: [2, 3]}
    assert model.format_topic_id(znode.topic_id) == "vZKYST0pSA2HO5x_6hoO2Q"


def test_topic_znode_before_topic_ids_has_none():
    assert model.parse_topic(model.topic_assignment({0: [1]}), "t") == model.TopicZNode({0: [1]}, None)
    doc = {"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {}, "removing_replicas": {}}
    assert model.parse_topic(json.dumps(doc), "t").topic_id is None


@pytest.mark.parametrize("topic_id, fragment", [
    ('"AAAAAAAAAAAAAAAAAAAAAA"', "zero UUID"),
    ('"AAECAwQFBgcICQoLDA0O"', "base64url"),
    ('"not an id at all, really"', "base64url"),
    ("17", "base64url"),
    ("null", "base64url"),
    ('{"id": 1}', "base64url"),
])
def test_topic_znode_with_a_malformed_id_is_refused(topic_id, fragment):
    data = '{"version":3,"topic_id":%s,"partitions":{"0":[1]}}' % topic_id
    with pytest.raises(ValueError) as e:
        model.parse_topic(data, "orders")
    assert "'orders'" in str(e.value) and "topic_id" in str(e.value) and fragment in str(e.value)


def test_topic_znode_version_4_is_unknown():
    with pytest.raises(ValueError, match="unsupported version 4"):
        model.parse_topic('{"version":4,"partitions":{"0":[1]}}', "t")


@pytest.mark.parametrize("reserved", [bytes(16), bytes(15) + b"\x01"])
def test_reserved_uuids_are_never_written_as_topic_ids(reserved):
    with pytest.raises(ValueError):
        model.topic_assignment({0: [1]}, reserved)
    with pytest.raises(ValueError):
        model.with_topic_id(model.topic_assignment({0: [1]}), reserved)


def test_with_topic_id_upgrades_a_znode_keeping_its_other_fields():
    old = json.dumps({"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {"0": [2]},
                      "removing_replicas": {}, "something_newer": [1]})
    data = model.with_topic_id(old, SEQUENTIAL_ID, "t")
    assert json.loads(data) == {"version": 3, "topic_id": SEQUENTIAL_TEXT, "partitions": {"0": [1, 2]},
                                "adding_replicas": {"0": [2]}, "removing_replicas": {}, "something_newer": [1]}
    v1 = model.with_topic_id(model.topic_assignment({0: [1]}), SEQUENTIAL_ID, "t")
    assert v1 == model.topic_assignment({0: [1]}, SEQUENTIAL_ID)
    with pytest.raises(ValueError, match="'t'"):
        model.with_topic_id(b'{"version":1}', SEQUENTIAL_ID, "t")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=4, unique=True), min_size=1, max_size=20),
       st.binary(min_size=16, max_size=16).filter(lambda b: b not in (bytes(16), bytes(15) + b"\x01")))
def test_topic_znode_round_trip_property(replica_lists, topic_id):
    assignment = dict(enumerate(replica_lists))
    assert model.parse_topic(model.topic_assignment(assignment, topic_id)) == model.TopicZNode(assignment, topic_id)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_parsers_never_raise_anything_but_value_error(data):
    for parse in (lambda d: model.parse_topic_assignment(d), lambda d: model.parse_broker(0, d),
                  model.parse_offset, model.parse_owner, model.parse_topic, model.parse_topic_id,
                  lambda d: model.with_topic_id(d, SEQUENTIAL_ID)):
        try:
            parse(data)
        except ValueError:
            pass


# --------------------------------------------------------------------- assign_partitions

def test_assign_partitions_round_robin_from_start():
    assert model.assign_partitions(5, [3, 1, 2], start=1) == {0: [2], 1: [3], 2: [1], 3: [2], 4: [3]}
    assert model.assign_partitions(2, [7], start=0) == {0: [7], 1: [7]}


def test_assign_partitions_spreads_evenly_and_random_start_varies():
    brokers = [0, 1, 2, 3]
    for _ in range(20):
        a = model.assign_partitions(10, brokers)
        counts = Counter(r[0] for r in a.values())
        assert set(counts) == set(brokers)
        assert max(counts.values()) - min(counts.values()) <= 1
        assert all(len(r) == 1 for r in a.values())
    leaders_of_0 = {model.assign_partitions(1, brokers)[0][0] for _ in range(200)}
    assert len(leaders_of_0) > 1


@pytest.mark.parametrize("n, brokers", [(0, [1]), (-1, [1]), (True, [1]), (1, []), (1, [-1]), (1, ["a"])])
def test_assign_partitions_refuses_bad_input(n, brokers):
    with pytest.raises(ValueError):
        model.assign_partitions(n, brokers)


# ---------------------------------------------------------------------- offsets, owners

def test_offset_round_trip_and_garbage():
    assert model.encode_offset(0) == b"0"
    assert model.parse_offset(model.encode_offset(2**63 - 1)) == 2**63 - 1
    assert model.parse_offset(b" 42\n") == 42  # tolerate what a person wrote with zkCli
    for bad in (None, b"", b"-1", b"1.5", b"0x10", b"9" * 20, b"\xff", b"1" * 40):
        with pytest.raises(ValueError):
            model.parse_offset(bad)
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(ValueError):
            model.encode_offset(bad)


def test_owner_round_trip_and_garbage():
    assert model.parse_owner(model.encode_owner("host-1-abc")) == "host-1-abc"
    for bad in (None, b"", b"a/b", b"\xff", b"x" * 2000):
        with pytest.raises(ValueError):
            model.parse_owner(bad)
