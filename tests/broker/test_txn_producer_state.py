"""The producer state of a partition (``broker.producer_state``) with transactions: transactional batches
get the idempotent checks, control batches are refused on Produce, markers are judged by the producer's
epoch and adopt a newer one, and a marker in the log a broker starts from does not reset a producer's
sequence."""

from __future__ import annotations

from spark_coord.broker.producer_state import PartitionProducers, ProducerStateTable
from spark_coord.errors import ErrorCode
from spark_coord.records.builder import BatchBuilder, control_batch
from spark_coord.records.header import parse_header


class FakeLog:
    """What the producer state reads of a partition log: the idempotent batches it opened with."""

    def __init__(self, idempotent_tail=()):
        self.idempotent_tail = list(idempotent_tail)


def txn_header(pid: int, seq: int, epoch: int = 0, base_offset: int = 0, records: int = 1):
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    for i in range(records):
        b.append(b"v%d" % i)
    return parse_header(b.build(base_offset))


def test_transactional_batches_get_the_idempotent_checks():
    plog = FakeLog()
    table = ProducerStateTable()
    h = txn_header(4, 0, records=2)
    assert table.check("t", 0, plog, [h]).append
    table.record("t", 0, plog, [h], 10)
    assert table.check("t", 0, plog, [h]).duplicate_of == 10
    assert table.check("t", 0, plog, [txn_header(4, 5)]).code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check("t", 0, plog, [txn_header(4, 2)]).append


def test_control_batches_are_not_produced():
    marker = parse_header(control_batch(1, 4, 0))
    verdict = ProducerStateTable().check("t", 0, FakeLog(), [marker])
    assert verdict.code == ErrorCode.INVALID_RECORD


def test_markers_are_judged_by_the_producer_epoch_and_adopt_a_newer_one():
    state = PartitionProducers(FakeLog())
    state.record(txn_header(4, 0, epoch=2), 0)
    assert state.check_marker(4, 1).code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.check_marker(4, 2).code == ErrorCode.NONE
    assert state.check_marker(99, 0).code == ErrorCode.NONE  # unknown producer: Kafka appends it
    state.record_marker(4, 3)
    assert state.check(txn_header(4, 1, epoch=2)).code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.check(txn_header(4, 0, epoch=3)).append


def test_a_marker_in_the_log_tail_does_not_reset_the_sequence():
    """A broker starting from a log whose producer's last batch is a marker expects the producer's next
    sequence, not 0 (a marker carries no sequence: base sequence -1)."""
    data = txn_header(4, 0, records=2)
    marker = parse_header(control_batch(0, 4, 0, base_offset=2))
    state = PartitionProducers(FakeLog([data, marker]))
    assert state.check(txn_header(4, 2, base_offset=3)).append
    assert state.check(txn_header(4, 0, base_offset=3, records=2)).duplicate_of == 0
    assert state.check(txn_header(4, 3, base_offset=3)).code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
