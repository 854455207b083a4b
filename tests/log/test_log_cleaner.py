"""The log cleaner (compaction) on real segment files: what it keeps, offsets and gaps, compressed batches,
tombstones, dirty ratio and lag, bounded memory, and crash safety of the swap; plus the per-topic log
settings it relies on (cleanup.policy and retention, segment.ms, LogAppendTime)."""

from __future__ import annotations

import os

import pytest

from spark_coord.log import LogConfig, PartitionLog
from spark_coord.log import cleaner as cleaner_mod
from spark_coord.log.cleaner import CleanerSettings, LogCleaner, OffsetMap, clean_log
from spark_coord.log.scan import scan_batches
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import TIMESTAMP_TYPE_MASK, parse_header, validate_batches
from spark_coord.records.reader import iter_batches, iter_records

NOW_MS = 1_700_000_000_000
SETTINGS = CleanerSettings()


def batch(records: list[tuple[bytes | None, bytes | None]], codec: int = 0, ts: int = NOW_MS - 1000,
          producer_id: int = -1) -> bytes:
    b = BatchBuilder(codec, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                     base_sequence=0 if producer_id >= 0 else -1)
    for key, value in records:
        b.append(value, key=key, timestamp_ms=ts)
    return b.build()


def append(plog: PartitionLog, data: bytes) -> int:
    return plog.append(data, validate_batches(data))


def open_log(tmp_path, **cfg) -> PartitionLog:
    base = dict(segment_bytes=4096, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0,
                delete_retention_ms=0, segment_ms=2**62)
    base.update(cfg)
    return PartitionLog(tmp_path / "compacted-0", LogConfig(**base), lambda: NOW_MS / 1000)


def read_everything(plog: PartitionLog) -> list:
    """Every record from the log start, fetching as a consumer does: the next fetch starts after the last
    batch returned (so a batch whose last records were cleaned away does not repeat)."""
    offset, out = plog.log_start_offset, []
    while offset < plog.log_end_offset:
        region = plog.read(offset, 1 << 16)
        assert region is not None, f"nothing at {offset}"
        data = region.read()
        out.extend(r for r in iter_records(data, offset))
        offset = [h for h, _ in iter_batches(data)][-1].next_offset
    return out


def fill(plog: PartitionLog, keys: int, rounds: int, codec: int = 0, per_batch: int = 10) -> dict[bytes, bytes]:
    latest = {}
    pending = []
    for r in range(rounds):
        for k in range(keys):
            key, value = b"k%04d" % k, b"v%04d-%d" % (k, r)
            pending.append((key, value))
            latest[key] = value
            if len(pending) == per_batch:
                append(plog, batch(pending, codec))
                pending = []
    if pending:
        append(plog, batch(pending, codec))
    return latest


def test_offset_map_keeps_the_last_offset_and_stays_within_its_memory():
    m = OffsetMap(1 << 20, 1000)
    for i in range(3000):
        m.put(b"key-%d" % (i % 1000), i)
    assert m.size == 1000 and m.get(b"key-7") == 2007 and m.get(b"absent") == -1
    assert m.memory_bytes <= 1 << 20 and m.slots >= 1000 / 0.75
    small = OffsetMap(1 << 10, 10**6)
    assert small.memory_bytes <= 1 << 10 and small.limit < small.slots


@pytest.mark.parametrize("codec", [0, 1, 3, 4], ids=["none", "gzip", "lz4", "zstd"])
def test_cleaning_keeps_the_last_record_of_each_key_with_offsets_and_batches_intact(tmp_path, codec):
    plog = open_log(tmp_path)
    latest = fill(plog, keys=50, rounds=8, codec=codec)
    end = plog.log_end_offset
    active_base = plog.segment_bases()[-1]
    before = [r for r in read_everything(plog)]
    stats = clean_log(plog, SETTINGS, NOW_MS)
    assert stats is not None and stats.bytes_written < stats.bytes_read
    after = read_everything(plog)
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets)), "offsets increase and none repeats"
    assert plog.log_end_offset == end and plog.segment_bases()[-1] == active_base
    in_active = [r for r in before if r.offset >= active_base]
    assert [r for r in after if r.offset >= active_base] == in_active, "the active segment is never touched"
    cleaned = {r.key: r.value for r in after}
    assert cleaned == latest
    below = [r for r in after if r.offset < active_base]
    assert len({r.key for r in below}) == len(below), "one record per key in the cleaned segments"
    assert len(offsets) < len(before)
    # every stored batch is whole, CRC-valid, keeps its codec, and a rebuilt one keeps its last offset
    for path in sorted(plog.directory.glob("*.log")):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            assert scan_batches(f, int(path.stem), 0, size, min_offset=0, index_interval_bytes=1 << 30).error is None
        data = path.read_bytes()
        for h, _ in iter_batches(data):
            assert h.codec == codec
            assert h.last_offset_delta % 10 == 9 or h.base_offset + h.last_offset_delta == end - 1
    plog.close()
    reopened = open_log(tmp_path)
    assert read_everything(reopened) == after
    reopened.close()


