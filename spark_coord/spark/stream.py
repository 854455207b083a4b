"""``spark.readStream.format("coordkafka")``: the micro-batch stream reader.

Spark keeps one instance of this reader in a long-lived Python process on the
driver for the whole query and calls ``initialOffset``, ``latestOffset``,
``partitions``, ``commit`` and ``stop`` on it; another instance is pickled to the
executors only to call ``read``.  So the constructor does no I/O and every
connection or thread starts lazily on the driver (``_ensure_started``).

Offsets are the JSON of ``spark_coord.spark.offsets`` (``{"topic": {"p": next}}``
plus ``$from`` where a batch starts somewhere other than the previous offset).
Admission control follows Spark's Kafka source: ``maxOffsetsPerTrigger`` is
spread over partitions in proportion to their lag (largest remainder, so the cap
holds exactly), ``minOffsetsPerTrigger`` skips a trigger until enough records
wait or ``maxTriggerDelay`` passed, and ``Trigger.AvailableNow`` pins the end at
the offsets present when the query started.

Committed offsets with ``group.id`` (what they mean to the group: docs/spark/index.md,
"How the group mapping works").  What PySpark 4
does, seen in ``pyspark/sql/streaming/python_streaming_source_runner.py`` and
in runs: it calls ``commit(end)`` lazily (for batch N when it plans N+2, or
never), but it calls ``latestOffset(start, limit)`` only after the batch ending
at ``start`` was written to the commit log -- so ``start`` is confirmed and is
committed to the group at once (asynchronously).  At the end of an AvailableNow
run Spark asks ``latestOffset`` once more with the final end as ``start``; the
reader commits it synchronously right there, before answering.  When a query
stops, the runner calls ``stop()`` in a ``finally`` -- but Spark ends the
process with SIGTERM (twice) when the query is stopped or an AvailableNow run
ends, and Python's default SIGTERM action would skip that ``finally``.  So the
reader, when it runs as part of a group, turns the first SIGTERM into
``SystemExit`` in that process (the runner's main thread), which runs the
``finally``; ``stop()`` then leaves the group with a final commit of what Spark
confirmed.  Records of a batch that was planned but not confirmed are not
committed: its successor (this query restarted, or another member) reads them.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from spark_coord.common import TopicPartition
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.spark.options import SourceOptions

log = logging.getLogger(__name__)


def allocate(lag: dict[TopicPartition, int], cap: int | None) -> dict[TopicPartition, int]:
    """How many records to take from each partition: all of ``lag`` if it fits in ``cap``, else
    ``cap`` split in proportion to each partition's lag (largest remainders get the leftovers)."""
    total = sum(lag.values())
    if cap is None or total <= cap:
        return dict(lag)
    shares = {tp: cap * n / total for tp, n in lag.items()}
    take = {tp: int(s) for tp, s in shares.items()}
    left = cap - sum(take.values())
    for tp in sorted(shares, key=lambda tp: (take[tp] - shares[tp], tp))[:left]:
        take[tp] += 1
    return take


class CoordKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over the partitions its ``PartitionSource`` assigns."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._source = None
        self._resolver = None
        self._applied: dict[TopicPartition, int] = {}
        self._target: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] = {}
        #: the starting offsets resolved by policy (earliest, latest, a timestamp) for initialOffset
        self._initial: dict[TopicPartition, int] = {}
        #: initialOffset's answer, given again on every later call of this process (see there)
        self._initial_json: dict | None = None
        #: partitions of deleted topics the group still assigns, reported as data loss: not planned
        self._deleted: set[TopicPartition] = set()
        self._last_batch_at = time.monotonic()

    def __getstate__(self) -> dict:
        """Only the options travel (to executors); connections and threads stay on the driver."""
        return {"opts": self.opts}

    def __setstate__(self, state: dict) -> None:
        self.opts = state["opts"]
        self._reset_runtime()

    def _ensure_started(self) -> None:
        if self._source is None:
            from spark_coord.spark.membership import partition_source_for
            from spark_coord.spark.offsets import OffsetResolver

            self._resolver = OffsetResolver(self.opts)
            source = partition_source_for(self.opts, self._resolver)
            source.start()
            self._source = source
            if self.opts.group_id is not None:
                _exit_cleanly_on_sigterm()

    # ------------------------------------------------------------- offsets
    def initialOffset(self) -> dict:
        from spark_coord.spark.offsets import to_json

        self._ensure_started()
        # One answer per process: Spark asks for batch 0's start twice, when it plans the batch (our
        # latestOffset's start) and when it runs it (partitions()' start).  A group source's assignment
        # may move in between -- partitions taken away were then missing from the second answer, and
        # the batch read nothing of them though its end was committed.  Partitions that come or go
        # later are latestOffset's to plan, as for every other batch.
        if self._initial_json is not None:
            return self._initial_json
        assigned = self._source.assigned()
        # Not marked applied here: Spark also asks for the initial offset as the start of a batch 0 it
        # replays from the checkpoint, and the batch after that one starts at the logged end, not
        # here; only a batch ``latestOffset`` plans carries a handed-out offset on (``$from``).
        offsets = {tp: off for tp, off in assigned.items() if off is not None}
        rest = [tp for tp, off in assigned.items() if off is None]
        unresolved = [tp for tp in rest if tp not in self._initial]
        if unresolved:
            # 'group' without a committed offset falls back to latest, as a Kafka consumer's default reset does
            policy = "latest" if self.opts.starting == "group" else self.opts.starting
            self._initial.update(self._resolver.starting(unresolved, policy))
        # resolved once: Spark asks again when it plans batch 0, and "latest" moves on a topic being
        # written -- a second answer would start the batch past the end the first one led to
        offsets.update({tp: self._initial[tp] for tp in rest})
        log.info("initial offsets %s", offsets)
        self._initial_json = to_json(offsets)
        return self._initial_json

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._ensure_started()
        self._target = self._resolver.latest(list(self._source.assigned()))
        log.info("Trigger.AvailableNow: reading up to %s", self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        from spark_coord.spark.offsets import from_json, to_json

        self._ensure_started()
        start_offsets = from_json(start)
        # Spark plans batch N+1 only after batch N ran and was written to the commit log, so
        # ``start`` is the end of the last committed batch.  Report it now: Spark calls commit()
        # for batch N only once batch N+1 is constructed, which never happens while no new data
        # arrives, and the group's offsets would lag a whole batch behind the sink.
        if start_offsets:
            self._source.on_batch_committed(start_offsets)
        if self._target is not None and start_offsets and all(
                start_offsets.get(tp, -1) >= end for tp, end in self._target.items()):
            # AvailableNow reached its end: this is Spark's last call before it ends the run
            flush = getattr(self._source, "flush", None)
            if flush is not None:
                flush()
        assigned = self._source.assigned()
        self._deleted &= set(assigned)  # those the coordinator took back need no more exclusion
        assigned = {tp: off for tp, off in assigned.items() if tp not in self._deleted}
        start_offsets = self._drop_gone(start_offsets, assigned)
        handed = {tp: off for tp, off in assigned.items() if off is not None and self._applied.get(tp) != off}
        new = [tp for tp in assigned if tp not in start_offsets and tp not in handed]
        base = {tp: start_offsets[tp] for tp in assigned if tp in start_offsets}
        base.update(self._handed_starts(handed, start_offsets))
        try:
            if new:  # partitions that appeared after the query began start at their earliest offset
                base.update(self._resolver.earliest(new))
            latest = self._resolver.latest(list(assigned)) if assigned else {}
        except KafkaError as e:
            if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            # a topic deleted while the group still assigns its partitions to this query: data loss
            # (failOnDataLoss), else they are left out and the next trigger plans the rest
            self._deleted |= self._report_gone(list(assigned), start_offsets)
            return start
        reset = self._restarted_logs(base, latest)
        base.update(reset)
        # Those calls wait on brokers, for as long as a cut lasts: the lease checked above may have
        # run out meanwhile.  Plan only what is still plannable now, as the batch starts from here.
        still = self._source.assigned()
        assigned = {tp: off for tp, off in assigned.items() if tp in still and still[tp] == off}
        handed = {tp: off for tp, off in handed.items() if tp in assigned}
        self._latest = dict(latest)
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, base[tp])) for tp, off in latest.items()}
        lag = {tp: max(0, latest[tp] - base[tp]) for tp in assigned}

        max_rows, min_rows = self._limits(limit)
        available = sum(lag.values())
        if min_rows is not None and available < min_rows:
            waited = (time.monotonic() - self._last_batch_at) * 1000
            if available == 0 or waited < self.opts.max_trigger_delay_ms:
                log.debug("%d record(s) available, fewer than minOffsetsPerTrigger %d; waiting", available, min_rows)
                return start
        take = allocate(lag, max_rows)
        end = dict(start_offsets)
        froms = {}
        for tp in assigned:
            end[tp] = base[tp] + take[tp]
            if base[tp] != start_offsets.get(tp):
                # a handed-out, reset or new start: the batch reads from it even when it takes nothing
                # there (else ``partitions`` would read from the last end up to it)
                froms[tp] = base[tp]
        if end == from_json(start) and not froms:
            return start
        planned = getattr(self._source, "on_batch_planned", None)
        if planned is not None:
            accepted = planned({tp: end[tp] for tp in assigned})
            if accepted is not None:
                for tp in set(assigned) - set(accepted):  # revoked since the look above: not in this batch
                    froms.pop(tp, None)
                    handed.pop(tp, None)
                    if tp in start_offsets:
                        end[tp] = start_offsets[tp]
                    else:
                        end.pop(tp, None)
                if end == from_json(start) and not froms:
                    return start
        self._applied.update(handed)
        self._last_batch_at = time.monotonic()
        return to_json(end, froms)

    def _data_loss(self, message: str) -> None:
        """Spark's failOnDataLoss on the driver: fail the query, or warn and go on."""
        from spark_coord.spark.partition import DataLossError

        if self.opts.fail_on_data_loss:
            raise DataLossError(message + ". Some data may have been lost; set failOnDataLoss=false to go on with a "
                                          "warning instead")
        log.warning("%s; going on (failOnDataLoss=false)", message)

    def _drop_gone(self, start_offsets: dict[TopicPartition, int], assigned: dict) -> dict[TopicPartition, int]:
        """``start_offsets`` without the partitions that no longer exist (their topic was deleted),
        each reported as data loss (once: those already reported are dropped quietly).  A partition
        merely not assigned now (a group's other member has it) is kept, so the query resumes from it
        if it comes back."""
        reported = {tp for tp in start_offsets if tp in self._deleted}
        candidates = [tp for tp in start_offsets if tp not in assigned and tp not in reported]
        if not candidates and not reported:
            return start_offsets
        gone = reported | (self._report_gone(candidates, start_offsets) if candidates else set())
        return {tp: off for tp, off in start_offsets.items() if tp not in gone}

    def _report_gone(self, candidates: list[TopicPartition], start_offsets: dict[TopicPartition, int]
                     ) -> set[TopicPartition]:
        """Those of ``candidates`` that no longer exist, each reported as data loss (which raises
        with failOnDataLoss)."""
        gone = set(self._resolver.gone(candidates))
        for t, p in sorted(gone):
            at = start_offsets.get((t, p))
            self._data_loss(f"{t}-{p}: the partition is gone (its topic was deleted)"
                            + (f" with offset {at} next to read" if at is not None else "")
                            + "; a topic created again under that name is read from its start")
        return gone

    def _restarted_logs(self, base: dict[TopicPartition, int], latest: dict[TopicPartition, int]
                        ) -> dict[TopicPartition, int]:
        """Partitions whose log now ends before the offset the query reads next -- the topic was
        deleted and created again, or its log truncated -- reported as data loss; without
        failOnDataLoss they go on from the new log's start (returned: partition -> that offset)."""
        behind = [tp for tp in base if tp in latest and latest[tp] < base[tp]]
        for t, p in behind:
            self._data_loss(f"{t}-{p}: the log now ends at offset {latest[(t, p)]}, before offset {base[(t, p)]} "
                            "that the query reads next (the topic was deleted and created again, or its log "
                            "truncated); records of the old log may not have been read, and the new log is read "
                            "from its start")
        return self._resolver.earliest(behind) if behind else {}

    @staticmethod
    def _handed_starts(handed: dict[TopicPartition, int], start_offsets: dict[TopicPartition, int]
                       ) -> dict[TopicPartition, int]:
        """Where handed-out partitions start: the coordinator's offset, unless this query's own
        checkpoint is already past it.

        A handed-out offset above the checkpoint means another member of the group read on from
        where this query left off; skipping ahead is right.  One below it means the group's
        offsets trail this query's sink -- the last committed batches had not yet reached the
        coordinator in a ping answer when the query was killed and restarted, or a StopFetcher
        answer raced a commit -- and those records are already in the sink: reading them again
        would hand the sink each of them twice (in a different batch, which no idempotent sink
        can absorb).
        """
        out = {}
        for tp, off in handed.items():
            own = start_offsets.get(tp)
            if own is not None and off < own:
                log.info("%s-%d: the group's offset %d trails this query's checkpoint %d; continuing from "
                         "the checkpoint (those records are in the sink already)", tp[0], tp[1], off, own)
                off = own
            out[tp] = off
        return out

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """(max rows, min rows) for this trigger; options' min applies along with a max limit, as
        Spark's Kafka source's composite limit does; AvailableNow never waits for a minimum."""
        max_rows = min_rows = None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
            min_rows = self.opts.min_offsets_per_trigger
        elif isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if self._target is not None:
            min_rows = None
        return max_rows, min_rows

    def reportLatestOffset(self) -> dict | None:
        from spark_coord.spark.offsets import to_json

        return to_json(self._latest) if self._latest else None

    # ------------------------------------------------------------ planning
    def partitions(self, start: dict, end: dict):
        from spark_coord.spark.offsets import from_json, make_partition, split_ranges, starts_from_json

        self._ensure_started()
        s, e, f = from_json(start), from_json(end), starts_from_json(end)
        ranges = {}
        for tp, until in e.items():
            frm = f.get(tp, s.get(tp, until))
            if frm > until:
                log.warning("%s-%d: planned start %d is after end %d; skipped", tp[0], tp[1], frm, until)
                continue
            if until > frm:
                ranges[tp] = (frm, until)
        pieces = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        leaders = self._resolver.leaders(sorted(ranges)) if ranges else {}
        return [make_partition(self.opts, tp, a, b, leaders.get(tp)) for tp, a, b in pieces]

    def read(self, partition):
        from spark_coord.spark.partition import read_partition

        return read_partition(partition)

    # ------------------------------------------------------------- lifecycle
    def commit(self, end: dict) -> None:
        from spark_coord.spark.offsets import from_json

        offsets = from_json(end)
        log.debug("committed %s", offsets)
        if self._source is not None:
            self._source.on_batch_committed(offsets)

    def stop(self) -> None:
        if self._source is not None:
            self._source.stop()
        if self._resolver is not None:
            self._resolver.close()
        self._reset_runtime()


_sigterm_installed = False


def _exit_cleanly_on_sigterm() -> None:
    """In Spark's source process (this thread is its main thread), make the first SIGTERM raise
    SystemExit, so the runner's ``finally: reader.stop()`` runs; later ones are ignored, so
    ``stop()`` is not interrupted.  A handler someone else installed is left alone."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def leave(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.info("SIGTERM: leaving the consumer group before the source process ends")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)
    _sigterm_installed = True
