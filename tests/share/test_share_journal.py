"""The share-state journal on real files: recovery stops at a torn or corrupt record and appends go
on after it, a roll carries the entries ZooKeeper does not hold yet and deletes the old segment,
``covered`` keeps the disk bounded, and fsync follows the flag (the partition logs' flush policy)."""

from __future__ import annotations

import logging
import os

import pytest

from spark_coord.log import LogConfig, LogManager
from spark_coord.log.manager import OTHER_DIRS
from spark_coord.share.journal import JOURNAL_DIR, JournalEntry, ShareJournal
from spark_coord.share.store import decode, encode, identity_of, seq_of

W = "1-abc"


def _entry(partition: int, seq: int, start: int = 0, writer: str = W, epoch: int = 1, pad: int = 0) -> JournalEntry:
    snap = {"version": 1, "start": start, "ranges": [[start, start + pad, 2, 1]] if pad else []}
    return JournalEntry(("g", "t", partition), writer, epoch, seq, encode(snap, b"\x01" * 16, writer, epoch, seq=seq))


def _sizes(directory) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in ShareJournal(directory).segments()}


def test_entries_carry_the_znode_bytes_with_their_sequence_number():
    e = _entry(0, 7, start=5)
    assert (identity_of(e.data), seq_of(e.data)) == ((W, 1), 7)
    assert decode(e.data) == ({"version": 1, "start": 5, "ranges": []}, b"\x01" * 16)  # seq is no snapshot field
    assert seq_of(encode({"version": 1, "start": 0, "ranges": []}, None, W, 1)) == -1  # an old znode
    assert JournalEntry.of(e.key, e.data) == e


def test_reopen_keeps_the_latest_entry_per_share_partition(tmp_path):
    j = ShareJournal(tmp_path)
    assert j.open() == {}
    j.append([_entry(0, 1), _entry(1, 1)])
    j.append([_entry(0, 2, start=3)])
    j.close()
    again = ShareJournal(tmp_path)
    got = again.open()
    assert got == {("g", "t", 0): _entry(0, 2, start=3), ("g", "t", 1): _entry(1, 1)}
    assert [p.name for p in again.segments()] == ["journal-1.log"]  # a fresh active segment, the old deleted
    assert again.pending == got
    again.close()


@pytest.mark.parametrize("damage", ["torn", "crc"])
def test_a_torn_tail_or_a_bad_crc_is_cut_and_appends_go_on_after_it(tmp_path, damage):
    j = ShareJournal(tmp_path)
    j.open()
    j.append([_entry(0, 1)])
    j.append([_entry(0, 2), _entry(1, 1)])
    j.close()
    path = j.segments()[-1]
    data = bytearray(path.read_bytes())
    last = len(_entry(1, 1).record())
    if damage == "torn":
        del data[-5:]  # the last record cut short by a crash
    else:
        data[-1] ^= 0xFF  # its payload changed: the CRC does not check
    path.write_bytes(bytes(data))

    j = ShareJournal(tmp_path)
    got = j.open()
    assert got == {("g", "t", 0): _entry(0, 2)}  # up to the last whole record
    assert path.exists() is False
    j.append([_entry(1, 5)])
    j.close()
    got = ShareJournal(tmp_path).open()
    assert got == {("g", "t", 0): _entry(0, 2), ("g", "t", 1): _entry(1, 5)}
    assert last > 5


def test_a_roll_carries_the_pending_entries_and_deletes_the_old_segment(tmp_path):
    j = ShareJournal(tmp_path, segment_bytes=4096)
    j.open()
    j.append([_entry(0, 1, pad=3)])  # stays pending: ZooKeeper never holds it
    for seq in range(1, 200):
        j.append([_entry(1, seq)])
        j.covered(("g", "t", 1), W, 1, seq)  # each checkpointed at once
    assert j.rolls > 0
    assert len(j.segments()) == 1 and sum(_sizes(tmp_path).values()) <= 4096 + 200
    j.close()
    got = ShareJournal(tmp_path).open()
    assert got[("g", "t", 0)] == _entry(0, 1, pad=3)  # carried over every roll
    assert got[("g", "t", 1)].seq >= 190  # what followed the last roll


def test_covered_drops_what_zookeeper_holds_and_keeps_the_disk_bounded(tmp_path):
    j = ShareJournal(tmp_path, segment_bytes=8192)
    j.open()
    for seq in range(1, 2000):
        j.append([_entry(p, seq, pad=seq % 7) for p in range(4)])
        for p in range(4):
            j.covered(("g", "t", p), W, 1, seq - 1)  # ZooKeeper one behind
    assert len(j.pending) == 4 and j.appends == 1999
    assert sum(_sizes(tmp_path).values()) < 8192 + 4096  # one segment, whatever was appended
    key = ("g", "t", 0)
    j.covered(key, W, 1, 1998)
    assert key in j.pending  # an older write of its lineage does not hold it
    j.covered(key, "2-other", 3, 0)
    assert key not in j.pending  # taken over: someone else's write supersedes it
    j.drop(("g", "t", 1))
    assert set(j.pending) == {("g", "t", 2), ("g", "t", 3)}
    j.close()


@pytest.mark.parametrize("fsync", [False, True])
def test_fsync_follows_the_flag(tmp_path, monkeypatch, fsync):
    j = ShareJournal(tmp_path, fsync=fsync)
    j.open()
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    for seq in range(10):
        j.append([_entry(0, seq), _entry(1, seq)])
    assert len(calls) == (10 if fsync else 0)
    j.close()


def test_a_failed_append_leaves_no_torn_record(tmp_path, monkeypatch):
    j = ShareJournal(tmp_path)
    j.open()
    j.append([_entry(0, 1)])
    real = os.write

    def half(fd, buf):
        real(fd, bytes(buf)[:7])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(OSError):
        j.append([_entry(0, 2)])
    monkeypatch.setattr(os, "write", real)
    assert j.pending[("g", "t", 0)].seq == 1
    j.append([_entry(1, 1)])
    j.close()
    assert ShareJournal(tmp_path).open() == {("g", "t", 0): _entry(0, 1), ("g", "t", 1): _entry(1, 1)}


def test_the_log_manager_leaves_the_journal_directory_alone(tmp_path, caplog):
    j = ShareJournal(tmp_path / JOURNAL_DIR)
    j.open()
    j.append([_entry(0, 1)])
    j.close()
    with caplog.at_level(logging.WARNING, logger="spark_coord.log"):
        logs = LogManager(tmp_path, LogConfig())
    assert JOURNAL_DIR in OTHER_DIRS and not caplog.records  # skipped quietly, not "ignoring directory"
    try:
        logs.get_or_create("t", 0)
        assert logs.partitions() == [("t", 0)]  # the journal's directory is no partition
    finally:
        logs.close()
    assert ShareJournal(tmp_path / JOURNAL_DIR).open() == {("g", "t", 0): _entry(0, 1)}
