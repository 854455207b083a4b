"""Kafka's transactional producer (KIP-98) on the synchronous client, and ending a transaction by its identity.

``TransactionalProducer`` is the idempotent ``Producer`` with a ``transactional.id``, used as Kafka's
Java producer and librdkafka are::

    with ClusterClient("broker1:9092") as cluster:
        producer = TransactionalProducer(cluster, "orders-enricher-0")
        producer.init_transactions()                 # fences older producers of the id
        producer.begin_transaction()
        producer.send("enriched", b"...", key=b"k")
        producer.send_offsets_to_transaction({("orders", 0): 1200}, "enricher")
        producer.commit_transaction()                # or abort_transaction()

It speaks ``transaction.version`` 1 (KIP-98 as the Java client before KIP-890's second part): it sends
AddPartitionsToTxn itself before a partition's first batch of a transaction (v3 at most), EndTxn at
most v4 (the epoch stays the same from one transaction to the next), and TxnOffsetCommit v3+ with the
group member's generation, member id and instance id (KIP-447).

States and the only moves between them (``_MOVES`` is this table, ``TransactionalProducer._move``
checks every change)::

    from              move                          to
    UNINITIALIZED     init_transactions             READY
    READY             begin_transaction             IN_TRANSACTION
    IN_TRANSACTION    commit_transaction            COMMITTING    (flushed, EndTxn(commit) in flight)
    IN_TRANSACTION    abort_transaction             ABORTING      (unsent records dropped, EndTxn(abort))
    ABORTABLE_ERROR   abort_transaction             ABORTING
    COMMITTING        commit_transaction            COMMITTING    (a commit that timed out, called again)
    ABORTING          abort_transaction             ABORTING      (likewise)
    COMMITTING        EndTxn answered               READY
    ABORTING          EndTxn answered               READY
    IN_TRANSACTION    an abortable error            ABORTABLE_ERROR
    COMMITTING        an abortable error            ABORTABLE_ERROR
    any               a fatal error                 FATAL_ERROR   (every later call raises it again)

Errors are mapped as Kafka's clients map them: a newer producer of the transactional id
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) raises ``ProducerFencedError``, and it and
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE and UNSUPPORTED_VERSION are fatal
(``TransactionFatalError``: the producer can only be closed; a new one calls ``init_transactions``).
Any other refusal of a request of the transaction (a batch refused, a group not authorized, a
member's generation fenced...) is abortable (``TransactionAbortableError``): the producer then
takes only ``abort_transaction()``.  Coordinator errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, a broken connection) and CONCURRENT_TRANSACTIONS (the previous
transaction's markers are still being written) are retried, with a backoff doubling from
``retry_backoff_ms`` to ``retry_backoff_max_ms``, until ``max_block_ms`` has passed since the call began
(Kafka's ``max.block.ms``); then the call raises ``TransactionTimeoutError`` and may be called again.

``end_transaction`` ends a transaction from any process that knows its transactional id, producer
id and epoch (a Spark driver ending what its tasks wrote), and ``committed_offsets_stable`` reads a
group's offsets with ``require_stable`` (none of them in a transaction still open).
"""

from __future__ import annotations

import enum
import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, TypeVar

from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.client.groups import CommittedOffset, GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.common import TopicPartition
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire.find_coordinator import BATCHED_VERSION, KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from spark_coord.wire.registry import ApiKey

log = logging.getLogger(__name__)

__all__ = ["TransactionalProducer", "TransactionState", "TransactionError", "TransactionFatalError",
           "ProducerFencedError", "TransactionAbortableError", "TransactionTimeoutError",
           "end_transaction", "committed_offsets_stable"]

T = TypeVar("T")

#: Coordinator errors: find the coordinator again, then retry.
_COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
#: Another request of the transactional id is being completed (markers of the last EndTxn): retry.
_BUSY = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS})
#: The first pause after CONCURRENT_TRANSACTIONS (doubling from there): the transaction before is
#: completing, its markers a few milliseconds from written, so the next transaction's first
#: AddPartitionsToTxn is asked again soon, as Kafka's Java client does (20 ms) instead of after its
#: usual retry backoff; 100 ms there cost a transaction of 1,000 records 90% of its throughput.
BUSY_BACKOFF_MS = 20
#: A newer producer of the transactional id exists (epoch bumped by its InitProducerId, or by a timeout's abort).
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
#: Refusals after which the producer cannot go on, matching Java's TransactionManager.
_FATAL = _FENCED | {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE,
                    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED}


