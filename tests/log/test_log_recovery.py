"""Recovery at open: torn tails, garbage, corrupt batches, broken indexes, leftovers."""

from __future__ import annotations

import logging
import os

from spark_coord.records.header import parse_header

SEG0 = f"{0:020d}"


def build(kit, batches: int, **config):
    plog = kit.open(**config)
    sizes = []
    for i in range(batches):
        data = kit.batch([b"r%04d-%d" % (i, j) for j in range(3)])
        sizes.append(len(data))
        kit.append(plog, data)
    plog.close()
    return sizes


def expected(batches: int) -> list[tuple[int, bytes]]:
    return [(3 * i + j, b"r%04d-%d" % (i, j)) for i in range(batches) for j in range(3)]


def last_log(kit):
    return sorted(kit.dir.glob("*.log"))[-1]


def dropped_warning(caplog) -> str:
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "dropping" in r.getMessage()]
    assert len(msgs) == 1, [r.getMessage() for r in caplog.records]
    return msgs[0]


def test_truncated_tail_is_cut_at_the_last_whole_batch(kit, caplog):
    sizes = build(kit, 10)
    path = last_log(kit)
    full = path.stat().st_size
    os.truncate(path, full - sizes[-1] // 2)
    plog = kit.open()
    assert plog.log_end_offset == 27
    assert path.stat().st_size == full - sizes[-1]
    assert f"dropping {sizes[-1] - sizes[-1] // 2} bytes" in dropped_warning(caplog)
    assert kit.read_all(plog) == expected(9)
    assert kit.append(plog, kit.batch([b"after"])) == 27
    assert kit.read_all(plog)[-1] == (27, b"after")
    plog.close()


def test_every_cut_point_keeps_exactly_the_whole_batches(kit):
    sizes = build(kit, 4)
    path = last_log(kit)
    original = path.read_bytes()
    boundaries = [sum(sizes[:k]) for k in range(len(sizes) + 1)]
    for cut in range(boundaries[2] - 3, len(original) + 1):
        path.write_bytes(original[:cut])
        plog = kit.open()
        whole = max(k for k, b in enumerate(boundaries) if b <= cut)
        assert plog.log_end_offset == 3 * whole, cut
        assert path.stat().st_size == boundaries[whole]
        plog.close()


def test_garbage_after_the_last_batch_is_dropped(kit, caplog):
    build(kit, 5)
    path = last_log(kit)
    good = path.stat().st_size
    with open(path, "ab") as f:
        f.write(os.urandom(1000))
    plog = kit.open()
    assert "dropping 1000 bytes" in dropped_warning(caplog)
    assert path.stat().st_size == good
    assert kit.read_all(plog) == expected(5)
    assert kit.append(plog, kit.batch([b"ok"])) == 15
    plog.close()


def test_plausible_header_with_huge_length_is_a_torn_write(kit, caplog):
    sizes = build(kit, 3)
    path = last_log(kit)
    data = bytearray(path.read_bytes())
    data[-sizes[-1] + 8: -sizes[-1] + 12] = (2**31 - 1).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    plog = kit.open()
    assert plog.log_end_offset == 6
    assert "torn write" in dropped_warning(caplog)
    plog.close()


def test_flipped_byte_in_the_last_batch_truncates_it(kit, caplog):
    sizes = build(kit, 6)
    path = last_log(kit)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # inside the last batch's records: covered by the CRC
    path.write_bytes(bytes(data))
    plog = kit.open()
    warning = dropped_warning(caplog)
    assert "CRC mismatch" in warning and f"dropping {sizes[-1]} bytes" in warning, warning
    assert path.stat().st_size == len(data) - sizes[-1]  # cut where the last batch began
    assert plog.log_end_offset == 15
    assert kit.read_all(plog) == expected(5)
    assert kit.append(plog, kit.batch([b"x", b"y"])) == 15
    plog.close()
    again = kit.open()  # and the repaired log reopens cleanly
    assert again.log_end_offset == 17
    assert [r for r in caplog.records if "dropping" in r.getMessage()].__len__() == 1
    again.close()


def test_flipped_byte_in_a_middle_batch_of_the_last_segment(kit, caplog):
    build(kit, 6)
    path = last_log(kit)
    data = bytearray(path.read_bytes())
    second = parse_header(data).size
    data[second + 70] ^= 0x01
    path.write_bytes(bytes(data))
    plog = kit.open()
    dropped_warning(caplog)
    assert plog.log_end_offset == 3  # never keeps bytes after a corrupt batch in the last segment
    plog.close()


def test_broken_or_missing_index_of_an_old_segment_is_rebuilt(kit, caplog):
    config = dict(segment_bytes=2048, index_interval_bytes=200)
    build(kit, 60, **config)
    indexes = sorted(kit.dir.glob("*.index"))
    assert len(indexes) > 3 and indexes[0].stat().st_size > 0
    good = indexes[0].read_bytes()
    indexes[0].write_bytes(b"\x00" * len(good) + b"\x01")  # zero-filled, with a partial entry
    indexes[1].write_bytes(good[:16][::-1])  # out of order
    indexes[2].unlink()
    plog = kit.open(**config)
    assert indexes[0].read_bytes() == good
    assert indexes[2].exists()
    assert kit.read_all(plog, max_bytes=300) == expected(60)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    plog.close()


def test_corrupt_tail_of_an_old_segment_leaves_a_gap_that_reads_skip(kit, caplog):
    config = dict(segment_bytes=2048, index_interval_bytes=100_000)
    build(kit, 60, **config)
    logs = sorted(kit.dir.glob("*.log"))
    seg1_base = int(logs[1].stem)
    data = bytearray(logs[0].read_bytes())
    data[-3] ^= 0xFF  # last batch of the first segment
    logs[0].write_bytes(bytes(data))
    plog = kit.open(**config)
    assert "gap" in dropped_warning(caplog)
    assert plog.log_end_offset == 180
    records = kit.read_all(plog)
    lost = set(range(seg1_base - 3, seg1_base))
    assert records == [r for r in expected(60) if r[0] not in lost]
    region = plog.read(seg1_base - 2, 10_000)  # an offset in the gap reads from the next segment
    assert parse_header(region.read()).base_offset == seg1_base
    plog.close()


def test_leftovers_and_bad_checkpoint_are_handled(kit, caplog):
    build(kit, 3)
    (kit.dir / "log-start-offset.tmp").write_text("12")
    (kit.dir / f"{999:020d}.index").write_bytes(b"\x00" * 8)
    (kit.dir / "log-start-offset").write_text("not a number")
    (kit.dir / "README").write_text("hello")
    plog = kit.open()
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 9)
    assert not (kit.dir / "log-start-offset.tmp").exists()
    assert not (kit.dir / f"{999:020d}.index").exists()
    assert any("unreadable checkpoint" in r.getMessage() for r in caplog.records)
    plog.close()


def test_empty_last_segment_after_a_roll(kit):
    config = dict(segment_bytes=1024)
    build(kit, 20, **config)
    plog = kit.open(**config)
    end = plog.log_end_offset
    plog.close()
    (kit.dir / f"{end:020d}.log").write_bytes(b"")  # a roll that crashed before its first write
    plog = kit.open(**config)
    assert plog.log_end_offset == end
    assert plog.segment_bases()[-1] == end
    assert kit.append(plog, kit.batch([b"z"])) == end
    assert kit.read_all(plog)[-1] == (end, b"z")
    plog.close()
