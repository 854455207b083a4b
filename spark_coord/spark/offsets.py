"""Driver-side look-ups shared by the batch and the stream reader, and the offset JSON.

A stream offset is Spark's Kafka source's JSON, ``{"topic": {"0": 23, "1": 7}}``:
for each partition, the next offset to read.  One optional extra key, ``"$from"``
(``$`` cannot occur in a topic name), holds the same shape and says where a
batch starts reading partitions whose start is not the previous offset: a
partition first seen in this batch, or one whose coordinator handed out a start
offset.  With it, ``partitions(start, end)`` depends only on the two logged
offsets, so a restarted query replays its last batch exactly.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Iterable

from spark_coord.common import TopicPartition
from spark_coord.spark.options import EARLIEST, LATEST, SourceOptions

log = logging.getLogger(__name__)

FROM_KEY = "$from"


def to_json(offsets: dict[TopicPartition, int], starts: dict[TopicPartition, int] | None = None) -> dict:
    """``{(t, p): o}`` (plus per-partition starts) as offset JSON, keys sorted so equal offsets dump equal."""
    out: dict = {}
    for (topic, part) in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    if starts:
        out[FROM_KEY] = to_json(starts)
    return out


def from_json(value: dict | None) -> dict[TopicPartition, int]:
    """The per-partition offsets of offset JSON (``$from`` left out); ValueError on anything else."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in (value or {}).items():
        if topic == FROM_KEY:
            continue
        if not isinstance(parts, dict):
            raise ValueError(f"offset JSON: topic {topic!r} maps to {parts!r}, not an object")
        for part, off in parts.items():
            if not str(part).isdigit() or not isinstance(off, int) or off < 0:
                raise ValueError(f"offset JSON: {topic}-{part} -> {off!r} is not a partition and an offset")
            out[(topic, int(part))] = off
    return out


def starts_from_json(value: dict | None) -> dict[TopicPartition, int]:
    """The ``$from`` part of offset JSON."""
    return from_json((value or {}).get(FROM_KEY))


