"""A transactional id's state at its coordinator: Kafka's ``TransactionMetadata`` without I/O (KIP-98).

``TxnState`` is Kafka's ``TransactionState``: each state names the states it may be entered from
(``VALID_PREVIOUS``), and ``TxnMetadata.transition_to`` refuses any other move.  ``TxnMetadata`` holds
what the coordinator keeps per transactional id, what it writes to ZooKeeper
(``/transactions/ids/<id>``, ``to_json`` / ``from_json``): producer id and epoch, the previous
producer id and epoch (a retried InitProducerId is recognised by them), state, partitions, the
groups whose offsets are in the transaction (AddOffsetsToTxn), timeout, the start time of the open
transaction and the time of the last change.

The decisions of the coordinator's APIs are pure functions of a ``TxnMetadata`` and the request
(``init_producer_id``, ``add_partitions``, ``add_group``, ``end_txn``): each answers an error code, or the metadata to
write next (a copy: the caller writes it, fenced, and only then adopts it).  Error codes are Kafka's
``TransactionCoordinator``'s for transaction version 1 (the client sends AddPartitionsToTxn itself, the
epoch moves only at InitProducerId and when the coordinator fences an open transaction).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import Enum

from spark_coord.errors import ErrorCode

__all__ = ["TxnState", "TxnMetadata", "IllegalTransition", "MAX_EPOCH", "Decision",
           "init_producer_id", "add_partitions", "add_group", "end_txn", "fence_open", "fence_for_timeout", "complete",
           "verify_partition", "expired"]

#: The largest epoch a producer id may reach (Kafka: ``Short.MaxValue - 1``, so a bump of a fenced
#: epoch still fits); at this epoch InitProducerId takes a new producer id.
MAX_EPOCH = 32766
NO_PRODUCER_ID = -1
NO_EPOCH = -1

TopicPartition = tuple[str, int]


class TxnState(Enum):
    """Kafka's transaction states, by the names DescribeTransactions and ListTransactions answer."""

    #: No transaction open: InitProducerId moves the epoch, AddPartitionsToTxn opens one (Ongoing).
    EMPTY = "Empty"
    #: Partitions (or groups) were added: more may be, EndTxn moves it to PrepareCommit or PrepareAbort.
    ONGOING = "Ongoing"
    #: EndTxn(commit) is durable: COMMIT markers are being written; every request but a retried
    #: EndTxn(commit) gets CONCURRENT_TRANSACTIONS (or INVALID_TXN_STATE).
    PREPARE_COMMIT = "PrepareCommit"
    #: EndTxn(abort), a fenced producer or a timeout is durable: ABORT markers are being written.
    PREPARE_ABORT = "PrepareAbort"
    #: Every COMMIT marker was written: the next transaction may start.
    COMPLETE_COMMIT = "CompleteCommit"
    #: Every ABORT marker was written: the next transaction may start.
    COMPLETE_ABORT = "CompleteAbort"
    #: The id expired and is being removed (not entered by this coordinator yet).
    DEAD = "Dead"
    #: An open transaction's epoch is being bumped so the coordinator can abort it (InitProducerId of a
    #: new producer, or a timeout); never written: the abort writes PrepareAbort with the new epoch.
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @classmethod
    def parse(cls, name: str) -> "TxnState | None":
        """The state named ``name`` as Kafka spells it (None: unknown, ListTransactions reports it)."""
        return _BY_NAME.get(name)

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_BY_NAME = {s.value: s for s in TxnState}

