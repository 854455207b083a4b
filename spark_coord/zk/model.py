"""Kafka's JSON (and decimal) znode contents: what we write and what we accept.

We write exactly what ZooKeeper-mode Kafka 2.x writes, so Kafka tooling reads our
znodes, and we read every shape Kafka has used (broker registration versions 1-5,
topic znode versions 1-3; version 3, Kafka 2.8's, carries the topic id).  Everything read from ZooKeeper is treated as
hostile: anything that is not the expected shape raises ``ValueError`` saying
what is wrong, never ``KeyError``/``TypeError``.
"""

from __future__ import annotations

import base64
import json
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from spark_coord.zk import paths

#: Largest znode content we parse; ZooKeeper's own default limit (jute.maxbuffer) is ~1 MB.
MAX_ZNODE_BYTES = 1024 * 1024

BROKER_REGISTRATION_VERSION = 4
#: The topic znode as Kafka before 2.8 wrote it (partitions only).
TOPIC_ASSIGNMENT_VERSION = 1
#: The topic znode as Kafka 2.8+ writes it: ``topic_id``, ``adding_replicas`` and ``removing_replicas``.
TOPIC_ZNODE_VERSION = 3

#: A topic id is a 16-byte UUID (KIP-516); the zero UUID means "no id" on the wire.
TOPIC_ID_SIZE = 16
ZERO_TOPIC_ID = bytes(TOPIC_ID_SIZE)
#: Kafka's reserved ids (``Uuid.RESERVED``): never handed out to a topic.
_RESERVED_TOPIC_IDS = frozenset({ZERO_TOPIC_ID, bytes(15) + b"\x01"})
# Kafka's Uuid.toString: base64url without padding (22 characters); Uuid.fromString also takes "==".
_TOPIC_ID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}(==)?$")

# PLAINTEXT://host:port, INTERNAL://[::1]:9092, PLAINTEXT://:9092 (all interfaces)
_ENDPOINT = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[^:/\[\]]*):([0-9]{1,5})$")


def _loads(what: str, data: bytes | str | None) -> Any:
    if data is None:
        raise ValueError(f"{what}: znode has no data")
    if len(data) > MAX_ZNODE_BYTES:
        raise ValueError(f"{what}: {len(data)} bytes is more than {MAX_ZNODE_BYTES}")
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        return json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{what}: not JSON ({e.__class__.__name__}: {str(e)[:80]})") from None


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_port(what: str, port: Any) -> int:
    if not _is_int(port) or not 0 < port < 65536:
        raise ValueError(f"{what}: port {port!r} is not in 1..65535")
    return port


# ---------------------------------------------------------------- broker registration

@dataclass(frozen=True)
class Endpoint:
    """One advertised listener of a broker: ``LISTENER://host:port`` and its security protocol."""

    listener: str
    protocol: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as read from ``/brokers/ids/<id>``: where clients reach it.

    ``host``/``port`` are its default address: the PLAINTEXT endpoint when it has one,
    else the first endpoint (ours register the inter-broker listener first).
    ``endpoints`` are all its listeners; ``endpoint_for(name)`` finds one by name, as
    Metadata answers a client with the endpoint of the listener it connected to.
    """

    id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[Endpoint, ...] = field(default=(), compare=False)

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 hosts in brackets), as a client connects to it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def endpoint_for(self, listener: str) -> Endpoint | None:
        """The endpoint of listener ``listener`` (None when the broker has no such listener)."""
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        if not self.endpoints and listener == "PLAINTEXT":  # a version 1 registration
            return Endpoint("PLAINTEXT", "PLAINTEXT", self.host, self.port)
        return None


def endpoint(host: str, port: int, listener: str = "PLAINTEXT") -> str:
    """Kafka's endpoint string ``PLAINTEXT://host:port`` (IPv6 in brackets)."""
    h = f"[{host}]" if ":" in host else host
    return f"{listener}://{h}:{port}"


def parse_endpoint(text: str) -> tuple[str, str, int]:
    """``(listener, host, port)`` of ``LISTENER://host:port``; ValueError on anything else."""
    if not isinstance(text, str):
        raise ValueError(f"endpoint {text!r} is not a string")
    m = _ENDPOINT.match(text)
    if not m:
        raise ValueError(f"endpoint {text!r} is not LISTENER://host:port")
    host = m.group(2)
    if host.startswith("["):
        host = host[1:-1]
    return m.group(1), host, _check_port(f"endpoint {text!r}", int(m.group(3)))


def _check_host(broker_id: int, host: Any) -> None:
    if not isinstance(host, str) or not host or any(c in host for c in "/[] \t\r\n"):
        raise ValueError(f"broker {broker_id}: illegal host {host!r}")


