"""One Spark input partition = one offset range of one topic-partition, and how an
executor reads it.

``read_partition`` runs on executors: it fetches ``[from_offset, until_offset)``
from the partition's leader (the driver's leader hint first, fresh metadata after
NOT_LEADER or a broken connection) and yields ``pyarrow.RecordBatch``es decoded
straight from the fetched bytes (``records.arrow.decode_to_arrow``), never per-row
tuples.  I/O, decoding and Spark's serialization overlap: as soon as an answer is
in, the fetch of the next chunk is written (pipelined on the same connection) and
a background thread receives and decodes it (CRC checks, decompression and the
compiled decoder release the GIL) while Spark serializes the batch before it.
The two receive buffers alternate and stay with the worker (``client.pool``), so a
task's memory stays at about two fetches plus two decoded batches, and no fetch
faults in fresh pages.  Records that retention removed before we got to them are data loss:
with ``failOnDataLoss`` (the default) the task fails with a message naming the
topic, partition and offsets; without it a WARNING is logged and the read skips
ahead to the log start offset.  With ``kafka.isolation.level=read_committed`` the fetches stop at the
last stable offset and the batches of aborted transactions are dropped (the answer's
``aborted_transactions``); the offsets they and the transaction markers take are gaps in a range,
not data loss, and a range that ends on them ends when the fetches pass its end, as Spark's Kafka
source does.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from pyspark.sql.datasource import InputPartition

log = logging.getLogger(__name__)

#: Attempts at a retriable error (leader moved, broker restarting) before the task fails.
MAX_RETRIES = 10


class DataLossError(RuntimeError):
    """Records of a planned range are gone (retention, truncation) and failOnDataLoss is true."""


@dataclass
class KafkaInputPartition(InputPartition):
    """The records of ``topic``-``partition`` with offsets in ``[from_offset, until_offset)``.

    ``leader_host``/``leader_port`` are the driver's view of the leader when it
    planned the range, a hint that saves a metadata round trip; ``bootstrap`` is
    the fallback when the hint is stale.
    """
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    bootstrap: str
    leader_host: str | None = None
    leader_port: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 8 * 1048576
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    socket_timeout_ms: int = 30000
    client_id: str = "spark-coord-spark"
    security: Any = None  # a security.client.ClientSecurity (pickled to executors; its repr hides secrets)
    #: how long the executor's Python worker keeps the connections for the next task (0: none)
    connections_max_idle_ms: int = 540_000
    #: 1: read_committed (fetch below the last stable offset, drop aborted transactions), 0: read_uncommitted
    isolation_level: int = 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def read_partition(p: KafkaInputPartition) -> Iterator["pyarrow.RecordBatch"]:  # noqa: F821
    """Yield the records of ``p`` as RecordBatches of Spark's Kafka schema, in offset order.

    Nothing for anything else: PySpark plans a read with no input partitions as one
    ``InputPartition(None)``."""
    global _first_read_done
    if not isinstance(p, KafkaInputPartition):
        return
    prepare_worker()
    reader = _RangeReader(p)
    try:
        yield from reader.batches()
    except Exception:
        reader.failed = True
        raise
    finally:
        reader.close()
    from spark_coord.records.arrow import decoder_loaded

    # Not at the end of a worker's first read while the compiled kernel is not loaded: that read is a fresh
    # query's first micro-batch of a few records, whose records the collection would only hold up.
    if decoder_loaded() or _first_read_done:
        settle_worker()
    _first_read_done = True


_first_read_done = False
_memory_kept = False
_objects_frozen = False


def prepare_worker() -> None:
    """Before a Python worker's first read or write: freed memory is kept for reuse
    (``spark_coord.memory``).  Every fetch decodes into fresh Arrow columns of megabytes, freed
    once Spark has them; glibc would hand such blocks back to the kernel and take fresh pages
    for the next ones, which the kernel zeroes on first touch (a sixth of the read path's CPU
    time for 100-byte records, a quarter with zstd)."""
    global _memory_kept
    if not _memory_kept:
        from spark_coord.memory import keep_freed_memory

        keep_freed_memory()
        _memory_kept = True


def settle_worker() -> None:
    """After a Spark Python worker's first task (for a read of a few records before the compiled decoder
    is loaded, its second): the objects it holds by then -- pyspark, pyarrow,
    numba and the compiled decoder, ours, all loaded -- are moved out of the cyclic garbage
    collector's sight (``gc.freeze``, after one collection).  They live as long as the worker,
    and every full collection walked all of them: the collections that each batch's objects set
    off cost a worker a tenth of its CPU time, more than the decoding of 100-byte records.
    Only in Spark's workers (``pyspark.worker`` runs them): a process of another kind may hold
    objects that become garbage later, which a frozen collector would never reclaim."""
    global _objects_frozen
    if not _objects_frozen and "pyspark.worker" in sys.modules:
        import gc

        gc.collect()
        gc.freeze()
        _objects_frozen = True


class _RangeReader:
    """Fetch loop for one range.  Its connections and receive buffers are leased from the worker's
    ``client.pool`` (kept for the next task with the same cluster and security settings: no new
    connection, TLS handshake or SASL log-in, no fresh pages for the buffers) and given back at
    the end -- or closed, after a failure or with a fetch still in flight."""

    def __init__(self, p: KafkaInputPartition) -> None:
        from spark_coord.client import pool
        from spark_coord.records.compression import Scratch

        self.p = p
        self.lease = pool.lease(p.bootstrap, p.client_id, p.socket_timeout_ms / 1000, p.security,
                                p.connections_max_idle_ms)
        self.cluster = self.lease.cluster
        self.conn = None
        self.use_hint = p.leader_host is not None  # until a failure: then leaders from fresh metadata
        self.partition_max_bytes = min(p.max_partition_fetch_bytes, p.fetch_max_bytes)
        # alternating receive buffers, and buffers to decompress them in, kept with the lease for the next task
        self._buffers = self.lease.state.setdefault("fetch_buffers", [bytearray(), bytearray()])
        self._scratch = self.lease.state.setdefault("decompress_buffers", [Scratch(), Scratch()])
        self._turn = 0
        self._in_flight: _Fetch | None = None
        self.failed = False  # set on an error: the leased client is then closed, not kept

    def close(self) -> None:
        if self._in_flight is not None and self.conn is not None:
            self.conn.close()  # a fetch still coming: this connection's stream is not reusable
        elif self.conn is not None:
            self.conn.usable()  # closes it if the broker closed it meanwhile
        if self.failed:
            self.lease.discard()
        self.lease.__exit__(None, None, None)
        self.conn = None

    # ------------------------------------------------------------------ leaders
    def _connection(self):
        if self.conn is not None and not self.conn.closed:
            return self.conn
        timeout = self.p.socket_timeout_ms / 1000
        if self.use_hint:
            try:
                self.conn = self.cluster.connection_to(self.p.leader_host, self.p.leader_port)
                return self.conn
            except OSError as e:
                log.info("%s: leader hint %s:%s unreachable (%s); asking the cluster", self.p.name,
                         self.p.leader_host, self.p.leader_port, e)
                self.use_hint = False
        self.cluster.topic(self.p.topic, refresh=True, wait=timeout)
        self.conn = self.cluster.connection(self.cluster.leader(self.p.topic, self.p.partition))
        return self.conn

    def _drop_connection(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self._in_flight = None
        self.use_hint = False  # from now on, leaders come from fresh metadata

    # ---------------------------------------------------------------- the loop
    def _send(self, offset: int) -> "_Fetch":
        from spark_coord.client.fetcher import send_fetch

        p = self.p
        slot = self._turn
        buf = self._buffers[slot]
        want = self.partition_max_bytes + _RESPONSE_SLACK
        if len(buf) < want:
            buf = self._buffers[slot] = bytearray(want)
        self._turn ^= 1
        pending = send_fetch(self._connection(), {(p.topic, p.partition): offset}, max_wait_ms=p.fetch_max_wait_ms,
                             min_bytes=p.fetch_min_bytes, max_bytes=p.fetch_max_bytes,
                             partition_max_bytes=self.partition_max_bytes, into=buf,
                             isolation_level=p.isolation_level)
        return _Fetch(offset, pending, self._scratch[slot])

    def _prefetch(self, offset: int) -> "_Fetch | None":
        """Write the fetch at ``offset`` and start receiving it in the background (None if writing fails:
        the loop fetches it again in the foreground and handles the error there)."""
        from spark_coord.client.connection import BrokerConnectionError
        from spark_coord.errors import KafkaError

        try:
            fetch = self._send(offset)
        except (BrokerConnectionError, OSError, KafkaError) as e:
            log.debug("%s: prefetch at %d not sent: %s", self.p.name, offset, e)
            return None
        fetch.receive_in_background(self._decoder(offset, fetch.scratch))
        return fetch

    def _decoder(self, offset: int, scratch):
        """What the background thread does with a fetch at ``offset`` once it is in: decode its
        records (CRC checks, decompression and the compiled decoder all release the GIL), so the
        next batch is decoded while Spark serializes this one.  Anything but a plain answer (an
        error, nothing whole, records below the log start) is left to the loop."""
        from spark_coord.records.arrow import decode_to_arrow
        from spark_coord.records.reader import next_offset as next_offset_of

        p = self.p

        def decode(outcome) -> tuple[int, object] | None:
            data = outcome[0]
            if data.error or data.records is None or (0 <= data.log_start_offset and offset < data.log_start_offset):
                return None
            next_offset = next_offset_of(data.records)
            if next_offset is None:
                return None
            return next_offset, decode_to_arrow(data.records, p.topic, p.partition, offset, p.until_offset,
                                                p.include_headers, scratch=scratch,
                                                aborted_transactions=self._aborted(data))
        return decode

    def batches(self):
        from spark_coord.client.connection import BrokerConnectionError
        from spark_coord.errors import ErrorCode, KafkaError, is_retriable
        from spark_coord.records.arrow import decode_to_arrow
        from spark_coord.records.reader import next_offset as next_offset_of

        p = self.p
        offset, until = p.from_offset, p.until_offset
        failures = 0
        ahead: _Fetch | None = None
        while offset < until:
            try:
                if ahead is not None and ahead.offset != offset:
                    ahead.discard()  # its buffer is about to be reused
                    ahead = self._in_flight = None
                fetch = ahead if ahead is not None else self._send(offset)
                ahead = None
                self._in_flight = fetch
                data = fetch.result()[0]
                self._in_flight = None
            except (BrokerConnectionError, OSError, KafkaError) as e:
                failures = self._retry(failures, f"fetch failed: {e}")
                self._drop_connection()
                continue
            if data.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                offset = self._out_of_range(offset)
                continue
            if data.error:
                if not is_retriable(data.error):
                    raise KafkaError(data.error, f"fetching {p.name} at offset {offset}")
                failures = self._retry(failures, ErrorCode.name_of(data.error))
                self._drop_connection()
                continue
            failures = 0
            records = data.records
            if 0 <= data.log_start_offset and offset < data.log_start_offset:
                offset = self._lost(offset, data.log_start_offset, "below the log start offset")
                continue
            decoded = fetch.decoded
            next_offset = decoded[0] if decoded is not None else next_offset_of(records)
            if next_offset is None:  # nothing whole came back
                if data.high_watermark <= offset:
                    offset = self._lost(offset, until, f"beyond the high watermark {data.high_watermark}")
                    continue
                if records is not None and len(records) and self.partition_max_bytes < p.fetch_max_bytes:
                    self.partition_max_bytes = min(p.fetch_max_bytes, self.partition_max_bytes * 2)
                    log.info("%s: a batch at offset %d exceeds the fetch size; asking for %d bytes", p.name, offset,
                             self.partition_max_bytes)
                    continue
                failures = self._retry(failures, f"no complete batch at offset {offset} (high watermark "
                                                  f"{data.high_watermark}, last stable offset "
                                                  f"{data.last_stable_offset}, {len(records or b'')} bytes)")
                continue
            if max(offset, next_offset) < until:
                ahead = self._in_flight = self._prefetch(max(offset, next_offset))
            rb = decoded[1] if decoded is not None else decode_to_arrow(records, p.topic, p.partition, offset, until,
                                                                         p.include_headers, scratch=fetch.scratch,
                                                                         aborted_transactions=self._aborted(data))
            del records, data, decoded, fetch  # the receive buffer is reused two fetches later
            if rb.num_rows:
                yield rb
            offset = max(offset, next_offset)

    def _aborted(self, data):
        """The aborted transactions of a fetch answer to drop (read_committed only)."""
        return data.aborted_transactions if self.p.isolation_level else None

    def _retry(self, failures: int, why: str) -> int:
        failures += 1
        if failures > MAX_RETRIES:
            raise RuntimeError(f"{self.p.name}: giving up on [{self.p.from_offset}, {self.p.until_offset}) after "
                               f"{MAX_RETRIES} retries: {why}")
        log.info("%s: %s; retry %d/%d", self.p.name, why, failures, MAX_RETRIES)
        time.sleep(min(0.05 * 2 ** failures, 1.0))
        return failures

    def _out_of_range(self, offset: int) -> int:
        """The broker says ``offset`` does not exist: find out which side and treat it as data loss."""
        from spark_coord.client.admin import EARLIEST, LATEST, AdminClient

        admin = AdminClient(self.cluster)
        self.cluster.topic(self.p.topic, refresh=True)
        earliest = admin.list_offsets(self.p.topic, [self.p.partition], EARLIEST)[self.p.partition]
        latest = admin.list_offsets(self.p.topic, [self.p.partition], LATEST)[self.p.partition]
        if offset < earliest:
            return self._lost(offset, earliest, f"below the log start offset {earliest}")
        if offset >= latest:
            return self._lost(offset, self.p.until_offset, f"beyond the log end offset {latest}")
        log.info("%s: offset %d was out of range but is now within [%d, %d); retrying", self.p.name, offset,
                 earliest, latest)
        return offset

    def _lost(self, offset: int, resume: int, why: str) -> int:
        """Records ``[offset, resume)`` are gone: fail, or warn and return where to go on."""
        p = self.p
        resume = min(resume, p.until_offset)
        message = (f"{p.name}: offsets {offset}..{resume - 1} of the planned range [{p.from_offset}, "
                   f"{p.until_offset}) are no longer available ({why}; retention or truncation removed them)")
        if p.fail_on_data_loss:
            raise DataLossError(message + ". Set failOnDataLoss=false to skip lost records with a warning.")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
        return max(resume, offset + 1) if resume <= offset else resume


#: Bytes of a Fetch answer beyond its record set (headers of one partition), for the receive buffers.
_RESPONSE_SLACK = 64 * 1024


class _Fetch:
    """One Fetch in flight, received in this thread or by one of the process's background threads."""

    def __init__(self, offset: int, pending, scratch=None) -> None:
        self.offset = offset
        self.pending = pending
        self.scratch = scratch  # where its compressed batches are decompressed
        self._done: threading.Event | None = None
        self._outcome = None
        self._error: BaseException | None = None
        #: (next offset, RecordBatch) when the background thread decoded the answer
        self.decoded: tuple[int, object] | None = None

    def receive_in_background(self, decoder=None) -> None:
        """Receive (and with ``decoder``, decode) the answer on a background thread."""
        self._done = threading.Event()
        _BACKGROUND.run(lambda: self._receive(decoder))

    def _receive(self, decoder) -> None:
        try:
            self._outcome = self.pending.result()
            if decoder is not None:
                try:
                    self.decoded = decoder(self._outcome)
                except Exception as e:  # noqa: BLE001 -- the reading thread decodes it again and meets the error itself
                    log.debug("decoding the fetch at %d in the background: %s", self.offset, e)
        except BaseException as e:  # noqa: BLE001 -- handed to the reading thread, which result() raises it in
            self._error = e
        finally:
            self._done.set()

    def discard(self) -> None:
        """Wait until nothing is received into this fetch's buffer any more; ignore its answer."""
        try:
            self.result()
        except Exception as e:  # noqa: BLE001 -- discarded: whatever it failed with no longer matters
            log.debug("discarded fetch at %d: %s", self.offset, e)

    def result(self):
        if self._done is None:
            return self.pending.result()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._outcome


class _Background:
    """Threads that receive and decode fetches, kept for the process's life: a job goes to an idle
    one, or a new one when all are busy (one per reader at a time, so one in a Spark worker).  A
    thread per fetch would map, and have the kernel zero, a fresh stack and fresh malloc heaps for
    every fetch; kept threads decode into memory their previous fetches freed."""

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()

    def run(self, job) -> None:
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), name="coordkafka-fetch", daemon=True).start()
        jobs.put(job)

    def _serve(self, jobs: queue.SimpleQueue) -> None:
        while True:
            job = jobs.get()
            try:
                job()
            except BaseException as e:  # noqa: BLE001 -- a job hands its own errors on; keep serving
                log.debug("background job failed: %s", e)
            with self._lock:
                self._idle.append(jobs)


_BACKGROUND = _Background()

