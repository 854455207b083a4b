"""The Produce check's decisions (``coordinator.txn.state.verify_partition``) and what a leader asks
(``broker.txn_verify.verify``): the coordinator is asked once per partition and transaction, not again
while the producer's transaction is open there, again after the marker that closed it; a marker
arriving while the question is out voids the answer.  (tests/integration/test_transactions.py checks
it on real brokers.)"""

from __future__ import annotations

import asyncio

from spark_coord.broker import txn_verify
from spark_coord.broker.producer_state import ProducerStateTable
from spark_coord.coordinator.txn.state import TxnState, verify_partition
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import parse_header

TP = ("t", 0)


def test_verdicts_are_kafkas_produce_codes():
    ongoing = frozenset({TP})
    assert verify_partition(TxnState.ONGOING, 7, 2, ongoing, 7, 2, TP) == ErrorCode.NONE
    assert verify_partition(TxnState.ONGOING, 7, 2, ongoing, 7, 2, ("t", 1)) == ErrorCode.INVALID_TXN_STATE
    assert verify_partition(TxnState.ONGOING, 7, 2, ongoing, 7, 1, TP) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert verify_partition(TxnState.ONGOING, 7, 2, ongoing, 8, 2, TP) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert verify_partition(None, -1, -1, frozenset(), 7, 2, TP) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    for preparing in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        assert verify_partition(preparing, 7, 2, ongoing, 7, 2, TP) == ErrorCode.NOT_ENOUGH_REPLICAS
    for done in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        assert verify_partition(done, 7, 2, frozenset(), 7, 2, TP) == ErrorCode.INVALID_TXN_STATE


class Coordinator:
    """The id's coordinator held here: answers from ``partitions``, counting the questions."""

    def __init__(self) -> None:
        self.asked = 0
        self.partitions: set = set()

    def verify(self, tid, pid, epoch, tp):
        self.asked += 1
        return verify_partition(TxnState.ONGOING, 7, 0, frozenset(self.partitions), pid, epoch, tp)


class Service:
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def for_transaction(self, tid):
        return self.coordinator, None


class Log:
    """What the check reads of a partition log: the producer's transaction there."""

    def __init__(self) -> None:
        self.open: dict[int, tuple[int, int, int]] = {}
        self.idempotent_tail = ()

    def transaction_info(self, pid):
        return self.open.get(pid, (-1, -1, -1))


class Ctx:
    def __init__(self, coordinator: Coordinator, enabled: bool = True) -> None:
        self.transactions = Service(coordinator)
        self.config = {"transaction.partition.verification.enable": enabled}

        class Producers:
            sequences = ProducerStateTable()
        self.producers = Producers()


def test_asked_once_per_partition_and_transaction():
    coordinator = Coordinator()
    ctx, plog = Ctx(coordinator), Log()

    def check() -> int:
        return asyncio.run(txn_verify.verify(ctx, "tx", "t", 0, plog, (7, 0)))[0]

    assert check() == ErrorCode.INVALID_TXN_STATE and coordinator.asked == 1  # not added yet
    coordinator.partitions.add(TP)
    assert check() == ErrorCode.NONE and coordinator.asked == 2
    plog.open[7] = (0, 3, 100)  # its first batch appended at offset 100: the transaction is open here
    assert check() == ErrorCode.NONE and coordinator.asked == 2  # not asked again
    plog.open[7] = (0, 3, -1)  # a marker closed it: the next transaction is asked about
    coordinator.partitions.clear()
    assert check() == ErrorCode.INVALID_TXN_STATE and coordinator.asked == 3
    off = Ctx(coordinator, enabled=False)
    assert asyncio.run(txn_verify.verify(off, "tx", "t", 0, plog, (7, 0))) == (ErrorCode.NONE, None)
    assert coordinator.asked == 3


def test_a_marker_during_the_question_voids_the_answer():
    coordinator = Coordinator()
    coordinator.partitions.add(TP)
    ctx, plog = Ctx(coordinator), Log()
    producers = ctx.producers.sequences.partition("t", 0, plog)
    code, guard = asyncio.run(txn_verify.verify(ctx, "tx", "t", 0, plog, (7, 0)))
    assert code == ErrorCode.NONE and producers.still_verified(7, guard)
    producers.record_marker(7, 0)  # the transaction ended before the batch was appended
    assert not producers.still_verified(7, guard)


def test_the_transactional_producer_of_an_entry():
    def header(transactional: bool, pid: int = 7):
        b = BatchBuilder(producer_id=pid, producer_epoch=3, base_sequence=0, is_transactional=transactional)
        b.append(b"v")
        return parse_header(b.build())

    assert txn_verify.transactional_producer([header(True)]) == (7, 3)
    assert txn_verify.transactional_producer([header(False)]) is None
    plain = BatchBuilder()
    plain.append(b"v")
    assert txn_verify.transactional_producer([parse_header(plain.build())]) is None


class RemoteService:
    """The id's coordinator on broker 1: DescribeTransactions over the wire, counted."""

    def __init__(self) -> None:
        self.described = 0
        self.broker = type("B", (), {"broker_id": 0})()
        self.markers = self

    def for_transaction(self, tid):
        return None, ErrorCode.NOT_COORDINATOR

    def holder_of(self, tid):
        return 1, 3

    async def describe_transaction(self, holder, tid):
        assert holder == 1
        self.described += 1
        return {"error_code": 0, "transaction_state": "Ongoing", "producer_id": 7, "producer_epoch": 0,
                "topics": [{"topic": "t", "partitions": [0]}]}


def test_one_question_over_the_wire_for_the_partitions_of_a_request():
    ctx = Ctx(Coordinator())
    ctx.transactions = RemoteService()
    logs = {p: Log() for p in range(3)}
    got = asyncio.run(txn_verify.verify_many(ctx, "tx", (7, 0), [("t", p, logs[p]) for p in range(3)]))
    assert {tp: code for tp, (code, _) in got.items()} == {
        ("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.INVALID_TXN_STATE, ("t", 2): ErrorCode.INVALID_TXN_STATE}
    assert ctx.transactions.described == 1
    logs[0].open[7] = (0, 3, 5)  # open on partition 0 now: only the others are asked about
    got = asyncio.run(txn_verify.verify_many(ctx, "tx", (7, 0), [("t", p, logs[p]) for p in range(3)]))
    assert got[("t", 0)] == (ErrorCode.NONE, None) and ctx.transactions.described == 2
    got = asyncio.run(txn_verify.verify_many(ctx, "tx", (8, 0), [("t", 1, logs[1])]))
    assert got[("t", 1)][0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING  # another producer than the id's
