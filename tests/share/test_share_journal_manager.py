"""Acknowledgements made durable by the share-state journal, ZooKeeper a checkpoint behind it, against a
real ZooKeeper: an acknowledgement is answered while ZooKeeper writes are held back; a manager abandoned
without a flush (a crash) is followed by a new incarnation that loads the journal's newer state (accepted
records stay accepted, released ones keep their delivery count); an entry whose lineage is not the
znode's (another writer wrote since, an admin deleted it) is ignored; after a ZooKeeper session loss
acknowledgements wait for ZooKeeper again until a write lands."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from test_share_fencing import G, GatedStore, T, _ctx, _saved, _zk_call, _znode

from spark_coord.errors import ErrorCode
from spark_coord.share.journal import ShareJournal
from spark_coord.share.manager import SharePartitionManager, ShareSettings
from spark_coord.share.partition import AckType
from spark_coord.share.store import ShareStateStore, identity_of, seq_of
from spark_coord.zk import paths
from spark_coord.zk.testing import expire_session

#: Long enough that no checkpoint is written during a test unless someone waits on ZooKeeper.
NO_CHECKPOINT_MS = 600_000


def _acks() -> list[dict]:
    """0-4 accepted, 5-6 released, 7 rejected (8-9 stay acquired)."""
    return [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [AckType.ACCEPT]},
            {"first_offset": 5, "last_offset": 6, "acknowledge_types": [AckType.RELEASE]},
            {"first_offset": 7, "last_offset": 7, "acknowledge_types": [AckType.REJECT]}]


def _manager(zk, plog, journal_dir, store=None, broker_id: int = 1, **kw) -> SharePartitionManager:
    journal = ShareJournal(journal_dir)
    recovered = journal.open()
    return SharePartitionManager(_ctx(zk, plog, broker_id, [broker_id]), store or ShareStateStore(zk, _zk_call),
                                 flush_interval_ms=NO_CHECKPOINT_MS, journal=journal, recovered=recovered,
                                 settings=lambda group: ShareSettings(auto_offset_reset="earliest"), **kw)


def _crash(m: SharePartitionManager) -> None:
    """Abandon ``m`` as a SIGKILL would: no flush, no stop; its journal's file closed."""
    for t in m._tasks:
        t.cancel()
    m.ctx.zk.remove_listener(m._zk_state)
    m.journal.close()


def _saved_and_empty(zk) -> SimpleNamespace:
    """The group's znodes saved (``_saved``); the partition's log, empty for now."""
    _saved(zk)
    return SimpleNamespace(log_start_offset=0, log_end_offset=0)


async def _held_back(m: SharePartitionManager, plog, store: GatedStore):
    """The share partition loaded, offsets 0-19 acquired by m1, then every ZooKeeper write held back."""
    held = await asyncio.wait_for(m.partition(G, T, 0), 10)
    plog.log_end_offset = 20
    held.sp.acquire("m1", [(0, 19)], max_records=20, lock_deadline=m.clock() + 30_000)
    store.hold.set()
    return held


async def _acknowledged_then_crashed(zk, plog, tmp_path) -> SharePartitionManager:
    """Broker 1 loads the share partition, acquires 0-9 and acknowledges ``_acks`` -- answered NONE while
    every ZooKeeper write is held back -- then crashes.  The abandoned manager."""
    store = GatedStore(zk)
    m = _manager(zk, plog, tmp_path, store)
    m.start()
    held = await asyncio.wait_for(m.partition(G, T, 0), 10)
    plog.log_end_offset = plog.opened_end_offset = 20
    got = held.sp.acquire("m1", [(0, 19)], max_records=10, lock_deadline=m.clock() + 30_000)
    assert [(a.first_offset, a.last_offset) for a in got] == [(0, 9)]
    store.hold.set()
    code, written = m.acknowledge(held, "m1", _acks(), renew=False)
    assert (code, await asyncio.wait_for(written, 5)) == (ErrorCode.NONE, ErrorCode.NONE)
    assert not store.called.is_set()  # answered with no ZooKeeper write even tried
    data, _ = _znode(zk)
    assert identity_of(data) == (m.writer, 1) and seq_of(data) < held.sp.version  # ZooKeeper lags
    _crash(m)
    store.gate.set()
    return m