class OffsetResolver:
    """Metadata and ListOffsets against the cluster, for planning on the driver.

    Holds one ``ClusterClient``; create it lazily (``open()``), never in a reader's
    constructor, because Spark pickles readers to ship them to executors.
    """

    def __init__(self, opts: SourceOptions) -> None:
        from spark_coord.client.admin import AdminClient
        from spark_coord.client.metadata import ClusterClient

        self.opts = opts
        self.cluster = ClusterClient(opts.bootstrap, client_id=opts.client_id, timeout=opts.socket_timeout_ms / 1000,
                                     security=opts.security)
        self.admin = AdminClient(self.cluster)

    def close(self) -> None:
        self.cluster.close()

    def topic_partitions(self) -> list[TopicPartition]:
        """Every existing partition the options select (subscribe / subscribePattern / assign), sorted."""
        opts = self.opts
        if opts.subscribe_pattern is not None:
            meta = self.cluster.refresh(None)
            topics = sorted(t for t, info in meta.items() if info.error == 0 and opts.matches(t))
        else:
            wanted = list(opts.subscribe or ()) or sorted(opts.assign or {})
            meta = self.cluster.refresh(wanted)
            topics = [t for t in wanted if t in meta and meta[t].error == 0]
            missing = [t for t in wanted if t not in topics]
            if missing:
                log.debug("topics not (yet) in the cluster: %s", ", ".join(missing))
        out = []
        for t in topics:
            parts = sorted(meta[t].partitions)
            if opts.assign is not None:
                absent = [p for p in opts.assign[t] if p not in meta[t].partitions]
                if absent:
                    log.warning("assign: %s has no partition(s) %s; they are not read", t, absent)
                parts = [p for p in opts.assign[t] if p in meta[t].partitions]
            out.extend((t, p) for p in parts)
        return out

    def gone(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Those of ``tps`` that no longer exist, by fresh metadata of their topics: the topic is
        unknown, or has no such partition (a topic in another error state counts as existing)."""
        from spark_coord.errors import ErrorCode

        tps = list(tps)
        meta = self.cluster.refresh(sorted({t for t, _ in tps}))
        return [(t, p) for t, p in tps
                if t not in meta or meta[t].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                or (meta[t].error == 0 and p not in meta[t].partitions)]

    def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int | dict[TopicPartition, int]
                     ) -> dict[TopicPartition, int]:
        """Offsets of ``tps`` for ``timestamp`` (EARLIEST, LATEST, epoch ms, or one of those per
        partition: the first record at or after it, -1 when none is), grouped per topic; with
        ``kafka.isolation.level=read_committed`` latest is the last stable offset.  A retriable
        failure is retried ``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs`` apart."""
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        out = {}
        for t, parts in by_topic.items():
            stamps = {p: timestamp[(t, p)] for p in parts} if isinstance(timestamp, dict) else timestamp
            call = functools.partial(self.admin.list_offsets, t, sorted(parts), stamps, self.opts.isolation_level)
            for p, off in self._retrying(call, t).items():
                out[(t, p)] = off
        return out

    def _retrying(self, call, topic: str):
        from spark_coord.client.connection import BrokerConnectionError
        from spark_coord.errors import KafkaError, is_retriable

        for attempt in range(self.opts.offset_retries + 1):
            try:
                return call()
            except (KafkaError, BrokerConnectionError) as e:
                if isinstance(e, KafkaError) and not is_retriable(e.code) or attempt == self.opts.offset_retries:
                    raise
                log.info("offsets of %s: %s; retry %d/%d", topic, e, attempt + 1, self.opts.offset_retries)
                time.sleep(self.opts.offset_retry_interval_ms / 1000)
                self.cluster.topics.pop(topic, None)  # leaders from fresh metadata

    def starting(self, tps: list[TopicPartition], policy=None) -> dict[TopicPartition, int]:
        """Where ``tps`` start, by Spark's order: ``startingTimestamp``, else
        ``startingOffsetsByTimestamp``, else ``policy`` (default ``startingOffsets``)."""
        o = self.opts
        if o.starting_timestamp is not None:
            return self._by_timestamp(dict.fromkeys(tps, o.starting_timestamp), "startingTimestamp", True)
        if o.starting_by_timestamp is not None:
            return self._by_timestamp(self._spec_for(o.starting_by_timestamp, tps, "startingOffsetsByTimestamp"),
                                      "startingOffsetsByTimestamp", True)
        return self.resolve(o.starting if policy is None else policy, tps, "startingOffsets")

    def ending(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where a batch read of ``tps`` ends: ``endingTimestamp``, else ``endingOffsetsByTimestamp``,
        else ``endingOffsets`` (Spark's order); no record that recent: the latest offset."""
        o = self.opts
        if o.ending_timestamp is not None:
            return self._by_timestamp(dict.fromkeys(tps, o.ending_timestamp), "endingTimestamp", False)
        if o.ending_by_timestamp is not None:
            return self._by_timestamp(self._spec_for(o.ending_by_timestamp, tps, "endingOffsetsByTimestamp"),
                                      "endingOffsetsByTimestamp", False)
        return self.resolve(o.ending, tps, "endingOffsets")

    @staticmethod
    def _spec_for(spec: dict[str, dict[int, int]], tps: list[TopicPartition], option: str
                  ) -> dict[TopicPartition, int]:
        missing = [tp for tp in tps if tp[1] not in spec.get(tp[0], {})]
        if missing:
            raise ValueError(f"{option}: no timestamp for {', '.join(f'{t}-{p}' for t, p in missing)}; as in "
                             "Spark, give one for every partition the query reads (-2 earliest, -1 latest)")
        return {tp: spec[tp[0]][tp[1]] for tp in tps}

    def _by_timestamp(self, stamps: dict[TopicPartition, int], option: str, start: bool
                      ) -> dict[TopicPartition, int]:
        """The first offset at or after each partition's timestamp (-2/-1: earliest/latest).  None
        that recent: for an end, the latest offset; for a start, as startingOffsetsByTimestampStrategy
        says: fail ("error") or the latest offset ("latest")."""
        if not stamps:
            return {}
        found = self.list_offsets(list(stamps), stamps)
        missing = [tp for tp, off in found.items() if off < 0]
        if missing and start and self.opts.starting_timestamp_strategy == "error":
            t, p = missing[0]
            raise ValueError(f"{option}: {t}-{p} has no record with a timestamp at or after {stamps[(t, p)]} "
                             f"({len(missing)} partition(s) like it); startingOffsetsByTimestampStrategy=latest "
                             "starts such partitions at their latest offset")
        if missing:
            found.update(self.latest(missing))
        log.info("%s: offsets %s", option, found)
        return found

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(tps, EARLIEST)

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(tps, LATEST)

    def leaders(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[str, int] | None]:
        """Leader address per partition from the cached metadata (None when unknown)."""
        from spark_coord.errors import KafkaError
        from spark_coord.wire.types import ProtocolError

        out = {}
        for t, p in tps:
            try:
                out[(t, p)] = self.cluster.brokers.get(self.cluster.leader(t, p))
            except (KafkaError, OSError, ProtocolError) as e:  # a hint only: executors look it up themselves
                log.debug("no leader hint for %s-%d: %s", t, p, e)
                out[(t, p)] = None
        return out

    def resolve(self, spec, tps: list[TopicPartition], what: str) -> dict[TopicPartition, int]:
        """Offsets for ``tps`` from ``"earliest"``/``"latest"`` or a JSON spec (-2/-1 inside it allowed).

        Partitions a JSON spec leaves out default to earliest for a start and latest
        for an end, as Spark's Kafka source does for partitions the spec forgot.
        """
        if spec == "earliest":
            return self.earliest(tps)
        if spec == "latest":
            return self.latest(tps)
        if not isinstance(spec, dict):
            raise ValueError(f"{what}: cannot resolve {spec!r} here")
        default = EARLIEST if what == "startingOffsets" else LATEST
        want = {tp: spec.get(tp[0], {}).get(tp[1], default) for tp in tps}
        out = {tp: off for tp, off in want.items() if off >= 0}
        earliest_needed = [tp for tp, off in want.items() if off == EARLIEST]
        latest_needed = [tp for tp, off in want.items() if off == LATEST]
        if earliest_needed:
            out.update(self.earliest(earliest_needed))
        if latest_needed:
            out.update(self.latest(latest_needed))
        return out


def make_partition(opts: SourceOptions, tp: TopicPartition, start: int, end: int,
                   leader: tuple[str, int] | None):
    """A ``KafkaInputPartition`` for ``tp`` over ``[start, end)`` carrying the read options."""
    from spark_coord.spark.partition import KafkaInputPartition

    return KafkaInputPartition(
        topic=tp[0], partition=tp[1], from_offset=start, until_offset=end, bootstrap=opts.bootstrap,
        leader_host=leader[0] if leader else None, leader_port=leader[1] if leader else None,
        include_headers=opts.include_headers, fail_on_data_loss=opts.fail_on_data_loss,
        fetch_max_bytes=opts.fetch_max_bytes, max_partition_fetch_bytes=opts.max_partition_fetch_bytes,
        fetch_max_wait_ms=opts.fetch_max_wait_ms, fetch_min_bytes=opts.fetch_min_bytes,
        socket_timeout_ms=opts.poll_timeout_ms or opts.socket_timeout_ms, client_id=opts.client_id,
        security=opts.security, connections_max_idle_ms=opts.connections_max_idle_ms,
        isolation_level=opts.isolation_level)


def split_ranges(ranges: dict[TopicPartition, tuple[int, int]], min_partitions: int | None,
                 max_records: int | None = None) -> list[tuple[TopicPartition, int, int]]:
    """Ranges as ``(tp, start, end)``, cut as Spark's Kafka source cuts them: first every range into
    pieces of at most ``max_records`` (``maxRecordsPerPartition``), then, while there are fewer
    than ``min_partitions`` pieces, each piece into more in proportion to its size.

    The result is a pure function of the input, so planning stays deterministic.
    """
    items = [(tp, s, e) for tp, (s, e) in sorted(ranges.items()) if e > s]
    if max_records:
        items = [piece for tp, s, e in items for piece in _even(tp, s, e, -(-(e - s) // max_records))]
    if not min_partitions or len(items) >= min_partitions:
        return items
    total = sum(e - s for _, s, e in items)
    return [piece for tp, s, e in items
            for piece in _even(tp, s, e, max(1, min(e - s, round(min_partitions * (e - s) / total))))]


def _even(tp: TopicPartition, s: int, e: int, pieces: int) -> list[tuple[TopicPartition, int, int]]:
    """``[s, e)`` in ``pieces`` contiguous pieces whose sizes differ by at most one."""
    step, extra = divmod(e - s, pieces)
    out, pos = [], s
    for i in range(pieces):
        nxt = pos + step + (1 if i < extra else 0)
        out.append((tp, pos, nxt))
        pos = nxt
    return out
