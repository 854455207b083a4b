"""The group commit of share-partition acknowledgements, against a real ZooKeeper.

Acknowledgements made in one turn of the broker's event loop -- any members, sessions and
partitions -- go to ZooKeeper in one multi, and each is answered only once that multi is in (Kafka's
broker answers after its share coordinator's log append); with ZooKeeper out of reach none is
answered NONE.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark_coord.errors import ErrorCode
from spark_coord.share.manager import SharePartitionManager
from spark_coord.share.store import ShareStateStore, decode
from spark_coord.zk import paths

G, T = "g", "t"
ACCEPT = 1


async def _zk_call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


def _ctx(zk, plog):
    zk.ensure_path(paths.share_group(G))  # saved by the group's coordinator when a member joined
    view = SimpleNamespace(topic_id=lambda topic: None, topics={T: {0: [1], 1: [1]}})
    return SimpleNamespace(zk=zk, zk_call=_zk_call, broker_id=1, view=view,
                           logs=SimpleNamespace(get_or_create=lambda topic, partition: plog),
                           appends=SimpleNamespace(notify=lambda key: None))


def _accept(first: int, last: int) -> list[dict]:
    return [{"first_offset": first, "last_offset": last, "acknowledge_types": [ACCEPT]}]


async def _two_members_holding(manager, plog):
    """Partitions 0 and 1 loaded (their first writes in), member a holding 0-9 of partition 0 and
    member b 0-9 of partition 1, those acquisitions written."""
    plog.log_end_offset = 0
    helds = [await asyncio.wait_for(manager.partition(G, T, p), 10) for p in (0, 1)]
    plog.log_end_offset = 10
    for held, member in zip(helds, ("a", "b"), strict=True):
        assert held.sp.acquire(member, [(0, 9)], max_records=10, lock_deadline=manager.clock() + 60_000)
        assert await manager.durable(held, held.sp.version, timeout=10) == ErrorCode.NONE
    return helds


def test_two_sessions_acknowledgements_go_in_one_multi_and_are_answered_after_it(zk):
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=0)
    store = ShareStateStore(zk, _zk_call)

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog), store)
        manager.start()
        try:
            helds = await _two_members_holding(manager, plog)
            multis = store.multis
            seen: dict[str, list] = {}

            def answered(member: str, p: int):
                def callback(fut: asyncio.Future) -> None:  # what ZooKeeper holds when the answer is given
                    snap = decode(zk.get(paths.share_partition(G, T, p))[0])[0]
                    seen[member] = [fut.result(), store.multis - multis, snap["start"]]
                return callback

            # both in the same turn of the loop, as two connections' requests read in one tick
            code_a, written_a = manager.acknowledge(helds[0], "a", _accept(0, 9), renew=False)
            code_b, written_b = manager.acknowledge(helds[1], "b", _accept(0, 9), renew=False)
            assert (code_a, code_b) == (ErrorCode.NONE, ErrorCode.NONE)
            written_a.add_done_callback(answered("a", 0))
            written_b.add_done_callback(answered("b", 1))
            assert not written_a.done() and not written_b.done()
            assert await asyncio.wait_for(asyncio.gather(written_a, written_b), 10) == [ErrorCode.NONE] * 2
            await asyncio.sleep(0)
            # one multi carried both, and each was answered once its partition's start had moved past the records
            assert seen == {"a": [ErrorCode.NONE, 1, 10], "b": [ErrorCode.NONE, 1, 10]}
            assert store.multis - multis == 1
        finally:
            await manager.stop()

    asyncio.run(run())


@pytest.fixture
def own_zookeeper(tmp_path: Path):
    """A ZooKeeper of this test's own, which it stops."""
    from spark_coord.zk.embedded import EmbeddedZooKeeper
    from tests.conftest import ZOOKEEPER_TEST_SETTINGS

    server = EmbeddedZooKeeper(port=0, data_dir=tmp_path / "zk", settings=ZOOKEEPER_TEST_SETTINGS)
    server.start(timeout=60)
    try:
        yield server
    finally:
        server.stop()


def test_with_zookeeper_out_of_reach_no_acknowledgement_is_answered_none(own_zookeeper):
    """ZooKeeper stopped with the two members' acknowledgements applied in memory: neither is answered
    NONE (each times out)."""
    from spark_coord.zk.client import close, connect

    client = connect(own_zookeeper.connect_string, session_timeout_ms=30_000, connection_timeout_ms=10_000)
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=0)
    store = ShareStateStore(client, _zk_call)

    async def run():
        manager = SharePartitionManager(_ctx(client, plog), store)
        manager.start()
        try:
            helds = await _two_members_holding(manager, plog)
            own_zookeeper.stop()
            _, written_a = manager.acknowledge(helds[0], "a", _accept(0, 9), renew=False)
            _, written_b = manager.acknowledge(helds[1], "b", _accept(0, 9), renew=False)
            codes = await asyncio.gather(manager.settle(written_a, helds[0].key, 3),
                                         manager.settle(written_b, helds[1].key, 3))
            assert codes == [ErrorCode.REQUEST_TIMED_OUT] * 2
            assert not (written_a.done() and written_a.result() == ErrorCode.NONE)
            assert not (written_b.done() and written_b.result() == ErrorCode.NONE)
        finally:
            # the worker thread blocked in the multi is let go by closing the client (its request fails)
            await asyncio.get_running_loop().run_in_executor(None, close, client)
            await manager.stop()

    asyncio.run(run())
