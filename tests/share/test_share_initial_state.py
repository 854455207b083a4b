"""A new share partition is served only once its initial state (its start offset) is in ZooKeeper,
as Kafka initializes share-group state (InitializeShareGroupState) before serving: written behind,
a broker crash in that window picked a new ``latest`` on restart, and records produced in between
never reached the group.  The manager against a real ZooKeeper whose writes a test can hold back."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from spark_coord.share.manager import SharePartitionManager, ShareStateUnavailable
from spark_coord.share.store import ShareStateStore, decode
from spark_coord.zk import paths


class GatedStore(ShareStateStore):
    """Writes wait for ``gate`` (ZooKeeper slow or out of reach, from the manager's side)."""

    def __init__(self, zk):
        super().__init__(zk, _zk_call)
        self.called = threading.Event()
        self.gate = threading.Event()

    def write_blocking(self, writes):
        self.called.set()
        if not self.gate.wait(30):
            raise ConnectionError("held back by the test")
        return super().write_blocking(writes)


async def _zk_call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


def _ctx(zk, plog):
    zk.ensure_path(paths.share_group("g"))  # saved by the group's coordinator when a member joined
    return SimpleNamespace(zk=zk, zk_call=_zk_call, view=SimpleNamespace(topic_id=lambda topic: None),
                           logs=SimpleNamespace(get_or_create=lambda topic, partition: plog),
                           appends=SimpleNamespace(notify=lambda key: None))


def _stored_start(zk) -> int:
    data, _ = zk.get(paths.share_partition("g", "t", 0))
    return decode(data)[0]["start"]


def test_a_new_share_partition_is_handed_out_only_after_its_start_is_written(zk):
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=10)
    store = GatedStore(zk)

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog), store)
        manager.start()
        try:
            loading = asyncio.ensure_future(manager.partition("g", "t", 0))
            assert await asyncio.get_running_loop().run_in_executor(None, store.called.wait, 10)
            assert not loading.done(), "served before its start offset was in ZooKeeper"
            store.gate.set()
            held = await asyncio.wait_for(loading, 10)
            assert held.sp.start_offset == 10 and _stored_start(zk) == 10
        finally:
            store.gate.set()
            await manager.stop()

    asyncio.run(run())


def test_a_share_partition_whose_start_cannot_be_written_is_refused_and_keeps_that_start(zk):
    """ZooKeeper out of reach while a partition is first used: the fetch is refused (the handler
    answers its error for the partition); once written, the start is the one chosen first, so
    records produced meanwhile are delivered."""
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=10)
    store = GatedStore(zk)

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog), store, init_wait_s=0.3)
        manager.start()
        try:
            with pytest.raises(ShareStateUnavailable, match="g/t-0"):
                await manager.partition("g", "t", 0)
            plog.log_end_offset = 15  # produced while it could not be written
            store.gate.set()
            held = await asyncio.wait_for(manager.partition("g", "t", 0), 10)
            assert held.sp.start_offset == 10 and _stored_start(zk) == 10
        finally:
            store.gate.set()
            await manager.stop()

    asyncio.run(run())


@pytest.mark.parametrize("saved,log_end,start,counts", [
    # the whole saved state past a shorter log: it starts at the log end
    ({"start": 50, "ranges": [[50, 54, 2, 1], [55, 59, 0, 1]]}, 20, 20, {"acknowledged": 0, "available": 0}),
    # the window reaches past the log end: what lies below it is kept, the rest dropped
    ({"start": 10, "ranges": [[10, 14, 0, 1], [15, 30, 2, 1]]}, 20, 10, {"acknowledged": 5, "available": 5}),
], ids=["start-past-the-log-end", "window-past-the-log-end"])
def test_a_saved_state_past_a_truncated_log_is_clipped_to_the_log_end(zk, saved, log_end, start, counts):
    """A broker restarted on a truncated or replaced log: a saved start past the log end stalled the
    partition, and records later written at the reused offsets were skipped as already done."""
    from spark_coord.share.store import encode

    zk.create(paths.share_partition("g", "t", 0), encode({"version": 1, **saved}, None), makepath=True)
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=log_end)
    store = GatedStore(zk)
    store.gate.set()

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog), store)
        manager.start()
        try:
            held = await asyncio.wait_for(manager.partition("g", "t", 0), 10)
            assert held.sp.start_offset == start and held.sp.end_offset == log_end
            assert {k: held.sp.counts()[k] for k in counts} == counts
            assert held.sp.fetch_offset() == (10 if start == 10 else log_end)
            await manager.flush()
            assert _stored_start(zk) == start
        finally:
            await manager.stop()

    asyncio.run(run())
