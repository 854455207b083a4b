"""Names every part of spark-coord shares.

- ``TopicPartition``: a partition's identity, ``(topic, partition)``.
- ``EARLIEST``, ``LATEST``, ``MAX_TIMESTAMP``: the special timestamps of Kafka's
  ListOffsets (the log start offset, the log end offset, the record with the
  largest timestamp); Spark's ``startingOffsets`` JSON uses -2 and -1 the same way.
- ``OFFSET_RESETS`` and ``normalize_offset_reset``: ``auto.offset.reset`` policies.
  The coordinator protocol and ZooKeeper keep Kafka 0.8's names (``smallest``,
  ``largest``); users may also write the new consumer's ``earliest``/``latest``.
"""

from __future__ import annotations

TopicPartition = tuple[str, int]

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3

SMALLEST, LARGEST = "smallest", "largest"
OFFSET_RESETS = (SMALLEST, LARGEST)
_RESET_ALIASES = {"smallest": SMALLEST, "earliest": SMALLEST, "largest": LARGEST, "latest": LARGEST}


def normalize_offset_reset(value: str) -> str:
    """``smallest``/``earliest`` -> ``smallest``, ``largest``/``latest`` -> ``largest``."""
    try:
        return _RESET_ALIASES[value]
    except KeyError:
        raise ValueError(f"auto_offset_reset must be smallest/earliest or largest/latest, got {value!r}") from None
