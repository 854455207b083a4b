"""Append and read: offsets, regions, segment roll, index lookups, timestamps."""

from __future__ import annotations

import threading

import pytest

from spark_coord.log import LogClosed, LogConfig, OffsetOutOfRange, PartitionLog
from spark_coord.records.header import HEADER, InvalidBatch, parse_header, validate_batches


def test_round_trip_assigns_contiguous_offsets(kit):
    plog = kit.open()
    assert (plog.topic, plog.partition) == ("events", 0)
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    assert kit.append(plog, kit.batch([b"a", b"b", b"c"])) == 0
    assert kit.append(plog, kit.batch([b"d"]), kit.batch([b"e", b"f"])) == 3
    assert plog.log_end_offset == 6
    assert kit.read_all(plog) == list(enumerate([b"a", b"b", b"c", b"d", b"e", b"f"]))
    plog.close()


def test_stored_bytes_are_the_produced_bytes_with_offset_and_epoch_rewritten(kit):
    plog = kit.open()
    kit.append(plog, kit.batch([b"x"] * 5))
    produced = bytearray(kit.batch([b"y", b"z"]))
    HEADER.pack_into(produced, 0, *parse_header(produced)._replace(partition_leader_epoch=77))
    kit.append(plog, bytes(produced))
    stored = plog.read(5, 1 << 20).read()
    h = parse_header(stored)
    assert (h.base_offset, h.partition_leader_epoch) == (5, 0)
    assert stored[21:] == produced[21:]  # everything the CRC covers is untouched
    validate_batches(stored)  # and the CRC still holds
    plog.close()


def test_read_mid_batch_starts_at_the_containing_batch(kit):
    plog = kit.open()
    kit.append(plog, kit.batch([b"0", b"1", b"2"]), kit.batch([b"3", b"4", b"5"]))
    region = plog.read(4, 1 << 20)
    h = parse_header(region.read())
    assert h.base_offset == 3
    assert [o for o, _ in kit.decode(region.read())] == [3, 4, 5]
    plog.close()


def test_max_bytes_cuts_at_a_batch_boundary(kit):
    plog = kit.open(index_interval_bytes=100)
    batches = [kit.batch([b"v" * 50]) for _ in range(20)]
    kit.append(plog, *batches)
    size = len(batches[0])
    region = plog.read(0, size * 3 + size // 2)
    assert region.length == size * 3
    assert [o for o, _ in kit.decode(region.read())] == [0, 1, 2]
    region = plog.read(7, size * 5)  # start mid-log, limit lands exactly on a boundary
    assert (region.offset, region.length) == (size * 7, size * 5)
    assert kit.read_all(plog, max_bytes=size * 2 + 1) == [(i, b"v" * 50) for i in range(20)]
    plog.close()


def test_oversize_first_batch_is_returned_whole(kit):
    plog = kit.open()
    kit.append(plog, kit.batch([b"s"]), kit.batch([b"B" * 5000]), kit.batch([b"t"]))
    big = plog.read(1, 100)
    assert parse_header(big.read()).base_offset == 1
    assert big.length == parse_header(big.read()).size
    assert plog.read(0, 0).length == len(kit.batch([b"s"]))
    plog.close()


def test_offset_out_of_range_edges(kit):
    plog = kit.open()
    with pytest.raises(OffsetOutOfRange):
        plog.read(1, 100)
    assert plog.read(0, 100) is None  # empty log: 0 is the end
    kit.append(plog, kit.batch([b"a", b"b"]))
    assert plog.read(2, 100) is None
    with pytest.raises(OffsetOutOfRange) as e:
        plog.read(3, 100)
    assert (e.value.log_start_offset, e.value.log_end_offset) == (0, 2)
    with pytest.raises(OffsetOutOfRange):
        plog.read(-1, 100)
    plog.close()


def test_segments_roll_by_size_and_index_finds_every_offset(kit):
    plog = kit.open(segment_bytes=4096, index_interval_bytes=256)
    n = 400
    for i in range(n):
        kit.append(plog, kit.batch([b"%05d" % i, b"%05d+" % i]))
    bases = plog.segment_bases()
    assert len(bases) > 5
    assert all(f.stat().st_size <= 4096 for f in kit.dir.glob("*.log"))
    assert sorted(int(f.stem) for f in kit.dir.glob("*.log")) == bases
    for offset in range(0, 2 * n):
        region = plog.read(offset, 1)
        h = parse_header(region.read())
        assert h.base_offset <= offset <= h.last_offset
        # a region never crosses a segment: it lies inside the file of the segment it came from
        assert region.offset + region.length <= region.fileobj.seek(0, 2)
    assert kit.read_all(plog, max_bytes=10_000) == [
        (2 * i + j, (b"%05d" % i) + (b"+" if j else b"")) for i in range(n) for j in (0, 1)]
    plog.close()
    reopened = kit.open(segment_bytes=4096, index_interval_bytes=256)
    assert reopened.segment_bases() == bases
    assert reopened.log_end_offset == 2 * n
    assert parse_header(reopened.read(555, 1).read()).base_offset == 554
    reopened.close()


def test_offset_for_timestamp_is_the_first_record_at_or_after_it(kit):
    """Kafka's rule (what offsetsForTimes and Spark's timestamp options rely on): the first record,
    not its batch, whose timestamp is >= t."""
    plog = kit.open(segment_bytes=1024)
    for i in range(30):  # batch i holds timestamps 1000*i .. 1000*i + 2
        kit.append(plog, kit.batch([b"x" * 40] * 3, timestamp=1000 * i, step_ms=1))
    assert len(plog.segment_bases()) > 2
    assert plog.offset_for_timestamp(0) == (0, 0)
    assert plog.offset_for_timestamp(5001) == (16, 5001)  # the second record of batch 5
    assert plog.offset_for_timestamp(5002) == (17, 5002)
    assert plog.offset_for_timestamp(5003) == (18, 6000)  # none in batch 5: the first of batch 6
    assert plog.offset_for_timestamp(29_002) == (89, 29_002)
    assert plog.offset_for_timestamp(29_003) is None
    plog.close()
    reopened = kit.open(segment_bytes=1024)  # old segments' timestamps are computed lazily
    assert reopened.offset_for_timestamp(20_000) == (60, 20_000)
    assert reopened.offset_for_timestamp(20_001) == (61, 20_001)
    reopened.close()


def test_hostile_appends_are_refused_without_changing_the_log(kit):
    plog = kit.open()
    good = kit.batch([b"a", b"b"])
    with pytest.raises(ValueError):
        plog.append(good + b"extra", validate_batches(good))
    with pytest.raises(ValueError):
        plog.append(good, [])
    h = validate_batches(good)[0]
    with pytest.raises(InvalidBatch):
        plog.append(good, [h._replace(last_offset_delta=1_000_000)])
    with pytest.raises(InvalidBatch):
        plog.append(good, [h._replace(records_count=0, last_offset_delta=-1)])
    huge = h._replace(records_count=2**31 - 1, last_offset_delta=2**31 - 2)
    with pytest.raises(InvalidBatch):
        plog.append(good + good, [huge, huge])  # more offsets than one segment can index
    assert plog.log_end_offset == 0
    assert kit.append(plog, good) == 0
    plog.close()


def test_closed_log_refuses_work(kit):
    plog = kit.open()
    kit.append(plog, kit.batch([b"a"]))
    plog.close()
    with pytest.raises(LogClosed):
        kit.append(plog, kit.batch([b"b"]))
    with pytest.raises(LogClosed):
        plog.read(0, 10)
    plog.flush()  # harmless after close


def test_bad_directory_name_is_refused(tmp_path):
    with pytest.raises(ValueError):
        PartitionLog(tmp_path / "no_partition_number", LogConfig())


def test_concurrent_flush_and_retention_while_appending(kit):
    plog = kit.open(segment_bytes=2048, flush_interval_ms=0, retention_bytes=8192)
    stop = threading.Event()
    errors: list[BaseException] = []

    def maintenance():
        try:
            while not stop.is_set():
                plog.maybe_flush_by_time()
                plog.apply_retention()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    worker = threading.Thread(target=maintenance)
    worker.start()
    try:
        for i in range(600):
            kit.append(plog, kit.batch([b"%06d" % i]))
            region = plog.read(plog.log_end_offset - 1, 1000)
            assert kit.decode(region.read())[-1] == (i, b"%06d" % i)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not errors
    plog.flush()
    records = kit.read_all(plog)
    assert records == [(o, b"%06d" % o) for o in range(plog.log_start_offset, 600)]
    assert plog.log_start_offset > 0
    plog.close()


def test_flush_policy_by_messages_and_by_time(kit, clock):
    plog = kit.open(clock=clock, flush_interval_messages=5, flush_interval_ms=1000)
    kit.append(plog, kit.batch([b"a"] * 3))
    assert plog.unflushed_messages == 3
    kit.append(plog, kit.batch([b"b"] * 2))  # reaches 5 records: flushed before append returns
    assert plog.unflushed_messages == 0
    kit.append(plog, kit.batch([b"c"]))
    clock.advance_ms(999)
    plog.maybe_flush_by_time()
    assert plog.unflushed_messages == 1
    clock.advance_ms(1)
    plog.maybe_flush_by_time()
    assert plog.unflushed_messages == 0
    plog.close()


def test_time_flush_disabled_by_minus_one(kit, clock):
    plog = kit.open(clock=clock, flush_interval_ms=-1)
    kit.append(plog, kit.batch([b"a"]))
    clock.advance_ms(10**9)
    plog.maybe_flush_by_time()
    assert plog.unflushed_messages == 1
    plog.flush()
    assert plog.unflushed_messages == 0
    plog.close()


def test_region_can_be_sent_with_asyncio_sendfile(kit):
    import asyncio
    import socket

    plog = kit.open()
    kit.append(plog, *[kit.batch([b"%d" % i * 100]) for i in range(10)])
    region = plog.read(3, 1500)
    expected = region.read()

    async def send() -> bytes:
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            loop = asyncio.get_running_loop()
            sent = await loop.sock_sendfile(a, region.fileobj, region.offset, region.length)
            assert sent == region.length
            a.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := b.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    assert asyncio.run(send()) == expected
    assert region.read() == expected  # a moved file position does not matter to the log
    kit.append(plog, kit.batch([b"more"]))
    assert kit.read_all(plog)[-1] == (10, b"more")
    plog.close()


def test_delete_removes_the_directory_but_regions_stay_readable(kit):
    plog = kit.open()
    kit.append(plog, kit.batch([b"keep me"]))
    region = plog.read(0, 1000)
    plog.delete()
    assert not kit.dir.exists()
    assert not list(kit.root.iterdir())
    assert kit.decode(region.read()) == [(0, b"keep me")]
    with pytest.raises(LogClosed):
        plog.read(0, 10)
    plog.delete()  # twice is harmless
    plog.close()
