"""Settings of a partition log, taken from the broker's ``log.*`` keys and the topic's own configs.

One frozen value per topic (the broker's when the topic sets nothing); validated once here so that
the segment and index code can rely on sane numbers (positions are int32 on disk, as
in Kafka's offset index, so a segment can never exceed 2 GiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


#: cleanup.policy values.
DELETE, COMPACT = "delete", "compact"
CREATE_TIME, LOG_APPEND_TIME = "CreateTime", "LogAppendTime"


@dataclass(frozen=True)
class LogConfig:
    """What a :class:`~spark_coord.log.partition.PartitionLog` needs: the broker's ``log.*`` keys, or
    one topic's settings (``configs.topic`` resolves a topic's overrides over the broker's values).

    ``retention_bytes`` / ``retention_ms`` of -1 keep everything; ``flush_interval_ms``
    of -1 leaves time-based flushing to the OS; ``flush_interval_messages`` counts
    records (not batches), so 1 fsyncs every append before it returns.  Retention applies
    only when ``cleanup_policy`` has ``delete``; the cleaner compacts when it has ``compact``.
    A partition's config is replaced as a whole when its topic's settings change.
    """

    segment_bytes: int = 1073741824
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    retention_ms: int = 604800000
    flush_interval_messages: int = INT64_MAX
    flush_interval_ms: int = -1
    segment_ms: int = 604800000
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME
    cleanup_policy: tuple[str, ...] = (DELETE,)
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5

    def __post_init__(self) -> None:
        checks = [
            ("log.segment.bytes", self.segment_bytes, 1024, INT32_MAX),
            ("log.index.interval.bytes", self.index_interval_bytes, 1, INT32_MAX),
            ("log.retention.bytes", self.retention_bytes, -1, INT64_MAX),
            ("log.retention.ms", self.retention_ms, -1, INT64_MAX),
            ("log.flush.interval.messages", self.flush_interval_messages, 1, INT64_MAX),
            ("log.flush.interval.ms", self.flush_interval_ms, -1, INT64_MAX),
            ("log.roll.ms", self.segment_ms, 1, INT64_MAX),
            ("message.max.bytes", self.max_message_bytes, 0, INT32_MAX),
            ("log.cleaner.min.compaction.lag.ms", self.min_compaction_lag_ms, 0, INT64_MAX),
            ("log.cleaner.max.compaction.lag.ms", self.max_compaction_lag_ms, 1, INT64_MAX),
            ("log.cleaner.delete.retention.ms", self.delete_retention_ms, 0, INT64_MAX),
        ]
        for name, value, low, high in checks:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name}: expected an integer, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{name}: {value} is outside [{low}, {high}]")
        if not 0.0 <= float(self.min_cleanable_dirty_ratio) <= 1.0:
            raise ValueError(f"log.cleaner.min.cleanable.ratio: {self.min_cleanable_dirty_ratio} is outside [0, 1]")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"log.message.timestamp.type: {self.message_timestamp_type!r} is not CreateTime "
                             "or LogAppendTime")
        policy = tuple(self.cleanup_policy)
        if not policy or any(p not in (DELETE, COMPACT) for p in policy):
            raise ValueError(f"log.cleanup.policy: {','.join(policy)!r} is not delete, compact or compact,delete")
        object.__setattr__(self, "cleanup_policy", policy)

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log."""
        return COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention (by time and size) removes old segments of this log."""
        return DELETE in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """Age at which the active segment rolls: segment.ms, or max.compaction.lag.ms when a compacted
        log wants its records cleanable sooner (Kafka's ``LogConfig.maxSegmentMs``)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @classmethod
    def from_broker_config(cls, cfg: Mapping[str, Any]) -> "LogConfig":
        """Build from a ``spark_coord.config.Config`` of keyset ``BROKER`` (or any mapping of its keys;
        keys missing from a plain mapping take this class's defaults)."""
        d = cls()

        def get(key: str, default: Any) -> Any:
            value = cfg.get(key, default) if hasattr(cfg, "get") else cfg[key]
            return default if value is None else value

        policy = get("log.cleanup.policy", d.cleanup_policy)
        if isinstance(policy, str):
            policy = [p.strip() for p in policy.split(",") if p.strip()]
        return cls(
            segment_bytes=int(cfg["log.segment.bytes"]),
            index_interval_bytes=int(cfg["log.index.interval.bytes"]),
            retention_bytes=int(cfg["log.retention.bytes"]),
            retention_ms=int(cfg["log.retention.ms"]),
            flush_interval_messages=int(cfg["log.flush.interval.messages"]),
            flush_interval_ms=int(cfg["log.flush.interval.ms"]),
            segment_ms=int(get("log.roll.ms", d.segment_ms)),
            max_message_bytes=int(get("message.max.bytes", d.max_message_bytes)),
            message_timestamp_type=str(get("log.message.timestamp.type", d.message_timestamp_type)),
            cleanup_policy=tuple(policy),
            min_compaction_lag_ms=int(get("log.cleaner.min.compaction.lag.ms", d.min_compaction_lag_ms)),
            max_compaction_lag_ms=int(get("log.cleaner.max.compaction.lag.ms", d.max_compaction_lag_ms)),
            delete_retention_ms=int(get("log.cleaner.delete.retention.ms", d.delete_retention_ms)),
            min_cleanable_dirty_ratio=float(get("log.cleaner.min.cleanable.ratio", d.min_cleanable_dirty_ratio)),
        )