#: The states each state may be entered from (Kafka's ``TransactionState.validPreviousStates`` of
#: transaction version 1: PrepareAbort is also entered from a completed state in TV2 only).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransition(ValueError):
    """A move Kafka's ``TransactionMetadata`` does not allow."""


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id as its coordinator keeps it (and writes it to ZooKeeper)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    #: The producer id and epoch before the last InitProducerId (a retried request carries them).
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_EPOCH
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    #: When the open transaction began (its first AddPartitionsToTxn), -1 when none is open.
    start_ms: int = -1
    #: When this state was entered.
    update_ms: int = -1
    #: The groups whose offsets the transaction commits (AddOffsetsToTxn): Kafka adds each group's
    #: ``__consumer_offsets`` partition to the transaction; the group id is kept here instead.
    groups: frozenset[str] = field(default_factory=frozenset)

    def transition_to(self, state: TxnState, **changes) -> "TxnMetadata":
        """A copy in ``state`` with ``changes``; raises IllegalTransition when Kafka forbids the move."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: {self.state.value} -> {state.value}")
        return replace(self, state=state, **changes)

    def topics(self) -> dict[str, list[int]]:
        """The transaction's partitions by topic, each sorted."""
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            out.setdefault(topic, []).append(partition)
        return out

    def to_json(self) -> bytes:
        return json.dumps({
            "version": 1, "producerId": self.producer_id, "producerEpoch": self.producer_epoch,
            "lastProducerId": self.last_producer_id, "lastProducerEpoch": self.last_producer_epoch,
            "timeoutMs": self.timeout_ms, "state": self.state.value,
            "partitions": [[t, p] for t, p in sorted(self.partitions)],
            "startMs": self.start_ms, "updateMs": self.update_ms, "groups": sorted(self.groups),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, transactional_id: str, data: bytes) -> "TxnMetadata":
        """The metadata written by ``to_json``; raises ValueError on anything else."""
        try:
            d = json.loads(data)
            state = TxnState.parse(d["state"])
            if state is None:
                raise ValueError(f"unknown state {d['state']!r}")
            return cls(transactional_id, int(d["producerId"]), int(d["producerEpoch"]), int(d["timeoutMs"]),
                       state, int(d.get("lastProducerId", -1)), int(d.get("lastProducerEpoch", -1)),
                       frozenset((str(t), int(p)) for t, p in d.get("partitions", [])),
                       int(d.get("startMs", -1)), int(d.get("updateMs", -1)),
                       frozenset(str(g) for g in d.get("groups", [])))
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"transactional id {transactional_id!r}: unreadable state: {e!r}") from None


@dataclass(frozen=True)
class Decision:
    """What a request leads to: an error code, and the metadata to write (None: write nothing)."""

    code: int
    write: TxnMetadata | None = None

    @classmethod
    def error(cls, code: int) -> "Decision":
        return cls(code)


def _producer_matches(txn: TxnMetadata, producer_id: int, epoch: int) -> int:
    """Kafka's checks of a request's producer id and epoch: INVALID_PRODUCER_ID_MAPPING for another
    producer id, PRODUCER_FENCED for another epoch (the answer maps it for older versions), else NONE."""
    if producer_id != txn.producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if epoch != txn.producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def init_producer_id(txn: TxnMetadata, timeout_ms: int, now_ms: int, new_producer_id: int | None,
                     expected: tuple[int, int] | None = None) -> Decision:
    """InitProducerId for an id that has metadata (Kafka's ``prepareInitProducerIdTransit``).

    ``expected``: the producer id and epoch a v3+ request resumes (KIP-360), None when it names none;
    one that is neither the current nor the last producer is PRODUCER_FENCED.  A transaction being
    completed is CONCURRENT_TRANSACTIONS (the client retries); an open one is fenced first: the caller
    aborts it (``fence_open``) and answers CONCURRENT_TRANSACTIONS.  Otherwise the epoch is bumped
    (a retry with the last producer's epoch gets the same answer again, with no write), or at
    ``MAX_EPOCH`` the id takes ``new_producer_id`` at epoch 0; the state becomes Empty.
    """
    if expected is not None:
        pid, epoch = expected
        current = pid == txn.producer_id and epoch == txn.producer_epoch
        retried = (pid == txn.last_producer_id and epoch == txn.last_producer_epoch
                   and txn.state in (TxnState.EMPTY,))
        if retried:
            return Decision(ErrorCode.NONE)  # the answer already written: the current producer id and epoch
        if not current:
            return Decision.error(ErrorCode.PRODUCER_FENCED)
    if txn.state.preparing or txn.state in (TxnState.PREPARE_EPOCH_FENCE, TxnState.DEAD):
        return Decision.error(ErrorCode.CONCURRENT_TRANSACTIONS)
    if txn.state == TxnState.ONGOING:
        return Decision.error(ErrorCode.CONCURRENT_TRANSACTIONS)  # the caller fences and aborts it first
    if txn.producer_epoch >= MAX_EPOCH or txn.producer_id < 0:
        if new_producer_id is None:
            raise ValueError("a new producer id is needed")
        pid, epoch = new_producer_id, 0
    else:
        pid, epoch = txn.producer_id, txn.producer_epoch + 1
    return Decision(ErrorCode.NONE, txn.transition_to(
        TxnState.EMPTY, producer_id=pid, producer_epoch=epoch, last_producer_id=txn.producer_id,
        last_producer_epoch=txn.producer_epoch, timeout_ms=timeout_ms, partitions=frozenset(),
        groups=frozenset(), start_ms=-1, update_ms=now_ms))


