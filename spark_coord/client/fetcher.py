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


@dataclass
class PartitionData:
    """One partition of a Fetch answer: raw record set (memoryview) plus the broker's watermarks."""
    topic: str
    partition: int
    error: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None = field(repr=False, default=None)


def fetch(conn: BrokerConnection, offsets: dict[tuple[str, int], int], max_wait_ms: int = 500,
          min_bytes: int = 1, max_bytes: int = 52428800, partition_max_bytes: int = 1048576) -> list[PartitionData]:
    """One Fetch request for ``{(topic, partition): fetch_offset}`` to the leader behind ``conn``."""
    return send_fetch(conn, offsets, max_wait_ms, min_bytes, max_bytes, partition_max_bytes).result()


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
                out.append(PartitionData(t["topic"], p["partition_index"], p["error_code"], p["high_watermark"],
                                         p["log_start_offset"], p["records"]))
        return out


def send_fetch(conn: BrokerConnection, offsets: dict[tuple[str, int], int], max_wait_ms: int = 500,
               min_bytes: int = 1, max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
               into: bytearray | None = None) -> PendingFetch:
    """Write a Fetch now (pipelined on ``conn``) and return it; ``into``: a buffer to reuse for the answer."""
    topics: dict[str, list] = {}
    for (topic, part), offset in offsets.items():
        topics.setdefault(topic, []).append({
            "partition": part, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes})
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""}
    return PendingFetch(conn.send(ApiKey.FETCH, body, timeout=conn.timeout + max_wait_ms / 1000, into=into),
                        dict(offsets))

