"""Group membership for a streaming query: the coordinator decides what it plans.

``GroupPartitionSource`` registers one group member per Spark executor (the
``members`` option; one by default, as in local mode) with the coordinator, each
through its own ``ConsumerCoordinatorConnector`` thread.  Those threads live in
the driver-side Python process that hosts the stream reader for the whole query,
so they keep answering the coordinator's pings between Spark's calls.

The mapping (DESIGN.md section 8):

- **StartFetcher** hands a member its partitions and their start offsets (the
  group's committed offsets; -1 when the group has none, resolved here by the
  query's ``startingOffsets``: earliest -> smallest, otherwise largest).  Only
  partitions currently started are returned by ``assigned()``, so only they are
  planned; the reader applies a handed-out offset once and records it in the
  batch's offset JSON, so replays stay exact.
- **commit(end)** of a micro-batch records its end offsets; the next **Ping**
  answer reports them, and the coordinator writes them to ZooKeeper.
- **StopFetcher**: the member stops offering its partitions at once, waits for
  the batch in flight on them to commit (bounded by half the session timeout),
  then answers with the committed offsets -- so the next owner starts exactly
  where this query stopped.
- **Coordinator lost** (connection gone or silent): the member's partitions are
  withdrawn until it is registered and started again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from spark_coord.client.admin import EARLIEST, LATEST
from spark_coord.client.metadata import parse_bootstrap
from spark_coord.consumer.connector import ConsumerCoordinatorConnector, Registration
from spark_coord.spark.options import SourceOptions

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class _QueryMember:
    """One registered member (one executor's share of the query's partitions)."""

    def __init__(self, source: "GroupPartitionSource", consumer_id: str):
        self.source = source
        self.consumer_id = consumer_id
        self.owned: dict[TopicPartition, int | None] = {}   # started partitions -> handed-out start offset
        self.generation = -1
        self.started = threading.Event()

    # -- the connector's Member protocol (called on the connector thread) --------------------
    def report_offsets(self) -> list[dict]:
        with self.source.lock:
            committed = self.source.committed
            return [{"topic": t, "partition": p, "offset": committed[(t, p)]}
                    for (t, p) in sorted(self.owned) if (t, p) in committed]

    def stop_fetchers(self) -> None:
        src = self.source
        with src.lock:
            revoked = dict(self.owned)
            src.stopping.update(revoked)
        deadline = time.monotonic() + src.stop_timeout
        with src.changed:  # wait for the batch in flight on these partitions to commit
            while any(src.in_flight(tp) for tp in revoked):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("%s: batch on %s still uncommitted after %.1fs; answering StopFetcher with "
                                "the last committed offsets (the next owner re-reads the rest)", self.consumer_id,
                                sorted(tp for tp in revoked if src.in_flight(tp)), src.stop_timeout)
                    break
                src.changed.wait(left)
            self.owned.clear()
            src.stopping.difference_update(revoked)
            self.started.clear()

    def start_fetchers(self, generation_id: int, assignment: dict, threads: dict, brokers: dict) -> None:
        resolved = self.source.resolve_resets({tp: off for tp, off in assignment.items()})
        with self.source.lock:
            self.owned = resolved
            self.generation = generation_id
        self.started.set()
        log.info("%s: generation %d, %d partition(s): %s", self.consumer_id, generation_id, len(resolved),
                 ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(resolved.items())))

    def connection_lost(self) -> None:
        with self.source.lock:
            if self.owned:
                log.info("%s: coordinator lost; planning nothing for %d partition(s) until started again",
                         self.consumer_id, len(self.owned))
            self.owned.clear()
        self.started.clear()


class GroupPartitionSource:
    """A ``PartitionSource`` whose partitions come from the coordinator (see the module docstring)."""

    def __init__(self, opts: SourceOptions) -> None:
        if opts.group_id is None:
            raise ValueError("group.id is required for group membership")
        self.opts = opts
        self.resolver = None  # its own (connector threads use it while the reader uses the reader's)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.committed: dict[TopicPartition, int] = {}
        self.planned: dict[TopicPartition, int] = {}
        self.stopping: set[TopicPartition] = set()
        self.stop_timeout = opts.session_timeout_ms / 2000
        token = uuid.uuid4().hex[:8]
        host = socket.gethostname()
        n = opts.members or 1
        self.members = [_QueryMember(self, f"coordkafka-{host}-{os.getpid()}-{token}-executor-{i}") for i in range(n)]
        self.connectors: list[ConsumerCoordinatorConnector] = []

    # -- PartitionSource ---------------------------------------------------------------------
    def start(self) -> None:
        from spark_coord.spark.offsets import OffsetResolver

        self.resolver = OffsetResolver(self.opts)
        reset = "smallest" if self.opts.starting == "earliest" else "largest"
        registration = dict(group_id=self.opts.group_id, auto_commit=True, auto_offset_reset=reset,
                            session_timeout_ms=self.opts.session_timeout_ms)
        if self.opts.subscribe_pattern is not None:
            registration["pattern"] = self.opts.subscribe_pattern
        else:
            registration["topics"] = {t: 1 for t in self.opts.subscribe or ()}
        for m in self.members:
            conn = ConsumerCoordinatorConnector(parse_bootstrap(self.opts.bootstrap),
                                                Registration(consumer_id=m.consumer_id, **registration), m,
                                                client_id=self.opts.client_id)
            conn.start()
            self.connectors.append(conn)
        # Let the first rebalance finish so the initial offsets see the assignment (bounded).
        deadline = time.monotonic() + max(self.opts.session_timeout_ms / 1000, 5.0)
        for m in self.members:
            if not m.started.wait(max(0.0, deadline - time.monotonic())):
                log.warning("%s: no assignment yet from the coordinator; planning starts when it arrives",
                            m.consumer_id)
                break

    def assigned(self) -> dict[TopicPartition, int | None]:
        with self.lock:
            out: dict[TopicPartition, int | None] = {}
            for m in self.members:
                for tp, off in m.owned.items():
                    if tp not in self.stopping:
                        out[tp] = off
            return out

    def on_batch_planned(self, end: dict[TopicPartition, int]) -> None:
        with self.lock:
            self.planned.update(end)

    def on_batch_committed(self, end: dict[TopicPartition, int]) -> None:
        with self.changed:
            for tp, off in end.items():
                if off > self.committed.get(tp, -1):
                    self.committed[tp] = off
            self.changed.notify_all()

    def stop(self) -> None:
        for conn in self.connectors:  # close() hands the last committed offsets to the coordinator
            conn.close(timeout=self.opts.session_timeout_ms / 1000)
        self.connectors = []
        if self.resolver is not None:
            self.resolver.close()
            self.resolver = None

    # -- helpers -----------------------------------------------------------------------------
    def in_flight(self, tp: TopicPartition) -> bool:
        """A planned end offset on ``tp`` that has not been committed yet."""
        planned = self.planned.get(tp)
        return planned is not None and planned > self.committed.get(tp, -1)

    def resolve_resets(self, assignment: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """StartFetcher's -1 (no committed offset) becomes the startingOffsets policy's offset."""
        missing = [tp for tp, off in assignment.items() if off is None or off < 0]
        out: dict[TopicPartition, int | None] = {tp: off for tp, off in assignment.items() if off is not None and off >= 0}
        if missing:
            which = EARLIEST if self.opts.starting == "earliest" else LATEST
            try:
                out.update(self.resolver.list_offsets(missing, which))
            except Exception:  # the reader falls back to its own policy for these partitions
                log.warning("could not resolve start offsets of %s; the reader applies startingOffsets",
                            missing, exc_info=True)
                out.update({tp: None for tp in missing})
        return out