class TransactionError(KafkaError):
    """A transactional call failed with Kafka's error ``code``."""


class TransactionFatalError(TransactionError):
    """The producer cannot go on (fenced, not authorized, a state the coordinator refuses): close it."""


class ProducerFencedError(TransactionFatalError):
    """A newer producer of the same transactional id exists (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH):
    this one is a zombie and may write nothing more.  Fatal."""


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit: call ``abort_transaction()``, then begin a new one."""


class TransactionTimeoutError(TransactionError):
    """The call's ``max_block_ms`` passed while retrying (the coordinator away or busy); the call may
    be made again, and goes on where it stopped."""


def _raise_for(code: int, what: str) -> None:
    """The exception of a non-retriable refusal ``code`` of ``what``."""
    if code in _FENCED:
        raise ProducerFencedError(code, f"{what}: a newer producer of the transactional id fenced this one")
    if code in _FATAL:
        raise TransactionFatalError(code, what)
    raise TransactionAbortableError(code, what)


# --------------------------------------------------------------------------------- coordinators

@dataclass(frozen=True)
class _Coordinator:
    node_id: int
    host: str
    port: int


class _Again(Exception):
    """A coordinator error, CONCURRENT_TRANSACTIONS or a broken connection: retry after a backoff."""

    def __init__(self, code: int, text: str, forget: tuple[int, str] | None = None):
        super().__init__(text)
        self.code = code
        self.forget = forget  # (key type, key) whose coordinator is looked up again


class _Coordinators:
    """The brokers coordinating transactional ids (key type 1) and groups (key type 0), found with
    FindCoordinator and cached until they answer a coordinator error; connections through the
    cluster client."""

    def __init__(self, cluster: ClusterClient):
        self.cluster = cluster
        self._known: dict[tuple[int, str], _Coordinator] = {}

    def forget(self, key_type: int, key: str) -> None:
        self._known.pop((key_type, key), None)

    def connection(self, key_type: int, key: str) -> BrokerConnection:
        """A connection to the coordinator of ``key``; _Again while it is unknown or unreachable."""
        c = self._known.get((key_type, key))
        if c is None:
            c = self._known[(key_type, key)] = self._find(key_type, key)
        try:
            return self.cluster.connection_to(c.host, c.port)
        except (OSError, BrokerConnectionError) as e:
            self.forget(key_type, key)
            raise _Again(ErrorCode.NETWORK_EXCEPTION, f"coordinator {c.host}:{c.port}: {e}") from e

    def _find(self, key_type: int, key: str) -> _Coordinator:
        what = f"FindCoordinator {'transactional id' if key_type == KEY_TYPE_TRANSACTION else 'group'} {key!r}"
        try:
            conn = self.cluster.any_connection()
            version = conn.version_for(ApiKey.FIND_COORDINATOR)
            if version is not None and version >= BATCHED_VERSION:
                resp = conn.request(ApiKey.FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": [key]})
                answer = next((c for c in resp["coordinators"] if c["key"] == key), None)
                if answer is None:
                    raise _Again(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{what}: no answer for the key")
            else:
                answer = conn.request(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type})
        except BrokerConnectionError as e:
            raise _Again(ErrorCode.NETWORK_EXCEPTION, f"{what}: {e}") from e
        code = answer["error_code"]
        if code in _COORDINATOR_ERRORS:
            raise _Again(code, f"{what}: {ErrorCode.name_of(code)}")
        if code:
            _raise_for(code, answer.get("error_message") or what)
        return _Coordinator(answer["node_id"], answer["host"], answer["port"])

    def request(self, key_type: int, key: str, api_key: int, body: dict, what: str) -> dict:
        """``body`` sent to the coordinator of ``key``; a broken connection is _Again."""
        conn = self.connection(key_type, key)
        try:
            return conn.request(api_key, body)
        except BrokerConnectionError as e:
            self.forget(key_type, key)
            raise _Again(ErrorCode.NETWORK_EXCEPTION, f"{what}: {e}", (key_type, key)) from e

    def check(self, key_type: int, key: str, code: int, what: str) -> None:
        """_Again for a coordinator error (the coordinator looked up again) or CONCURRENT_TRANSACTIONS;
        the mapped exception for another error; nothing for NONE."""
        if code in _COORDINATOR_ERRORS:
            self.forget(key_type, key)
            raise _Again(code, f"{what}: {ErrorCode.name_of(code)}", (key_type, key))
        if code in _BUSY:
            raise _Again(code, f"{what}: {ErrorCode.name_of(code)}")
        if code:
            _raise_for(code, what)


def _retrying(what: str, max_block_ms: int, backoff_ms: int, backoff_max_ms: int, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` until it stops raising _Again, pausing ``backoff_ms`` doubling to ``backoff_max_ms``;
    TransactionTimeoutError with the last code once ``max_block_ms`` has passed."""
    deadline = time.monotonic() + max_block_ms / 1000
    pause = backoff_ms / 1000
    busy = min(BUSY_BACKOFF_MS, backoff_ms) / 1000
    while True:
        try:
            return attempt()
        except _Again as e:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransactionTimeoutError(e.code, f"{what}: {e} (gave up after {max_block_ms} ms)") from None
            if e.code in _BUSY:  # the previous transaction's markers: milliseconds away
                wait, busy = busy, min(busy * 2, backoff_max_ms / 1000)
            else:
                wait, pause = pause, min(pause * 2, backoff_max_ms / 1000)
            log.log(logging.DEBUG if e.code in _BUSY else logging.INFO, "%s: %s; retrying in %.3f s", what, e,
                    min(wait, left))
            time.sleep(min(wait, left))


