"""A small synchronous producer: record batches per partition, Produce to leaders.

Used by ``spark-coord produce``, the demo, tests and benchmarks, and by the Spark
sink.  Keys are partitioned with Kafka's murmur2 rule (as the Java client does), so
records with the same key land where other Kafka producers would put them.  Records
without a key are partitioned as Kafka's sticky partitioner does (KIP-480): they all
go to one partition until its batch is sent, then to another one; the first partition
of a topic is chosen at random, so short runs of a producer (one ``spark-coord
produce`` per file) spread over the partitions instead of all filling the first.

With ``idempotence`` it is Kafka's idempotent producer: it asks a broker for a
producer id (InitProducerId) before its first batch, and gives every batch of a
partition the next sequence numbers.  A Produce whose answer was lost (the
connection broke) or that failed with a retriable error is sent again, byte for
byte: the broker answers a batch it already holds as a duplicate (its original
offset) instead of storing it twice, and refuses one that would skip a sequence
(OUT_OF_ORDER_SEQUENCE_NUMBER, retried once the batches before it are in), so
nothing is duplicated or reordered.  Without it a retried batch may be stored
twice (at least once, as Kafka's producer with idempotence off).

``client.transactions.TransactionalProducer`` is this producer with a transactional id: its
batches are marked transactional and carry the id in Produce.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from typing import Iterable, Sequence

from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode, KafkaError, is_retriable
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.compression import codec_id
from spark_coord.records.partitioner import partition_for_key
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)


class Producer:
    """``send()`` buffers into per-partition batches; ``flush()`` (or a full batch) sends them.

    Parameters
    ----------
    cluster : ClusterClient
    acks : 0, 1 or -1
    compression : "none", "gzip", "snappy", "lz4" or "zstd"
    batch_size : bytes per record batch before it is sent
    retries : attempts per batch on retriable errors (leader moved, topic not yet known, the
        connection broke before the answer came)
    rng : where the sticky partitioner draws partitions for records without a key
    idempotence : producer id and sequence numbers on every batch (needs acks=-1)
    """

    def __init__(self, cluster: ClusterClient, acks: int = 1, compression: str = "none",
                 batch_size: int = 16384, retries: int = 5, timeout_ms: int = 30000,
                 rng: random.Random | None = None, idempotence: bool = False):
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1, 0 or 1, not {acks!r}")
        if idempotence and acks != -1:
            raise ValueError(f"an idempotent producer needs acks=-1 (all), not {acks!r}")
        self.idempotence = idempotence
        #: set by ``TransactionalProducer``: sent in Produce, and its batches are marked transactional
        self.transactional_id: str | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        #: (topic, partition) -> the base sequence of its next batch (idempotence)
        self.sequences: dict[tuple[str, int], int] = {}
        self.cluster = cluster
        self.acks = acks
        self.codec = codec_id(compression)  # ValueError naming the known codecs
        self.batch_size = batch_size
        self.retries = retries
        self.timeout_ms = timeout_ms
        self._builders: dict[tuple[str, int], BatchBuilder] = {}
        self._counts: dict[tuple[str, int], int] = defaultdict(int)
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}       # topic -> partition of the keyless records' open batch
        self._last_sticky: dict[str, int] = {}  # topic -> the sticky partition before it
        self.sent_records = 0
        self.sent_bytes = 0

    def ensure_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch), asked of a broker (InitProducerId) the first time; (-1, -1) without
        idempotence.  Retriable refusals (COORDINATOR_NOT_AVAILABLE while the broker reaches
        ZooKeeper) are retried ``retries`` times."""
        if not self.idempotence or self.producer_id >= 0:
            return self.producer_id, self.producer_epoch
        body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
        for attempt in range(self.retries + 1):
            resp = self.cluster.request_any(ApiKey.INIT_PRODUCER_ID, body)
            code = resp["error_code"]
            if not code:
                self.producer_id, self.producer_epoch = resp["producer_id"], resp["producer_epoch"]
                log.debug("producer id %d, epoch %d", self.producer_id, self.producer_epoch)
                return self.producer_id, self.producer_epoch
            if not is_retriable(code) or attempt == self.retries:
                raise KafkaError(code, "InitProducerId: no producer id for an idempotent producer")
            time.sleep(min(0.1 * 2 ** attempt, 2.0))
        raise AssertionError("unreachable")

    def partition_count(self, topic: str) -> int:
        return len(self.cluster.topic(topic, wait=5.0).partitions)

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes | None]] = (), partition: int | None = None,
             timestamp_ms: int | None = None) -> None:
        if partition is None:
            n = self.partition_count(topic)
            partition = partition_for_key(key, n) if key is not None else self._sticky_partition(topic, n)
        tp = (topic, partition)
        builder = self._builders.get(tp)
        if builder is None:
            pid, epoch = self.ensure_producer_id()
            builder = self._builders[tp] = BatchBuilder(codec=self.codec, producer_id=pid, producer_epoch=epoch,
                                                         is_transactional=self.transactional_id is not None)
        builder.append(value, key=key, headers=headers,
                       timestamp_ms=timestamp_ms if timestamp_ms is not None else int(time.time() * 1000))
        self._counts[tp] += 1
        if builder.size_estimate >= self.batch_size:
            self._send({tp: self._take(tp)})

    def _sticky_partition(self, topic: str, n: int) -> int:
        """The partition keyless records of ``topic`` go to now: chosen at random when the
        previous one's batch was sent (never the same one twice in a row when n > 1)."""
        partition = self._sticky.get(topic)
        if partition is None or partition >= n:
            last = self._last_sticky.get(topic)
            partition = self._rng.randrange(n - 1 if last is not None and n > 1 else n)
            if last is not None and n > 1 and partition >= last:
                partition += 1  # skip the previous sticky partition
            self._sticky[topic] = partition
        return partition

    def _take(self, tp) -> tuple[bytes, int]:
        """Close the batch of ``tp`` for sending; keyless records then move on to another partition."""
        topic, partition = tp
        if self._sticky.get(topic) == partition:
            self._last_sticky[topic] = self._sticky.pop(topic)
        builder = self._builders.pop(tp)
        count = self._counts.pop(tp)
        if self.idempotence:
            builder.base_sequence = self.take_sequence(tp, count)
        return builder.build(), count

    def take_sequence(self, tp: tuple[str, int], count: int) -> int:
        """The base sequence of the next batch of ``tp`` (``count`` records); sequences wrap at 2**31."""
        first = self.sequences.get(tp, 0)
        self.sequences[tp] = (first + count) % 2**31
        return first

    def flush(self) -> None:
        if self._builders:
            self._send({tp: self._take(tp) for tp in list(self._builders)})

    def send_batches(self, batches: dict[tuple[str, int], tuple[bytes, int]]) -> None:
        """Produce built record batches, one per (topic, partition): (batch bytes, record count)."""
        self._send(dict(batches))

    def retriable(self, code: int) -> bool:
        """Whether a batch refused with ``code`` is sent again: Kafka's retriable codes, and for an
        idempotent producer OUT_OF_ORDER_SEQUENCE_NUMBER (a batch before it is being retried)."""
        return is_retriable(code) or (self.idempotence and code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def _send(self, batches: dict[tuple[str, int], tuple[bytes, int]]) -> None:
        from spark_coord.client.connection import BrokerConnectionError

        pending = dict(batches)
        last_error: int | str = ""
        for attempt in range(self.retries + 1):
            by_leader: dict[int, dict] = defaultdict(dict)
            failed: dict = {}
            for (topic, part), batch in pending.items():
                try:
                    by_leader[self.cluster.leader(topic, part)][(topic, part)] = batch
                except KafkaError as e:  # no leader now (its broker restarting): retried as a Produce answer is
                    if not self.retriable(e.code):
                        raise
                    failed[(topic, part)] = batch
                    last_error = ErrorCode.name_of(e.code)
            for leader, group in by_leader.items():
                try:
                    errors = self._produce(leader, group)
                except BrokerConnectionError as e:  # the answer is lost: the batches may or may not be in
                    self.cluster.drop_connection(leader)
                    errors, last_error = dict.fromkeys(group, ErrorCode.NETWORK_EXCEPTION), str(e)
                for tp, code in errors.items():
                    if self.retriable(code):
                        failed[tp] = group[tp]
                        last_error = last_error if code == ErrorCode.NETWORK_EXCEPTION else ErrorCode.name_of(code)
                    else:
                        raise KafkaError(code, f"producing to {tp[0]}-{tp[1]}")
            if not failed:
                return
            pending = failed
            log.info("retrying %d batch(es) after %s", len(failed), last_error)
            time.sleep(min(0.1 * 2 ** attempt, 2.0))
            try:
                self.cluster.refresh(sorted({t for t, _ in failed}))
            except BrokerConnectionError as e:  # the cluster may be restarting: the next attempt tells
                log.info("metadata refresh failed: %s", e)
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"giving up after {self.retries} retries: {last_error}")

    def _produce(self, leader: int, group: dict) -> dict:
        topics: dict[str, list] = defaultdict(list)
        for (topic, part), (records, _) in group.items():
            topics[topic].append({"index": part, "records": records})
        body = {"transactional_id": self.transactional_id, "acks": self.acks, "timeout_ms": self.timeout_ms,
                "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()]}
        conn = self.cluster.connection(leader)
        if self.acks == 0:
            conn.send_only(ApiKey.PRODUCE, body)
            self._account(group)
            return {}
        resp = conn.request(ApiKey.PRODUCE, body)
        errors = {}
        for t in resp["responses"]:
            for p in t["partition_responses"]:
                if p["error_code"]:
                    errors[(t["name"], p["index"])] = p["error_code"]
        self._account({tp: b for tp, b in group.items() if tp not in errors})
        return errors

    def _account(self, group) -> None:
        for records, count in group.values():
            self.sent_records += count
            self.sent_bytes += len(records)

    def send_many(self, topic: str, values: Iterable[bytes]) -> None:
        for v in values:
            self.send(topic, v)
        self.flush()
