"""Strict wire: a body key that is a field of no version of its message (or struct) raises
UnknownKeyError naming the message, the version and the key; a field of another version, or a
tagged field, is a normal part of the superset dict a handler builds for every version."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest

from spark_coord.wire import consumer_protocol as cp
from spark_coord.wire import protocol, schema
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.schema import Field, Message, UnknownKeyError
from spark_coord.wire.types import EncodeError, Reader, Writer

# v0-1 classic, v2+ flexible: a field added in v1, a field dropped after v0, an array of structs
# holding a nullable struct, a tagged int and a tagged struct.
TOY = Message("ToyResponse", valid="0-2", flexible="2+", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("ThrottleTimeMs", "int32", "1+"),
    Field("OldName", "string", "0"),
    Field("Topics", "[]ToyTopic", "0+", fields=[
        Field("Name", "string", "0+"),
        Field("Partitions", "[]int32", "0+"),
        Field("Leader", "ToyLeader", "1+", nullable="1+", default=None, fields=[
            Field("LeaderId", "int32", "1+"),
            Field("LeaderEpoch", "int32", "2+", default=-1),
        ]),
    ]),
    Field("Hint", "int32", "2+", tag=0, tagged="2+", default=-1),
    Field("Endpoint", "ToyEndpoint", "2+", tag=1, tagged="2+", fields=[
        Field("Host", "string", "2+"),
        Field("Port", "int32", "2+"),
    ]),
])

SUPERSET = {"error_code": 3, "throttle_time_ms": 7, "old_name": "x", "hint": 5,
            "endpoint": {"host": "h", "port": 9},
            "topics": [{"name": "t", "partitions": [0, 1], "leader": {"leader_id": 1, "leader_epoch": 2}},
                       {"name": "u", "partitions": [], "leader": None}]}


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setattr(schema, "STRICT", True)


@pytest.fixture
def lenient(monkeypatch):
    monkeypatch.setattr(schema, "STRICT", False)


def _encode(body: dict, version: int) -> bytes:
    w = Writer()
    TOY.encode(w, body, version)
    return w.getvalue()


def _with(body: dict, path: tuple, key: str, value=1) -> dict:
    """A deep copy of ``body`` with ``key`` added to the dict at ``path`` (keys and list indexes)."""
    out = copy.deepcopy(body)
    node = out
    for step in path:
        node = node[step]
    node[key] = value
    return out


_TYPO_IN_A_CHILD = """
from spark_coord.wire import protocol
from spark_coord.wire.protocol import RequestHeader
try:
    protocol.encode_response(RequestHeader(12, 4, 1, None), {"error_cod": 27})
    print("ignored")
except ValueError as e:
    print(type(e).__name__)