def fence_open(txn: TxnMetadata, now_ms: int) -> TxnMetadata:
    """The PrepareAbort that ends an Ongoing transaction of a producer being fenced (a new producer's
    InitProducerId): the epoch bumped (through PrepareEpochFence, as Kafka), so the old producer's
    next request is PRODUCER_FENCED and its batches INVALID_PRODUCER_EPOCH.  At ``MAX_EPOCH`` the epoch
    stays (Kafka aborts with it too; the next InitProducerId takes a new producer id)."""
    epoch = txn.producer_epoch + 1 if txn.producer_epoch < MAX_EPOCH else txn.producer_epoch
    fencing = txn.transition_to(TxnState.PREPARE_EPOCH_FENCE, producer_epoch=epoch, update_ms=now_ms)
    return fencing.transition_to(TxnState.PREPARE_ABORT, update_ms=now_ms)


def fence_for_timeout(txn: TxnMetadata, now_ms: int) -> TxnMetadata | None:
    """The PrepareAbort of a transaction Ongoing past its timeout (Kafka's
    ``abortTimedOutTransactions``: epoch bumped, so the producer's next request is fenced), or None
    when it has not timed out."""
    if txn.state != TxnState.ONGOING or txn.start_ms < 0 or now_ms < txn.start_ms + txn.timeout_ms:
        return None
    return fence_open(txn, now_ms)


def add_partitions(txn: TxnMetadata, producer_id: int, epoch: int, partitions: set[TopicPartition],
                   now_ms: int) -> Decision:
    """AddPartitionsToTxn: Ongoing with the partitions added; nothing to write when they are all in
    already (Kafka's ``handleAddPartitionsToTransaction``)."""
    return _add(txn, producer_id, epoch, frozenset(partitions), frozenset(), now_ms)


def add_group(txn: TxnMetadata, producer_id: int, epoch: int, group_id: str, now_ms: int) -> Decision:
    """AddOffsetsToTxn: Ongoing with the group added.  Kafka's coordinator treats it as
    AddPartitionsToTxn of the group's ``__consumer_offsets`` partition, so the codes are the same:
    another producer id INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED, a transaction
    being completed CONCURRENT_TRANSACTIONS; nothing to write when the group is in already."""
    return _add(txn, producer_id, epoch, frozenset(), frozenset({group_id}), now_ms)


def _add(txn: TxnMetadata, producer_id: int, epoch: int, partitions: frozenset[TopicPartition],
         groups: frozenset[str], now_ms: int) -> Decision:
    code = _producer_matches(txn, producer_id, epoch)
    if code:
        return Decision.error(code)
    if txn.state.preparing or txn.state in (TxnState.PREPARE_EPOCH_FENCE, TxnState.DEAD):
        return Decision.error(ErrorCode.CONCURRENT_TRANSACTIONS)
    if txn.state == TxnState.ONGOING and partitions <= txn.partitions and groups <= txn.groups:
        return Decision(ErrorCode.NONE)
    start = txn.start_ms if txn.state == TxnState.ONGOING else now_ms
    kept_partitions = txn.partitions if txn.state == TxnState.ONGOING else frozenset()
    kept_groups = txn.groups if txn.state == TxnState.ONGOING else frozenset()
    return Decision(ErrorCode.NONE, txn.transition_to(
        TxnState.ONGOING, partitions=kept_partitions | partitions, groups=kept_groups | groups, start_ms=start,
        update_ms=now_ms))


