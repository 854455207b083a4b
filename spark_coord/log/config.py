"""Settings of a partition log, taken from the broker's ``log.*`` keys.

One frozen value shared by every partition of a broker; validated once here so that
the segment and index code can rely on sane numbers (positions are int32 on disk, as
in Kafka's offset index, so a segment can never exceed 2 GiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class LogConfig:
    """What a :class:`~spark_coord.log.partition.PartitionLog` needs from ``broker.properties``.

    ``retention_bytes`` / ``retention_ms`` of -1 keep everything; ``flush_interval_ms``
    of -1 leaves time-based flushing to the OS; ``flush_interval_messages`` counts
    records (not batches), so 1 fsyncs every append before it returns.
    """

    segment_bytes: int = 1073741824
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    retention_ms: int = 604800000
    flush_interval_messages: int = INT64_MAX
    flush_interval_ms: int = -1

    def __post_init__(self) -> None:
        checks = [
            ("log.segment.bytes", self.segment_bytes, 1024, INT32_MAX),
            ("log.index.interval.bytes", self.index_interval_bytes, 1, INT32_MAX),
            ("log.retention.bytes", self.retention_bytes, -1, INT64_MAX),
            ("log.retention.ms", self.retention_ms, -1, INT64_MAX),
            ("log.flush.interval.messages", self.flush_interval_messages, 1, INT64_MAX),
            ("log.flush.interval.ms", self.flush_interval_ms, -1, INT64_MAX),
        ]
        for name, value, low, high in checks:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name}: expected an integer, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{name}: {value} is outside [{low}, {high}]")

    @classmethod
    def from_broker_config(cls, cfg: Mapping[str, Any]) -> "LogConfig":
        """Build from a ``spark_coord.config.Config`` of keyset ``BROKER`` (or any mapping of its keys)."""
        return cls(
            segment_bytes=int(cfg["log.segment.bytes"]),
            index_interval_bytes=int(cfg["log.index.interval.bytes"]),
            retention_bytes=int(cfg["log.retention.bytes"]),
            retention_ms=int(cfg["log.retention.ms"]),
            flush_interval_messages=int(cfg["log.flush.interval.messages"]),
            flush_interval_ms=int(cfg["log.flush.interval.ms"]),
        )
