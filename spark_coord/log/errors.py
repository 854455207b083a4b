"""Errors the partition log raises; the broker maps each to a Kafka error code.

``OffsetOutOfRange`` -> OFFSET_OUT_OF_RANGE, ``LogClosed`` -> UNKNOWN_TOPIC_OR_PARTITION
(the partition was deleted or the broker is shutting down), an ``OSError`` from the
disk -> KAFKA_STORAGE_ERROR, ``records.header.InvalidBatch`` -> CORRUPT_MESSAGE.
"""

from __future__ import annotations


class OffsetOutOfRange(Exception):
    """A read below the log start offset or above the log end offset."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(f"offset {offset} is outside the log's range [{log_start_offset}, {log_end_offset}]")


class LogClosed(Exception):
    """The partition log was closed or deleted; no more appends or reads."""
