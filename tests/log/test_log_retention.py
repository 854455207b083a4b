"""Retention by size and time, the log start offset checkpoint, and the LogManager."""

from __future__ import annotations

import pytest

from spark_coord.log import LogConfig, LogManager, OffsetOutOfRange
from spark_coord.records.header import parse_header

DAY_MS = 86_400_000


def fill(kit, plog, count: int, timestamp: int = 1_000_000, size: int = 100) -> None:
    for i in range(count):
        kit.append(plog, kit.batch([b"%05d" % i + b"." * size], timestamp=timestamp))


def test_retention_by_bytes_keeps_at_least_the_limit(kit):
    plog = kit.open(segment_bytes=1024, retention_bytes=3000, retention_ms=-1)
    fill(kit, plog, 60)
    before = plog.segment_bases()
    deleted = plog.apply_retention()
    assert deleted > 0
    after = plog.segment_bases()
    assert after == before[deleted:]
    assert plog.size_bytes >= 3000
    first_size = (kit.dir / f"{after[0]:020d}.log").stat().st_size
    assert plog.size_bytes - first_size < 3000  # deleting one more would drop below the limit
    assert plog.log_start_offset == after[0]
    assert sorted(int(f.stem) for f in kit.dir.glob("*.log")) == after
    assert sorted(int(f.stem) for f in kit.dir.glob("*.index")) == after
    with pytest.raises(OffsetOutOfRange):
        plog.read(after[0] - 1, 100)
    assert kit.read_all(plog)[0][0] == after[0]
    assert plog.apply_retention() == 0
    plog.close()


def test_retention_never_deletes_the_active_segment(kit):
    plog = kit.open(segment_bytes=1024, retention_bytes=0, retention_ms=0)
    fill(kit, plog, 30)
    plog.apply_retention()
    assert len(plog.segment_bases()) == 1
    assert plog.log_start_offset == plog.segment_bases()[0] > 0
    assert plog.log_end_offset == 30
    plog.close()


def test_retention_by_time_with_injected_clock(kit, clock):
    now_ms = int(clock.now * 1000)
    plog = kit.open(clock=clock, segment_bytes=1024, retention_ms=DAY_MS)
    fill(kit, plog, 20, timestamp=now_ms - 3 * DAY_MS)  # old
    old_end = plog.log_end_offset
    fill(kit, plog, 20, timestamp=now_ms)  # fresh
    assert plog.apply_retention() > 0
    start = plog.log_start_offset
    assert 0 < start <= old_end
    assert plog.log_end_offset == 40
    # every remaining old batch sits in the segment that also holds the first fresh one
    assert all(o >= start for o, _ in kit.read_all(plog))
    assert plog.apply_retention() == 0
    clock.advance_ms(2 * DAY_MS)  # now the fresh data is old too, but the active segment stays
    assert plog.apply_retention() > 0
    assert len(plog.segment_bases()) == 1
    plog.close()


def test_log_start_offset_survives_reopen(kit, clock):
    plog = kit.open(clock=clock, segment_bytes=1024, retention_bytes=2000, retention_ms=-1)
    fill(kit, plog, 50)
    plog.apply_retention()
    start, end = plog.log_start_offset, plog.log_end_offset
    assert start > 0
    plog.close()
    reopened = kit.open(clock=clock, segment_bytes=1024, retention_bytes=2000, retention_ms=-1)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
    with pytest.raises(OffsetOutOfRange):
        reopened.read(start - 1, 10)
    assert kit.append(reopened, kit.batch([b"next"])) == end
    reopened.close()


def test_checkpoint_keeps_offsets_when_every_segment_file_is_gone(kit):
    plog = kit.open(segment_bytes=1024, retention_bytes=0, retention_ms=-1)
    fill(kit, plog, 30)
    plog.apply_retention()
    start = plog.log_start_offset
    plog.close()
    for f in list(kit.dir.glob("*.log")) + list(kit.dir.glob("*.index")):
        f.unlink()
    reopened = kit.open()
    assert reopened.log_start_offset == reopened.log_end_offset == start
    assert kit.append(reopened, kit.batch([b"again"])) == start
    reopened.close()


def test_region_stays_readable_after_retention_deletes_its_segment(kit):
    plog = kit.open(segment_bytes=1024, retention_bytes=0, retention_ms=-1)
    fill(kit, plog, 30)
    region = plog.read(0, 10_000)
    expected = region.read()
    assert plog.apply_retention() > 0
    assert not (kit.dir / f"{0:020d}.log").exists()
    assert region.read() == expected
    assert parse_header(region.read()).base_offset == 0
    plog.close()


def test_manager_creates_reopens_and_deletes_partitions(tmp_path, kit):
    cfg = LogConfig(segment_bytes=1024)
    data = kit.batch([b"hello"])
    mgr = LogManager(tmp_path / "logs", cfg)
    assert mgr.partitions() == []
    assert mgr.get("orders", 0) is None
    for p in range(3):
        plog = mgr.get_or_create("orders", p)
        kit.append(plog, data)
    assert mgr.get_or_create("orders", 1) is mgr.get("orders", 1)
    mgr.get_or_create("my.topic-with-dash", 7)
    assert mgr.partitions() == [("my.topic-with-dash", 7), ("orders", 0), ("orders", 1), ("orders", 2)]
    mgr.delete_partition("orders", 2)
    mgr.delete_partition("orders", 99)  # unknown: nothing happens
    assert not (tmp_path / "logs" / "orders-2").exists()
    mgr.flush_due()
    mgr.apply_retention()
    mgr.close()

    (tmp_path / "logs" / "not a partition").mkdir()
    (tmp_path / "logs" / "orders-01").mkdir()  # not canonical: would alias orders-1
    (tmp_path / "logs" / "stray-file-0").write_text("x")
    leftover = tmp_path / "logs" / "orders-5.0123abcd-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"junk")
    mgr = LogManager(tmp_path / "logs", cfg)
    assert mgr.partitions() == [("my.topic-with-dash", 7), ("orders", 0), ("orders", 1)]
    assert not leftover.exists()
    assert mgr.get("orders", 1).log_end_offset == 1
    assert mgr.get("my.topic-with-dash", 7).log_end_offset == 0
    mgr.close()


@pytest.mark.parametrize("topic, partition", [
    ("../escape", 0), ("", 0), (".", 0), ("..", 0), ("a/b", 0), ("x" * 250, 0), ("ok", -1), ("ok", 2**31),
    ("ok", True), ("sp ace", 0),
])
def test_manager_refuses_illegal_names(tmp_path, topic, partition):
    mgr = LogManager(tmp_path / "logs", LogConfig())
    with pytest.raises(ValueError):
        mgr.get_or_create(topic, partition)
    assert list((tmp_path / "logs").iterdir()) == []
    mgr.close()


def test_from_broker_config_reads_log_keys():
    from spark_coord import config

    cfg = config.load(config.BROKER, overrides={"log.segment.bytes": "2048", "log.flush.interval.messages": "1",
                                                "log.retention.bytes": "5000", "log.flush.interval.ms": "250"})
    lc = LogConfig.from_broker_config(cfg)
    assert (lc.segment_bytes, lc.flush_interval_messages, lc.retention_bytes, lc.flush_interval_ms) == \
        (2048, 1, 5000, 250)
    assert lc.index_interval_bytes == 4096 and lc.retention_ms == 604800000
    with pytest.raises(ValueError, match="log.segment.bytes"):
        LogConfig(segment_bytes=2**31)
    with pytest.raises(ValueError, match="log.flush.interval.messages"):
        LogConfig(flush_interval_messages=0)
