"""Transactions in a fetched record set: control batches never reach a reader in either isolation
level, and with a read_committed Fetch answer's aborted transactions the batches of aborted
transactions are dropped as Kafka's Java consumer drops them (``CompletedFetch``): per producer id,
from the transaction's first offset until that producer's ABORT marker.  Hand-built batches:
interleaved producers, an abort and a commit, a producer id reused after its abort, a plain and an
idempotent non-transactional producer, an open transaction, a fetch that starts or ends inside an
aborted transaction.  Both readers (``iter_records`` and ``decode_to_arrow``, compiled and Python)."""

from __future__ import annotations

import pytest
from records_samples import build, restamp

from spark_coord.records import arrow, arrow_jit
from spark_coord.records.builder import control_batch
from spark_coord.records.header import CONTROL_MASK, TRANSACTIONAL_MASK, InvalidBatch
from spark_coord.records.reader import (
    ABORT_MARKER,
    COMMIT_MARKER,
    aborted_batches,
    control_marker,
    drop_aborted,
    iter_batches,
    iter_records,
    next_offset,
)

P_ABORTED, P_COMMITTED, P_IDEMPOTENT, P_OPEN = 1001, 1002, 1003, 1004


def data(base: int, n: int, producer_id: int = -1, transactional: bool = False, codec: int = 0) -> bytes:
    records = [(b"k%d" % (base + i), b"v%d" % (base + i), [], 1_700_000_000_000 + base + i) for i in range(n)]
    return build(records, codec, base_offset=base, producer_id=producer_id,
                 producer_epoch=0 if producer_id >= 0 else -1, is_transactional=transactional)


def log_of() -> bytes:
    """Offsets 0..16 of one partition as a broker would hold them::

        0-1   P_ABORTED   txn data          (aborted: marker at 8)
        2-3   P_COMMITTED txn data          (committed: marker at 11)
        4     plain, no producer id
        5-6   P_ABORTED   txn data (lz4)    (aborted)
        7     P_IDEMPOTENT, not transactional
        8     P_ABORTED   ABORT marker
        9-10  P_COMMITTED txn data (zstd)
        11    P_COMMITTED COMMIT marker
        12-13 P_ABORTED   txn data          (its next transaction: committed at 14)
        14    P_ABORTED   COMMIT marker
        15-16 P_OPEN      txn data          (still open: no marker)
    """
    return b"".join([
        data(0, 2, P_ABORTED, True), data(2, 2, P_COMMITTED, True), data(4, 1), data(5, 2, P_ABORTED, True, codec=3),
        data(7, 1, P_IDEMPOTENT), control_batch(ABORT_MARKER, P_ABORTED, 0, 8),
        data(9, 2, P_COMMITTED, True, codec=4), control_batch(COMMIT_MARKER, P_COMMITTED, 0, 11),
        data(12, 2, P_ABORTED, True), control_batch(COMMIT_MARKER, P_ABORTED, 0, 14), data(15, 2, P_OPEN, True),
    ])


#: What Kafka's broker answers a read_committed fetch of the log above: the one aborted transaction.
ABORTED = [(P_ABORTED, 0)]
UNCOMMITTED = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 15, 16]
COMMITTED = [2, 3, 4, 7, 9, 10, 12, 13, 15, 16]


@pytest.fixture(params=["compiled", "python"])
def decoder(request, monkeypatch):
    """``decode_to_arrow`` through the compiled kernel, or the Python decoder."""
    if request.param == "compiled":
        assert arrow_jit.AVAILABLE, arrow_jit.WHY_NOT
        monkeypatch.setattr(arrow, "arrow_jit", arrow_jit)
        monkeypatch.setattr(arrow, "_USE_JIT", True)
    else:
        monkeypatch.setattr(arrow, "_USE_JIT", False)

    def decode(buf, start=0, end=None, aborted=None):
        rb = arrow.decode_to_arrow(buf, "t", 0, start, end, include_headers=True, aborted_transactions=aborted)
        return rb.column("offset").to_pylist(), rb.column("value").to_pylist()
    return decode


def test_control_markers_are_parsed():
    buf = log_of()
    markers = {h.base_offset: control_marker(h, b) for h, b in iter_batches(buf) if h.is_control}
    assert markers == {8: ABORT_MARKER, 11: COMMIT_MARKER, 14: COMMIT_MARKER}
    for h, _ in iter_batches(buf):
        assert h.is_control == (h.base_offset in markers)
        assert bool(h.attributes & TRANSACTIONAL_MASK) == (h.producer_id in (P_ABORTED, P_COMMITTED, P_OPEN))