"""


def test_the_suite_and_the_processes_it_starts_are_strict():
    """tests/conftest.py sets the environment, so brokers and coordinators started by tests are strict too."""
    assert schema.STRICT is True and os.environ[schema.STRICT_ENV] == "1"
    child = subprocess.run([sys.executable, "-c", _TYPO_IN_A_CHILD], capture_output=True, text=True, timeout=60,
                           check=True)
    assert child.stdout.strip() == "UnknownKeyError"
    lenient = subprocess.run([sys.executable, "-c", _TYPO_IN_A_CHILD], capture_output=True, text=True, timeout=60,
                             check=True, env={**os.environ, schema.STRICT_ENV: "0"})
    assert lenient.stdout.strip() == "ignored"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_superset_of_every_version_encodes_at_each_version(strict, version):
    decoded = TOY.decode(Reader(_encode(SUPERSET, version)), version)
    assert decoded["error_code"] == 3
    assert decoded["old_name"] == ("x" if version == 0 else "")
    assert decoded["throttle_time_ms"] == (0 if version == 0 else 7)
    assert decoded["hint"] == (5 if version == 2 else -1)
    # what is decoded (every field of every version) encodes again
    assert _encode(decoded, version) == _encode(SUPERSET, version)


def test_a_typo_at_the_top_raises_naming_message_version_and_key(strict):
    with pytest.raises(UnknownKeyError) as e:
        _encode(_with(SUPERSET, (), "error_cod"), 1)
    assert (e.value.message, e.value.version, e.value.key, e.value.path) == ("ToyResponse", 1, "error_cod", "")
    assert str(e.value) == "ToyResponse v1: unknown key 'error_cod' (a field of no version)"
    assert isinstance(e.value, EncodeError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_typo_in_an_array_element_names_its_path(strict, version):
    with pytest.raises(UnknownKeyError, match=r"ToyResponse v\d: unknown key 'nmae' in topics\[1\]") as e:
        _encode(_with(SUPERSET, ("topics", 1), "nmae"), version)
    assert (e.value.version, e.value.key, e.value.path) == (version, "nmae", "topics[1]")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_typo_in_a_nested_struct_raises_even_where_the_struct_is_not_in_the_version(strict, version):
    """``leader`` is not in v0 (nor ``endpoint`` before v2), but a key of no version inside is still a typo."""
    with pytest.raises(UnknownKeyError) as e:
        _encode(_with(SUPERSET, ("topics", 0, "leader"), "leader_idd"), version)
    assert (e.value.message, e.value.version, e.value.key, e.value.path) == (
        "ToyResponse", version, "leader_idd", "topics[0].leader")
    with pytest.raises(UnknownKeyError, match=r"unknown key 'prot' in endpoint"):
        _encode(_with(SUPERSET, ("endpoint",), "prot"), version)


def test_a_key_of_another_struct_is_unknown_here(strict):
    """``error_code`` is a field of the message, not of its topics."""
    with pytest.raises(UnknownKeyError, match=r"unknown key 'error_code' in topics\[0\]"):
        _encode(_with(SUPERSET, ("topics", 0), "error_code", 0), 2)


def test_tagged_fields_are_known_in_every_version(strict):
    body = {"error_code": 1, "hint": 4, "endpoint": {"host": "h", "port": 1}}
    assert _encode(body, 0) == _encode({"error_code": 1}, 0)  # not in v0-1: ignored
    assert _encode(body, 2) != _encode({"error_code": 1}, 2)
    with pytest.raises(UnknownKeyError, match=r"ToyResponse v2: unknown key 'prot' in endpoint"):
        _encode({"error_code": 1, "endpoint": {"host": "h", "prot": 1}}, 2)


def test_lenient_mode_ignores_the_unknown_key(lenient):
    for version in (0, 1, 2):
        typo = _with(_with(SUPERSET, (), "error_cod", 9), ("topics", 0, "leader"), "leader_idd", 9)
        assert _encode(typo, version) == _encode(SUPERSET, version)


def test_served_apis_are_strict_in_responses_and_requests(strict):
    with pytest.raises(UnknownKeyError, match=r"^HeartbeatResponse v4: unknown key 'error_cod'"):
        protocol.encode_response(RequestHeader(12, 4, 1, None), {"error_cod": 27})
    # throttle_time_ms is v1+, group_instance_id v3+: normal in a superset dict at v0
    protocol.encode_response(RequestHeader(12, 0, 1, None), {"throttle_time_ms": 0, "error_code": 27})
    protocol.encode_request(12, 0, 1, None, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                             "group_instance_id": "i"})
    with pytest.raises(UnknownKeyError, match=r"^HeartbeatRequest v3: unknown key 'memberid'"):
        protocol.encode_request(12, 3, 1, None, {"group_id": "g", "memberid": "m"})


def test_fetch_response_nested_and_tagged(strict):
    partition = {"partition_index": 0, "error_code": 0, "high_watermark": 5, "records": b"",
                 "current_leader": {"leader_id": 1, "leader_epoch": 2}, "aborted_transactions": None}
    body = {"responses": [{"topic": "t", "topic_id": bytes(16), "partitions": [partition]}],
            "node_endpoints": [{"node_id": 1, "host": "h", "port": 9, "rack": None}]}
    for version in (4, 12, 13, 16):  # topic then topic_id; tagged current_leader from 12, node_endpoints from 16
        protocol.encode_response(RequestHeader(1, version, 1, None), body)
    partition["current_leader"]["leader_epcoh"] = 2
    for version in (4, 12):  # current_leader is not in v4, but the typo inside it is found
        with pytest.raises(UnknownKeyError) as e:
            protocol.encode_response(RequestHeader(1, version, 1, None), body)
        assert (e.value.message, e.value.version, e.value.key, e.value.path) == (
            "FetchResponse", version, "leader_epcoh", "responses[0].partitions[0].current_leader")


def test_a_decoded_consumer_protocol_body_encodes_again(strict):
    """A decoded subscription carries its ``version`` (the int16 before the struct), which is no field."""
    body = {"topics": ["t"], "owned_partitions": [{"topic": "t", "partitions": [1]}], "generation_id": 3,
            "rack_id": "r", "user_data": b"u"}
    data = cp.encode_subscription(body, 3)
    decoded = cp.decode_subscription(data)
    assert decoded["version"] == 3
    assert cp.encode_subscription(decoded, 3) == data
    with pytest.raises(UnknownKeyError, match="ConsumerProtocolSubscription v0: unknown key 'topic'"):
        cp.encode_subscription({"topic": ["t"]}, 0)
    with pytest.raises(UnknownKeyError, match=r"ConsumerProtocolAssignment v0: .* in assigned_partitions\[0\]"):
        cp.encode_assignment({"assigned_partitions": [{"topic": "t", "partition": [0]}]})


def _handlers():
    from spark_coord.broker.handlers import data_handlers
    from spark_coord.coordinator.handlers import group_apis

    return [(h.name, h.api_key, h.error_response) for h in data_handlers()] + \
           [(a.name, a.api_key, a.error_response) for a in group_apis()]


@pytest.mark.parametrize("name,api_key,error_response", _handlers(), ids=[h[0] for h in _handlers()])
def test_every_whole_request_error_answer_is_strict_at_every_served_version(strict, name, api_key, error_response):
    """The answer a handler's failure gets (``error_response``) is built by code no other test runs at every
    version: each encodes, for a request decoded from the wire (every key of every version)."""
    from wire_samples import sample_body

    from spark_coord.errors import ErrorCode

    low, high = protocol.served_versions(api_key)
    for version in range(low, high + 1):
        for seed, with_nulls in ((1, True), (2, False)):
            frame = protocol.encode_request(api_key, version, 1, "c", sample_body(api_key, version, "request", seed,
                                                                                   with_nulls))
            _, request = protocol.decode_request(memoryview(frame)[4:])
            answer = error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR)
            if answer is not None:  # None: no answer (Produce with acks=0)
                protocol.encode_response(RequestHeader(api_key, version, 1, None), answer)
