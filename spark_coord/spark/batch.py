"""``spark.read.format("coordkafka")``: a bounded read of offset ranges.

``partitions()`` runs once on the driver: it lists the selected partitions,
resolves where it starts and ends (startingOffsets / endingOffsets, or their
timestamp options) with ListOffsets, and plans one input
partition per topic-partition (more when ``minPartitions`` asks for it).
``read()`` runs on executors (``partition.read_partition``).
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSourceReader

from spark_coord.spark.options import SourceOptions

log = logging.getLogger(__name__)


class CoordKafkaBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of every selected partition once."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self):
        from spark_coord.spark.offsets import OffsetResolver, make_partition, split_ranges

        resolver = OffsetResolver(self.opts)
        try:
            tps = resolver.topic_partitions()
            if not tps:
                log.warning("no partitions match the options; the read is empty")
                return []
            earliest = resolver.earliest(tps)
            o = self.opts
            if o.starting == "earliest" and o.starting_timestamp is None and o.starting_by_timestamp is None:
                starts = earliest  # the same ListOffsets: one round trip less for every query
            else:
                starts = resolver.starting(tps)
            ends = resolver.ending(tps)
            ranges = {}
            for tp in tps:
                start, end = starts[tp], ends[tp]
                if start > end:
                    raise ValueError(f"startingOffsets: {tp[0]}-{tp[1]} starts at {start}, after its end {end}")
                if start < earliest[tp] and self.opts.fail_on_data_loss:
                    raise ValueError(f"startingOffsets: {tp[0]}-{tp[1]} offset {start} is below the log start "
                                     f"offset {earliest[tp]} (removed by retention); set failOnDataLoss=false to "
                                     "start at the log start instead")
                ranges[tp] = (max(start, earliest[tp]) if start < earliest[tp] else start, end)
            leaders = resolver.leaders(tps)
            pieces = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
            log.info("batch read of %d partition(s) in %d input partition(s), %d records", len(tps), len(pieces),
                     sum(e - s for _, s, e in pieces))
            return [make_partition(self.opts, tp, s, e, leaders.get(tp)) for tp, s, e in pieces]
        finally:
            resolver.close()

    def read(self, partition):
        from spark_coord.spark.partition import read_partition

        return read_partition(partition)
