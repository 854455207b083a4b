"""A share partition whose log was cut back in a crash (a torn tail dropped at recovery, a replaced
disk): the saved state past the recovered log end is about records that are gone, and records
written there after the restart are new.

Found by the share nemesis (``truncated_restart``): broker 2 opened ``chaos-2`` at ``[0, 2830)``,
the producer wrote 25 records, and the share state (reaching 2904) was clipped 0.8 s later at the
log end *of that moment*, 2855: offsets 2830-2854 took the saved states of the records cut off and
were never delivered.  The state is now clipped at the log end the log recovered to when it was
opened, unless this broker incarnation wrote it (then it is about this log's records).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from spark_coord.share.manager import SharePartitionManager
from spark_coord.share.store import ShareStateStore, encode
from spark_coord.zk import paths


async def _zk_call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


def test_records_written_after_a_truncated_restart_and_before_the_share_load_are_delivered(zk):
    # before the crash: records 20-49 acknowledged by the share group, saved by the broker's earlier process
    zk.create(paths.share_partition("g", "t", 0), encode({"version": 1, "start": 20, "ranges": [[20, 49, 2, 1]]},
                                                         None, "1-earlier", 3), makepath=True)
    # restarted on a log cut back to 30; the producer wrote 10 new records (30-39) before the first ShareFetch
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=30, opened_end_offset=30)
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


def test_state_this_incarnation_wrote_past_the_opened_log_end_is_kept(zk):
    """Records appended since the log opened, acknowledged, then the share partition loaded again
    (its topic id changed view, a fence lifted): that state is about this log's records."""
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=40, opened_end_offset=30)
    ctx = SimpleNamespace(zk=zk, zk_call=_zk_call, view=SimpleNamespace(topic_id=lambda topic: None),
                          logs=SimpleNamespace(get_or_create=lambda topic, partition: plog),
                          appends=SimpleNamespace(notify=lambda key: None))

    async def run():
        manager = SharePartitionManager(ctx, ShareStateStore(zk, _zk_call))
        zk.create(paths.share_partition("g2", "t", 0),
                  encode({"version": 1, "start": 20, "ranges": [[20, 37, 2, 1]]}, None, manager.writer, 1),
                  makepath=True)
        manager.start()
        try:
            held = await asyncio.wait_for(manager.partition("g2", "t", 0), 10)
            assert held.sp.fetch_offset() == 38  # 20-37 acknowledged by this incarnation's members
        finally:
            await manager.stop()

    asyncio.run(run())
