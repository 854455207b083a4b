"""``df.write.format("coordkafka")`` and ``df.writeStream.format("coordkafka")``: produce rows to topics.

Input columns are those of Spark's Kafka sink: ``value`` (binary or string,
required), and optionally ``key`` (binary or string), ``topic`` (string; the
``topic`` option wins when both are given), ``partition`` (int; else by key hash,
else round-robin) and ``headers`` (array<struct<key: string, value: binary>>);
other columns are not written, as with Spark's sink.
Each executor task produces its rows and flushes before it reports success, so a
committed batch is durably in the log (with ``acks=-1``/``1``).  The sink is an
idempotent producer by default (``kafka.enable.idempotence``): a producer id and
sequence numbers on every record batch, so a Produce sent again after a lost answer
or a broker restart is neither stored twice nor out of order.  Delivery across Spark
tasks is still at least once, as with Spark's Kafka sink: a retried task or an
aborted batch may have produced some rows already, which cannot be taken back.

With pyspark 4.x's ``DataSourceArrowWriter`` / ``DataSourceStreamArrowWriter``
(Spark hands those writers Arrow record batches instead of rows), the writers
build record batches straight from the Arrow columns (``records.builder.
arrow_batches_by_partition``: compiled, one pass over the rows, no Python per row):
rows are grouped by topic and partition (the ``partition`` column, else Kafka's
murmur2 of the key, else Kafka's sticky partitioner: one partition until
``batch.size`` bytes went to it), cut into batches of ``batch.size`` bytes and
produced one batch per partition per request.  Older
pyspark versions get the row writers, which produce row by row with
``client.producer.Producer``.

With ``kafka.transactional.id.prefix`` the sink writes exactly once (DESIGN.md, "Exactly once into
Kafka from Spark"; docs/spark/exactly-once.md): task ``p`` writes in a transaction of the
transactional id ``<prefix>-<p>`` (``client.transactions.TransactionalProducer``; its
InitProducerId fences and aborts an earlier attempt's), commits the sink group ``<prefix>``'s
offset ``N + 1`` of the pseudo-partition ``(<prefix>-sink, p)`` inside it for micro-batch ``N``,
and leaves it open: the driver's ``commit`` ends every task's transaction with EndTxn(commit),
its ``abort`` with EndTxn(abort).  A replayed batch's task that finds the offset at ``N + 1``
already (read with require_stable) writes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

try:  # pyspark 4.x: Spark passes Arrow record batches to these writers
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
except ImportError:  # pragma: no cover - older pyspark
    DataSourceArrowWriter = DataSourceStreamArrowWriter = None

from spark_coord.spark.options import SinkOptions

log = logging.getLogger(__name__)

_ALLOWED = {"key", "value", "topic", "partition", "headers"}


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task produced.

    With ``kafka.transactional.id.prefix``: ``transaction`` is the task's open transaction
    (transactional id, producer id, epoch) the driver's commit ends; None with ``done`` when the task
    found its output of the micro-batch already committed (a replay) and wrote nothing."""
    records: int = 0
    topics: list[str] = field(default_factory=list)
    transaction: tuple[str, int, int] | None = None
    done: bool = False


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
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, ShortType, StringType, StructType

    names = [f.name for f in schema.fields]
    lower: dict[str, int] = {}
    for i, n in enumerate(names):
        lower.setdefault(n.lower(), i)
    unused = [n for n in names if n.lower() not in _ALLOWED]
    if unused:  # as Spark's Kafka sink: other columns are not written
        log.debug("columns %s are not written (the sink writes key, value, topic, partition, headers)", unused)
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


def _producer(lease, opts: SinkOptions):
    """The ``Producer`` kept with the leased client for these settings (made on first use), so the
    tasks of one Python worker share one producer id and its sequences."""
    from spark_coord.client.producer import Producer

    key = ("producer", opts.acks, opts.compression, opts.batch_size, opts.retries, opts.socket_timeout_ms,
           opts.idempotence)
    producer = lease.state.get(key)
    if producer is None:
        producer = lease.state[key] = Producer(lease.cluster, acks=opts.acks, compression=opts.compression,
                                               batch_size=opts.batch_size, retries=opts.retries,
                                               timeout_ms=opts.socket_timeout_ms, idempotence=opts.idempotence)
    return producer


