"""A finding of the share nemesis (issue 46, ``truncated_restart``): a broker restarted on a truncated
log, whose producer writes again before a share member fetches, skips the records written at the
reused offsets.

The share partition's state is loaded on its first ShareFetch after the restart and clipped to the
log end *at that moment* (``SharePartitionManager``: "the state past the log end is dropped, records
written there are new").  Records appended between the log's recovery and that load lie below the
log end by then: the saved states of the records cut off (acknowledged, archived) are kept for
them, and they are never delivered.  In the nemesis run: broker 2 opened ``chaos-2`` at
``[0, 2830)`` (a torn batch dropped), the producer wrote 25 records, and the share state (reaching
2904) was clipped at 2855 0.8 s later; offsets 2830-2854 were never delivered to the share group
and its stored start passed them.  Kept here, strict xfail, until the share code tells the
records written after the restart from those cut off (e.g. by the log end the log recovered to).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from spark_coord.share.manager import SharePartitionManager
from spark_coord.share.store import ShareStateStore, encode
from spark_coord.zk import paths


async def _zk_call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


@pytest.mark.xfail(strict=True, reason="share state clipped at the log end of its load, not of the log's recovery")
def test_records_written_after_a_truncated_restart_and_before_the_share_load_are_delivered(zk):
    # before the crash: records 20-49 acknowledged by the share group
    zk.create(paths.share_partition("g", "t", 0), encode({"version": 1, "start": 20, "ranges": [[20, 49, 2, 1]]},
                                                         None), makepath=True)
    # restarted on a log cut back to 30; the producer wrote 10 new records (30-39) before the first ShareFetch
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=30)
    plog.log_end_offset = 40
    ctx = SimpleNamespace(zk=zk, zk_call=_zk_call, view=SimpleNamespace(topic_id=lambda topic: None),
                          logs=SimpleNamespace(get_or_create=lambda topic, partition: plog),
                          appends=SimpleNamespace(notify=lambda key: None))

    async def run():
        manager = SharePartitionManager(ctx, ShareStateStore(zk, _zk_call))
        manager.start()
        try:
            held = await asyncio.wait_for(manager.partition("g", "t", 0), 10)
            # the new records 30-39 must be available to the group, not taken for the acknowledged ones cut off
            assert held.sp.fetch_offset() == 30
        finally:
            await manager.stop()

    asyncio.run(run())
