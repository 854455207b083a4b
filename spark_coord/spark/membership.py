"""Which partitions a streaming query may plan: the ``PartitionSource`` seam.

The stream reader asks a ``PartitionSource`` on every ``latestOffset`` which
partitions it may plan now.  ``StaticPartitionSource`` answers from the options
alone (``assign``, or every partition of the subscribed / matching topics,
re-listed each time so new topics and partitions are picked up).  With
``group.id`` it is ``spark.group.GroupPartitionSource``: members registered with
the coordinator, partitions handed out by StartFetcher, batches Spark confirmed
committed to the group (CommitOffsets) and reported in Ping answers.

Contract (what the reader relies on):

- ``start()`` is called once, on the driver, before the first ``assigned()``;
  ``stop()`` once at the end (it may be called without ``start()``).
- ``assigned()`` returns ``{(topic, partition): start_offset_or_None}`` for the
  partitions this query may plan now.  ``None`` means "continue from the
  checkpointed offset (or the startingOffsets policy for a partition never seen)".
  An int is a start offset the coordinator handed out with the assignment; the
  reader applies it once, the first time it sees that value for that partition,
  and records it in the batch's offset JSON (``$from``) so replays stay exact --
  unless the query's checkpoint is already past it (the group's offsets trail
  batches that committed just before a crash): then the checkpoint wins, since
  those records are in the sink already.
  Partitions missing from the answer are not planned; the reader keeps their
  last offset and resumes from it (or from a handed-out offset) if they return.
- ``on_batch_planned(end)`` (optional) is called when ``latestOffset`` plans a
  batch, with its end offsets: a group source waits for such a batch to commit
  before handing its partitions back on StopFetcher.  It returns the partitions
  the batch may read (None: all): one given up since ``assigned()`` answered is
  left out of the batch.
- ``on_batch_committed(end)`` is called with the end offsets
  ``{(topic, partition): next_offset}`` of a batch Spark confirmed (from the
  reader's ``commit(end)``, and from ``latestOffset``, whose ``start`` Spark has
  confirmed): the offsets to commit as consumed.
- ``flush()`` (optional) commits everything confirmed so far before it returns
  (the end of a Trigger.AvailableNow run).
"""

from __future__ import annotations

import logging
from typing import Protocol

from spark_coord.common import TopicPartition
from spark_coord.spark.options import SourceOptions

log = logging.getLogger(__name__)


class PartitionSource(Protocol):
    """Partitions a streaming query may plan, and where committed batches are reported."""

    def start(self) -> None: ...

    def assigned(self) -> dict[TopicPartition, int | None]: ...

    def on_batch_committed(self, end: dict[TopicPartition, int]) -> None: ...

    def stop(self) -> None: ...


class StaticPartitionSource:
    """Every partition the options select, with no handed-out offsets; commits are only logged."""

    def __init__(self, opts: SourceOptions, resolver=None) -> None:
        self.opts = opts
        self._resolver = resolver
        self._own_resolver = resolver is None
        self.committed: dict[TopicPartition, int] = {}

    def start(self) -> None:
        if self._resolver is None:
            from spark_coord.spark.offsets import OffsetResolver

            self._resolver = OffsetResolver(self.opts)

    def assigned(self) -> dict[TopicPartition, int | None]:
        if self._resolver is None:
            raise RuntimeError("StaticPartitionSource.assigned() before start()")
        return {tp: None for tp in self._resolver.topic_partitions()}

    def on_batch_committed(self, end: dict[TopicPartition, int]) -> None:
        self.committed.update(end)
        log.debug("batch committed up to %s", end)

    def stop(self) -> None:
        if self._resolver is not None and self._own_resolver:
            self._resolver.close()
        self._resolver = None


def partition_source_for(opts: SourceOptions, resolver=None) -> PartitionSource:
    """The PartitionSource a stream reader with these options uses."""
    if opts.group_id is not None:
        from spark_coord.spark.group import GroupPartitionSource

        return GroupPartitionSource(opts)
    return StaticPartitionSource(opts, resolver)
