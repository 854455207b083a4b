"""SharePartition and transactions (KIP-932 on KIP-98): control batches are never records of a share
partition; a read_committed group acquires below the last stable offset only, and archives the
records of aborted transactions it acquires (Kafka's ``filterAbortedTransactionalAcquiredRecords``)."""

from __future__ import annotations

from spark_coord.errors import ErrorCode
from spark_coord.share import AckType, Acquired, RecordState, SharePartition

ARCHIVED = RecordState.ARCHIVED


def states(sp: SharePartition) -> dict[int, tuple]:
    """offset -> (state, delivery count), from the range list."""
    return {o: (RecordState(state), count) for first, last, state, count, _, _ in sp._ranges
            for o in range(first, last + 1)}


def test_a_marker_between_batches_is_archived_never_delivered():
    # 0-2 a transaction, 3 its COMMIT marker (a control batch: not in the data batches), 4-5 plain records
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 2), (4, 5)], max_records=100, lock_deadline=10, read_end=6)
    assert got == [Acquired(0, 2, 1), Acquired(4, 5, 1)]
    assert states(sp)[3] == (ARCHIVED, 0)
    assert sp.deliveries_total == 5 and sp.archived_total == 1


def test_a_marker_after_the_last_data_batch_does_not_hold_the_start_back():
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 2)], max_records=100, lock_deadline=10, read_end=4)  # 3: the marker
    assert got == [Acquired(0, 2, 1)]
    assert sp.end_offset == 4 and states(sp)[3] == (ARCHIVED, 0)
    assert sp.acknowledge("m", 0, 2, [AckType.ACCEPT]) == ErrorCode.NONE
    assert (sp.start_offset, sp.end_offset, sp.fetch_offset()) == (4, 4, 4)
    # a read of nothing but markers moves an empty window's start over them
    assert sp.acquire("m", [], max_records=100, lock_deadline=10, read_end=7) == []
    assert (sp.start_offset, sp.end_offset, sp.archived_total) == (7, 7, 4)


def test_the_trailing_markers_wait_while_the_acquisition_stopped_before_the_last_batch():
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 4), (5, 9)], max_records=3, lock_deadline=10, read_end=11)
    assert got == [Acquired(0, 2, 1)] and sp.end_offset == 3
    got = sp.acquire("m", [(3, 4), (5, 9)], max_records=100, lock_deadline=10, read_end=11)
    assert got == [Acquired(3, 9, 1)] and sp.end_offset == 11 and states(sp)[10] == (ARCHIVED, 0)


def test_nothing_at_or_past_the_last_stable_offset_is_acquired():
    # 0-1 plain, 2-4 an open transaction (the LSO is 2), 5-6 plain after it
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 1), (2, 4), (5, 6)], max_records=100, lock_deadline=10, stable_offset=2,
                     read_end=7)
    assert got == [Acquired(0, 1, 1)]
    assert sp.end_offset == 2 and sp.fetch_offset() == 2  # the rest waits, nothing archived
    assert sp.archived_total == 0
    # the transaction committed (marker at 7): the LSO is the log end, the rest comes
    got = sp.acquire("m", [(2, 4), (5, 6)], max_records=100, lock_deadline=10, stable_offset=8, read_end=8)
    assert got == [Acquired(2, 6, 1)] and states(sp)[7] == (ARCHIVED, 0)


def test_an_aborted_transaction_is_acquired_then_archived_and_never_returned():
    # 0-1 plain, 2-4 aborted (marker 5), 6-7 plain
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 1), (2, 4), (6, 7)], max_records=100, lock_deadline=10, stable_offset=8,
                     aborted=[(2, 4)], read_end=8)
    assert got == [Acquired(0, 1, 1), Acquired(6, 7, 1)]
    s = states(sp)
    assert [s[o] for o in (2, 3, 4)] == [(ARCHIVED, 1)] * 3  # as Kafka: acquired (count 1), then archived
    assert s[5] == (ARCHIVED, 0)
    assert sp.deliveries_total == 4 and sp.archived_total == 4
    assert sp.acknowledge("m", 0, 1, [AckType.ACCEPT]) == ErrorCode.NONE
    assert sp.start_offset == 6  # over the aborted records and the marker
    assert sp.acknowledge("m", 2, 4, [AckType.ACCEPT]) == ErrorCode.INVALID_RECORD_STATE


def test_aborted_records_count_against_max_records_and_a_later_fetch_goes_on():
    sp = SharePartition(0)
    got = sp.acquire("m", [(0, 4), (5, 9)], max_records=5, lock_deadline=10, aborted=[(0, 4)])
    assert got == [] and sp.start_offset == 5 and sp.fetch_offset() == 5
    got = sp.acquire("m", [(5, 9)], max_records=5, lock_deadline=10, aborted=[(0, 4)])
    assert got == [Acquired(5, 9, 1)]


def test_released_records_of_an_aborted_transaction_are_archived_when_acquired_again():
    # acquired under read_uncommitted, released; the group then reads committed only
    sp = SharePartition(0)
    assert sp.acquire("m", [(0, 3)], max_records=10, lock_deadline=10) == [Acquired(0, 3, 1)]
    assert sp.acknowledge("m", 0, 3, [AckType.RELEASE]) == ErrorCode.NONE
    got = sp.acquire("n", [(0, 3)], max_records=10, lock_deadline=10, aborted=[(1, 2)])
    assert got == [Acquired(0, 0, 2), Acquired(3, 3, 2)]
    assert states(sp)[1] == states(sp)[2] == (ARCHIVED, 2)


def test_archived_aborted_records_stay_archived_after_a_restore():
    sp = SharePartition(0)
    sp.acquire("m", [(0, 1), (2, 4), (6, 7)], max_records=100, lock_deadline=10, aborted=[(2, 4)], read_end=8)
    again = SharePartition.restore(sp.snapshot())
    s = states(again)
    assert [s[o][0] for o in range(2, 6)] == [ARCHIVED] * 4
    got = again.acquire("m", [(0, 1), (2, 4), (6, 7)], max_records=100, lock_deadline=10, read_end=8)
    # the acquisitions were lost (delivered again, their counts kept), the archive was not
    assert got == [Acquired(0, 1, 2), Acquired(6, 7, 2)]