def test_a_fetch_in_a_gap_gets_the_next_batch(tmp_path):
    plog = open_log(tmp_path)
    fill(plog, keys=20, rounds=10, per_batch=20)  # each batch holds every key once
    clean_log(plog, SETTINGS, NOW_MS)
    kept = [r.offset for r in read_everything(plog)]
    gap = next(o for o in range(plog.log_start_offset, plog.log_end_offset) if o not in kept)
    region = plog.read(gap, 1 << 16)
    records = list(iter_records(region.read(), gap))
    assert records and records[0].offset == min(o for o in kept if o > gap)
    plog.close()


def test_tombstones_go_after_delete_retention_ms(tmp_path):
    plog = open_log(tmp_path, delete_retention_ms=3_600_000)
    for k in range(30):
        append(plog, batch([(b"k%02d" % k, b"value")], ts=NOW_MS - 7_200_000))
    for k in range(10):  # tombstones: one young, nine old
        append(plog, batch([(b"k%02d" % k, None)], ts=NOW_MS - (60_000 if k == 0 else 7_200_000)))
    for k in range(200):  # roll past the tombstones so they are in closed segments
        append(plog, batch([(b"filler%03d" % k, b"x" * 50)]))
    clean_log(plog, SETTINGS, NOW_MS, force=True)
    records = {r.key: r.value for r in read_everything(plog)}
    assert b"k00" in records and records[b"k00"] is None, "a tombstone younger than delete.retention.ms stays"
    assert all(b"k%02d" % k not in records for k in range(1, 10)), "old tombstones and their keys are gone"
    assert all(records[b"k%02d" % k] == b"value" for k in range(10, 30))
    plog.close()


def test_dirty_ratio_and_min_compaction_lag_decide_whether_a_pass_runs(tmp_path):
    plog = open_log(tmp_path, min_cleanable_dirty_ratio=0.5)
    fill(plog, keys=50, rounds=6)
    assert clean_log(plog, SETTINGS, NOW_MS) is not None  # all dirty: ratio 1
    assert clean_log(plog, SETTINGS, NOW_MS) is None  # all clean now
    fill(plog, keys=5, rounds=2)  # a little dirt, below the ratio
    assert clean_log(plog, SETTINGS, NOW_MS) is None
    plog.close()
    young = PartitionLog(tmp_path / "young-0", LogConfig(segment_bytes=4096, cleanup_policy=("compact",),
                                                         min_cleanable_dirty_ratio=0.0,
                                                         min_compaction_lag_ms=3_600_000),
                         lambda: NOW_MS / 1000)
    fill(young, keys=50, rounds=6)  # records 1 s old: younger than the lag
    assert clean_log(young, SETTINGS, NOW_MS) is None
    assert clean_log(young, SETTINGS, NOW_MS + 7_200_000) is not None
    young.close()


def test_a_small_dedupe_buffer_cleans_in_several_passes(tmp_path):
    plog = open_log(tmp_path, segment_bytes=2048)
    latest = fill(plog, keys=400, rounds=4, per_batch=20)
    small = CleanerSettings(dedupe_buffer_size=16 * 512)  # 384 keys per pass
    passes = 0
    while clean_log(plog, small, NOW_MS) is not None:
        passes += 1
        assert passes < 20
    assert passes >= 2
    after = read_everything(plog)
    assert {r.key: r.value for r in after} == latest
    closed_end = plog.segment_bases()[-1]
    below = [r for r in after if r.offset < closed_end]
    assert len({r.key for r in below}) == len(below)
    plog.close()


def test_a_compact_only_topic_is_not_pruned_by_retention(tmp_path):
    plog = open_log(tmp_path, retention_ms=1, retention_bytes=1)
    fill(plog, keys=50, rounds=4)
    assert plog.apply_retention() == 0
    plog.config = LogConfig(segment_bytes=4096, cleanup_policy=("compact", "delete"), retention_ms=1)
    assert plog.apply_retention() > 0
    plog.close()


