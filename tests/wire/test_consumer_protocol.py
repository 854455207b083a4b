"""The consumer protocol's embedded bytes (JoinGroup metadata, SyncGroup assignment):
round trips of every version, Kafka's byte layout, and hostile input."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_coord.wire import consumer_protocol as cp
from spark_coord.wire.consumer_protocol import ConsumerProtocolError
from spark_coord.wire.types import EncodeError, ProtocolError

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SUBSCRIPTION = {"topics": ["clicks", "views-é"], "user_data": b"\x00\x01ud",
                "owned_partitions": [{"topic": "clicks", "partitions": [0, 2]}, {"topic": "views-é", "partitions": []}],
                "generation_id": 7, "rack_id": "rack-a"}
ASSIGNMENT = {"assigned_partitions": [{"topic": "clicks", "partitions": [1, 3, 5]}], "user_data": b"sticky"}


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


@pytest.mark.parametrize("version", range(0, 4))
def test_subscription_round_trip(version):
    data = cp.encode_subscription(SUBSCRIPTION, version)
    decoded = cp.decode_subscription(data)
    assert decoded["version"] == version
    assert decoded["topics"] == SUBSCRIPTION["topics"] and decoded["user_data"] == b"\x00\x01ud"
    assert decoded["owned_partitions"] == (SUBSCRIPTION["owned_partitions"] if version >= 1 else [])
    assert decoded["generation_id"] == (7 if version >= 2 else -1)
    assert decoded["rack_id"] == ("rack-a" if version >= 3 else None)
    assert cp.encode_subscription(decoded, version) == data


@pytest.mark.parametrize("version", range(0, 4))
def test_assignment_round_trip(version):
    data = cp.encode_assignment(ASSIGNMENT, version)
    decoded = cp.decode_assignment(data)
    assert decoded == {**ASSIGNMENT, "version": version}
    assert cp.partitions_by_topic(decoded["assigned_partitions"]) == {"clicks": [1, 3, 5]}


def test_null_user_data_and_rack_round_trip():
    data = cp.encode_subscription({"topics": ["t"]}, 3)
    assert cp.decode_subscription(data) == {"version": 3, "topics": ["t"], "user_data": None, "owned_partitions": [],
                                            "generation_id": -1, "rack_id": None}
    assert cp.decode_assignment(cp.encode_assignment({}))["user_data"] is None


def test_kafka_byte_layout():
    # Subscription v0 as Kafka's ConsumerProtocol writes it: version, topics, user data (null)
    v0 = struct.pack(">hi", 0, 2) + _string("a") + _string("bc") + struct.pack(">i", -1)
    assert cp.encode_subscription({"topics": ["a", "bc"]}, 0) == v0
    # v3 appends owned partitions, generation id and the rack
    v3 = (struct.pack(">hi", 3, 1) + _string("a") + struct.pack(">i", 2) + b"ud"
          + struct.pack(">i", 1) + _string("a") + struct.pack(">iii", 2, 0, 4)
          + struct.pack(">i", 9) + _string("r1"))
    body = {"topics": ["a"], "user_data": b"ud", "owned_partitions": [{"topic": "a", "partitions": [0, 4]}],
            "generation_id": 9, "rack_id": "r1"}
    assert cp.encode_subscription(body, 3) == v3
    # Assignment v0: version, [topic, [partitions]], user data
    a0 = struct.pack(">hi", 0, 1) + _string("t") + struct.pack(">iii", 2, 0, 1) + struct.pack(">i", -1)
    assert cp.encode_assignment({"assigned_partitions": cp.topic_partitions({"t": [1, 0]})}) == a0
    assert cp.decode_assignment(a0)["assigned_partitions"] == [{"topic": "t", "partitions": [0, 1]}]


def test_newer_versions_are_read_with_the_latest_layout():
    """Kafka's rule for this format: newer versions only append fields."""
    data = bytearray(cp.encode_subscription(SUBSCRIPTION, 3))
    data[0:2] = struct.pack(">h", 5)
    decoded = cp.decode_subscription(bytes(data) + b"\x01\x02future fields")
    assert decoded["version"] == 5 and decoded["rack_id"] == "rack-a" and decoded["generation_id"] == 7
    a = bytearray(cp.encode_assignment(ASSIGNMENT, 3))
    a[0:2] = struct.pack(">h", 4)
    assert cp.decode_assignment(bytes(a) + b"\xff")["assigned_partitions"] == ASSIGNMENT["assigned_partitions"]