def _end_txn(coordinators: _Coordinators, transactional_id: str, producer_id: int, producer_epoch: int,
             commit: bool) -> None:
    """One EndTxn to the transaction's coordinator; _Again for what is retried, else the mapped error."""
    what = f"EndTxn({'commit' if commit else 'abort'}) of {transactional_id!r}"
    resp = coordinators.request(KEY_TYPE_TRANSACTION, transactional_id, ApiKey.END_TXN, {
        "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
        "committed": commit}, what)
    coordinators.check(KEY_TYPE_TRANSACTION, transactional_id, resp["error_code"],
                       f"{what} (producer id {producer_id}, epoch {producer_epoch})")


# ------------------------------------------------------------------------------------ the states

class TransactionState(enum.Enum):
    """Where a ``TransactionalProducer`` is; see the module's table of moves."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


_S = TransactionState
_INIT, _BEGIN, _COMMIT, _ABORT, _DONE, _ABORTABLE = ("init_transactions", "begin_transaction",
                                                     "commit_transaction", "abort_transaction",
                                                     "EndTxn answered", "an abortable error")

_MOVES: dict[tuple[TransactionState, str], TransactionState] = {
    (_S.UNINITIALIZED, _INIT): _S.READY,
    (_S.READY, _BEGIN): _S.IN_TRANSACTION,
    (_S.IN_TRANSACTION, _COMMIT): _S.COMMITTING,
    (_S.IN_TRANSACTION, _ABORT): _S.ABORTING,
    (_S.ABORTABLE_ERROR, _ABORT): _S.ABORTING,
    (_S.COMMITTING, _COMMIT): _S.COMMITTING,
    (_S.ABORTING, _ABORT): _S.ABORTING,
    (_S.COMMITTING, _DONE): _S.READY,
    (_S.ABORTING, _DONE): _S.READY,
    (_S.IN_TRANSACTION, _ABORTABLE): _S.ABORTABLE_ERROR,
    (_S.COMMITTING, _ABORTABLE): _S.ABORTABLE_ERROR,
}


class TransactionalProducer(Producer):
    """An idempotent ``Producer`` whose batches belong to transactions of ``transactional_id``.

    Parameters
    ----------
    cluster : ClusterClient
    transactional_id : Kafka's ``transactional.id``: the identity that survives restarts; a producer
        that calls ``init_transactions`` with it fences every earlier one and aborts its open transaction
    transaction_timeout_ms : Kafka's ``transaction.timeout.ms``: the coordinator aborts a transaction open
        longer (at most the brokers' ``transaction.max.timeout.ms``, 15 min by default)
    max_block_ms : how long ``init_transactions``, ``send_offsets_to_transaction``, ``commit_transaction``
        and ``abort_transaction`` retry coordinator errors and CONCURRENT_TRANSACTIONS before raising
        ``TransactionTimeoutError`` (Kafka's ``max.block.ms``)
    retry_backoff_ms, retry_backoff_max_ms : the first and the largest pause between those retries
    compression, batch_size, retries, timeout_ms, rng : as ``Producer`` (acks is -1, idempotence on)
    """

    def __init__(self, cluster: ClusterClient, transactional_id: str, transaction_timeout_ms: int = 60000,
                 max_block_ms: int = 60000, retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 compression: str = "none", batch_size: int = 16384, retries: int = 5, timeout_ms: int = 30000,
                 rng: random.Random | None = None):
        if not transactional_id or not isinstance(transactional_id, str):
            raise ValueError(f"transactional_id must be a non-empty string, got {transactional_id!r}")
        if transaction_timeout_ms <= 0:
            raise ValueError(f"transaction_timeout_ms must be positive, got {transaction_timeout_ms}")
        if retry_backoff_ms <= 0 or retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")
        super().__init__(cluster, acks=-1, compression=compression, batch_size=batch_size, retries=retries,
                         timeout_ms=timeout_ms, rng=rng, idempotence=True)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.max_block_ms = max_block_ms
        self._backoff = (retry_backoff_ms, retry_backoff_max_ms)
        self._coordinators = _Coordinators(cluster)
        self.state = TransactionState.UNINITIALIZED
        self._fatal: TransactionFatalError | None = None
        self._abortable: TransactionError | None = None
        #: partitions AddPartitionsToTxn added to the open transaction
        self.partitions_in_transaction: set[TopicPartition] = set()
        self._started = False  # a partition or a group was added: the coordinator has the transaction
        self._bump_epoch = False  # a batch was refused: its sequences were taken, so a new epoch resets them

    # ----------------------------------------------------------------- states
    def _move(self, move: str) -> None:
        """Take ``move`` from the current state, checked against ``_MOVES``; a fatal error raises again,
        an illegal move is a RuntimeError naming the state."""
        if self._fatal is not None:
            raise self._fatal
        to = _MOVES.get((self.state, move))
        if to is None:
            if self.state is TransactionState.ABORTABLE_ERROR and self._abortable is not None:
                raise TransactionAbortableError(self._abortable.code, f"{move}: the transaction must be aborted "
                                                f"first (abort_transaction) after: {self._abortable}")
            raise RuntimeError(f"{move}: not in state {self.state.value} of transactional id "
                               f"{self.transactional_id!r}")
        self.state = to

    def _failed(self, error: TransactionError) -> TransactionError:
        """Record ``error``: fatal ones for good, abortable ones until the transaction is aborted."""
        if isinstance(error, TransactionFatalError):
            self._fatal = error
            self.state = TransactionState.FATAL_ERROR
        elif (self.state, _ABORTABLE) in _MOVES:
            self._abortable = error
            self.state = _MOVES[(self.state, _ABORTABLE)]
        return error

    def _in_transaction(self, what: str) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self.state is TransactionState.ABORTABLE_ERROR and self._abortable is not None:
            raise TransactionAbortableError(self._abortable.code, f"{what}: the transaction must be aborted "
                                            f"(abort_transaction) after: {self._abortable}")
        if self.state is not TransactionState.IN_TRANSACTION:
            raise RuntimeError(f"{what}: no transaction begun (state {self.state.value}); "
                               "call begin_transaction() first")

    def _retrying(self, what: str, attempt: Callable[[], T]) -> T:
        return _retrying(what, self.max_block_ms, self._backoff[0], self._backoff[1], attempt)

    # ------------------------------------------------------------ the calls
    def init_transactions(self) -> tuple[int, int]:
        """InitProducerId with the transactional id: a producer id and a new epoch, which fences every
        earlier producer of the id; the coordinator first aborts (or completes) the transaction an earlier
        producer left open, answering CONCURRENT_TRANSACTIONS meanwhile, which is retried.  Returns
        (producer id, epoch)."""
        self._move(_INIT)
        try:
            self._init_producer_id(-1, -1)
        except TransactionError as e:
            self.state = TransactionState.UNINITIALIZED
            if isinstance(e, TransactionFatalError):
                self._failed(e)
            raise
        return self.producer_id, self.producer_epoch

    def _init_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        what = f"InitProducerId of {self.transactional_id!r}"
        body = {"transactional_id": self.transactional_id, "transaction_timeout_ms": self.transaction_timeout_ms,
                "producer_id": producer_id, "producer_epoch": producer_epoch}

        def attempt() -> dict:
            resp = self._coordinators.request(KEY_TYPE_TRANSACTION, self.transactional_id,
                                              ApiKey.INIT_PRODUCER_ID, body, what)
            self._coordinators.check(KEY_TYPE_TRANSACTION, self.transactional_id, resp["error_code"], what)
            return resp
        resp = self._retrying(what, attempt)
        self.producer_id, self.producer_epoch = resp["producer_id"], resp["producer_epoch"]
        self.sequences.clear()  # a new epoch starts every partition's sequence at 0
        log.info("transactional id %r: producer id %d, epoch %d", self.transactional_id, self.producer_id,
                 self.producer_epoch)

    def ensure_producer_id(self) -> tuple[int, int]:
        """The producer id and epoch ``init_transactions`` got (batches are built with them)."""
        if self.producer_id < 0:
            raise RuntimeError("init_transactions() first")
        return self.producer_id, self.producer_epoch

    def begin_transaction(self) -> None:
        """Start a transaction (local only: the coordinator learns of it at its first partition or group)."""
        self._move(_BEGIN)
        self.partitions_in_transaction = set()
        self._started = False

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers=(), partition: int | None = None, timestamp_ms: int | None = None) -> None:
        """Buffer one record into the transaction (see ``Producer.send``); a full batch is sent, after
        AddPartitionsToTxn when its partition is new to the transaction."""
        self._in_transaction("send")
        super().send(topic, value, key=key, headers=headers, partition=partition, timestamp_ms=timestamp_ms)

    def flush(self) -> None:
        """Send every buffered batch of the transaction (AddPartitionsToTxn first for new partitions)."""
        if self._builders:
            self._in_transaction("flush")
        super().flush()

    def send_batches(self, batches: dict[tuple[str, int], tuple[bytes, int]]) -> None:
        """Produce record batches built elsewhere (a Spark task's Arrow rows) in the transaction, after
        AddPartitionsToTxn for their new partitions.  They must be built as this producer's: transactional,
        with its producer id and epoch, and base sequences from ``take_sequence``."""
        self._in_transaction("send_batches")
        super().send_batches(batches)

    def add_partitions_to_transaction(self, partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn for those of ``partitions`` not in the transaction yet, for a caller that sends
        its own Produce requests (pipelined, with ``transactional_id`` in them): Kafka refuses a
        transactional batch for a partition the transaction's coordinator was not told of."""
        self._in_transaction("add_partitions_to_transaction")
        try:
            self._add_partitions([tp for tp in dict.fromkeys(partitions) if tp not in self.partitions_in_transaction])
        except TransactionError as e:
            raise self._failed(e) from None

    def _send(self, batches: dict[tuple[str, int], tuple[bytes, int]]) -> None:
        """Produce ``batches`` in the transaction: their new partitions added first (AddPartitionsToTxn),
        as Kafka's coordinator needs before a partition takes a transactional batch.  A refusal makes the
        transaction abortable (fenced ones fatal)."""
        try:
            self._add_partitions([tp for tp in batches if tp not in self.partitions_in_transaction])
            try:
                super()._send(batches)
            except KafkaError as e:
                self._bump_epoch = True  # the batches' sequences are taken and not all written
                _raise_for(e.code, f"Produce in the transaction of {self.transactional_id!r}: {e}")
        except TransactionError as e:
            raise self._failed(e) from None

    def _add_partitions(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        what = f"AddPartitionsToTxn of {self.transactional_id!r}"

        def body() -> dict:
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(tp for tp in partitions if tp not in self.partitions_in_transaction):
                topics.setdefault(topic, []).append(partition)
            return {"v3_and_below_transactional_id": self.transactional_id,
                    "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
                    "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def attempt() -> None:
            resp = self._coordinators.request(KEY_TYPE_TRANSACTION, self.transactional_id,
                                              ApiKey.ADD_PARTITIONS_TO_TXN, body(), what)
            codes = {(t["name"], p["partition_index"]): p["partition_error_code"]
                     for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}
            self.partitions_in_transaction.update(tp for tp in partitions if codes.get(tp) == 0)
            failed = {tp: c for tp, c in codes.items() if c}
            # OPERATION_NOT_ATTEMPTED marks the partitions not tried because another one failed
            real = {tp: c for tp, c in failed.items() if c != ErrorCode.OPERATION_NOT_ATTEMPTED} or failed
            text = ", ".join(f"{t}-{p}: {ErrorCode.name_of(c)}" for (t, p), c in sorted(real.items()))
            for code in dict.fromkeys(real.values()):
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # a new topic the coordinator has not seen yet
                    raise _Again(code, f"{what}: {text}")
                self._coordinators.check(KEY_TYPE_TRANSACTION, self.transactional_id, code, f"{what}: {text}")
            self._started = True
            unanswered = [tp for tp in partitions if tp not in self.partitions_in_transaction]
            if unanswered:
                raise _Again(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer for {sorted(unanswered)}")
        self._retrying(what, attempt)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int | CommittedOffset], group_id: str,
                                    generation_id: int = -1, member_id: str = "",
                                    group_instance_id: str | None = None) -> None:
        """Commit ``{(topic, partition): next offset}`` for ``group_id`` within the transaction: AddOffsetsToTxn
        to the transaction's coordinator (the group becomes part of the transaction), then TxnOffsetCommit
        to the group's coordinator.  The offsets become the group's committed ones when the transaction
        commits, and are dropped if it aborts; until then OffsetFetch with ``require_stable`` answers
        UNSTABLE_OFFSET_COMMIT for them.  ``generation_id``, ``member_id``, ``group_instance_id``: the
        group member the offsets come from (KIP-447: a zombie of an older generation is refused); -1, "",
        None for a group without members."""
        self._in_transaction("send_offsets_to_transaction")
        tid = self.transactional_id
        what = f"AddOffsetsToTxn of {tid!r} for group {group_id!r}"

        def add() -> None:
            resp = self._coordinators.request(KEY_TYPE_TRANSACTION, tid, ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": tid, "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "group_id": group_id}, what)
            self._coordinators.check(KEY_TYPE_TRANSACTION, tid, resp["error_code"], what)
            self._started = True

        topics: dict[str, list[dict]] = {}
        for (topic, partition), value in sorted(offsets.items()):
            c = value if isinstance(value, CommittedOffset) else CommittedOffset(int(value))
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": c.offset,
                                                 "committed_leader_epoch": c.leader_epoch,
                                                 "committed_metadata": c.metadata or ""})
        body = {"transactional_id": tid, "group_id": group_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "generation_id": generation_id, "member_id": member_id,
                "group_instance_id": group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        commit_what = f"TxnOffsetCommit of {tid!r} for group {group_id!r}"

        def commit() -> None:
            resp = self._coordinators.request(KEY_TYPE_GROUP, group_id, ApiKey.TXN_OFFSET_COMMIT, body, commit_what)
            failed = {(t["name"], p["partition_index"]): p["error_code"]
                      for t in resp["topics"] for p in t["partitions"] if p["error_code"]}
            if not failed:
                return
            text = ", ".join(f"{t}-{p}: {ErrorCode.name_of(c)}" for (t, p), c in sorted(failed.items()))
            for code in dict.fromkeys(failed.values()):
                if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT):
                    raise _Again(code, f"{commit_what}: {text}")  # retried as Java's TxnOffsetCommitHandler does
                self._coordinators.check(KEY_TYPE_GROUP, group_id, code, f"{commit_what}: {text}")

        try:
            self._retrying(what, add)
            self._retrying(commit_what, commit)
        except TransactionTimeoutError:
            raise
        except TransactionError as e:
            raise self._failed(e) from None

    def commit_transaction(self) -> None:
        """Flush the transaction's batches, then EndTxn(commit): its records become readable to
        read_committed consumers and its offsets the groups' committed ones.  A batch refused makes the
        transaction abortable (raised here); a timeout leaves it committing: call again."""
        self._move(_COMMIT)
        Producer.flush(self)  # a refused batch: _send made the transaction abortable and raises
        self._end(True)

    def abort_transaction(self) -> None:
        """Drop the records not sent yet, then EndTxn(abort): the transaction's records are skipped by
        read_committed consumers and its offsets dropped.  After a batch was refused, the producer also
        takes a new epoch (InitProducerId with its producer id and epoch, KIP-360), which resets the
        sequences the refused batch left behind."""
        self._move(_ABORT)
        self._builders.clear()
        self._counts.clear()
        self._sticky.clear()
        self._end(False)

    def _end(self, commit: bool) -> None:
        try:
            if self._started:
                coordinators, tid = self._coordinators, self.transactional_id
                self._retrying(f"EndTxn of {tid!r}", lambda: _end_txn(
                    coordinators, tid, self.producer_id, self.producer_epoch, commit))
            if not commit and self._bump_epoch:
                self._init_producer_id(self.producer_id, self.producer_epoch)
                self._bump_epoch = False
        except TransactionTimeoutError:
            raise  # still committing / aborting: the call may be made again
        except TransactionError as e:
            raise self._failed(e) from None
        self._move(_DONE)
        self._abortable = None
        self.partitions_in_transaction = set()
        self._started = False

    def close(self) -> None:
        """Drop the records not sent (the cluster client stays open).  An open transaction is left to the
        coordinator: its timeout aborts it, or a new producer of the id does at ``init_transactions``."""
        self._builders.clear()
        self._counts.clear()


# ----------------------------------------------------------------------- from any process

def end_transaction(cluster: ClusterClient, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool, max_block_ms: int = 60000, retry_backoff_ms: int = 100,
                    retry_backoff_max_ms: int = 1000) -> None:
    """Commit (or abort) the open transaction of ``transactional_id`` made by ``producer_id`` at
    ``producer_epoch``, from any process: FindCoordinator for the id, then EndTxn, retrying coordinator
    errors and CONCURRENT_TRANSACTIONS until ``max_block_ms`` (then TransactionTimeoutError).

    Sending it again after an answer was lost is safe: the coordinator answers NONE to the same end of a
    transaction it already ended.  Raises ``ProducerFencedError`` when the id has a newer epoch (a newer
    producer, or the coordinator aborted the transaction when it timed out), and ``TransactionFatalError``
    for INVALID_TXN_STATE (no transaction open for it, or the other end already taken),
    INVALID_PRODUCER_ID_MAPPING (the id has another producer id) and the other refusals: in every such
    case this call ended nothing."""
    coordinators = _Coordinators(cluster)
    what = f"EndTxn({'commit' if commit else 'abort'}) of {transactional_id!r}"

    def attempt() -> None:
        try:
            _end_txn(coordinators, transactional_id, producer_id, producer_epoch, commit)
        except TransactionAbortableError as e:  # not a producer here: nothing to abort, the call failed
            raise TransactionFatalError(e.code, str(e)) from None
    _retrying(what, max_block_ms, retry_backoff_ms, retry_backoff_max_ms, attempt)


def committed_offsets_stable(cluster: ClusterClient, group: str, partitions: Iterable[TopicPartition],
                             timeout: float = 30.0) -> dict[TopicPartition, int]:
    """``group``'s committed offsets ``{(topic, partition): next offset}`` of ``partitions`` (those with none
    left out), read with OffsetFetch ``require_stable``: a partition whose offset is in a transaction still
    open, or whose commit is still being completed, is answered UNSTABLE_OFFSET_COMMIT, and asked again
    until ``timeout`` (then KafkaError with that code), so what is returned is never undone by an abort.

    The partitions are named because Kafka answers UNSTABLE_OFFSET_COMMIT to a fetch of every partition
    only for partitions that already have a committed offset: one whose first commit is pending would be
    left out as if it had none."""
    with GroupClient(cluster, timeout=timeout) as groups:
        found = groups.fetch_offsets(group, partitions, require_stable=True)
    return {tp: c.offset for tp, c in found.items()}
