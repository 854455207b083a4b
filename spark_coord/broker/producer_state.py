"""Idempotent producers: producer id allocation and per-partition sequence state.

Producer ids (InitProducerId) come from blocks claimed in ZooKeeper the way
ZooKeeper-mode Kafka does it: ``/latest_producer_id_block`` holds the last block
handed to any broker, ``{"version":1,"broker":<id>,"block_start":"<n>","block_end":"<m>"}``
(decimal strings, as Kafka writes them); a broker claims the next block with a
version-checked set, so two brokers can never hand out the same id, and a
restarted broker starts a fresh block (ids are never reused).

Transactional batches (attributes bit 4) go through the same checks; the log
(``log.txn``) opens the producer's transaction on the partition at the first one.
Control batches are refused (INVALID_RECORD): markers come from WriteTxnMarkers only,
checked with ``check_marker`` (an older producer epoch: INVALID_PRODUCER_EPOCH).

Sequences (Produce): for every (producer id, topic, partition) the broker keeps
the producer's epoch and the metadata of its last ``MAX_CACHED_BATCHES`` batches
(Kafka keeps five: the most a producer has in flight).  A batch with
producer_id >= 0 is then

- a duplicate of a cached batch (same epoch, first and last sequence): answered
  with success and the original base offset, and nothing is appended (Kafka's
  behaviour: a retried request after a lost response is not stored twice);
- the next in sequence (first sequence = last + 1, wrapping at 2**31-1): appended;
- from a newer epoch starting at sequence 0: appended (the epoch is adopted);
- from an older epoch: INVALID_PRODUCER_EPOCH;
- anything else: OUT_OF_ORDER_SEQUENCE_NUMBER (a gap).

The state lives in memory, rebuilt when the broker starts from the idempotent
batches of each partition's last segment (``PartitionLog.idempotent_tail``: the
newest five of every producer), so a producer retrying a batch that was stored
just before a broker crash or restart gets the duplicate's answer instead of a
second copy.  A producer the partition has no state for (first contact, or last
seen in an older segment) is accepted at any sequence.
Memory is bounded: at most ``MAX_PRODUCERS_PER_PARTITION`` producers per
partition, the least recently seen forgotten first (a forgotten producer is then
"unknown" and accepted as above).
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, NamedTuple

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_coord.errors import ErrorCode
from spark_coord.records.header import BatchHeader
from spark_coord.zk import paths

if TYPE_CHECKING:  # pragma: no cover
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

#: Ids per block claimed from ZooKeeper (Kafka's ``PRODUCER_ID_BLOCK_SIZE``).
BLOCK_SIZE = 1000
#: Batches remembered per producer and partition for duplicate detection (Kafka: 5).
MAX_CACHED_BATCHES = 5
#: Producers remembered per partition before the least recently seen is forgotten.
MAX_PRODUCERS_PER_PARTITION = 10_000
#: Attempts at the version-checked block claim before giving up (other brokers racing).
MAX_CLAIM_ATTEMPTS = 64

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------- id blocks

class ProducerIdBlockError(RuntimeError):
    """``/latest_producer_id_block`` cannot be used (unreadable content, ids exhausted, endless races)."""


def _block_json(broker_id: int, start: int, end: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)},
                      separators=(",", ":")).encode()


def parse_block(data: bytes) -> tuple[int, int]:
    """(block_start, block_end) of the znode's JSON; ``ProducerIdBlockError`` if it is not Kafka's format."""
    try:
        doc = json.loads(data)
        start, end = int(doc["block_start"]), int(doc["block_end"])
    except (ValueError, KeyError, TypeError) as e:
        raise ProducerIdBlockError(f"{paths.LATEST_PRODUCER_ID_BLOCK} holds no producer id block: "
                                   f"{data[:120]!r}") from e
    if not 0 <= start <= end <= _INT64_MAX:
        raise ProducerIdBlockError(f"{paths.LATEST_PRODUCER_ID_BLOCK} holds an impossible block [{start}, {end}]")
    return start, end


def claim_block(zk: "KazooClient", broker_id: int, block_size: int = BLOCK_SIZE) -> tuple[int, int]:
    """Claim the next block of producer ids for ``broker_id``; returns (first, last) inclusive.

    Blocking (run it off the event loop).  Reads the latest block and writes the
    next one with a version-checked set (or creates the znode for the very first
    block), retrying when another broker won the race.
    """
    path = paths.LATEST_PRODUCER_ID_BLOCK
    for _ in range(MAX_CLAIM_ATTEMPTS):
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            try:
                zk.create(path, _block_json(broker_id, 0, block_size - 1), makepath=True)
            except NodeExistsError:
                continue
            return 0, block_size - 1
        start = parse_block(data)[1] + 1 if data else 0  # Kafka creates the znode empty
        if start > _INT64_MAX - block_size:
            raise ProducerIdBlockError("producer ids are exhausted")
        end = start + block_size - 1
        try:
            zk.set(path, _block_json(broker_id, start, end), version=stat.version)
        except BadVersionError:
            continue
        log.info("broker %d claimed producer ids %d-%d", broker_id, start, end)
        return start, end
    raise ProducerIdBlockError(f"lost the race for {path} {MAX_CLAIM_ATTEMPTS} times")


class ProducerIdAllocator:
    """Hands out producer ids from the current block, claiming a new block when it runs out.

    ``claim`` is an async callable returning (first, last) of a fresh block (in the
    broker: ``claim_block`` through ``BrokerContext.zk_call``); injected so tests can
    count claims.  Safe for concurrent callers on one event loop.
    """

    def __init__(self, claim: Callable[[], Awaitable[tuple[int, int]]]):
        self._claim = claim
        self._next = 0
        self._end = -1  # empty: the first call claims
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next > self._end:
                self._next, self._end = await self._claim()
            pid = self._next
            self._next += 1
            return pid


# ---------------------------------------------------------------- sequences

def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence of a batch's last record: sequences wrap from 2**31-1 to 0 (Kafka's rule)."""
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _next_sequence(seq: int) -> int:
    return 0 if seq == _INT32_MAX else seq + 1