def broker_registration(broker_id: int, host: str, port: int, *, rack: str | None = None,
                        timestamp_ms: int | None = None,
                        endpoints: Iterable[tuple[str, str, str, int]] | None = None) -> bytes:
    """The JSON a broker writes to ``/brokers/ids/<id>``, as ZooKeeper-mode Kafka 2.x writes it (version 4).

    ``endpoints``: ``(listener, protocol, host, port)`` of every listener, in order (the
    inter-broker listener first); None means one PLAINTEXT listener at ``host:port``.
    The top-level ``host``/``port`` are the PLAINTEXT endpoint's, or null/-1 when there
    is none, as Kafka writes them (older clients only speak PLAINTEXT).  ``broker_id``
    is not part of the JSON (it is the znode's name) but is checked here so a bad id
    fails before anything is registered.
    """
    paths.validate_broker_id(broker_id)
    eps = list(endpoints) if endpoints is not None else [("PLAINTEXT", "PLAINTEXT", host, port)]
    if not eps:
        raise ValueError(f"broker {broker_id}: no endpoints")
    for listener, protocol, h, p in eps:
        _check_host(broker_id, h)
        _check_port(f"broker {broker_id}", p)
        if not re.fullmatch(r"[A-Za-z0-9_]+", listener) or not re.fullmatch(r"[A-Z_]+", protocol):
            raise ValueError(f"broker {broker_id}: illegal listener {listener!r} / protocol {protocol!r}")
    plain = next(((h, p) for _, protocol, h, p in eps if protocol == "PLAINTEXT"), (None, -1))
    ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
    doc: dict[str, Any] = {
        "listener_security_protocol_map": {listener: protocol for listener, protocol, _, _ in eps},
        "endpoints": [endpoint(h, p, listener) for listener, _, h, p in eps],
        "jmx_port": -1,
        "host": plain[0],
        "timestamp": str(ts),
        "port": plain[1],
        "version": BROKER_REGISTRATION_VERSION,
    }
    if rack is not None:
        doc["rack"] = str(rack)
    return _dumps(doc)


def parse_broker(broker_id: int, data: bytes | str | None) -> BrokerInfo:
    """Where broker ``broker_id`` is reachable, from its ``/brokers/ids/<id>`` JSON.

    Accepts registration versions 1-5: version 1 has only ``host``/``port``; 2+ add
    ``endpoints`` (and then ``host`` may be null when no listener is PLAINTEXT); 4+
    add ``listener_security_protocol_map``.  The default address is the first
    endpoint whose security protocol is PLAINTEXT, else the first endpoint, else
    ``host``/``port``.
    """
    what = f"broker {broker_id} registration"
    paths.validate_broker_id(broker_id)
    doc = _loads(what, data)
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("version")
    if not _is_int(version) or not 1 <= version <= 5:
        raise ValueError(f"{what}: unsupported version {version!r} (1-5 are known)")
    rack = doc.get("rack")
    rack = rack if isinstance(rack, str) else None

    found: list[Endpoint] = []
    endpoints = doc.get("endpoints") if version >= 2 else None
    if endpoints is not None:
        if not isinstance(endpoints, list):
            raise ValueError(f"{what}: 'endpoints' is not a list")
        protocols = doc.get("listener_security_protocol_map") or {}
        if not isinstance(protocols, dict):
            raise ValueError(f"{what}: 'listener_security_protocol_map' is not an object")
        for ep in endpoints:
            try:
                listener, host, port = parse_endpoint(ep)
            except ValueError as e:
                raise ValueError(f"{what}: {e}") from None
            protocol = protocols.get(listener, listener)
            if host and isinstance(protocol, str):
                found.append(Endpoint(listener, protocol, host, port))
    chosen = next((e for e in found if e.protocol == "PLAINTEXT"), found[0] if found else None)
    if chosen is not None:
        return BrokerInfo(broker_id, chosen.host, chosen.port, rack, tuple(found))

    host, port = doc.get("host"), doc.get("port")
    if isinstance(host, str) and host and _is_int(port) and 0 < port < 65536:
        return BrokerInfo(broker_id, host, port, rack)
    raise ValueError(f"{what}: no usable endpoint and no usable host/port (host={host!r}, port={port!r})")


# ---------------------------------------------------------------------- topic ids

def new_topic_id() -> bytes:
    """A fresh topic id: 16 random bytes of a version-4 UUID, as Kafka's ``Uuid.randomUuid``
    hands out -- never a reserved id (the zero UUID, ``0...01``) nor one whose text starts with ``-``."""
    while True:
        raw = uuid.uuid4().bytes
        if raw not in _RESERVED_TOPIC_IDS and not format_topic_id(raw).startswith("-"):
            return raw


