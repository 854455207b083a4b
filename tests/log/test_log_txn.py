"""Transactions on a partition log (``log.txn``): transactional batches open a producer's transaction,
markers close it, the last stable offset, the aborted-transaction index (Kafka's ``.txnindex``), reads
bounded by the LSO, and recovery of all of it from the snapshot and the batches after it."""

from __future__ import annotations

import struct

from spark_coord.log.txn import ABORT, COMMIT, ENTRY_SIZE, AbortedTxn, TxnState, read_txn_index, txn_index_name
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import validate_batches
from spark_coord.records.reader import iter_batches


def txn_batch(pid: int, values: list[bytes], seq: int = 0, epoch: int = 0, transactional: bool = True) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    for v in values:
        b.append(v, key=v, timestamp_ms=1_700_000_000_000)
    return b.build()


def append(plog, batch: bytes) -> int:
    return plog.append(batch, validate_batches(batch))


def batch_offsets(region) -> list[tuple[int, int, bool]]:
    """(base offset, producer id, control) of each batch of a read."""
    return [(h.base_offset, h.producer_id, h.is_control) for h, _ in iter_batches(region.read())]


def test_lso_follows_open_transactions_and_markers(kit):
    plog = kit.open()
    append(plog, txn_batch(-1, [b"plain"], seq=-1, epoch=-1, transactional=False))  # offset 0
    assert plog.last_stable_offset == 1
    assert append(plog, txn_batch(7, [b"a", b"b"])) == 1  # producer 7 opens at 1
    assert append(plog, txn_batch(8, [b"c"])) == 3  # producer 8 opens at 3
    append(plog, txn_batch(7, [b"d"], seq=2))  # 4: 7's transaction stays open at 1
    assert plog.last_stable_offset == 1
    assert plog.txns.open_transactions() == {7: 1, 8: 3}
    offset, _ = plog.append_marker(7, 0, COMMIT, 5)
    assert offset == 5
    assert plog.last_stable_offset == 3
    offset, _ = plog.append_marker(8, 0, ABORT, 5)
    assert offset == 6
    assert plog.last_stable_offset == plog.log_end_offset == 7
    assert plog.aborted_transactions(0, 7) == [AbortedTxn(8, 3, 6, 7)]
    assert plog.transaction_info(7) == (0, 5, -1)
    # a marker for a producer with no open transaction is appended and changes nothing
    offset, _ = plog.append_marker(9, 0, ABORT, 1)
    assert offset == 7 and plog.aborted_transactions(0, 100) == [AbortedTxn(8, 3, 6, 7)]
    plog.close()


def test_the_aborted_index_is_kafkas_format(kit):
    plog = kit.open()
    append(plog, txn_batch(3, [b"x"]))
    plog.append_marker(3, 0, ABORT, 0)
    plog.close()
    raw = (kit.dir / txn_index_name(0)).read_bytes()
    assert len(raw) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", raw) == (0, 3, 0, 1, 2)
    assert read_txn_index(kit.dir / txn_index_name(0)) == [AbortedTxn(3, 0, 1, 2)]


def test_read_committed_reads_stop_at_the_lso(kit):
    plog = kit.open()
    append(plog, txn_batch(-1, [b"p0"], seq=-1, epoch=-1, transactional=False))  # 0
    append(plog, txn_batch(5, [b"t1", b"t2"]))  # 1-2, open
    append(plog, txn_batch(-1, [b"p3"], seq=-1, epoch=-1, transactional=False))  # 3
    lso = plog.last_stable_offset
    assert lso == 1
    assert batch_offsets(plog.read(0, 1 << 20, lso)) == [(0, -1, False)]
    assert plog.read(1, 1 << 20, lso) is None
    assert [o for o, *_ in batch_offsets(plog.read(0, 1 << 20))] == [0, 1, 3]
    plog.append_marker(5, 0, COMMIT, 0)  # 4
    assert plog.last_stable_offset == 5
    assert [o for o, *_ in batch_offsets(plog.read(1, 1 << 20, 5))] == [1, 3, 4]
    plog.close()


def test_recovery_rebuilds_open_transactions_and_the_index(kit):
    plog = kit.open(segment_bytes=1024)
    for i in range(6):  # several segments: rolls write snapshots
        append(plog, txn_batch(-1, [b"v%d" % i * 100], seq=-1, epoch=-1, transactional=False))
    first_open = append(plog, txn_batch(1, [b"open-" * 60]))
    for i in range(4):
        append(plog, txn_batch(-1, [b"w%d" % i * 100], seq=-1, epoch=-1, transactional=False))
    for i in range(2):
        append(plog, txn_batch(2, [b"ab%d" % i * 100], seq=i))
    plog.append_marker(2, 0, ABORT, 3)  # in the active segment, after the newest snapshot
    assert len(plog.segment_bases()) > 3
    before = (plog.last_stable_offset, plog.txns.open_transactions(), plog.aborted_transactions(0, 1 << 40),
              plog.transaction_info(2))
    assert before[0] == first_open
    plog.close()
    # a crash lost the index entry of the marker after the newest snapshot: recovery scans it back
    newest = max(int(f.name.split(".")[0]) for f in kit.dir.glob("*.txnsnapshot"))
    lost = [f for f in kit.dir.glob("*.txnindex") if int(f.name.split(".")[0]) >= newest]
    assert lost
    for f in lost:
        f.unlink()
    reopened = kit.open(segment_bytes=1024)
    after = (reopened.last_stable_offset, reopened.txns.open_transactions(),
             reopened.aborted_transactions(0, 1 << 40), reopened.transaction_info(2))
    assert after == before
    assert list(kit.dir.glob("*.txnindex")), "the index was written again"
    reopened.close()