def _lease(opts: SinkOptions):
    """The worker's client for these settings, kept between tasks (``client.pool``); a task that
    fails closes it instead, so no later task inherits an unknown producer sequence."""
    from spark_coord.client import pool

    return pool.lease(opts.bootstrap, opts.client_id, opts.socket_timeout_ms / 1000, opts.security,
                      opts.connections_max_idle_ms)


def produce_rows(rows, opts: SinkOptions, cols: SinkColumns) -> SinkCommitMessage:
    """Produce every row, flush, and say how many went where (executor side)."""
    topics = set()
    count = 0
    with _lease(opts) as lease:
        txn = _Transaction.begin(lease, opts) if opts.transactional_id_prefix is not None else None
        if txn is not None and txn.done:
            return txn.message(0, [])
        producer = txn.producer if txn is not None else _producer(lease, opts)
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
        _pause_mid_write(opts, count)
        if txn is not None:
            return txn.prepared(count, sorted(topics))
    return SinkCommitMessage(records=count, topics=sorted(topics))


def produce_arrow(batches, opts: SinkOptions, cols: SinkColumns) -> SinkCommitMessage:
    """Produce the rows of every Arrow record batch, flush, and say how many went where (executor side)."""
    from spark_coord.records.builder import BatchArena
    from spark_coord.spark.partition import prepare_worker, settle_worker

    prepare_worker()  # Spark's gathered Arrow batches and the compressed record batches reuse memory
    topics: set[str] = set()
    count = 0
    with _lease(opts) as lease:
        txn = _Transaction.begin(lease, opts) if opts.transactional_id_prefix is not None else None
        if txn is not None and txn.done:
            return txn.message(0, [])
        producer = txn.producer if txn is not None else _producer(lease, opts)
        sticky: dict[str, tuple[int, int]] = {}
        # the record batches of one gathered Arrow batch, reused for the next (and the next task)
        arena = lease.state.setdefault("arena", BatchArena())
        for rb in _gathered(batches, _REQUEST_BYTES, opts.linger_ms):
            pending = _arrow_record_batches(rb, opts, cols, producer, sticky, arena)
            topics.update(_topics_of(rb, opts, cols))
            count += rb.num_rows
            try:
                if txn is not None:  # Kafka refuses a transactional batch of a partition not added first
                    producer.add_partitions_to_transaction(pending)
                _send_all(producer, pending, opts.max_in_flight)  # returns once every batch is acknowledged
            finally:
                arena.reset()
        _pause_mid_write(opts, count)
        if txn is not None:
            message = txn.prepared(count, sorted(topics))
    settle_worker()  # the worker's long-lived objects out of the collector's way
    if txn is not None:
        return message
    return SinkCommitMessage(records=count, topics=sorted(topics))


#: Bytes of Arrow batches the Arrow writer gathers before it builds and produces record batches.
_REQUEST_BYTES = 4 * 1048576


def _gathered(batches, min_bytes: int, linger_ms: int | None = None):
    """The non-empty Arrow batches of ``batches`` joined into batches of at least ``min_bytes``
    (the last may be smaller): record batches then fill ``batch.size`` whatever rows per
    Arrow batch Spark sends (``spark.sql.execution.arrow.maxRecordsPerBatch``), as a Kafka
    producer's per-partition accumulator does.  With ``linger_ms`` (``kafka.linger.ms``) the
    rows held go out once the first of them has waited that long (checked as each Arrow batch
    arrives), however few they are."""
    held, size, since = [], 0, 0.0
    for rb in batches:
        if not rb.num_rows:
            continue
        if not held:
            since = time.monotonic()
        held.append(rb)
        size += rb.nbytes
        if size >= min_bytes or (linger_ms is not None and (time.monotonic() - since) * 1000 >= linger_ms):
            yield _joined(held)
            held, size = [], 0
    if held:
        yield _joined(held)


