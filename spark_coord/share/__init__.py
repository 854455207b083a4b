"""Share groups (KIP-932, "Queues for Kafka") at the partition leader.

``partition.SharePartition`` is the state a leader keeps per (share group, partition): the
share-partition start offset and the in-flight window of records with their states, delivery
counts and acquisition locks -- a pure state table (no I/O, no clock, no threads) the broker
drives on ShareFetch / ShareAcknowledge and persists with ``snapshot()`` / ``restore()``.
"""

from spark_coord.share.partition import AckType, Acquired, RecordState, SharePartition

__all__ = ["AckType", "Acquired", "RecordState", "SharePartition"]