@dataclass(frozen=True)
class BatchMetadata:
    """What is remembered of one appended idempotent batch."""

    first_seq: int
    last_seq: int
    base_offset: int
    timestamp: int = -1  # the batch's max timestamp (DescribeProducers' LastTimestamp)


@dataclass
class ProducerEntry:
    """One producer's epoch and its last batches on one partition."""

    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))


class Verdict(NamedTuple):
    """Outcome of checking one batch: append it, answer a duplicate, or refuse with ``code``."""

    code: ErrorCode
    duplicate_of: int | None = None  # base offset of the original, for a duplicate
    message: str | None = None

    @property
    def append(self) -> bool:
        return self.code == ErrorCode.NONE and self.duplicate_of is None


ACCEPT = Verdict(ErrorCode.NONE)


class PartitionProducers:
    """The producers of one partition log (reset when the log object is replaced)."""

    def __init__(self, plog: object):
        self._log = weakref.ref(plog)
        self.producers: OrderedDict[int, ProducerEntry] = OrderedDict()
        #: Producer id -> the guard of its Produce check in flight (Kafka's ``VerificationGuard``): a
        #: marker of the producer drops it, so a batch checked before the marker is not appended after it.
        self.guards: dict[int, object] = {}
        for h in getattr(plog, "idempotent_tail", ()):  # what the log held when this broker opened it
            if h.is_control:  # a transaction marker: no sequence of the producer's, perhaps a newer epoch
                self.record_marker(h.producer_id, h.producer_epoch)
            else:
                self.record(h, h.base_offset)

    def belongs_to(self, plog: object) -> bool:
        return self._log() is plog

    def check(self, h: BatchHeader) -> Verdict:
        """Judge batch ``h`` (producer_id >= 0) against the state; changes nothing."""
        if h.producer_epoch < 0 or h.base_sequence < 0:
            return Verdict(ErrorCode.INVALID_RECORD, message=f"batch of producer {h.producer_id} has epoch "
                           f"{h.producer_epoch} and base sequence {h.base_sequence}: both must be >= 0")
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return ACCEPT  # first contact, or state lost in a restart: see the module docstring
        self.producers.move_to_end(h.producer_id)
        if h.producer_epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH,
                           message=f"producer {h.producer_id}: epoch {h.producer_epoch} is older than {entry.epoch}")
        if h.producer_epoch > entry.epoch:
            if h.base_sequence != 0:
                return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                               message=f"producer {h.producer_id}: new epoch {h.producer_epoch} must start at "
                                       f"sequence 0, not {h.base_sequence}")
            return ACCEPT
        last = last_sequence(h.base_sequence, h.last_offset_delta)
        for b in entry.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last:
                return Verdict(ErrorCode.NONE, duplicate_of=b.base_offset)
        if not entry.batches:
            return ACCEPT
        expected = _next_sequence(entry.batches[-1].last_seq)
        if h.base_sequence != expected:
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                           message=f"producer {h.producer_id}: expected sequence {expected}, got {h.base_sequence}")
        return ACCEPT

    def record(self, h: BatchHeader, base_offset: int) -> None:
        """Remember batch ``h`` appended at ``base_offset``."""
        entry = self.producers.get(h.producer_id)
        if entry is None or entry.epoch != h.producer_epoch:
            entry = ProducerEntry(h.producer_epoch)
            self.producers[h.producer_id] = entry
        self.producers.move_to_end(h.producer_id)
        entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h.base_sequence, h.last_offset_delta),
                                           base_offset, h.max_timestamp))
        while len(self.producers) > MAX_PRODUCERS_PER_PARTITION:
            pid, _ = self.producers.popitem(last=False)
            log.debug("forgot producer %d (more than %d producers on one partition)", pid,
                      MAX_PRODUCERS_PER_PARTITION)


    def check_marker(self, producer_id: int, producer_epoch: int) -> Verdict:
        """Judge a transaction marker (WriteTxnMarkers) of ``producer_id`` at ``producer_epoch``: an epoch
        older than the producer's -> INVALID_PRODUCER_EPOCH, as Kafka's ``appendEndTxnMarker`` refuses it."""
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH, message=f"producer {producer_id}: marker epoch "
                           f"{producer_epoch} is older than {entry.epoch}")
        return ACCEPT

    def record_marker(self, producer_id: int, producer_epoch: int) -> None:
        """A marker was appended: a newer epoch is adopted (the producer's next batch must start at
        sequence 0 of it, and older epochs are refused)."""
        self.guards.pop(producer_id, None)
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch > entry.epoch:
            self.producers[producer_id] = ProducerEntry(producer_epoch)

    def start_verification(self, producer_id: int) -> object:
        """A guard for a Produce check of ``producer_id`` about to ask its transaction coordinator (the
        one in flight already, if any: its answer is for the same transaction)."""
        return self.guards.setdefault(producer_id, object())

    def still_verified(self, producer_id: int, guard: object) -> bool:
        """Whether no marker of ``producer_id`` came since ``guard`` was handed out (the batch checked
        may be appended into the transaction the coordinator confirmed)."""
        return self.guards.get(producer_id) is guard

    def active(self) -> list[tuple[int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp) of every producer remembered here
        (DescribeProducers), oldest contact first."""
        return [(pid, e.epoch, e.batches[-1].last_seq if e.batches else -1,
                 e.batches[-1].timestamp if e.batches else -1) for pid, e in self.producers.items()]


class ProducerStateTable:
    """Sequence state of every partition this broker appends to, keyed by (topic, partition)."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], PartitionProducers] = {}

    def partition(self, topic: str, partition: int, plog: object) -> PartitionProducers:
        """The state of ``plog``; a new, empty one when the log was deleted and created again."""
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None or not state.belongs_to(plog):
            state = PartitionProducers(plog)
            self._partitions[key] = state
        return state

    def check(self, topic: str, partition: int, plog: object, headers: list[BatchHeader]) -> Verdict:
        """Judge the batches of one Produce partition entry.  Batches without a producer id pass.

        An entry with an idempotent batch must hold exactly that one batch (Kafka
        requires one batch per partition from Produce v3 on); INVALID_RECORD otherwise.
        """
        if any(h.is_control for h in headers):
            return Verdict(ErrorCode.INVALID_RECORD, message="control batches are written by the transaction "
                           "coordinator's markers (WriteTxnMarkers), not produced")
        idempotent = [h for h in headers if h.producer_id >= 0]
        if not idempotent:
            return ACCEPT
        if len(headers) != 1:
            return Verdict(ErrorCode.INVALID_RECORD,
                           message=f"{len(headers)} batches for one partition: an idempotent producer sends one")
        return self.partition(topic, partition, plog).check(headers[0])

    def record(self, topic: str, partition: int, plog: object, headers: list[BatchHeader], base_offset: int) -> None:
        """Remember the idempotent batch among ``headers`` just appended at ``base_offset``."""
        if len(headers) == 1 and headers[0].producer_id >= 0:
            self.partition(topic, partition, plog).record(headers[0], base_offset)


@dataclass
class BrokerProducers:
    """A broker's producer machinery: the id allocator and the sequence table
    (``BrokerContext.producers``)."""

    ids: ProducerIdAllocator
    sequences: ProducerStateTable

    @classmethod
    def create(cls, zk_call: Callable[..., Awaitable], zk: "KazooClient", broker_id: int) -> "BrokerProducers":
        """Ids claimed from ZooKeeper in blocks through ``zk_call`` (off the event loop)."""
        return cls(ids=ProducerIdAllocator(lambda: zk_call(claim_block, zk, broker_id)),
                   sequences=ProducerStateTable())
