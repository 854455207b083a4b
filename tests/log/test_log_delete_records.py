"""DeleteRecords on the partition log: ``advance_log_start`` moves the log start offset forward, durably
(the checkpoint is read back on reopen), reads below it are out of range, and retention then drops the
whole segments below it."""

from __future__ import annotations

import pytest

from spark_coord.log import OffsetOutOfRange


def fill(kit, plog, count: int) -> None:
    for i in range(count):
        kit.append(plog, kit.batch([b"%05d" % i + b"." * 100]))


def test_advance_moves_the_start_for_reads_and_survives_a_reopen(kit):
    plog = kit.open(segment_bytes=1024, retention_ms=-1)
    fill(kit, plog, 30)
    assert plog.advance_log_start(17) == 17
    assert plog.log_start_offset == 17
    with pytest.raises(OffsetOutOfRange):
        plog.read(16, 1 << 20)
    assert kit.read_all(plog)[0] == (17, b"00017" + b"." * 100)
    assert plog.advance_log_start(5) == 17  # never backwards
    plog.close()
    again = kit.open(segment_bytes=1024, retention_ms=-1)
    assert again.log_start_offset == 17 and again.log_end_offset == 30
    again.close()


def test_beyond_the_end_or_negative_is_out_of_range_and_changes_nothing(kit):
    plog = kit.open()
    fill(kit, plog, 3)
    for bad in (4, -2):
        with pytest.raises(OffsetOutOfRange):
            plog.advance_log_start(bad)
    assert plog.log_start_offset == 0
    assert plog.advance_log_start(3) == 3  # up to the end: everything
    assert plog.read(3, 100) is None
    plog.close()


def test_retention_drops_whole_segments_below_the_new_start(kit):
    plog = kit.open(segment_bytes=1024, retention_ms=-1, retention_bytes=-1)
    fill(kit, plog, 40)
    bases = plog.segment_bases()
    assert len(bases) > 3
    plog.advance_log_start(bases[2] + 1)
    assert plog.apply_retention() == 2
    assert plog.segment_bases() == bases[2:]
    assert plog.log_start_offset == bases[2] + 1  # mid-segment: the start stays where it was put
    plog.close()
