"""``df.write.format("coordkafka")`` and ``df.writeStream.format("coordkafka")``: produce rows to topics.

Input columns are those of Spark's Kafka sink: ``value`` (binary or string,
required), and optionally ``key`` (binary or string), ``topic`` (string; the
``topic`` option wins when both are given), ``partition`` (int; else by key hash,
else round-robin) and ``headers`` (array<struct<key: string, value: binary>>).
Each executor task produces its rows with ``client.producer.Producer`` and flushes
before it reports success, so a committed batch is durably in the log (with
``acks=-1``/``1``).  Delivery is at least once: a retried task or an aborted
batch may have produced some rows already, which cannot be taken back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from spark_coord.spark.options import SinkOptions

log = logging.getLogger(__name__)

_ALLOWED = {"key", "value", "topic", "partition", "headers"}


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task produced."""
    records: int = 0
    topics: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SinkColumns:
    """Positions of the Kafka columns in the input rows (None = column absent)."""
    value: int
    key: int | None = None
    topic: int | None = None
    partition: int | None = None
    headers: int | None = None


def check_input_schema(schema, opts: SinkOptions) -> SinkColumns:
    """Validate the DataFrame's columns against what the sink takes; ValueError names the column."""
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, ShortType, StringType,
                                   StructType)

    names = [f.name for f in schema.fields]
    lower = {n.lower(): i for i, n in enumerate(names)}
    unknown = [n for n in names if n.lower() not in _ALLOWED]
    if unknown:
        raise ValueError(f"column {unknown[0]!r}: the coordkafka sink takes only key, value, topic, partition "
                         f"and headers columns (select them first), got {names}")
    if "value" not in lower:
        raise ValueError(f"column 'value': required by the coordkafka sink, got {names}")

    def typed(name: str, ok: tuple, what: str) -> int | None:
        i = lower.get(name)
        if i is not None and not isinstance(schema.fields[i].dataType, ok):
            raise ValueError(f"column {name!r}: must be {what}, got {schema.fields[i].dataType.simpleString()}")
        return i

    cols = SinkColumns(
        value=typed("value", (BinaryType, StringType), "binary or string"),
        key=typed("key", (BinaryType, StringType), "binary or string"),
        topic=typed("topic", (StringType,), "string"),
        partition=typed("partition", (IntegerType, ShortType, LongType), "int"),
        headers=typed("headers", (ArrayType,), "array<struct<key: string, value: binary>>"),
    )
    if cols.headers is not None:
        element = schema.fields[cols.headers].dataType.elementType
        if not (isinstance(element, StructType) and [f.name.lower() for f in element.fields] == ["key", "value"]
                and isinstance(element.fields[0].dataType, StringType)
                and isinstance(element.fields[1].dataType, (BinaryType, StringType))):
            raise ValueError(f"column 'headers': must be array<struct<key: string, value: binary>>, got "
                             f"{schema.fields[cols.headers].dataType.simpleString()}")
    if cols.topic is None and opts.topic is None:
        raise ValueError("topic: no topic option and no topic column; say where the rows go")
    return cols


def _bytes(value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def produce_rows(rows, opts: SinkOptions, cols: SinkColumns) -> SinkCommitMessage:
    """Produce every row, flush, and say how many went where (executor side)."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    cluster = ClusterClient(opts.bootstrap, client_id=opts.client_id, timeout=opts.socket_timeout_ms / 1000)
    topics = set()
    count = 0
    try:
        producer = Producer(cluster, acks=opts.acks, compression=opts.compression, batch_size=opts.batch_size,
                            retries=opts.retries, timeout_ms=opts.socket_timeout_ms)
        for row in rows:
            topic = opts.topic if opts.topic is not None else row[cols.topic]
            if topic is None:
                raise ValueError("topic: a row has a null topic column and no topic option is set")
            headers = ()
            if cols.headers is not None and row[cols.headers]:
                headers = [(h[0], _bytes(h[1])) for h in row[cols.headers]]
            producer.send(topic, _bytes(row[cols.value]),
                          key=_bytes(row[cols.key]) if cols.key is not None else None,
                          headers=headers,
                          partition=row[cols.partition] if cols.partition is not None else None)
            topics.add(topic)
            count += 1
        producer.flush()
    finally:
        cluster.close()
    return SinkCommitMessage(records=count, topics=sorted(topics))


def _total(messages) -> int:
    return sum(m.records for m in messages if isinstance(m, SinkCommitMessage))


class CoordKafkaWriter(DataSourceWriter):
    """Batch write: each task produces its rows."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator) -> SinkCommitMessage:
        return produce_rows(iterator, self.opts, self.cols)

    def commit(self, messages) -> None:
        log.info("write committed: %d record(s) produced", _total(messages))

    def abort(self, messages) -> None:
        log.warning("write aborted after %d record(s) were produced; they stay in the log (at-least-once)",
                    _total(messages))


class CoordKafkaStreamWriter(DataSourceStreamWriter):
    """Streaming write: each micro-batch's tasks produce their rows."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator) -> SinkCommitMessage:
        return produce_rows(iterator, self.opts, self.cols)

    def commit(self, messages, batchId: int) -> None:
        log.info("batch %d committed: %d record(s) produced", batchId, _total(messages))

    def abort(self, messages, batchId: int) -> None:
        log.warning("batch %d aborted after %d record(s) were produced; they stay in the log (at-least-once)",
                    batchId, _total(messages))