def format_topic_id(topic_id: bytes) -> str:
    """A topic id as Kafka prints and stores it (``Uuid.toString``): base64url, no padding, 22 characters."""
    if not isinstance(topic_id, (bytes, bytearray)) or len(topic_id) != TOPIC_ID_SIZE:
        raise ValueError(f"a topic id is {TOPIC_ID_SIZE} bytes, got {topic_id!r}")
    return base64.urlsafe_b64encode(bytes(topic_id)).rstrip(b"=").decode("ascii")


def parse_topic_id(text: Any, where: str = "topic id") -> bytes:
    """The 16 bytes of a topic id in Kafka's text form (what ``Uuid.fromString`` accepts: 22
    base64url characters, optionally padded); ValueError on anything else, and on the zero UUID,
    which names no topic."""
    if not isinstance(text, str) or not _TOPIC_ID_TEXT.match(text):
        raise ValueError(f"{where}: {str(text)[:40]!r} is not a base64url UUID (22 characters)")
    raw = base64.urlsafe_b64decode(text[:22] + "==")
    if raw == ZERO_TOPIC_ID:
        raise ValueError(f"{where}: the zero UUID is not a topic id")
    return raw


# ------------------------------------------------------------------ topic assignment

def _check_assignment(what: str, assignment: dict[int, list[int]]) -> dict[int, list[int]]:
    if not assignment:
        raise ValueError(f"{what}: no partitions")
    out: dict[int, list[int]] = {}
    for p in sorted(assignment):
        replicas = assignment[p]
        if not isinstance(replicas, list) or not replicas:
            raise ValueError(f"{what}: partition {p} has no replica list ({replicas!r})")
        for b in replicas:
            if not _is_int(b) or b < 0:
                raise ValueError(f"{what}: partition {p} has an illegal broker id {b!r}")
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"{what}: partition {p} lists a broker twice ({replicas!r})")
        out[p] = list(replicas)
    if list(out) != list(range(len(out))):
        raise ValueError(f"{what}: partitions must be 0..{len(out) - 1} with no gaps, got {sorted(out)!r}")
    return out


@dataclass(frozen=True)
class TopicZNode:
    """What ``/brokers/topics/<topic>`` says: the partition -> replicas map (first replica is
    the leader) and the topic id (None in a znode written before Kafka 2.8 / topic ids)."""

    partitions: dict[int, list[int]]
    topic_id: bytes | None = None


def topic_assignment(assignment: dict[int, list[int]], topic_id: bytes | None = None) -> bytes:
    """The content of ``/brokers/topics/<topic>``.

    With ``topic_id``, Kafka 2.8+'s version 3::

        {"version":3,"topic_id":"<base64url>","partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{}}

    Without, the pre-2.8 version 1 ``{"version":1,"partitions":{"0":[1],"1":[2]}}`` (a topic
    without an id, which a broker gives one when it first sees it).  ``assignment`` maps
    partition -> replica broker ids, the first being the leader.
    """
    if not isinstance(assignment, dict):
        raise ValueError(f"topic assignment must be a dict, got {type(assignment).__name__}")
    for p in assignment:
        paths.validate_partition(p)
    checked = _check_assignment("topic assignment", assignment)
    partitions = {str(p): r for p, r in checked.items()}
    if topic_id is None:
        return _dumps({"version": TOPIC_ASSIGNMENT_VERSION, "partitions": partitions})
    if bytes(topic_id) in _RESERVED_TOPIC_IDS:
        raise ValueError("a reserved UUID (zero or one) cannot be a topic id")
    return _dumps({"version": TOPIC_ZNODE_VERSION, "topic_id": format_topic_id(topic_id), "partitions": partitions,
                   "adding_replicas": {}, "removing_replicas": {}})


def _topic_doc(data: bytes | str | None, topic: str) -> tuple[str, dict]:
    what = f"topic {topic!r} assignment"
    doc = _loads(what, data)
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("version")
    if not _is_int(version) or not 1 <= version <= TOPIC_ZNODE_VERSION:
        raise ValueError(f"{what}: unsupported version {version!r} (1-{TOPIC_ZNODE_VERSION} are known)")
    return what, doc


