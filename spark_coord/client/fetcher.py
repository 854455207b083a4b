"""Kafka Fetch for a set of partitions of one leader, decoded into records or Arrow.

The building block of ``spark-coord tail``, the thin consumer's fetchers and the
Spark source's executors.  Nothing a broker sends is trusted: record sets are
decoded by ``spark_coord.records`` (every length checked), and a partial trailing
batch is simply left for the next fetch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spark_coord.client.connection import BrokerConnection, PendingResponse
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

#: Fetch's and ListOffsets' IsolationLevel: every record below the high watermark, or only those below
#: the last stable offset, aborted transactions listed (Kafka's ``isolation.level``).
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


def isolation_level_of(name: str, option: str = "isolation.level") -> int:
    """``read_uncommitted`` / ``read_committed`` (Kafka's ``isolation.level`` values) as the wire's 0 / 1;
    ValueError naming ``option`` otherwise."""
    level = ISOLATION_LEVELS.get(str(name).strip().lower())
    if level is None:
        raise ValueError(f"{option} must be read_uncommitted or read_committed, got {name!r}")
    return level


@dataclass
class PartitionData:
    """One partition of a Fetch answer: raw record set (memoryview) plus the broker's watermarks.

    ``last_stable_offset``: below it every transaction is decided (-1 when the broker did not say);
    ``aborted_transactions``: in a read_committed answer, the ``(producer_id, first_offset)`` of the
    aborted transactions the record set overlaps (``records.reader.aborted_batches`` drops them)."""
    topic: str
    partition: int
    error: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None = field(repr=False, default=None)
    last_stable_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None


def fetch(conn: BrokerConnection, offsets: dict[tuple[str, int], int], max_wait_ms: int = 500,
          min_bytes: int = 1, max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
          isolation_level: int = READ_UNCOMMITTED) -> list[PartitionData]:
    """One Fetch request for ``{(topic, partition): fetch_offset}`` to the leader behind ``conn``."""
    return send_fetch(conn, offsets, max_wait_ms, min_bytes, max_bytes, partition_max_bytes,
                      isolation_level=isolation_level).result()


class PendingFetch:
    """A Fetch written to the connection; ``result()`` waits for and decodes its answer."""

    __slots__ = ("pending", "offsets")

    def __init__(self, pending: PendingResponse, offsets: dict[tuple[str, int], int]) -> None:
        self.pending = pending
        self.offsets = offsets

    def result(self) -> list[PartitionData]:
        resp = self.pending.result()
        if resp.get("error_code"):
            return [PartitionData(topic, part, resp["error_code"], -1, -1) for (topic, part) in self.offsets]
        out = []
        for t in resp["responses"]:
            for p in t["partitions"]:
                aborted = p.get("aborted_transactions")
                out.append(PartitionData(t["topic"], p["partition_index"], p["error_code"], p["high_watermark"],
                                         p["log_start_offset"], p["records"], p.get("last_stable_offset", -1),
                                         [(a["producer_id"], a["first_offset"]) for a in aborted] if aborted else None))
        return out


def send_fetch(conn: BrokerConnection, offsets: dict[tuple[str, int], int], max_wait_ms: int = 500,
               min_bytes: int = 1, max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
               into: bytearray | None = None, isolation_level: int = READ_UNCOMMITTED) -> PendingFetch:
    """Write a Fetch now (pipelined on ``conn``) and return it; ``into``: a buffer to reuse for the answer.
    ``isolation_level``: ``READ_COMMITTED`` (1) asks for records below the last stable offset only, with
    the aborted transactions among them listed."""
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise ValueError(f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), got {isolation_level!r}")
    topics: dict[str, list] = {}
    for (topic, part), offset in offsets.items():
        topics.setdefault(topic, []).append({
            "partition": part, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes})
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""}
    return PendingFetch(conn.send(ApiKey.FETCH, body, timeout=conn.timeout + max_wait_ms / 1000, into=into),
                        dict(offsets))