def test_acknowledgements_answered_from_the_journal_survive_a_crash(zk, tmp_path):
    plog = _saved_and_empty(zk)

    async def run():
        old = await _acknowledged_then_crashed(zk, plog, tmp_path)
        new = _manager(zk, plog, tmp_path)  # the same broker, a new incarnation
        assert set(new.recovered) == {(G, T, 0)}
        new.start()
        try:
            held = await asyncio.wait_for(new.partition(G, T, 0), 10)
            assert identity_of(_znode(zk)[0]) == (new.writer, 2)  # taken over from the journal's lineage
            assert (held.sp.start_offset, held.sp.counts()["archived"]) == (5, 1)  # 0-4 done, 7 archived
            got = held.sp.acquire("m2", [(0, 19)], max_records=20, lock_deadline=new.clock() + 30_000)
            offsets = {o: a.delivery_count for a in got for o in range(a.first_offset, a.last_offset + 1)}
            assert sorted(offsets) == [5, 6, *range(8, 20)]  # never 0-4 (accepted) nor 7 (rejected)
            assert offsets[5] == offsets[6] == 2  # released once: their count kept
            assert offsets[10] == 1
            assert (G, T, 0) not in new.journal.pending  # the takeover superseded the old entry
        finally:
            await new.stop()
            new.journal.close()
        assert old.writer != new.writer

    asyncio.run(run())


@pytest.mark.parametrize("since", ["another writer", "an admin deleted it"])
def test_a_journal_entry_of_another_lineage_than_the_znode_is_ignored(zk, tmp_path, since):
    plog = _saved_and_empty(zk)

    async def run():
        await _acknowledged_then_crashed(zk, plog, tmp_path)
        if since == "another writer":
            other = SharePartitionManager(_ctx(zk, plog, 2, [2]), ShareStateStore(zk, _zk_call))
            other.start()
            await asyncio.wait_for(other.partition(G, T, 0), 10)  # its takeover, from the znode
            await other.stop()
            assert identity_of(_znode(zk)[0]) == (other.writer, 2)
        else:
            zk.delete(paths.share_partition(G, T, 0))
        new = _manager(zk, plog, tmp_path)
        new.start()
        try:
            held = await asyncio.wait_for(new.partition(G, T, 0), 10)
            got = held.sp.acquire("m2", [(0, 19)], max_records=20, lock_deadline=new.clock() + 30_000)
            assert [(a.first_offset, a.last_offset) for a in got] == [(0, 19)]  # the znode's state, not the entry's
            assert (G, T, 0) not in new.journal.pending
        finally:
            await new.stop()
            new.journal.close()

    asyncio.run(run())


def test_after_a_session_loss_acknowledgements_wait_for_zookeeper_until_a_write_lands(zk, tmp_path):
    plog = _saved_and_empty(zk)
    store = GatedStore(zk)

    async def until(predicate, what: str, timeout: float = 30) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def run():
        m = _manager(zk, plog, tmp_path, store)
        m.start()
        try:
            held = await _held_back(m, plog, store)

            def ack(offset: int):
                return m.acknowledge(held, "m1", [{"first_offset": offset, "last_offset": offset,
                                                    "acknowledge_types": [AckType.ACCEPT]}], renew=False)[1]

            assert await asyncio.wait_for(ack(0), 5) == ErrorCode.NONE  # from the journal
            assert not store.called.is_set()

            await asyncio.get_running_loop().run_in_executor(None, expire_session, zk, 30)
            await until(lambda: not held.fresh, "the session loss to reach the manager")
            waiting = ack(1)
            await until(store.called.is_set, "the acknowledgement's ZooKeeper write")
            await asyncio.sleep(0)
            assert not waiting.done()  # held back with the ZooKeeper write
            store.gate.set()
            assert await asyncio.wait_for(waiting, 10) == ErrorCode.NONE
            assert seq_of(_znode(zk)[0]) >= held.sp.version  # in ZooKeeper before it was answered
            assert held.fresh

            store.gate.clear()
            store.called.clear()
            assert await asyncio.wait_for(ack(2), 5) == ErrorCode.NONE  # from the journal again
            assert not store.called.is_set()
        finally:
            store.gate.set()
            await m.stop()
            m.journal.close()

    asyncio.run(run())


