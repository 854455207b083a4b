"""The record with the largest timestamp (ListOffsets -3), and appends whose fsync the caller runs."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from spark_coord.records.header import validate_batches


def _batch(timestamps: list[int], compression: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, ts in enumerate(timestamps):
        b.append(i, timestamp=ts, key=None, value=b"v%d" % i, headers=[])
    return bytes(b.build())


def _append(plog, data: bytes) -> int:
    return plog.append(data, validate_batches(data))


def test_max_timestamp_is_the_first_record_holding_it_not_its_batch(kit):
    plog = kit.open()
    assert plog.max_timestamp() is None  # empty log
    _append(plog, _batch([100, 300, 200]))          # offsets 0-2
    _append(plog, _batch([900, 950, 400, 950]))     # offsets 3-6: the max (950) first at offset 4
    _append(plog, _batch([500, 600]))               # offsets 7-8
    assert plog.max_timestamp() == (4, 950)
    _append(plog, _batch([950]))                    # a tie later on: the first one stays
    assert plog.max_timestamp() == (4, 950)
    _append(plog, _batch([10, 20, 3000], compression=1))  # gzip: decoded to find offset 12
    assert plog.max_timestamp() == (12, 3000)


def test_max_timestamp_across_segments_and_after_reopen(kit):
    plog = kit.open(segment_bytes=1024)
    for i in range(40):
        _append(plog, _batch([1000 + i, 5000 if i == 13 else 1001 + i]))
    assert len(plog.segment_bases()) > 3
    assert plog.max_timestamp() == (27, 5000)  # batch 13, second record
    plog.close()
    reopened = kit.open(segment_bytes=1024)  # segments' largest timestamps recomputed from disk
    assert reopened.max_timestamp() == (27, 5000)


def test_max_timestamp_ignores_what_retention_removed(kit, clock):
    plog = kit.open(clock, segment_bytes=1024, retention_bytes=2048)
    _append(plog, _batch([9_000_000, 1]))
    for i in range(30):
        _append(plog, _batch([2000 + i, 2000 + i]))
    plog.apply_retention()
    assert plog.log_start_offset > 0
    offset, ts = plog.max_timestamp()
    assert ts == 2029 and offset == plog.log_end_offset - 2


def test_append_deferred_leaves_the_fsync_to_the_caller(kit):
    plog = kit.open(flush_interval_messages=3)
    first, flush_now = plog.append_deferred(*_pair(_batch([1, 2])))
    assert (first, flush_now, plog.unflushed_messages) == (0, False, 2)
    first, flush_now = plog.append_deferred(*_pair(_batch([3])))
    assert (first, flush_now, plog.unflushed_messages) == (2, True, 3)  # due, but not done
    plog.flush()
    assert plog.unflushed_messages == 0
    assert plog.append(*_pair(_batch([4, 5, 6]))) == 3 and plog.unflushed_messages == 0  # append still fsyncs


def _pair(data: bytes):
    return data, validate_batches(data)
