"""File and directory names of the on-disk log, in one place.

A partition lives in ``<log.dirs>/<topic>-<partition>/``; a segment is
``<base_offset:020d>.log`` plus its sparse index ``<base_offset:020d>.index``.
Topic names are checked against Kafka's rule (``[A-Za-z0-9._-]{1,249}``, not ``.``
or ``..``) before they become a path, so a hostile name cannot escape ``log.dirs``.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TMP_SUFFIX = ".tmp"
LOG_START_CHECKPOINT = "log-start-offset"
DELETE_SUFFIX = "-delete"  # a partition directory renamed away for deletion

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PARTITION_DIR = re.compile(r"(.+)-(\d{1,10})")
_SEGMENT = re.compile(r"(\d{20})\.(log|index)")
MAX_PARTITION = 2**31 - 1


def check_topic(topic: str) -> None:
    """Raise ``ValueError`` unless ``topic`` is a legal Kafka topic name."""
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"illegal topic name {topic!r}: use 1-249 characters of [A-Za-z0-9._-], not '.' or '..'")


def check_partition(partition: int) -> None:
    """Raise ``ValueError`` unless ``partition`` is a partition number Kafka allows."""
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition <= MAX_PARTITION:
        raise ValueError(f"illegal partition number {partition!r}: must be an int in [0, {MAX_PARTITION}]")


def partition_dir_name(topic: str, partition: int) -> str:
    check_topic(topic)
    check_partition(partition)
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """``"orders-3"`` -> ``("orders", 3)``; ``ValueError`` for anything that is not a partition directory."""
    m = _PARTITION_DIR.fullmatch(name)
    if not m:
        raise ValueError(f"not a partition directory name (<topic>-<partition>): {name!r}")
    topic, partition = m.group(1), int(m.group(2))
    if str(partition) != m.group(2):
        raise ValueError(f"not a partition directory name (leading zeros in the partition): {name!r}")
    check_topic(topic)
    check_partition(partition)
    return topic, partition


def segment_log_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def segment_index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``"00000000000000000042.log"`` -> ``(42, "log")``; None for other files."""
    m = _SEGMENT.fullmatch(name)
    return (int(m.group(1)), m.group(2)) if m else None


def deletion_name(directory: Path) -> Path:
    """Where a partition directory is renamed before it is removed (atomic hide, then rmtree)."""
    return directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")


def is_deletion_dir(name: str) -> bool:
    return name.endswith(DELETE_SUFFIX)