def test_recovery_with_damaged_snapshots_scans_from_the_start(kit):
    plog = kit.open(segment_bytes=1024)
    open_at = append(plog, txn_batch(4, [b"first" * 60]))
    for i in range(8):
        append(plog, txn_batch(-1, [b"z%d" % i * 150], seq=-1, epoch=-1, transactional=False))
    plog.close()
    snapshots = list(kit.dir.glob("*.txnsnapshot"))
    assert snapshots
    for f in snapshots:
        f.write_bytes(b"garbage")
    reopened = kit.open(segment_bytes=1024)
    assert reopened.last_stable_offset == open_at == 0
    assert reopened.txns.open_transactions() == {4: 0}
    reopened.close()


def test_txn_state_snapshot_round_trip():
    state = TxnState()
    from spark_coord.records.header import parse_header

    h = parse_header(txn_batch(11, [b"a"], epoch=3))
    state.on_batch(h, 40)
    state.on_marker(12, 1, COMMIT, 9, 41, 42)
    offset, producers = TxnState.parse_snapshot(state.snapshot_bytes(42))
    assert offset == 42 and producers == state.producers
    assert TxnState.parse_snapshot(b"\0\0\0\0{}") is None
    assert state.lso(100) == 40 and state.aborted_between(0, 100) == []


def keyed(pid: int, key: bytes, value: bytes, seq: int = 0, transactional: bool = True) -> bytes:
    b = BatchBuilder(producer_id=pid if transactional else -1, producer_epoch=0 if transactional else -1,
                     base_sequence=seq if transactional else -1, is_transactional=transactional)
    b.append(value, key=key, timestamp_ms=1_700_000_000_000)
    return b.build()


def test_cleaner_drops_aborted_batches_keeps_markers_and_stops_at_the_lso(kit):
    from spark_coord.log.cleaner import CleanerSettings, clean_log

    plog = kit.open(segment_bytes=1024, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0)
    pad = b"." * 300
    append(plog, keyed(-1, b"k", b"committed-1" + pad, transactional=False))  # 0
    append(plog, keyed(5, b"k", b"aborted" + pad))  # 1: aborted below, must not supersede offset 0
    append(plog, keyed(5, b"j", b"aborted-j" + pad, seq=1))  # 2
    plog.append_marker(5, 0, ABORT, 0)  # 3
    append(plog, keyed(6, b"c", b"committed-txn" + pad))  # 4
    plog.append_marker(6, 0, COMMIT, 0)  # 5
    open_at = append(plog, keyed(7, b"k", b"open" + pad))  # 6: open; nothing from here is cleaned
    for i in range(6):
        append(plog, keyed(-1, b"f%d" % i, pad * 2, transactional=False))
    assert plog.last_stable_offset == open_at
    clean_log(plog, CleanerSettings(), force=True)
    kept = [(h.base_offset, h.producer_id, h.is_control) for seg, size in plog.closed_segments()
            for _, h in seg.headers(size)]
    offsets = [o for o, _, _ in kept]
    assert 0 in offsets, "the committed record of k survived (the aborted one did not supersede it)"
    assert 1 not in offsets and 2 not in offsets, "aborted batches are gone"
    assert (3, 5, True) in kept and (5, 6, True) in kept, "markers are kept"
    assert 4 in offsets and open_at in offsets
    state = (plog.last_stable_offset, plog.txns.open_transactions(), plog.aborted_transactions(0, 1 << 40))
    plog.close()
    # the cleaned log opens with the same transactions (snapshots may now fall inside a merged segment)
    reopened = kit.open(segment_bytes=1024, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0)
    assert (reopened.last_stable_offset, reopened.txns.open_transactions(),
            reopened.aborted_transactions(0, 1 << 40)) == state
    reopened.close()


def test_lso_is_never_below_the_log_start(kit):
    plog = kit.open()
    append(plog, txn_batch(3, [b"a"]))  # 0: open
    append(plog, txn_batch(-1, [b"b"], seq=-1, epoch=-1, transactional=False))  # 1
    assert plog.last_stable_offset == 0
    plog.advance_log_start(1)
    assert plog.last_stable_offset == 1
    assert plog.read(1, 1 << 20, plog.last_stable_offset) is None  # nothing stable past the start yet
    plog.append_marker(3, 0, COMMIT, 0)
    assert plog.last_stable_offset == plog.log_end_offset == 3
    plog.close()


def test_recovered_aborted_entries_equal_the_written_ones_and_old_snapshots_go(kit):
    plog = kit.open(segment_bytes=1024)
    for i in range(8):
        append(plog, txn_batch(-1, [b"s%d" % i * 150], seq=-1, epoch=-1, transactional=False))
    append(plog, txn_batch(6, [b"gone"]))
    plog.append_marker(6, 0, ABORT, 2)  # no other transaction open: its LSO is the offset after the marker
    written = plog.aborted_transactions(0, 1 << 40)
    assert written[0].last_stable_offset == written[0].last_offset + 1
    plog.close()
    assert len(list(kit.dir.glob("*.txnsnapshot"))) == 2, "only the newest snapshots are kept"
    for f in kit.dir.glob("*.txnindex"):
        f.unlink()
    reopened = kit.open(segment_bytes=1024)
    assert reopened.aborted_transactions(0, 1 << 40) == written
    reopened.close()
