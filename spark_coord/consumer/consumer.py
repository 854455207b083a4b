"""``Consumer``: the thin consumer's public API (seeds 001, 003 sections 7 and 11).

A member of a coordinator-managed group.  The coordinator decides which
partitions it reads; the consumer only fetches them and reports how far the
application got.  Example::

    with Consumer("127.0.0.1:9092", "my-group", topics=["events"]) as consumer:
        for batch in consumer.batches(timeout=5.0):      # pyarrow.RecordBatch
            handle(batch.to_pylist())

Offsets reported to the coordinator (in Ping and StopFetcher answers) are the
next offset after what the application has *taken* from ``batches()`` or
``messages()`` -- never what the fetchers read ahead -- so delivery is
at-least-once.  With ``auto_commit=False`` only what ``commit()`` stored is
reported.  ``commit()`` also sends the offsets to the coordinator at once
(CommitOffsets) and returns when they are in ZooKeeper; ``close()`` commits the
final offsets the same way before it leaves the group.  When the assignment
changes, buffered data of the old assignment is dropped.

When the coordinator goes away the consumer keeps fetching while it finds the
next one, for up to its session timeout; a coordinator that takes it back into
its generation (its claim matches) lets it go on without a stop.  The member's door into
the coordinator: DESIGN.md "One registry, several doors".
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from spark_coord.client.fetcher import isolation_level_of
from spark_coord.client.metadata import ClusterClient, parse_bootstrap
from spark_coord.common import LARGEST, TopicPartition, normalize_offset_reset
from spark_coord.consumer.buffer import PartitionBuffer
from spark_coord.consumer.connector import CommitFailed, ConsumerCoordinatorConnector, Registration
from spark_coord.consumer.fetcher import FetcherManager, FetchSettings
from spark_coord.consumer.kip848 import ClusterIo, Kip848Member, make_member_id

log = logging.getLogger(__name__)

__all__ = ["CommitFailed", "Consumer", "Record", "default_consumer_id", "GROUP_PROTOCOLS", "COORDKAFKA", "CONSUMER"]

#: The group protocols: the coordinator's own channel (the default), Kafka 4's (KIP-848).
COORDKAFKA, CONSUMER = "coordkafka", "consumer"
GROUP_PROTOCOLS = (COORDKAFKA, CONSUMER)


class Record(NamedTuple):
    """One consumed record (``messages()``); ``timestamp`` in epoch ms, ``timestamp_type`` 0 CreateTime,
    1 LogAppendTime."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _rows(batch) -> list[tuple]:
    """(offset, timestamp ms, timestamp type, key, value, headers) per row of a fetched batch."""
    cols = batch.to_pydict()
    timestamps_us = batch.column(5).cast("int64").to_pylist()
    headers = cols.get("headers")
    return [(offset, ts // 1000 if ts is not None else -1, cols["timestampType"][i], cols["key"][i],
             cols["value"][i], tuple((h["key"], h["value"]) for h in headers[i]) if headers and headers[i] else ())
            for i, (offset, ts) in enumerate(zip(cols["offset"], timestamps_us, strict=True))]