def test_empty_assignment_means_no_partitions_but_empty_subscription_is_an_error():
    assert cp.decode_assignment(b"") == {"version": 0, "assigned_partitions": [], "user_data": None}
    with pytest.raises(ConsumerProtocolError, match="ConsumerProtocolSubscription: 0 byte"):
        cp.decode_subscription(b"")


@pytest.mark.parametrize("data,message", [
    (None, "null"),
    (b"\x00", "too short for the int16 version"),
    (struct.pack(">h", -1), "invalid version -1"),
    (struct.pack(">hi", 0, -2), "v0 .*invalid array length -2"),
    (struct.pack(">hi", 1, 1) + struct.pack(">h", 40) + b"abc", r"v1 .*string length 40 exceeds the 3 bytes"),
    (struct.pack(">hi", 0, 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", -1), "UTF-8"),
    (struct.pack(">hii", 0, 0, 5) + b"ab", "bytes length 5 exceeds"),
], ids=["null", "short", "negative-version", "negative-count", "long-string", "utf8", "long-bytes"])
def test_malformed_subscriptions_name_the_problem(data, message):
    with pytest.raises(ConsumerProtocolError, match=message):
        cp.decode_subscription(data)


@pytest.mark.parametrize("count", [0x7FFFFFFF, 1_000_000, 50])
def test_oversized_counts_are_refused_before_allocation(count):
    start = time.monotonic()
    # subscription: topics array count; assignment: partitions of one topic
    with pytest.raises(ConsumerProtocolError, match="array of"):
        cp.decode_subscription(struct.pack(">hi", 0, count) + b"\x00" * 64)
    with pytest.raises(ConsumerProtocolError, match="array of"):
        cp.decode_assignment(struct.pack(">hi", 0, 1) + _string("t") + struct.pack(">i", count) + b"\x00" * 64)
    assert time.monotonic() - start < 0.5


@pytest.mark.parametrize("version", range(0, 4))
def test_every_truncation_is_refused(version):
    sub = cp.encode_subscription(SUBSCRIPTION, version)
    for cut in range(len(sub)):
        with pytest.raises(ConsumerProtocolError):
            cp.decode_subscription(sub[:cut])
    assignment = cp.encode_assignment(ASSIGNMENT, version)
    for cut in range(1, len(assignment)):
        with pytest.raises(ConsumerProtocolError):
            cp.decode_assignment(assignment[:cut])


def test_errors_are_protocol_errors_and_encode_errors_name_the_field():
    assert issubclass(ConsumerProtocolError, ProtocolError)
    with pytest.raises(EncodeError, match="no version 4"):
        cp.encode_subscription({"topics": []}, 4)
    with pytest.raises(EncodeError, match=r"owned_partitions\[0\]\.partitions: "):
        cp.encode_subscription({"topics": [], "owned_partitions": [{"topic": "t", "partitions": [2**40]}]}, 1)


@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes(data):
    for decode in (cp.decode_subscription, cp.decode_assignment):
        try:
            assert isinstance(decode(data), dict)
        except ConsumerProtocolError:
            pass


@FUZZ
@given(version=st.integers(0, 3), edits=st.lists(
    st.tuples(st.sampled_from(["flip", "cut", "insert"]), st.integers(0, 10_000), st.integers(0, 255)),
    min_size=1, max_size=4))
def test_mutated_valid_bytes(version, edits):
    for data, decode in ((cp.encode_subscription(SUBSCRIPTION, version), cp.decode_subscription),
                         (cp.encode_assignment(ASSIGNMENT, version), cp.decode_assignment)):
        buf = bytearray(data)
        for op, pos, byte in edits:
            if not buf:
                break
            i = pos % len(buf)
            if op == "flip":
                buf[i] ^= 1 << (byte % 8)
            elif op == "cut":
                del buf[i:]
            else:
                buf[i:i] = bytes([byte])
        try:
            decode(bytes(buf))
        except ConsumerProtocolError:
            pass
