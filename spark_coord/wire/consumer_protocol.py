"""Kafka's consumer protocol: the bytes consumers put inside the group APIs.

A member of a group with protocol type ``"consumer"`` sends, in each JoinGroup
protocol's ``metadata``, a **subscription**; the assignment it receives in the
SyncGroup answer's ``assignment`` is an **assignment**.  Both are an int16
version followed by a non-flexible struct (Kafka's
``ConsumerProtocolSubscription.json`` and ``ConsumerProtocolAssignment.json``):

Subscription, v0-3:
- v0: topics (the member's subscription) and nullable user data.
- v1: OwnedPartitions (what the member holds now; cooperative rebalancing, KIP-429).
- v2: GenerationId of those owned partitions (KIP-792).
- v3: RackId (rack-aware assignment, KIP-881).

Assignment, v0-3: assigned partitions per topic and nullable user data; v1-3 have
the same shape (their numbers follow the subscription's).

Versions newer than we know are read with the v3 layout and the bytes after it
are ignored, as Kafka's own rule for this format says (new versions may only
append fields); bytes after a known version are ignored too, as Kafka's clients
ignore them.  An empty assignment (zero bytes) means "no partitions": Kafka's
brokers send it to members the leader left out, and librdkafka and kafkajs read
it so.

These bytes come straight from clients, so decoding treats them as hostile:
every count and length is checked against the bytes that remain before anything
is allocated, and every failure is a ``ConsumerProtocolError`` naming the format,
the version and the problem.  It is a ``ProtocolError`` subclass, but it concerns
one field of a well-formed request: answer it with an error code
(INCONSISTENT_GROUP_PROTOCOL), never by closing the connection.

Bodies are dicts keyed like the rest of ``spark_coord.wire`` (``topics``,
``user_data``, ``owned_partitions``, ``generation_id``, ``rack_id``;
``assigned_partitions``, ``user_data``), with ``version`` added on decode;
partition lists are ``[{"topic": name, "partitions": [ints]}]`` (see
``partitions_by_topic`` and ``topic_partitions``).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from spark_coord.wire.schema import Field, Message
from spark_coord.wire.types import EncodeError, ProtocolError, Reader, Writer

__all__ = ["ConsumerProtocolError", "SUBSCRIPTION", "ASSIGNMENT", "LATEST_VERSION",
           "encode_subscription", "decode_subscription", "encode_assignment", "decode_assignment",
           "partitions_by_topic", "topic_partitions"]

#: The newest version of either format that we know the layout of.
LATEST_VERSION = 3

SUBSCRIPTION = Message("ConsumerProtocolSubscription", valid="0-3", flexible="none", fields=[
    Field("Topics", "[]string", "0+"),
    Field("UserData", "bytes", "0+", nullable="0+", default=None),
    Field("OwnedPartitions", "[]TopicPartition", "1+", fields=[
        Field("Topic", "string", "1+"),
        Field("Partitions", "[]int32", "1+"),
    ]),
    Field("GenerationId", "int32", "2+", default=-1),
    Field("RackId", "string", "3+", nullable="3+", default=None),
])

ASSIGNMENT = Message("ConsumerProtocolAssignment", valid="0-3", flexible="none", fields=[
    Field("AssignedPartitions", "[]TopicPartition", "0+", fields=[
        Field("Topic", "string", "0+"),
        Field("Partitions", "[]int32", "0+"),
    ]),
    Field("UserData", "bytes", "0+", nullable="0+", default=None),
])


class ConsumerProtocolError(ProtocolError):
    """Consumer-protocol bytes (a subscription or an assignment) that cannot be read."""


def _encode(message: Message, body: dict, version: int) -> bytes:
    if not 0 <= version <= LATEST_VERSION:
        raise EncodeError(f"{message.name}: no version {version} (known: 0-{LATEST_VERSION})")
    if "version" in body:  # a decoded body's version: the int16 before the struct, not a field of it
        body = {k: v for k, v in body.items() if k != "version"}
    w = Writer()
    w.int16(version)
    message.encode(w, body, version)
    return w.getvalue()


def _decode(message: Message, data) -> dict:
    if data is None:
        raise ConsumerProtocolError(f"{message.name}: null instead of bytes")
    r = Reader(data)
    if r.remaining < 2:
        raise ConsumerProtocolError(f"{message.name}: {r.remaining} byte(s), too short for the int16 version")
    version = r.int16()
    if version < 0:
        raise ConsumerProtocolError(f"{message.name}: invalid version {version}")
    layout = min(version, LATEST_VERSION)
    try:
        body = message.decode(r, layout)
    except ProtocolError as e:
        raise ConsumerProtocolError(f"{message.name} v{version} ({r.pos + r.remaining} bytes): {e}") from e
    body["version"] = version
    return body


def encode_subscription(body: dict, version: int = LATEST_VERSION) -> bytes:
    """A JoinGroup protocol's metadata bytes.  Raises EncodeError (a ValueError) naming a bad field."""
    return _encode(SUBSCRIPTION, body, version)


def decode_subscription(data) -> dict:
    """A subscription from JoinGroup metadata bytes; ConsumerProtocolError if they cannot be read."""
    return _decode(SUBSCRIPTION, data)


def encode_assignment(body: dict, version: int = 0) -> bytes:
    """SyncGroup assignment bytes.  Every client reads v0 (the layout never changed), so it is the default."""
    return _encode(ASSIGNMENT, body, version)


def decode_assignment(data) -> dict:
    """An assignment from SyncGroup bytes (zero bytes: no partitions); ConsumerProtocolError if unreadable."""
    if data is not None and len(data) == 0:
        return {"version": 0, "assigned_partitions": [], "user_data": None}
    return _decode(ASSIGNMENT, data)


def partitions_by_topic(entries: Iterable[dict] | None) -> dict[str, list[int]]:
    """``[{"topic", "partitions"}]`` as ``{topic: sorted partitions}`` (a topic listed twice is merged)."""
    out: dict[str, set[int]] = {}
    for entry in entries or ():
        out.setdefault(entry["topic"], set()).update(entry["partitions"])
    return {topic: sorted(parts) for topic, parts in sorted(out.items())}


def topic_partitions(mapping: Mapping[str, Iterable[int]]) -> list[dict]:
    """``{topic: partitions}`` as the wire's ``[{"topic", "partitions"}]``, sorted."""
    return [{"topic": topic, "partitions": sorted(parts)} for topic, parts in sorted(mapping.items())]
