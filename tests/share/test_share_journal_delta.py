"""The share-state journal writes what changed (UPDATE records, as Kafka's ShareUpdate) between
SNAPSHOTs, on real files: replaying SNAPSHOT + UPDATEs gives exactly the state journaled last, a torn
or orphaned UPDATE ends the replay at the state before it, another lineage's UPDATE is ignored, a
roll carries a share partition over as one materialized SNAPSHOT, and an acknowledgement on a
fragmented 10,000-lock window appends a few hundred bytes, not its 160 KB snapshot."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_coord.share.journal import MAX_UPDATES, JournalEntry, ShareJournal, _read_segment, encode_update
from spark_coord.share.partition import SharePartition
from spark_coord.share.store import decode

W = "1-abc"
TID = b"\x01" * 16
LIMITS = {"delivery_count_limit": 3, "max_in_flight": 40}


def _key(p: int) -> tuple[str, str, int]:
    return ("g", "t", p)


def _journal(j: ShareJournal, p: int, sp: SharePartition, writer: str = W, epoch: int = 1) -> JournalEntry:
    """Journal ``sp`` as the manager's group commit does; the entry appended."""
    e = j.entry(_key(p), writer, epoch, sp, TID)
    j.append([e])
    return e


def _recovered(directory, p: int) -> dict:
    j = ShareJournal(directory)
    got = j.open()
    j.close()
    return decode(got[_key(p)].data)[0]


def _step(sp: SharePartition, member: str, op: int, a: int, b: int, now: int) -> None:
    """One random operation on ``sp``: acquire, acknowledge (accept / release / reject, per offset or
    whole), lock expiry, a start moved by decree, new limits, a member's release."""
    if op == 0:
        fo = sp.fetch_offset()
        if fo is not None:
            sp.acquire(member, [(fo, fo + a % 12)], max_records=1 + b % 12, lock_deadline=now + 1 + b % 15)
    elif op in (1, 2):
        held = [r for r in sp._ranges if r[2] == 1 and r[4] == member]
        if held:
            r = held[a % len(held)]
            first = r[0] + a % (r[1] - r[0] + 1)
            last = first + b % (r[1] - first + 1)
            types = [1 + (a + b + o) % 3 for o in range(last - first + 1)] if op == 2 else [1 + b % 3]
            assert sp.acknowledge(member, first, last, types) == 0
    elif op == 3:
        sp.expire_locks(now)
    elif op == 4 and a % 4 == 0:
        sp.move_start(sp.start_offset + b % 6)
    elif op == 4 and a % 4 == 1:  # a group's config changed: ACQUIRED offsets snapshot by the new limit
        sp.set_limits(delivery_count_limit=1 + b % 3, max_in_flight=LIMITS["max_in_flight"])
    elif op == 5:
        sp.release_member(member)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 1), st.sampled_from("ab"), st.integers(0, 5), st.integers(0, 99),
                                st.integers(0, 99), st.booleans(), st.booleans()), min_size=1, max_size=120),
       segment_bytes=st.sampled_from([600, 3000, 1 << 20]), max_updates=st.sampled_from([2, 1000]))
def test_replaying_snapshots_and_updates_gives_the_state_journaled_last(steps, segment_bytes, max_updates):
    with tempfile.TemporaryDirectory() as d:
        j = ShareJournal(d, segment_bytes=segment_bytes)
        j.max_updates, j.update_ratio = max_updates, 1000.0  # UPDATEs, however small the snapshot
        j.open()
        sps = [SharePartition(0, **LIMITS), SharePartition(100, **LIMITS)]
        last: dict[int, dict] = {}
        for now, (p, member, op, a, b, journal, checkpoint) in enumerate(steps):
            sp = sps[p]
            _step(sp, member, op, a, b, now)
            if journal:
                _journal(j, p, sp)
                last[p] = sp.snapshot()
            if checkpoint and p in last:  # ZooKeeper caught up: the entry is no longer pending
                j.covered(_key(p), W, 1, sp.version)
                j.append([j.entry(_key(p), W, 1, sp, TID)])  # and journaled again, so it stays recoverable
                last[p] = sp.snapshot()
        j.close()
        again = ShareJournal(d)
        got = again.open()
        again.close()
        assert set(got) == {_key(p) for p in last}
        for p, snap in last.items():
            state = decode(got[_key(p)].data)[0]
            assert state == snap
            assert SharePartition.restore(state, **LIMITS).snapshot() == SharePartition.restore(snap, **LIMITS) \
                .snapshot()


def _fragmented(locks: int = 10_000) -> SharePartition:
    sp = SharePartition(0, max_in_flight=locks)
    sp.acquire("m", [(0, locks - 1)], max_records=locks, lock_deadline=10**9)
    sp.acknowledge("m", 0, locks - 1, [2] + [1 if o % 2 else 2 for o in range(1, locks)])
    sp.acquire("m", [(0, locks - 1)], max_records=locks, lock_deadline=10**9)  # the released ones held again
    return sp


def test_an_acknowledgement_on_a_fragmented_window_appends_an_update_of_a_few_hundred_bytes(tmp_path):
    j = ShareJournal(tmp_path)
    j.open()
    sp = _fragmented()
    first = _journal(j, 0, sp)
    assert first.prev is None and len(first.data) > 100_000  # the first record of a chain is the whole state
    before = j.bytes
    assert sp.acknowledge("m", 2, 2, [1]) == 0  # one more offset accepted
    e = _journal(j, 0, sp)
    assert e.prev == first.seq and j.bytes - before < 1024
    assert sp.acknowledge("m", 0, 0, [1]) == 0  # the start moves over the first 3 offsets
    e = _journal(j, 0, sp)
    assert e.prev is not None and len(e.data) < 1024
    j.close()
    assert _recovered(tmp_path, 0) == sp.snapshot()