def _joined(held: list):
    """One Arrow batch holding the rows of ``held`` in order (itself when there is one)."""
    import pyarrow as pa

    if len(held) == 1:
        return held[0]
    return pa.Table.from_batches(held).combine_chunks().to_batches()[0]


def _send_all(producer, pending: dict[tuple[str, int], list[tuple[bytes, int]]], max_in_flight: int = 5) -> None:
    """Produce every pending batch: one batch per partition per request (Kafka's rule), up to
    ``max_in_flight`` requests pipelined (Kafka's max.in.flight.requests.per.connection).

    A request that fails -- its connection broke before the answer came, or a partition was
    refused with a retriable code -- is produced again through ``Producer.send_batches`` (its
    retries and leader refresh), in the order the requests were sent: the requests before it
    are settled first, so a partition's batches go out again in their order.  With idempotence
    (the producer's id and sequence numbers in every batch) the broker answers a batch it
    already holds as a duplicate and refuses one that would skip a sequence
    (OUT_OF_ORDER_SEQUENCE_NUMBER, retried in its turn), so nothing is stored twice or out of
    order.  Without it, as with any Kafka producer with several requests in flight and no
    idempotence, a retried batch may be stored twice or land after batches sent behind it."""
    from collections import deque

    from spark_coord.client.connection import BrokerConnectionError
    from spark_coord.errors import KafkaError
    from spark_coord.wire.registry import ApiKey

    if producer.acks == 0:
        while pending:
            producer.send_batches({tp: queue.pop(0) for tp, queue in pending.items()})
            pending = {tp: queue for tp, queue in pending.items() if queue}
        return
    cluster = producer.cluster
    in_flight: deque = deque()

    def settle() -> None:
        group, answer = in_flight.popleft()
        try:
            resp = answer.result()
        except BrokerConnectionError as e:
            log.info("produce of %d batch(es) lost its answer (%s); producing them again", len(group), e)
            producer.send_batches(group)
            return
        again = {}
        for t in resp["responses"]:
            for p in t["partition_responses"]:
                tp, code = (t["name"], p["index"]), p["error_code"]
                if producer.retriable(code):
                    again[tp] = group[tp]
                elif code:
                    raise KafkaError(code, f"producing to {tp[0]}-{tp[1]}")
        if again:
            producer.send_batches(again)

    while pending:
        by_leader: dict[int, dict] = {}
        for tp, queue in pending.items():
            by_leader.setdefault(cluster.leader(*tp), {})[tp] = queue.pop(0)
        pending = {tp: queue for tp, queue in pending.items() if queue}
        for leader, group in by_leader.items():
            topics: dict[str, list] = {}
            for (topic, part), (records, _) in group.items():
                topics.setdefault(topic, []).append({"index": part, "records": records})
            body = {"transactional_id": producer.transactional_id, "acks": producer.acks,
                    "timeout_ms": producer.timeout_ms,
                    "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()]}
            try:
                answer = cluster.connection(leader).send(ApiKey.PRODUCE, body)
            except BrokerConnectionError:
                while in_flight:  # the requests sent before it go again first
                    settle()
                producer.send_batches(group)
                continue
            in_flight.append((group, answer))
            while len(in_flight) >= max_in_flight:
                settle()
    while in_flight:
        settle()


class _Transaction:
    """A task's transaction of a ``kafka.transactional.id.prefix`` write (executor side).

    ``begin`` makes the task's ``TransactionalProducer`` with the id ``<prefix>-<p>`` (``p``: the task's
    partition id) on the leased client and calls InitProducerId, which fences any earlier producer of the
    id and aborts its open transaction (a failed attempt's, or a replayed batch's whose driver never
    ended it).  For micro-batch ``N`` (Spark's ``streaming.sql.batchId`` local property) it then reads
    the sink group ``<prefix>``'s offset of ``(<prefix>-sink, p)`` with require_stable: ``N + 1`` (or
    more) means the task's output of batch ``N`` is committed, and ``done`` is set; else the
    transaction is begun.  ``prepared`` commits ``N + 1`` in the transaction (AddOffsetsToTxn,
    TxnOffsetCommit with generation -1: the sink group has no members), after the rows were flushed,
    and returns the message that carries the open transaction to the driver."""

    def __init__(self, producer, opts: SinkOptions, partition: int, batch_id: int | None) -> None:
        self.producer = producer
        self.opts = opts
        self.prefix = opts.transactional_id_prefix
        self.partition = partition
        self.batch_id = batch_id
        self.done = False

    @classmethod
    def begin(cls, lease, opts: SinkOptions) -> "_Transaction":
        from pyspark import TaskContext

        from spark_coord.client.transactions import TransactionalProducer, committed_offsets_stable

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("kafka.transactional.id.prefix: a transactional write runs in a Spark task")
        batch = context.getLocalProperty("streaming.sql.batchId")
        prefix = opts.transactional_id_prefix
        txn = cls(TransactionalProducer(lease.cluster, f"{prefix}-{context.partitionId()}",
                                        transaction_timeout_ms=opts.transaction_timeout_ms,
                                        compression=opts.compression, batch_size=opts.batch_size,
                                        retries=opts.retries, timeout_ms=opts.socket_timeout_ms),
                  opts, context.partitionId(), None if batch is None else int(batch))
        txn.producer.init_transactions()
        if txn.batch_id is not None:
            _ensure_sink_topic(lease.cluster, txn.sink_partition)
            committed = committed_offsets_stable(lease.cluster, prefix, [txn.sink_partition],
                                                 timeout=opts.socket_timeout_ms / 1000)
            if committed.get(txn.sink_partition, -1) >= txn.batch_id + 1:
                log.info("batch %d, task %d: its output is committed already (sink group %r at %d); writing "
                         "nothing", txn.batch_id, txn.partition, prefix, committed[txn.sink_partition])
                txn.done = True
                return txn
        txn.producer.begin_transaction()
        return txn

    @property
    def sink_partition(self) -> tuple[str, int]:
        from spark_coord.spark.options import SINK_TOPIC_SUFFIX

        return self.prefix + SINK_TOPIC_SUFFIX, self.partition

    def message(self, records: int, topics: list[str]) -> SinkCommitMessage:
        p = self.producer
        return SinkCommitMessage(records=records, topics=topics, done=self.done,
                                 transaction=None if self.done else (p.transactional_id, p.producer_id,
                                                                     p.producer_epoch))

    def prepared(self, records: int, topics: list[str]) -> SinkCommitMessage:
        """The rows are flushed: add the sink group's ``N + 1`` (streaming) and hand the open transaction
        to the driver."""
        self.producer.flush()
        if self.batch_id is not None:
            self.producer.send_offsets_to_transaction({self.sink_partition: self.batch_id + 1}, self.prefix)
        _fail_first_attempt(self.opts)
        return self.message(records, topics)


def _ensure_sink_topic(cluster, tp: tuple[str, int]) -> None:
    """The topic of the sink group's pseudo-partitions, with partition ``tp[1]``: Kafka refuses
    TxnOffsetCommit for a topic it does not have (UNKNOWN_TOPIC_OR_PARTITION), so a task creates it, or
    adds partitions, when its own is missing.  It holds no records."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.errors import ErrorCode, KafkaError

    topic, partition = tp
    admin = AdminClient(cluster)
    try:
        count = len(cluster.topic(topic, refresh=True).partitions)
    except KafkaError:
        count = 0
    if count > partition:
        return
    try:
        if count == 0:
            admin.create_topic(topic, partitions=max(partition + 1, 8), if_not_exists=True)
        count = len(cluster.topic(topic, refresh=True).partitions)
        if count <= partition:
            admin.add_partitions(topic, max(partition + 1, 2 * count))
    except KafkaError as e:  # another task grew it first: fine when it has the partition now
        if e.code not in (ErrorCode.INVALID_PARTITIONS, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise
    if len(cluster.topic(topic, refresh=True, wait=30).partitions) <= partition:
        raise RuntimeError(f"kafka.transactional.id.prefix: topic {topic!r} has no partition {partition} for the "
                           "sink group's offset of this task")


#: Test-only faults (tests/spark/test_spark_exactly_once_sink.py): a JSON object in this environment
#: variable maps an output topic to ``{"fail_commit_after": k}`` (the driver's commit ends k transactions,
#: then raises, as a driver dying mid-commit) and ``{"fail_first_attempt": true}`` (a task's first attempt
#: raises after its rows were written and flushed, as an executor lost after the write).  Two more widen the
#: windows a real SIGKILL aims at (bench/bench_eos_kills.py) and change nothing else: ``{"write_pause_ms":
#: t}`` (a task that produced its rows sleeps t ms before its offset and report, announcing its pid on stderr) and
#: ``{"commit_pause_ms": t}`` (the driver's commit sleeps t ms before each EndTxn and after the last, or
#: before and after a default sink's commit, announcing each pause on stderr).
TEST_HOOK_ENV = "SPARK_COORD_SINK_TEST_HOOK"


def _test_hook(opts: SinkOptions, name: str):
    import os

    raw = os.environ.get(TEST_HOOK_ENV)
    if not raw:
        return None
    import json

    return json.loads(raw).get(opts.topic or "", {}).get(name)


def _fail_first_attempt(opts: SinkOptions) -> None:
    if _test_hook(opts, "fail_first_attempt"):
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"{TEST_HOOK_ENV}: the first attempt of a task fails after its write")


def _pause(opts: SinkOptions, name: str, announce: str) -> None:
    """The hook's ``name`` pause (``TEST_HOOK_ENV``), ``announce`` printed to stderr first."""
    pause_ms = _test_hook(opts, name)
    if pause_ms:
        import sys

        print(f"{TEST_HOOK_ENV}: {announce}; pausing {pause_ms} ms", file=sys.stderr, flush=True)
        time.sleep(pause_ms / 1000)


def _pause_mid_write(opts: SinkOptions, produced: int) -> None:
    """The hook's ``write_pause_ms`` in a task that produced rows: they are acknowledged, its
    transaction's offset and its report to the driver are still to come."""
    if produced and _test_hook(opts, "write_pause_ms"):
        import os

        from pyspark import TaskContext

        context = TaskContext.get()
        _pause(opts, "write_pause_ms", f"mid-write pid {os.getpid()} task {context.partitionId()} batch "
               f"{context.getLocalProperty('streaming.sql.batchId')} attempt {context.attemptNumber()}")


def _end_transactions(opts: SinkOptions, messages, batch_id: int | None, commit: bool) -> int:
    """EndTxn(commit or abort) of every task's open transaction (driver side); returns how many.  A
    commit that Kafka refuses raises: the transaction was aborted (it outlived kafka.transaction.timeout.ms,
    or a newer producer of its id fenced it), so the batch must not be marked done; the query stops and,
    restarted, replays the batch, whose tasks write again what was aborted.  An abort refused as fenced
    was aborted already, and is only logged."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionError, end_transaction

    open_ones = [m.transaction for m in messages if isinstance(m, SinkCommitMessage) and m.transaction]
    if not open_ones:
        if commit and _test_hook(opts, "fail_commit_after") is not None:
            raise RuntimeError(f"{TEST_HOOK_ENV}: the driver's commit stops")
        return 0
    what = "write" if batch_id is None else f"batch {batch_id}"
    stop_after = _test_hook(opts, "fail_commit_after") if commit else None
    with ClusterClient(opts.bootstrap, client_id=opts.client_id, timeout=opts.socket_timeout_ms / 1000,
                       security=opts.security) as cluster:
        for i, (tid, producer_id, epoch) in enumerate(open_ones):
            if commit:
                _pause(opts, "commit_pause_ms", f"commit of {what}: before transaction {i + 1} of {len(open_ones)}")
            if stop_after is not None and i >= stop_after:
                raise RuntimeError(f"{TEST_HOOK_ENV}: the driver's commit stops after {stop_after} transaction(s)")
            try:
                end_transaction(cluster, tid, producer_id, epoch, commit)
            except TransactionError as e:
                if not commit:
                    log.warning("%s: abort of transactional id %r: %s", what, tid, e)
                    continue
                raise RuntimeError(
                    f"{what}: the transaction of {tid!r} (producer id {producer_id}, epoch {epoch}) cannot be "
                    f"committed: {e}. Kafka aborted it (it was open longer than kafka.transaction.timeout.ms="
                    f"{opts.transaction_timeout_ms}, or a newer producer of the id fenced it); restart the query "
                    "and the batch is replayed, each task writing again what was not committed") from e
    if commit:
        _pause(opts, "commit_pause_ms", f"commit of {what}: committed {len(open_ones)} transaction(s)")
    return len(open_ones)


def _topics_of(rb, opts: SinkOptions, cols: SinkColumns) -> list[str]:
    import pyarrow.compute as pc

    if opts.topic is not None:
        return [opts.topic]
    return [t for t in pc.unique(rb.column(cols.topic)).to_pylist() if t is not None]


def _arrow_record_batches(rb, opts: SinkOptions, cols: SinkColumns, producer, sticky: dict[str, tuple[int, int]],
                          arena=None) -> dict[tuple[str, int], list[tuple[bytes, int]]]:
    """The record batches of one Arrow batch's rows, by (topic, partition); uncompressed ones in
    ``arena`` (a ``BatchArena``) when given."""
    import numpy as np
    import pyarrow.compute as pc

    from spark_coord.records.builder import ArrowColumns, arrow_batches_by_partition
    from spark_coord.records.compression import codec_id

    columns = ArrowColumns(rb.column(cols.key) if cols.key is not None else None, rb.column(cols.value),
                           rb.column(cols.headers) if cols.headers is not None else None)
    if opts.topic is not None:
        by_topic = [(opts.topic, np.arange(rb.num_rows))]
    else:
        topic_col = rb.column(cols.topic)
        if topic_col.null_count:
            raise ValueError("topic: a row has a null topic column and no topic option is set")
        by_topic = [(t, np.flatnonzero(pc.equal(topic_col, t).to_numpy(zero_copy_only=False)))
                    for t in pc.unique(topic_col).to_pylist()]
    codec = codec_id(opts.compression)
    now = int(time.time() * 1000)
    out: dict[tuple[str, int], list[tuple[bytes, int]]] = {}
    for topic, rows in by_topic:
        n = producer.partition_count(topic)
        parts = np.full(rb.num_rows, -1, np.int64)
        if cols.partition is not None:  # null: the default partitioner decides
            given = rb.column(cols.partition)
            valid = given.is_valid().to_numpy(zero_copy_only=False)
            values = np.asarray(given.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
            bad = rows[valid[rows] & ((values[rows] < 0) | (values[rows] >= n))]
            if len(bad):
                raise ValueError(f"partition: {int(values[bad[0]])} is not a partition of {topic!r} (0..{n - 1})")
            parts = np.where(valid, values, -1)
        unset = rows[parts[rows] < 0]
        if len(unset):
            keyed = columns.key_partitions(n)
            parts[unset] = keyed[unset]
            keyless = unset[parts[unset] < 0]
            if len(keyless):
                parts[keyless] = _sticky_partitions(columns, keyless, n, opts.batch_size, sticky, topic)
        ident = producer.ensure_producer_id() if producer.idempotence else None
        sequences = {q: seq for (t, q), seq in producer.sequences.items() if t == topic}
        # a transactional producer's batches are built with the transactional bit (Kafka's rule)
        by_partition = arrow_batches_by_partition(columns, rows, parts[rows], n, codec, opts.batch_size, now,
                                                  arena=arena, producer=ident, sequences=sequences,
                                                  transactional=producer.transactional_id is not None)
        for part, batches in by_partition.items():
            out[(topic, part)] = batches
        producer.sequences.update({(topic, q): seq for q, seq in sequences.items()})
    return out


def _sticky_partitions(columns, rows, partitions: int, batch_size: int, sticky: dict[str, tuple[int, int]],
                       topic: str):
    """Partitions for keyless ``rows`` as Kafka's sticky partitioner chooses them (KIP-794): one
    partition until ``batch_size`` bytes went to it, then the next; ``sticky[topic]`` carries
    (partition, bytes in it so far) from one Arrow batch to the next, starting at a random one."""
    import random

    import numpy as np

    start, filled = sticky.get(topic, (random.randrange(partitions), 0))
    sizes = columns.row_bytes(rows)
    before = filled + np.cumsum(sizes) - sizes  # bytes of this run before each row
    total = filled + int(sizes.sum())
    sticky[topic] = ((start + total // batch_size) % partitions, total % batch_size)
    return (start + before // batch_size) % partitions


def _total(messages) -> int:
    return sum(m.records for m in messages if isinstance(m, SinkCommitMessage))


class CoordKafkaRowWriter(DataSourceWriter):
    """Batch write, row by row (pyspark without Arrow writers): each task produces its rows."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator) -> SinkCommitMessage:
        return produce_rows(iterator, self.opts, self.cols)

    def commit(self, messages) -> None:
        if self.opts.transactional_id_prefix is not None:
            ended = _end_transactions(self.opts, messages, None, True)
            log.info("write committed: %d record(s) in %d transaction(s)", _total(messages), ended)
            return
        log.info("write committed: %d record(s) produced", _total(messages))

    def abort(self, messages) -> None:
        if self.opts.transactional_id_prefix is not None:
            ended = _end_transactions(self.opts, messages, None, False)
            log.warning("write aborted: %d transaction(s) aborted, their records never read by read_committed",
                        ended)
            return
        log.warning("write aborted after %d record(s) were produced; they stay in the log (at-least-once)",
                    _total(messages))


class CoordKafkaRowStreamWriter(DataSourceStreamWriter):
    """Streaming write, row by row (pyspark without Arrow writers): each micro-batch's tasks produce their rows."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator) -> SinkCommitMessage:
        return produce_rows(iterator, self.opts, self.cols)

    def commit(self, messages, batchId: int) -> None:
        if self.opts.transactional_id_prefix is not None:
            ended = _end_transactions(self.opts, messages, batchId, True)
            log.info("batch %d committed: %d record(s) in %d transaction(s)", batchId, _total(messages), ended)
            return
        if _test_hook(self.opts, "fail_commit_after") is not None:
            raise RuntimeError(f"{TEST_HOOK_ENV}: the driver's commit stops")
        _pause(self.opts, "commit_pause_ms", f"commit of batch {batchId}: before the commit")
        log.info("batch %d committed: %d record(s) produced", batchId, _total(messages))
        _pause(self.opts, "commit_pause_ms", f"commit of batch {batchId}: committed")

    def abort(self, messages, batchId: int) -> None:
        if self.opts.transactional_id_prefix is not None:
            ended = _end_transactions(self.opts, messages, batchId, False)
            log.warning("batch %d aborted: %d transaction(s) aborted, their records never read by read_committed",
                        batchId, ended)
            return
        log.warning("batch %d aborted after %d record(s) were produced; they stay in the log (at-least-once)",
                    batchId, _total(messages))


if DataSourceArrowWriter is not None:
    class CoordKafkaArrowWriter(CoordKafkaRowWriter, DataSourceArrowWriter):
        """Batch write from Arrow record batches: each task builds record batches from the columns."""

        def write(self, iterator) -> SinkCommitMessage:
            return produce_arrow(iterator, self.opts, self.cols)

    class CoordKafkaArrowStreamWriter(CoordKafkaRowStreamWriter, DataSourceStreamArrowWriter):
        """Streaming write from Arrow record batches: each micro-batch's tasks build record batches."""

        def write(self, iterator) -> SinkCommitMessage:
            return produce_arrow(iterator, self.opts, self.cols)

    CoordKafkaWriter, CoordKafkaStreamWriter = CoordKafkaArrowWriter, CoordKafkaArrowStreamWriter
else:  # pragma: no cover - older pyspark
    CoordKafkaWriter, CoordKafkaStreamWriter = CoordKafkaRowWriter, CoordKafkaRowStreamWriter