def default_consumer_id() -> str:
    """``<host>-<pid>-<random>``: unique per process and per consumer."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _subscription(topics, pattern: str | None, streams: int) -> tuple[dict[str, int], str | None]:
    if (topics is None or len(topics) == 0) == (pattern is None):
        raise ValueError("give exactly one of topics (a list or {topic: streams}) and pattern (a regex)")
    if streams < 1:
        raise ValueError(f"streams must be at least 1, got {streams}")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {e}") from None
        return {}, pattern
    if isinstance(topics, str):
        topics = [t for t in topics.split(",") if t.strip()]
    out = dict(topics) if isinstance(topics, Mapping) else {t: streams for t in topics}
    for t, n in out.items():
        if not isinstance(t, str) or not t.strip():
            raise ValueError(f"topics: bad topic name {t!r}")
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"topics: streams for {t!r} must be a positive int, got {n!r}")
    return {t.strip(): n for t, n in out.items()}, None


class Consumer:
    """A group member: joins through the coordinator, fetches what it is assigned.

    ``config`` (a CONSUMER ``Config`` or a mapping of its keys) supplies the fetch
    settings (fetch.*, max.partition.fetch.bytes, socket.timeout.ms, client.id);
    the explicit arguments decide the rest.

    ``group_protocol="consumer"`` joins with Kafka 4's consumer group protocol (KIP-848,
    ``consumer.kip848``) instead of the coordinator's channel, on our brokers or any Kafka 4
    cluster: ``group_instance_id`` (static membership), ``group_remote_assignor`` and
    ``auto_commit_interval_ms`` apply to it; ``commit()`` commits with the member epoch and
    ``close()`` commits and leaves.

    ``isolation_level`` (Kafka's ``isolation.level``; None: the config's, read_uncommitted by default):
    ``"read_committed"`` fetches only below the last stable offset and drops the records of aborted
    transactions; ``"read_uncommitted"`` returns every record.  Transaction markers are never returned.
    """

    def __init__(self, bootstrap: str | list[str], group: str, topics=None, pattern: str | None = None,
                 consumer_id: str | None = None, session_timeout_ms: int = 30000, auto_commit: bool = True,
                 auto_offset_reset: str = LARGEST, streams: int = 1, config: Mapping[str, Any] | None = None,
                 include_headers: bool = False, queued_batches: int = 16, security=None,
                 coordinator_bootstrap: str | list[str] | None = None, group_protocol: str = COORDKAFKA,
                 group_instance_id: str | None = None, group_remote_assignor: str | None = None,
                 auto_commit_interval_ms: int = 5000, isolation_level: str | None = None):
        from spark_coord import config as config_mod

        if not group or not isinstance(group, str):
            raise ValueError(f"group must be a non-empty string, got {group!r}")
        reset = normalize_offset_reset(str(auto_offset_reset).lower())
        if session_timeout_ms < 100:
            raise ValueError(f"session_timeout_ms must be at least 100, got {session_timeout_ms}")
        static, pattern = _subscription(topics, pattern, streams)
        if group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"group_protocol must be one of {', '.join(GROUP_PROTOCOLS)}, got {group_protocol!r}")
        if group_protocol == COORDKAFKA and (group_instance_id or group_remote_assignor):
            raise ValueError("group_instance_id and group_remote_assignor are for group_protocol='consumer'")
        self.group_protocol = group_protocol
        cfg = config if config is not None else {}
        if not hasattr(cfg, "keyset"):
            cfg = config_mod.load(config_mod.CONSUMER, None, dict(cfg))
        addresses = parse_bootstrap(bootstrap)
        self.group = group
        self.consumer_id = consumer_id or (make_member_id() if group_protocol == CONSUMER
                                           else default_consumer_id())
        self.auto_commit = auto_commit
        socket_timeout_ms = cfg["socket.timeout.ms"]
        client_id = cfg["client.id"]
        if security is None:  # the config's security.protocol, sasl.*, ssl.* keys
            from spark_coord.security.client import ClientSecurity

            security = ClientSecurity.from_settings(cfg)
        self.security = None if security.protocol == "PLAINTEXT" else security
        self._cluster = ClusterClient([f"{h}:{p}" for h, p in addresses], client_id=client_id,
                                      timeout=socket_timeout_ms / 1000, security=self.security)
        level = isolation_level_of(cfg["isolation.level"] if isolation_level is None else isolation_level,
                                   "isolation_level (isolation.level)")
        self._buffer = PartitionBuffer(queued_batches)
        self._fetchers = FetcherManager(self._cluster, self._buffer, FetchSettings(
            auto_offset_reset=reset, max_wait_ms=cfg["fetch.wait.max.ms"], min_bytes=cfg["fetch.min.bytes"],
            max_bytes=cfg["fetch.max.bytes"], partition_max_bytes=cfg["max.partition.fetch.bytes"],
            include_headers=include_headers, isolation_level=level))
        self._lock = threading.Lock()
        self._committed: dict[TopicPartition, int] = {}
        self._generation = -1
        self._threads: dict[TopicPartition, str] = {}
        self._start_offsets: dict[TopicPartition, int] = {}
        self._lease_until = 0.0
        self._closed = False
        self._pending: tuple | None = None  # (item, rows, next index) of a batch messages() is walking
        registration = Registration(group_id=group, consumer_id=self.consumer_id, topics=static, pattern=pattern,
                                    pattern_streams=streams, auto_commit=auto_commit, auto_offset_reset=reset,
                                    session_timeout_ms=session_timeout_ms)
        if coordinator_bootstrap is None and cfg["coordinator.bootstrap"]:
            coordinator_bootstrap = cfg["coordinator.bootstrap"]
        coordinators = parse_bootstrap(coordinator_bootstrap) if coordinator_bootstrap else addresses
        self.connector: ConsumerCoordinatorConnector | Kip848Member
        if group_protocol == CONSUMER:  # Kafka 4's protocol with the group's coordinator, on any Kafka 4 cluster
            io = ClusterIo([f"{h}:{p}" for h, p in addresses], group, client_id, socket_timeout_ms / 1000,
                           self.security)
            self.connector = Kip848Member(io, group, self, topics=list(static) or None, pattern=pattern,
                                         instance_id=group_instance_id, server_assignor=group_remote_assignor,
                                         session_timeout_ms=session_timeout_ms, member_id=self.consumer_id,
                                         auto_commit_interval_ms=auto_commit_interval_ms if auto_commit else None)
        else:
            self.connector = ConsumerCoordinatorConnector(coordinators, registration, self, client_id=client_id,
                                                          socket_timeout_ms=socket_timeout_ms,
                                                          security=self.security)
        self.connector.start()

    @classmethod
    def from_config(cls, cfg, topics=None, pattern: str | None = None, **kwargs) -> "Consumer":
        """A consumer from a CONSUMER ``Config`` (bootstrap.brokers, group.id, consumer.id, group.protocol, ...)."""
        if not cfg["group.id"]:
            raise ValueError("group.id is required")
        kwargs.setdefault("group_protocol", cfg["group.protocol"])
        kwargs.setdefault("group_instance_id", cfg["group.instance.id"] or None)
        kwargs.setdefault("group_remote_assignor", cfg["group.remote.assignor"] or None)
        return cls(cfg["bootstrap.brokers"], cfg["group.id"], topics=topics, pattern=pattern,
                   consumer_id=cfg["consumer.id"] or None, session_timeout_ms=cfg["session.timeout.ms"],
                   auto_commit=cfg["auto.commit.enable"], auto_offset_reset=cfg["auto.offset.reset"], config=cfg,
                   **kwargs)

    # ----------------------------------------------------------------- application
    def batches(self, timeout: float | None = None) -> Iterator:
        """pyarrow RecordBatches (columns of Spark's Kafka source) as they arrive; ends when
        nothing arrived for ``timeout`` seconds (None: never) or the consumer is closed."""
        while not self._closed:
            self._raise_fatal()
            item = self._buffer.take(timeout, mark=True)
            if item is None:
                return
            if item.batch.num_rows:  # an empty one only moved the position past transaction markers
                yield item.batch

    def messages(self, timeout: float | None = None) -> Iterator[Record]:
        """One ``Record`` at a time (convenience; ``batches()`` is the fast path).  Each record
        counts as consumed when it is yielded; leaving the loop mid-batch keeps the rest for
        the next call."""
        while not self._closed:
            self._raise_fatal()
            if self._pending is None:
                item = self._buffer.take(timeout, mark=False)
                if item is None:
                    return
                self._pending = (item, _rows(item.batch), 0)
            item, rows, i = self._pending
            if i >= len(rows) or not self._buffer.is_current(item):  # done, or its partition was taken away
                self._pending = None
                if i >= len(rows):  # past the transaction markers after its records too (ignored if taken away)
                    self._buffer.mark(item, item.next_offset)
                continue
            self._pending = (item, rows, i + 1)
            self._buffer.mark(item, rows[i][0] + 1)
            yield Record(item.topic, item.partition, *rows[i])

    def commit(self, offsets: Mapping[TopicPartition, int] | list[dict], timeout: float | None = None
               ) -> dict[TopicPartition, int]:
        """Commit offsets (next offset to consume): returns once the coordinator wrote them to
        ZooKeeper, with an error code per partition (0: committed; e.g. PARTITION_NOT_OWNED for a
        partition this member no longer owns).

        The offsets are also kept and reported in Ping answers, a re-registration and the final
        commit of ``close()``; so when no coordinator is reachable right now ``CommitFailed`` is
        raised at once (nothing waits for a failover) and nothing is lost."""
        items = (((o["topic"], o["partition"]), o["offset"]) for o in offsets) if isinstance(offsets, list) \
            else offsets.items()
        stored = {}
        for (topic, partition), offset in items:
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"commit: offset for {topic}-{partition} must be an int >= 0, got {offset!r}")
            stored[(topic, int(partition))] = offset
        with self._lock:
            self._committed.update(stored)
        return self.connector.commit([{"topic": t, "partition": p, "offset": o}
                                      for (t, p), o in sorted(stored.items())], timeout)

    def _raise_fatal(self) -> None:
        """A KIP-848 member the coordinator refused for good (UNRELEASED_INSTANCE_ID, ...): its error."""
        if isinstance(self.connector, Kip848Member) and self.connector.error is not None:
            raise self.connector.error

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned by the last StartFetcher (empty while unassigned)."""
        return self._buffer.assigned()

    @property
    def generation(self) -> int:
        """The generation of the current assignment (-1 before the first StartFetcher)."""
        return self._generation

    def positions(self) -> dict[TopicPartition, int]:
        """Next offset to consume per assigned partition (after what the application took)."""
        return self._buffer.positions()

    def close(self, timeout: float | None = None) -> None:
        """Leave the group cleanly: stop delivering and fetching, commit the final offsets
        (CommitOffsets, confirmed once in ZooKeeper) and leave, so the others take over at once.
        Returns within ``timeout`` (default: the session timeout) whatever the cluster does."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + (self.connector.session_timeout if timeout is None else timeout)
        self._buffer.close()      # wake the application's iterator; positions stay for the final commit
        self._fetchers.close()    # bounded: a fetch stuck on a hung broker is left behind
        self.connector.close(max(0.0, deadline - time.monotonic()))
        # closing the broker connections waits for a thread left behind inside one; never past the deadline
        closer = threading.Thread(target=self._cluster.close, name="close-connections", daemon=True)
        closer.start()
        closer.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(group={self.group!r}, id={self.consumer_id!r}, generation={self._generation})"

    # ---------------------------------------------------- Member (connector thread)
    def report_offsets(self) -> list[dict]:
        assigned = set(self._buffer.assigned())
        with self._lock:
            out = {tp: off for tp, off in self._committed.items() if tp in assigned}
        if self.auto_commit:
            out.update(self._buffer.positions())
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(out.items())]

    def stop_fetchers(self, partitions: set[TopicPartition] | None = None) -> list[dict] | None:
        """StopFetcher: stop everything (None), or just ``partitions`` -- the others go on -- and
        return the offsets to report for those."""
        if partitions is None:
            self._fetchers.stop()
            return None
        self._fetchers.remove(partitions)
        positions = self._buffer.revoke(partitions)
        with self._lock:
            out = {tp: o for tp, o in self._committed.items() if tp in partitions}
            for tp in partitions:
                self._committed.pop(tp, None)
                self._threads.pop(tp, None)
                self._start_offsets.pop(tp, None)
        if self.auto_commit:
            out.update(positions)
        log.info("stopped %d partition(s): %s", len(partitions), ", ".join(f"{t}-{p}" for t, p in sorted(partitions)))
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(out.items())]

    def start_fetchers(self, generation_id: int, assignment: dict[TopicPartition, int],
                       threads: dict[TopicPartition, str], brokers: dict[int, tuple[str, int]]) -> None:
        """StartFetcher: ``assignment`` is the complete assignment.  While fetching (a member that
        hands over incrementally), partitions it already fetches go on from where they are and only
        new ones start at the offsets given; otherwise everything starts at the offsets given."""
        if self._closed:
            return
        if self._fetchers.running:
            current = set(self._buffer.assigned())
            gone = current - set(assignment)
            if gone:  # a StartFetcher never takes partitions away; tolerate it like a StopFetcher
                self.stop_fetchers(gone)
            new = {tp: o for tp, o in assignment.items() if tp not in current}
            incarnations = self._buffer.add(new)
            self._fetchers.add(new, incarnations)
            with self._lock:
                self._generation = generation_id
                self._threads = dict(threads)
                self._start_offsets = {tp: self._start_offsets.get(tp, o) if tp in current else o
                                       for tp, o in assignment.items()}
            if new:
                log.info("started %d more partition(s): %s", len(new),
                         ", ".join(f"{t}-{p}" for t, p in sorted(new)))
            return
        previous = set(self._buffer.assigned())
        token = self._buffer.assign(assignment)
        with self._lock:
            # keep a commit only for a partition we kept and only if it is not behind the start
            # offset: a commit() for a partition that was revoked meanwhile is stale
            self._committed = {tp: o for tp, o in self._committed.items()
                               if tp in assignment and tp in previous and o >= assignment[tp]}
            self._generation = generation_id
            self._threads = dict(threads)
            self._start_offsets = dict(assignment)
        self._fetchers.start(assignment, token)

    def connection_lost(self) -> None:
        """No coordinator confirms the assignment any more: stop fetching (positions kept)."""
        self._fetchers.stop()

    def resume_fetchers(self) -> None:
        """Taken back into the same generation: fetch the same partitions from where we were."""
        self._fetchers.stop()
        if self._closed:
            return
        positions = self._buffer.positions()
        with self._lock:
            resume = {tp: positions.get(tp, start) for tp, start in self._start_offsets.items()}
        token = self._buffer.clear()
        if resume:
            self._fetchers.start(resume, token)

    def renew_lease(self, until: float) -> None:
        self._lease_until = until
        self._buffer.set_lease(until)
        self._fetchers.set_lease(until)

    def lease_end(self) -> float:
        """When (``time.time()``) the current lease ends or ended: no delivery after it unless renewed."""
        return time.time() + (self._lease_until - time.monotonic())
