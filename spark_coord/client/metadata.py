"""Cluster metadata as a client sees it: bootstrap, brokers, partition leaders.

``ClusterClient`` keeps one ``BrokerConnection`` per broker, refreshes Metadata
when a leader moves, and is the base of the admin client, the producer, the
tail reader and (later) the thin consumer's fetchers.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire.registry import ApiKey

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.client import ClientSecurity

log = logging.getLogger(__name__)


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    """``"h1:p1,h2:p2"`` (or a list of such) into ``[(h1, p1), (h2, p2)]``; ValueError names a bad entry."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad broker address {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap brokers given")
    return out


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    error: int = 0


@dataclass
class TopicInfo:
    name: str
    error: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    #: the topic's id (KIP-516, Metadata v10+), 16 bytes; all zero when the broker gives none
    topic_id: bytes = bytes(16)


class ClusterClient:
    """Connections to a cluster's brokers, found from a bootstrap list."""

    def __init__(self, bootstrap: str | list[str], client_id: str = "spark-coord", timeout: float = 30.0,
                 security: "ClientSecurity | None" = None):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.security = security  # TLS/SASL settings of every connection (None: PLAINTEXT)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._conns: dict[tuple[str, int], BrokerConnection] = {}  # by broker address
        self._any: BrokerConnection | None = None
        self._lock = threading.RLock()
        self._next_bootstrap = 0

    # ---------------------------------------------------------------- connections
    def any_connection(self) -> BrokerConnection:
        """A connection to some live broker: a known one, else the bootstrap list round-robin.

        Connecting (TCP plus ApiVersions) happens outside the client's lock, so a broker
        that is slow to answer holds up only the thread that waits for it."""
        with self._lock:
            if self._any is not None and self._any.usable():
                return self._any
            candidates = list(self.brokers.values()) + self.bootstrap
            first = self._next_bootstrap
        errors = []
        for i in range(len(candidates)):
            host, port = candidates[(first + i) % len(candidates)]
            try:
                conn = BrokerConnection(host, port, client_id=self.client_id, timeout=self.timeout,
                                        security=self.security)
            except (OSError, BrokerConnectionError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            with self._lock:
                if self._any is not None and not self._any.closed:  # another thread was quicker
                    conn.close()
                    return self._any
                self._any = conn
                self._next_bootstrap = (first + i + 1) % len(candidates)
                return conn
        raise BrokerConnectionError("no broker reachable: " + "; ".join(errors))

    def connection(self, broker_id: int) -> BrokerConnection:
        """The connection to ``broker_id``, made (outside the client's lock) when there is none."""
        with self._lock:
            address = self.brokers.get(broker_id)
        if address is None:
            self.refresh()
            with self._lock:
                address = self.brokers.get(broker_id)
            if address is None:
                raise BrokerConnectionError(f"broker {broker_id} is not in the cluster metadata")
        return self.connection_to(*address)

    def connection_to(self, host: str, port: int) -> BrokerConnection:
        """The connection to the broker at ``host:port`` (a leader hint, or a broker of the
        metadata), made (outside the client's lock) when there is none."""
        with self._lock:
            conn = self._conns.get((host, port))
            if conn is not None and conn.usable():
                return conn
        conn = BrokerConnection(host, port, client_id=self.client_id, timeout=self.timeout, security=self.security)
        with self._lock:
            current = self._conns.get((host, port))
            if current is not None and not current.closed:  # another thread was quicker
                conn.close()
                return current
            self._conns[(host, port)] = conn
            return conn

    def drop_connection(self, broker_id: int) -> None:
        with self._lock:
            address = self.brokers.get(broker_id)
            conn = self._conns.pop(address, None) if address is not None else None
            if conn is not None:
                conn.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
            if self._any is not None:
                self._any.close()
                self._any = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request_any(self, api_key: int, body: dict, version: int | None = None) -> dict:
        """Send to any broker, retrying once on another broker if the connection breaks."""
        for attempt in range(2):
            conn = self.any_connection()
            try:
                return conn.request(api_key, body, version=version)
            except BrokerConnectionError:
                with self._lock:
                    conn.close()
                    self._any = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------- metadata
    def refresh(self, topics: list[str] | None = None) -> dict[str, TopicInfo]:
        """Fetch Metadata for ``topics`` (None = all) and update brokers and leaders."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        resp = self.request_any(ApiKey.METADATA, body)
        with self._lock:
            self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]}
            self.controller_id = resp.get("controller_id", -1)
            self.cluster_id = resp.get("cluster_id")
            seen = {}
            for t in resp["topics"]:
                info = TopicInfo(t["name"], t["error_code"], topic_id=t.get("topic_id") or bytes(16))
                for p in t["partitions"]:
                    info.partitions[p["partition_index"]] = PartitionInfo(
                        t["name"], p["partition_index"], p["leader_id"], list(p["replica_nodes"]), p["error_code"])
                seen[t["name"]] = info
            if topics is None:
                self.topics = seen
            else:
                self.topics.update(seen)
            for gone in set(self._conns) - set(self.brokers.values()):
                self._conns.pop(gone).close()
        return seen

    def topic(self, name: str, refresh: bool = False, wait: float = 0.0) -> TopicInfo:
        """Metadata of one topic; with ``wait``, retry while it is unknown or a leader is missing."""
        deadline = time.monotonic() + wait
        while True:
            if refresh or name not in self.topics:
                self.refresh([name])
            info = self.topics.get(name)
            ok = info is not None and info.error == 0 and info.partitions and all(
                p.leader >= 0 for p in info.partitions.values())
            if ok or time.monotonic() >= deadline:
                break
            refresh = True
            time.sleep(0.1)
        if info is None or info.error:
            raise KafkaError(info.error if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r}")
        return info

    def leader(self, topic: str, partition: int) -> int:
        info = self.topic(topic)
        p = info.partitions.get(partition)
        if p is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        if p.leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
        return p.leader