def test_control_batches_never_reach_a_reader_in_either_mode(decoder):
    """read_uncommitted (no aborted list) and read_committed: no control record is ever a row or a
    record, and every data record of an uncommitted read is there, aborted ones included."""
    buf = log_of()
    assert [r.offset for r in iter_records(buf)] == UNCOMMITTED
    assert decoder(buf) == (UNCOMMITTED, [b"v%d" % o for o in UNCOMMITTED])
    assert [r.offset for r in iter_records(buf, aborted_transactions=ABORTED)] == COMMITTED
    assert decoder(buf, aborted=ABORTED) == (COMMITTED, [b"v%d" % o for o in COMMITTED])
    # a record set of nothing but markers: no rows, and the next fetch starts after them
    markers = control_batch(COMMIT_MARKER, 7, 0, 20) + control_batch(ABORT_MARKER, 8, 0, 21)
    assert list(iter_records(markers)) == [] and decoder(markers) == ([], [])
    assert decoder(markers, aborted=[(8, 21)]) == ([], []) and next_offset(markers) == 22


def test_aborted_transactions_of_interleaved_producers(decoder):
    """Only the aborted producer's batches between its first offset and its ABORT marker go: not the
    committed transaction interleaved with it, not the non-transactional records in between (with or
    without a producer id), not the same producer's next transaction after the marker, not the open
    transaction (the broker cuts a read_committed fetch at the last stable offset, before it)."""
    buf = log_of()
    assert aborted_batches(buf, ABORTED) == {0, 5}
    assert aborted_batches(buf, []) == set() and aborted_batches(buf, None) == set()
    assert drop_aborted(buf, []) is buf
    assert next_offset(drop_aborted(buf, ABORTED)) == next_offset(buf) == 17
    # a read that starts or ends inside the range, as a Spark task's offset range does
    assert decoder(buf, 1, 13, ABORTED)[0] == [2, 3, 4, 7, 9, 10, 12]
    assert decoder(buf, 6, None, ABORTED)[0] == [7, 9, 10, 12, 13, 15, 16]


def test_a_fetch_that_starts_or_ends_inside_an_aborted_transaction(decoder):
    """The broker lists an aborted transaction in every fetch that overlaps it: a fetch cut before
    the ABORT marker (max.partition.fetch.bytes) drops the transaction's batches it holds; the next
    fetch, starting in the middle of the transaction, gets the same entry (first offset below its
    start) and drops the rest."""
    batches = [b for _, b in iter_batches(log_of())]
    first, second = b"".join(batches[:4]), b"".join(batches[4:])   # 0..6 and 7..16
    assert decoder(first, 0, None, ABORTED)[0] == [2, 3, 4]
    assert next_offset(first) == 7
    assert decoder(second, 7, None, ABORTED)[0] == [7, 9, 10, 12, 13, 15, 16]
    assert decoder(b"".join(batches[3:]), 5, None, ABORTED)[0] == [7, 9, 10, 12, 13, 15, 16]


def test_two_aborted_transactions_of_one_producer_and_one_of_another(decoder):
    """A producer aborts twice (two entries, each ended by its own marker) while another producer's
    transaction is aborted across both; a committed transaction in between survives."""
    buf = b"".join([
        data(0, 1, 1, True), data(1, 1, 2, True), control_batch(ABORT_MARKER, 1, 0, 2),
        data(3, 1, 1, True), data(4, 1, 3, True), control_batch(COMMIT_MARKER, 1, 0, 5),
        data(6, 1, 1, True), data(7, 1, 2, True), control_batch(ABORT_MARKER, 1, 0, 8),
        control_batch(ABORT_MARKER, 2, 0, 9), control_batch(COMMIT_MARKER, 3, 0, 10), data(11, 1),
    ])
    aborted = [(1, 0), (2, 1), (1, 6)]
    assert decoder(buf, aborted=aborted)[0] == [3, 4, 11]
    assert [r.offset for r in iter_records(buf, aborted_transactions=aborted)] == [3, 4, 11]
    assert decoder(buf)[0] == [0, 1, 3, 4, 6, 7, 11]


def test_a_control_batch_without_a_marker_key_is_refused():
    marker = restamp(build([(b"\x00", b"", [], 1)], base_offset=3, producer_id=1, producer_epoch=0,
                           is_transactional=True), attributes=CONTROL_MASK | TRANSACTIONAL_MASK)
    with pytest.raises(InvalidBatch, match="control batch at offset 3"):
        aborted_batches(data(0, 3, 1, True) + marker, [(1, 0)])
    with pytest.raises(ValueError, match="control marker type"):
        control_batch(2, 1, 0)