def test_a_segment_the_cleaner_emptied_stays_and_the_log_start_does_not_move(tmp_path):
    """A later pass empties the first segment (every key in it written again since).  Retention must not
    take the empty segment for one below the log start: the log start stays 0, as Kafka's does."""
    plog = open_log(tmp_path)
    fill(plog, keys=20, rounds=10, per_batch=20)
    clean_log(plog, SETTINGS, NOW_MS)
    first = plog.closed_segments()[0][0]
    assert first.base_offset == 0 and first.size > 0
    fill(plog, keys=20, rounds=10, per_batch=20)  # supersedes every record the first pass kept
    clean_log(plog, SETTINGS, NOW_MS, force=True)
    first = plog.closed_segments()[0][0]
    assert first.base_offset == 0 and first.size == 0, "the second pass empties the first segment"
    assert plog.apply_retention() == 0
    assert plog.log_start_offset == 0
    records = read_everything(plog)
    assert records and records[0].offset > 0
    plog.close()
    reopened = open_log(tmp_path)
    assert reopened.log_start_offset == 0 and reopened.apply_retention() == 0
    reopened.close()


def test_a_crash_before_the_swap_is_committed_keeps_the_old_segments(tmp_path, monkeypatch):
    plog = open_log(tmp_path)
    fill(plog, keys=50, rounds=8)
    before = read_everything(plog)

    def crash(*_):
        raise SystemExit("killed mid-pass")

    monkeypatch.setattr(cleaner_mod.os, "replace", crash)  # dies with .cleaned files written
    with pytest.raises(SystemExit):
        clean_log(plog, SETTINGS, NOW_MS)
    monkeypatch.undo()
    # a SIGKILL would leave the .cleaned files; write them back as such a crash leaves them
    base = plog.segment_bases()[0]
    (tmp_path / "compacted-0" / f"{base:020d}.log.cleaned").write_bytes(b"\0" * 100)
    plog.close()
    reopened = open_log(tmp_path)
    assert not list((tmp_path / "compacted-0").glob("*.cleaned"))
    assert read_everything(reopened) == before
    reopened.close()


def test_a_crash_after_the_swap_is_committed_is_finished_at_start(tmp_path, monkeypatch):
    plog = open_log(tmp_path)
    latest = fill(plog, keys=50, rounds=8)
    calls = []
    real = cleaner_mod.fsync_dir

    def crash_after_commit(directory):
        real(directory)
        calls.append(directory)
        raise SystemExit("killed right after the commit")

    monkeypatch.setattr(cleaner_mod, "fsync_dir", crash_after_commit)
    with pytest.raises(SystemExit):
        clean_log(plog, SETTINGS, NOW_MS)
    monkeypatch.undo()
    assert list((tmp_path / "compacted-0").glob("*.log.swap"))
    plog.close()
    reopened = open_log(tmp_path)
    assert not list((tmp_path / "compacted-0").glob("*.swap"))
    after = read_everything(reopened)
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    assert {r.key: r.value for r in after} == latest
    reopened.close()


def test_the_cleaner_thread_cleans_due_logs(tmp_path):
    from spark_coord.log import LogManager

    manager = LogManager(tmp_path, LogConfig(segment_bytes=4096, cleanup_policy=("compact",),
                                             min_cleanable_dirty_ratio=0.0), lambda: NOW_MS / 1000)
    plog = manager.get_or_create("compacted", 0)
    latest = fill(plog, keys=50, rounds=8)
    thread = LogCleaner(manager, lambda: CleanerSettings(backoff_ms=50), lambda: NOW_MS / 1000)
    thread.start()
    try:
        import time
        deadline = time.monotonic() + 20
        while thread.passes == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert thread.passes >= 1
    finally:
        thread.stop()
    assert {r.key: r.value for r in read_everything(plog)} == latest
    manager.close()


def test_log_append_time_stamps_batches(tmp_path):
    plog = PartitionLog(tmp_path / "stamped-0", LogConfig(message_timestamp_type="LogAppendTime"),
                        lambda: NOW_MS / 1000)
    append(plog, batch([(b"a", b"1"), (b"b", b"2")], ts=123))
    data = plog.read(0, 1 << 16).read()
    h = parse_header(data)
    assert h.attributes & TIMESTAMP_TYPE_MASK and h.max_timestamp == NOW_MS
    assert [r.timestamp for r in iter_records(data)] == [NOW_MS, NOW_MS]  # CRC checked by iter_records
    assert plog.last_append_time_ms == NOW_MS
    plog.close()


def test_segment_ms_rolls_an_old_active_segment(tmp_path):
    now = [NOW_MS / 1000]
    plog = PartitionLog(tmp_path / "rolled-0", LogConfig(segment_ms=60_000), lambda: now[0])
    append(plog, batch([(None, b"x")]))
    append(plog, batch([(None, b"y")]))
    assert len(plog.segment_bases()) == 1
    now[0] += 61
    append(plog, batch([(None, b"z")]))
    assert plog.segment_bases() == [0, 2]
    plog.close()