def test_a_failed_append_sends_the_acknowledgement_to_zookeeper(zk, tmp_path):
    """The journal cannot be written (a full disk; here its file is closed): the acknowledgement is
    answered once its ZooKeeper write lands instead -- slower, never lost."""
    plog = _saved_and_empty(zk)
    store = GatedStore(zk)

    async def run():
        m = _manager(zk, plog, tmp_path, store)
        m.start()
        try:
            held = await _held_back(m, plog, store)
            m.journal.close()
            _, written = m.acknowledge(held, "m1", _acks(), renew=False)
            deadline = asyncio.get_running_loop().time() + 10
            while not store.called.is_set():
                assert asyncio.get_running_loop().time() < deadline, "no ZooKeeper write for the acknowledgement"
                await asyncio.sleep(0.02)
            assert not written.done()  # waits for ZooKeeper, held back
            store.gate.set()
            assert await asyncio.wait_for(written, 10) == ErrorCode.NONE
            assert seq_of(_znode(zk)[0]) >= held.sp.version
        finally:
            store.gate.set()
            await m.stop()

    asyncio.run(run())


def test_acknowledgements_on_a_fragmented_window_append_updates_and_a_crash_recovers_them(zk, tmp_path):
    """Every other offset of a 200-record window accepted, the rest held: each acknowledgement is
    journaled as an UPDATE of what changed since the last record (not the window's 3 KB state; the
    group's limits applied again at each acknowledgement change nothing), and the next incarnation
    loads the state they add up to."""
    plog = _saved_and_empty(zk)
    store = GatedStore(zk)

    async def run():
        m = _manager(zk, plog, tmp_path, store)
        m.start()
        held = await asyncio.wait_for(m.partition(G, T, 0), 10)
        plog.log_end_offset = plog.opened_end_offset = 200
        held.sp.acquire("m1", [(0, 199)], max_records=200, lock_deadline=m.clock() + 30_000)
        store.hold.set()
        types = [AckType.RELEASE] + [AckType.ACCEPT if o % 2 else AckType.RELEASE for o in range(1, 200)]
        _, written = m.acknowledge(held, "m1", [{"first_offset": 0, "last_offset": 199,
                                                 "acknowledge_types": types}], renew=False)
        assert await asyncio.wait_for(written, 5) == ErrorCode.NONE
        held.sp.acquire("m1", [(0, 199)], max_records=200, lock_deadline=m.clock() + 30_000)
        sizes = []
        for offset in (10, 20, 30, 0):
            before = m.journal.bytes
            _, written = m.acknowledge(held, "m1", [{"first_offset": offset, "last_offset": offset,
                                                     "acknowledge_types": [AckType.ACCEPT]}], renew=False)
            assert await asyncio.wait_for(written, 5) == ErrorCode.NONE
            assert m.journal.pending[(G, T, 0)].prev is not None  # an UPDATE
            sizes.append(m.journal.bytes - before)
        sizes = sizes[1:]  # the first carries the acquisition before it too (every other offset)
        assert max(sizes) < 400 < len(m.journal._chains[(G, T, 0)].base.data) / 5, sizes
        assert not store.called.is_set()  # every answer from the journal
        expected = held.sp.snapshot()
        assert expected["start"] == 2  # 0-1 done
        _crash(m)
        store.gate.set()
        new = _manager(zk, plog, tmp_path)
        new.start()
        try:
            again = await asyncio.wait_for(new.partition(G, T, 0), 10)
            assert again.sp.snapshot() == expected
        finally:
            await new.stop()
            new.journal.close()

    asyncio.run(run())