def parse_topic(data: bytes | str | None, topic: str = "?") -> TopicZNode:
    """Partitions and topic id from ``/brokers/topics/<topic>`` (versions 1-3; a ``topic_id``
    is read at any version, as Kafka does; other fields, e.g. ``adding_replicas``, are ignored).
    A ``topic_id`` that is present but not a topic id (not base64url of 16 bytes, the zero
    UUID, not a string) is a ValueError like any other malformed content."""
    what, doc = _topic_doc(data, topic)
    parts = doc.get("partitions")
    if not isinstance(parts, dict):
        raise ValueError(f"{what}: 'partitions' is not an object")
    assignment: dict[int, list[int]] = {}
    for key, replicas in parts.items():
        try:
            p = paths.parse_partition_node(key)
        except ValueError:
            raise ValueError(f"{what}: partition key {key!r} is not a non-negative decimal") from None
        assignment[p] = replicas
    topic_id = None
    if "topic_id" in doc:
        topic_id = parse_topic_id(doc["topic_id"], f"{what}: 'topic_id'")
    return TopicZNode(_check_assignment(what, assignment), topic_id)


def parse_topic_assignment(data: bytes | str | None, topic: str = "?") -> dict[int, list[int]]:
    """Partition -> replica broker ids from ``/brokers/topics/<topic>`` (``parse_topic``'s partitions)."""
    return parse_topic(data, topic).partitions


def with_topic_id(data: bytes | str | None, topic_id: bytes, topic: str = "?") -> bytes:
    """``data`` (a topic znode without an id) given ``topic_id``: raised to version 3 with
    ``topic_id`` added and every other field kept (a reassignment's ``adding_replicas`` too),
    as Kafka's controller upgrades a pre-2.8 topic.  ValueError when ``data`` is malformed."""
    parse_topic(data, topic)
    _, doc = _topic_doc(data, topic)
    if bytes(topic_id) in _RESERVED_TOPIC_IDS:
        raise ValueError("a reserved UUID (zero or one) cannot be a topic id")
    out: dict[str, Any] = {"version": TOPIC_ZNODE_VERSION, "topic_id": format_topic_id(topic_id)}
    out.update((k, v) for k, v in doc.items() if k not in out)
    out.setdefault("adding_replicas", {})
    out.setdefault("removing_replicas", {})
    return _dumps(out)


def assign_partitions(n_partitions: int, broker_ids: Iterable[int], start: int | None = None) -> dict[int, list[int]]:
    """Spread ``n_partitions`` leaders round-robin over the live brokers, one replica each.

    Brokers are taken in id order; partition ``p`` goes to the broker at index
    ``(start + p) % len(brokers)``.  ``start`` is random when None (as Kafka's
    ``AdminUtils.assignReplicasToBrokers`` does), so topics created one after another
    do not all put partition 0 on the same broker.
    """
    if not _is_int(n_partitions) or n_partitions < 1:
        raise ValueError(f"partition count must be an integer >= 1, got {n_partitions!r}")
    brokers = sorted({paths.validate_broker_id(b) for b in broker_ids})
    if not brokers:
        raise ValueError("no live brokers to assign partitions to")
    if start is None:
        start = random.randrange(len(brokers))
    elif not _is_int(start):
        raise ValueError(f"start must be an integer, got {start!r}")
    return {p: [brokers[(start + p) % len(brokers)]] for p in range(n_partitions)}


# ---------------------------------------------------------------- consumer offsets

def encode_offset(offset: int) -> bytes:
    """The content of ``/consumers/<g>/offsets/<t>/<p>``: the next offset as a decimal string (Kafka 0.8)."""
    if not _is_int(offset) or offset < 0:
        raise ValueError(f"illegal offset {offset!r}: must be an integer >= 0")
    return str(offset).encode("ascii")


def parse_offset(data: bytes | str | None, where: str = "offset") -> int:
    """The committed offset in an offsets znode; ValueError on anything but a non-negative decimal."""
    if data is None:
        raise ValueError(f"{where}: znode has no data")
    if len(data) > 32:
        raise ValueError(f"{where}: {len(data)} bytes is too long for an offset")
    try:
        text = data.decode("ascii") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not ASCII") from None
    text = text.strip()
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) > 2**63 - 1:
        raise ValueError(f"{where}: {text!r} is not a non-negative 64-bit decimal")
    return int(text)


def encode_owner(consumer_id: str) -> bytes:
    """The content of ``/consumers/<g>/owners/<t>/<p>``: the owning consumer id, UTF-8."""
    return paths.validate_consumer_id(consumer_id).encode("utf-8")


def parse_owner(data: bytes | str | None, where: str = "owner") -> str:
    """The consumer id in an owners znode; ValueError on empty or undecodable data."""
    if not data:
        raise ValueError(f"{where}: znode has no data")
    if len(data) > 4 * paths.NAME_MAX_LENGTH:
        raise ValueError(f"{where}: {len(data)} bytes is too long for a consumer id")
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8") from None
    return paths.validate_consumer_id(text)
