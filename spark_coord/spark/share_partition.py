"""One Spark input partition of a share group's micro-batch, and how an executor reads it.

The driver's member acquired the records (``spark.share``); an input partition carries some of
those offset ranges, each with the delivery count the broker gave it.  The executor reads each
range with a plain Fetch (``spark.partition``'s range reader: leader hint, pipelined fetches,
Arrow decoding) and appends the ``deliveryCount`` column.  It holds no share session: the records
are acknowledged by the driver's member once Spark commits the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import InputPartition

from spark_coord.spark.partition import KafkaInputPartition


@dataclass
class ShareInputPartition(InputPartition):
    """Offset ranges acquired for the query: ``(range, delivery count)`` pairs."""
    ranges: list[tuple[KafkaInputPartition, int]]


def read_share_partition(p: ShareInputPartition) -> Iterator["pyarrow.RecordBatch"]:  # noqa: F821
    """The records of ``p``'s ranges with ``deliveryCount``, range after range."""
    if not isinstance(p, ShareInputPartition):
        return
    import numpy as np
    import pyarrow as pa

    from spark_coord.spark.partition import read_partition

    for rng, delivery_count in p.ranges:
        for rb in read_partition(rng):
            yield rb.append_column("deliveryCount", pa.array(np.full(rb.num_rows, delivery_count, dtype=np.int32)))