def _three(tmp_path) -> tuple[ShareJournal, SharePartition, list[dict]]:
    """A share partition journaled three times (a SNAPSHOT, two UPDATEs); the snapshots after each."""
    j = ShareJournal(tmp_path)
    j.open()
    sp = _fragmented(200)
    snaps = []
    for offset in (2, 4, 6):
        assert sp.acknowledge("m", offset, offset, [1]) == 0
        _journal(j, 0, sp)
        snaps.append(sp.snapshot())
    return j, sp, snaps


def test_a_torn_update_at_the_tail_recovers_the_state_before_it(tmp_path):
    j, _, snaps = _three(tmp_path)
    j.close()
    path = j.segments()[-1]
    entries, _, size = _read_segment(path)
    assert [e.prev is None for e in entries] == [True, False, False]
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    assert _recovered(tmp_path, 0) == snaps[1]


def test_an_update_whose_predecessor_is_missing_ends_the_replay(tmp_path):
    j, _, snaps = _three(tmp_path)
    j.close()
    path = j.segments()[-1]
    entries, _, _ = _read_segment(path)
    path.write_bytes(entries[0].record() + entries[2].record())  # the first UPDATE lost
    assert _recovered(tmp_path, 0) == snaps[0]


def test_an_update_of_another_lineage_is_ignored(tmp_path):
    j, sp, snaps = _three(tmp_path)
    last = j.pending[_key(0)]
    assert sp.acknowledge("m", 8, 8, [1]) == 0
    update = sp.take_update()
    other = [JournalEntry.of(_key(0), encode_update(update, tid, writer, epoch, last.seq + 1, last.seq))
             for writer, epoch, tid in (("2-other", 1, TID), (W, 2, TID), (W, 1, b"\x02" * 16))]
    size = j.segments()[-1].stat().st_size
    with pytest.raises(ValueError):  # the journal refuses to append an UPDATE that follows no record of it
        j.append(other[:1])
    assert j.segments()[-1].stat().st_size == size
    j.close()
    with open(j.segments()[-1], "ab") as f:  # another broker's; this one's after a takeover; another topic's
        for e in other:
            f.write(e.record())
    assert _recovered(tmp_path, 0) == snaps[2]


def test_a_roll_writes_one_materialized_snapshot_per_pending_share_partition(tmp_path):
    j = ShareJournal(tmp_path, segment_bytes=100_000)
    j.open()
    sps = [_fragmented(200), _fragmented(200)]
    for offset in (2, 4, 6, 8):
        for p, sp in enumerate(sps):
            assert sp.acknowledge("m", offset, offset, [1]) == 0
            assert (_journal(j, p, sp).prev is None) == (offset == 2)  # a SNAPSHOT, then UPDATEs
    while not j.rolls:  # another share partition fills the segment, each state checkpointed after its append
        e = _journal(j, 2, _fragmented(2000))
        j.covered(e.key, W, 1, e.seq)
    entries, _, _ = _read_segment(j.segments()[-1])
    assert sorted(e.key for e in entries) == [_key(0), _key(1), _key(2)] and all(e.prev is None for e in entries)
    states = {e.key: decode(e.data)[0] for e in entries}
    assert states[_key(0)] == sps[0].snapshot() and states[_key(1)] == sps[1].snapshot()
    assert sps[0].acknowledge("m", 10, 10, [1]) == 0
    assert _journal(j, 0, sps[0]).prev == entries[0].seq  # the chain goes on from the materialized SNAPSHOT
    j.close()
    assert _recovered(tmp_path, 0) == sps[0].snapshot() and _recovered(tmp_path, 1) == sps[1].snapshot()


def test_a_snapshot_after_max_updates_and_after_a_failed_append(tmp_path, monkeypatch):
    j = ShareJournal(tmp_path)
    j.open()
    sp = _fragmented()
    kinds = []
    for offset in range(2, 2 * MAX_UPDATES + 8, 2):
        assert sp.acknowledge("m", offset, offset, [1]) == 0
        kinds.append(_journal(j, 0, sp).prev is None)
    assert [k for k, snapshot in enumerate(kinds) if snapshot] == [0, MAX_UPDATES + 1]
    assert sp.acknowledge("m", 4000, 4000, [1]) == 0

    def full(fd, buf):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr("os.write", full)
        try:
            _journal(j, 0, sp)
        except OSError:
            pass
        else:
            raise AssertionError("the append did not fail")
    assert sp.acknowledge("m", 4002, 4002, [1]) == 0
    assert _journal(j, 0, sp).prev is None  # the changes the failed UPDATE took are in no record: a SNAPSHOT
    j.close()
    assert _recovered(tmp_path, 0) == sp.snapshot()


def test_lowered_limits_journal_the_acquired_offsets_they_archive(tmp_path):
    j = ShareJournal(tmp_path)
    j.update_ratio = 1000.0  # UPDATEs, however small the snapshot
    j.open()
    sp = SharePartition(0, **LIMITS)
    sp.acquire("m", [(0, 9)], max_records=10, lock_deadline=100)
    _journal(j, 0, sp)
    sp.set_limits(delivery_count_limit=1, max_in_flight=40)  # handed out once: a crash now archives them
    assert sp.snapshot()["ranges"] == [[0, 9, 4, 1]]
    assert _journal(j, 0, sp).prev is not None
    j.close()
    assert _recovered(tmp_path, 0) == sp.snapshot()