def end_txn(txn: TxnMetadata, producer_id: int, epoch: int, commit: bool, now_ms: int) -> Decision:
    """EndTxn (Kafka's ``handleEndTransaction`` of transaction version 1): Ongoing goes to PrepareCommit
    or PrepareAbort; a retry of the same outcome being completed is CONCURRENT_TRANSACTIONS, of a
    completed one NONE; the other outcome, or no transaction open, INVALID_TXN_STATE."""
    code = _producer_matches(txn, producer_id, epoch)
    if code:
        return Decision.error(code)
    state = txn.state
    if state == TxnState.ONGOING:
        return Decision(ErrorCode.NONE, txn.transition_to(
            TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, update_ms=now_ms))
    if state == TxnState.COMPLETE_COMMIT:
        return Decision.error(ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE)
    if state == TxnState.COMPLETE_ABORT:
        return Decision.error(ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE)
    if state == TxnState.PREPARE_COMMIT:
        return Decision.error(ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE)
    if state == TxnState.PREPARE_ABORT:
        return Decision.error(ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS)
    if state == TxnState.PREPARE_EPOCH_FENCE:
        return Decision.error(ErrorCode.CONCURRENT_TRANSACTIONS)
    return Decision.error(ErrorCode.INVALID_TXN_STATE)  # Empty, Dead


def complete(txn: TxnMetadata, now_ms: int) -> TxnMetadata:
    """The Complete state after every marker of a PrepareCommit / PrepareAbort was written: the
    partitions and groups cleared, no transaction open."""
    target = TxnState.COMPLETE_COMMIT if txn.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return txn.transition_to(target, partitions=frozenset(), groups=frozenset(), start_ms=-1, update_ms=now_ms)


def expired(txn: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """Whether the id may be removed (Kafka's ``transactional.id.expiration.ms``, checked as its
    ``TransactionStateManager`` checks it): no transaction open or being completed (Empty,
    CompleteCommit, CompleteAbort) and its state unchanged for ``expiration_ms``.  An Ongoing one is
    left to its timeout, which aborts it first."""
    return txn.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and \
        txn.update_ms <= now_ms - expiration_ms


def verify_partition(state: "TxnState | None", txn_producer_id: int, txn_epoch: int,
                     partitions: "frozenset[TopicPartition] | set[TopicPartition]", producer_id: int, epoch: int,
                     partition: TopicPartition) -> int:
    """Whether a transactional batch of ``producer_id``/``epoch`` for ``partition`` belongs to the id's
    open transaction (the Produce check, KIP-890 part 1; Kafka's ``handleVerifyPartitionsInTransaction``),
    from what the coordinator holds of the id (its state, producer id and epoch, the transaction's
    partitions; ``state`` None: the coordinator has no such id).  Answered as Kafka's partition leader
    answers Produce v0-10 after asking: NONE; INVALID_PRODUCER_ID_MAPPING for an unknown id or another
    producer id; INVALID_PRODUCER_EPOCH for another epoch (the coordinator's PRODUCER_FENCED);
    NOT_ENOUGH_REPLICAS while the transaction is being completed (the coordinator's
    CONCURRENT_TRANSACTIONS, which a client of transaction version 1 retries only as this); and
    INVALID_TXN_STATE when the partition is not in an open transaction of that producer (the
    coordinator's TRANSACTION_ABORTABLE, which Kafka tells Produce v11 only; we serve up to v9)."""
    if state is None or txn_producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if txn_epoch != epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if state.preparing:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if state != TxnState.ONGOING or partition not in partitions:
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE
