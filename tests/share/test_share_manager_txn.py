"""SharePartitionManager.acquire on a real partition log with transactions (markers appended as
WriteTxnMarkers appends them) and its state in a real ZooKeeper: the group's ``share.isolation.level``
decides, at each acquisition, whether the read stops at the last stable offset and archives aborted
transactions; a long aborted transaction does not make an acquisition come back empty while records
follow it; markers are never acquired."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from spark_coord.log import LogConfig, PartitionLog
from spark_coord.log.txn import ABORT, COMMIT
from spark_coord.records.builder import BatchBuilder
from spark_coord.records.header import validate_batches
from spark_coord.records.reader import iter_records
from spark_coord.share.manager import SharePartitionManager, ShareSettings
from spark_coord.share.partition import Acquired, RecordState
from spark_coord.share.store import ShareStateStore
from spark_coord.zk import paths


async def _zk_call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


def _append(plog, values: list[str], pid: int = -1, seq: int = -1) -> int:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                     is_transactional=pid >= 0)
    for v in values:
        b.append(v.encode(), key=v.encode())
    raw = b.build()
    return plog.append(raw, validate_batches(raw))


def _values(region, acquired: list[Acquired]) -> list[str]:
    """The values of the acquired records in ``region`` (as a client keeps them: acquired offsets only)."""
    wanted = {o for a in acquired for o in range(a.first_offset, a.last_offset + 1)}
    return [r.value.decode() for r in iter_records(region.read(), 0) if r.offset in wanted]


def test_acquisitions_follow_the_isolation_level_and_pass_aborted_transactions(zk, tmp_path):
    plog = PartitionLog(tmp_path / "t-0", LogConfig())
    _append(plog, ["p0"])                                   # 0
    for i in range(20):
        _append(plog, [f"a{i}"], pid=7, seq=i)              # 1-20, aborted
    plog.append_marker(7, 0, ABORT, 0)                      # 21
    _append(plog, ["p1"])                                   # 22
    _append(plog, ["o0"], pid=8, seq=0)                     # 23, open
    _append(plog, ["p2"])                                   # 24
    levels = {"rc": "read_committed", "ru": "read_uncommitted"}
    for group in levels:
        zk.ensure_path(paths.share_group(group))  # saved by the group's coordinator when a member joined
    ctx = SimpleNamespace(zk=zk, zk_call=_zk_call, view=SimpleNamespace(topic_id=lambda topic: None),
                          logs=SimpleNamespace(get_or_create=lambda topic, partition: plog),
                          appends=SimpleNamespace(notify=lambda key: None),
                          group_configs=SimpleNamespace(get=lambda g: SimpleNamespace(share_isolation_level=levels[g])))

    async def run():
        manager = SharePartitionManager(ctx, ShareStateStore(zk, _zk_call),
                                        settings=lambda g: ShareSettings(auto_offset_reset="earliest"))
        manager.start()
        try:
            rc = await asyncio.wait_for(manager.partition("rc", "t", 0), 10)
            ru = await asyncio.wait_for(manager.partition("ru", "t", 0), 10)

            def acquire(held, n=5):
                got, region = manager.acquire(held, "m", max_records=n, max_bytes=1 << 20, batch_optimized=False,
                                              batch_size=n)
                return got, (_values(region, got) if region is not None else [])

            assert acquire(rc) == ([Acquired(0, 0, 1)], ["p0"])
            # 1-20 aborted, read five at a time: the acquisition reads on until it has a record
            assert acquire(rc) == ([Acquired(22, 22, 1)], ["p1"])
            states = {o: (RecordState(s), c) for f, last, s, c, _, _ in rc.sp._ranges for o in range(f, last + 1)}
            assert {states[o] for o in range(1, 21)} == {(RecordState.ARCHIVED, 1)}
            assert states[21] == (RecordState.ARCHIVED, 0)  # the marker: a gap, never acquired
            assert acquire(rc) == ([], [])  # 23 is the last stable offset
            assert rc.sp.fetch_offset() == 23
            # read_uncommitted: every data record, the open transaction's too, never a marker
            assert acquire(ru, 100) == ([Acquired(0, 20, 1), Acquired(22, 24, 1)],
                                        ["p0"] + [f"a{i}" for i in range(20)] + ["p1", "o0", "p2"])
            plog.append_marker(8, 0, COMMIT, 0)             # 25
            assert acquire(rc) == ([Acquired(23, 24, 1)], ["o0", "p2"])
            assert rc.sp.end_offset == 26  # the marker after the last data batch is archived too
            assert acquire(ru) == ([], []) and ru.sp.end_offset == 26
            # the level is read at each acquisition: released records of an aborted transaction are
            # archived when a read_committed group acquires them again
            assert ru.sp.release_member("m") == 24
            levels["ru"] = "read_committed"
            assert acquire(ru, 100) == ([Acquired(0, 0, 2), Acquired(22, 24, 2)], ["p0", "p1", "o0", "p2"])
            await manager.flush()
        finally:
            await manager.stop()
            plog.close()

    asyncio.run(run())
