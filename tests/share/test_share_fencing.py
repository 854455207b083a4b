"""Share-partition state fenced by its writer's identity and state epoch, and a DeleteGroups that
stays done, against a real ZooKeeper.

Found in review (issue 46, finding 7): a leader whose conditional write failed reloaded the znode
and carried on, so an old leader (a paused incarnation, a broker whose view still named it leader)
and the new one took turns fencing each other and both handed records out; a broker recognised
its own earlier write by its bytes; and a DeleteGroups racing a share partition's first write was
undone by its create (``ensure_path`` made the group's znode again).  Now every load is a takeover
written under the broker's name and the next state epoch, a leader taken over from stops serving
the partition (NOT_LEADER_OR_FOLLOWER, its waiting acknowledgements FENCED_STATE_EPOCH), a writer
knows its own writes by identity, and a first write is conditional on its group's znode.

Finding 7's last holes: a first write made the group's znode when it had none, so a ShareFetch after
DeleteGroups brought the group back; and a DeleteShareGroupOffsets of a topic was undone by a first
write in flight (the topic's znode made again).  Now a share partition's first write needs its
group's znode (only its coordinator makes it, when a member joins; GROUP_ID_NOT_FOUND otherwise) and
is conditional on the topic's znode under it as it was when the state was chosen.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from spark_coord.errors import ErrorCode
from spark_coord.share.manager import ShareGroupUnknown, SharePartitionManager, ShareStateUnavailable
from spark_coord.share.store import NO_NODE, ShareStateStore, StateFenced, Write, encode, identity_of
from spark_coord.zk import paths

G, T = "g", "t"
ACCEPT = 1


async def _zk_call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


class GatedStore(ShareStateStore):
    """Writes wait for ``gate`` once ``hold`` is set (a write in flight, from the manager's side)."""

    def __init__(self, zk):
        super().__init__(zk, _zk_call)
        self.hold = threading.Event()
        self.called = threading.Event()
        self.gate = threading.Event()

    def write_blocking(self, writes):
        if self.hold.is_set():
            self.called.set()
            if not self.gate.wait(30):
                raise ConnectionError("held back by the test")
        return super().write_blocking(writes)


def _ctx(zk, plog, broker_id: int, replicas: list[int]):
    view = SimpleNamespace(topic_id=lambda topic: None, topics={T: {0: replicas}})
    return SimpleNamespace(zk=zk, zk_call=_zk_call, broker_id=broker_id, view=view,
                           logs=SimpleNamespace(get_or_create=lambda topic, partition: plog),
                           appends=SimpleNamespace(notify=lambda key: None))


def _saved(zk) -> None:
    """The group's znode, saved by its coordinator when a member joined: a share partition's first
    write needs it (only the coordinator makes it)."""
    zk.create(paths.share_group(G), b'{"members":{}}', makepath=True)


def _znode(zk) -> tuple[bytes, int]:
    data, stat = zk.get(paths.share_partition(G, T, 0))
    return data, stat.version


def _accept(first: int, last: int) -> list[dict]:
    return [{"first_offset": first, "last_offset": last, "acknowledge_types": [ACCEPT]}]


def test_a_leader_taken_over_from_is_refused_and_stops_serving_the_share_partition(zk):
    """Broker 1 leads and has records acquired; broker 2 takes the partition over (a new assignment
    in its view, or a newer incarnation).  Broker 1's next write is refused -- its acknowledgement gets
    FENCED_STATE_EPOCH -- and it serves the partition no more (it reloaded and went on before)."""
    _saved(zk)
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=10)

    async def run():
        old = SharePartitionManager(_ctx(zk, plog, 1, [1]), ShareStateStore(zk, _zk_call))
        new = SharePartitionManager(_ctx(zk, plog, 2, [2]), ShareStateStore(zk, _zk_call))
        old.start()
        new.start()
        try:
            plog.log_end_offset = 0
            held = await asyncio.wait_for(old.partition(G, T, 0), 10)
            plog.log_end_offset = 10
            held.sp.acquire("m1", [(0, 9)], max_records=10, lock_deadline=old.clock() + 30_000)
            assert await old.durable(held, held.sp.version, timeout=10) == ErrorCode.NONE

            taken = await asyncio.wait_for(new.partition(G, T, 0), 10)
            assert identity_of(_znode(zk)[0]) == (new.writer, 2)
            assert taken.sp.counts()["available"] == 10  # the old leader's acquisitions come back

            code, written = old.acknowledge(held, "m1", _accept(0, 4), renew=False)
            assert code == ErrorCode.NONE  # applied in its memory ...
            assert await asyncio.wait_for(written, 10) == ErrorCode.FENCED_STATE_EPOCH  # ... never in ZooKeeper
            with pytest.raises(ShareStateUnavailable) as refused:
                await old.partition(G, T, 0)
            assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            with pytest.raises(ShareStateUnavailable):  # still, on every request
                await old.partition(G, T, 0)
            assert identity_of(_znode(zk)[0]) == (new.writer, 2)

            # the new leader goes on writing
            taken.sp.acquire("m2", [(0, 9)], max_records=3, lock_deadline=new.clock() + 30_000)
            code, written = new.acknowledge(taken, "m2", _accept(0, 2), renew=False)
            assert (code, await asyncio.wait_for(written, 10)) == (ErrorCode.NONE, ErrorCode.NONE)
        finally:
            await old.stop()
            await new.stop()

    asyncio.run(run())


def test_a_leader_taken_over_from_serves_the_partition_again_once_its_assignment_changes(zk):
    _saved(zk)
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=0)

    async def run():
        old_ctx = _ctx(zk, plog, 1, [1, 2])
        old = SharePartitionManager(old_ctx, ShareStateStore(zk, _zk_call))
        new = SharePartitionManager(_ctx(zk, plog, 2, [2, 1]), ShareStateStore(zk, _zk_call))
        old.start()
        new.start()
        try:
            held = await asyncio.wait_for(old.partition(G, T, 0), 10)
            await asyncio.wait_for(new.partition(G, T, 0), 10)
            plog.log_end_offset = 10
            held.sp.acquire("m1", [(0, 9)], max_records=1, lock_deadline=old.clock() + 30_000)
            assert await old.durable(held, held.sp.version, timeout=10) == ErrorCode.FENCED_STATE_EPOCH
            with pytest.raises(ShareStateUnavailable):
                await old.partition(G, T, 0)
            old_ctx.view.topics = {T: {0: [1, 3]}}  # a new assignment: broker 1 leads again
            again = await asyncio.wait_for(old.partition(G, T, 0), 10)
            assert identity_of(_znode(zk)[0]) == (old.writer, 3)
            assert again is not held and again.sp.fetch_offset() == 0  # its unwritten acquisition is not kept
        finally:
            await old.stop()
            await new.stop()

    asyncio.run(run())


def test_a_writers_own_earlier_write_is_recognised_by_its_identity_not_its_bytes(zk):
    """The answer of a write was lost, and the writer no longer has its bytes (several writes went
    unanswered, or the state changed since): the znode's writer and epoch say it is its own."""
    _saved(zk)
    store = ShareStateStore(zk, None)
    me, snap = ("1-aaaa", 4), {"version": 1, "start": 0, "ranges": []}
    assert store.write_blocking([Write(G, T, 0, encode(snap, None, *me), NO_NODE, me)]) == {(G, T, 0): 0}
    # a write of this writer at version 0 reached ZooKeeper; its answer did not
    zk.set(paths.share_partition(G, T, 0), encode({**snap, "start": 3}, None, *me), version=0)
    now = encode({**snap, "start": 5}, None, *me)
    assert store.write_blocking([Write(G, T, 0, now, 0, me)]) == {(G, T, 0): 2}
    assert _znode(zk) == (now, 2)
    # the same writer in another state epoch (an earlier hold on the partition) is someone else
    zk.set(paths.share_partition(G, T, 0), encode(snap, None, "1-aaaa", 5), version=2)
    out = store.write_blocking([Write(G, T, 0, now, 2, me)])
    assert isinstance(out[(G, T, 0)], StateFenced) and out[(G, T, 0)].writer == "1-aaaa"


def test_a_create_whose_group_was_deleted_since_its_state_was_chosen_is_refused(zk):
    store = ShareStateStore(zk, None)
    zk.create(paths.share_group(G), b"members", makepath=True)
    created = zk.exists(paths.share_group(G)).czxid
    zk.delete(paths.share_group(G))
    me = ("1-aaaa", 1)
    out = store.write_blocking([Write(G, T, 0, b"{}", NO_NODE, me, created)])
    assert isinstance(out[(G, T, 0)], StateFenced) and out[(G, T, 0)].group_gone
    assert zk.exists(paths.share_group(G)) is None
    # created again (new members): not the group the state was chosen for either
    zk.create(paths.share_group(G), b"members")
    assert isinstance(store.write_blocking([Write(G, T, 0, b"{}", NO_NODE, me, created)])[(G, T, 0)], StateFenced)
    # the group saved meanwhile (its membership changed): still the same group
    now = zk.exists(paths.share_group(G)).czxid
    zk.set(paths.share_group(G), b"other members")
    assert store.write_blocking([Write(G, T, 0, b"{}", NO_NODE, me, now)]) == {(G, T, 0): 0}
    # a group with no znode (never joined, or deleted before the state was chosen): refused, and its znode
    # is not made -- only its coordinator makes it
    out = store.write_blocking([Write("h", T, 1, b"{}", NO_NODE, me, None)])
    assert isinstance(out[("h", T, 1)], StateFenced) and out[("h", T, 1)].group_gone
    assert zk.exists(paths.share_group("h")) is None


def test_a_group_deleted_while_its_partitions_first_write_is_in_flight_stays_deleted(zk):
    """DeleteGroups (an empty share group: its state goes, then its znode) while a leader's first write
    of a share partition of it waits: the create used to make the group's znode again (and the
    partition's state under it); it is refused, and the request that loaded it gets an error."""
    zk.create(paths.share_group(G), b'{"members":{}}', makepath=True)  # the coordinator saved the group
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=10)
    store = GatedStore(zk)
    store.hold.set()

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog, 1, [1]), store)
        manager.start()
        try:
            loading = asyncio.ensure_future(manager.partition(G, T, 0))
            assert await asyncio.get_running_loop().run_in_executor(None, store.called.wait, 10)
            zk.delete(paths.share_group(G), recursive=True)  # DeleteGroups
            store.gate.set()
            with pytest.raises(ShareGroupUnknown):
                await asyncio.wait_for(loading, 10)
            assert zk.exists(paths.share_group(G)) is None
        finally:
            store.gate.set()
            await manager.stop()

    asyncio.run(run())


def test_a_create_whose_topics_state_was_deleted_since_it_was_chosen_is_refused(zk):
    """DeleteShareGroupOffsets of a topic (its znode under the group deleted) between a leader's choice
    of a share partition's first state and its create: the create is refused as a DeleteGroups' is, so
    the topic's state stays deleted; a topic znode created again since is another one too."""
    store = ShareStateStore(zk, None)
    zk.create(paths.share_group(G), b"members", makepath=True)
    zk.create(paths.share_partition(G, T, 1), b"{}", makepath=True)  # another partition of the topic has state
    group, topic = zk.exists(paths.share_group(G)).czxid, zk.exists(paths.share_topic(G, T)).czxid
    me = ("1-aaaa", 1)
    zk.delete(paths.share_topic(G, T), recursive=True)  # DeleteShareGroupOffsets of T
    out = store.write_blocking([Write(G, T, 0, b"{}", NO_NODE, me, group, topic)])
    assert isinstance(out[(G, T, 0)], StateFenced) and out[(G, T, 0)].writer is None
    assert not out[(G, T, 0)].group_gone  # the group is there: its partition is started afresh at next use
    assert zk.exists(paths.share_topic(G, T)) is None
    # created again by another leader's first write since: not the topic the state was chosen for either
    zk.create(paths.share_partition(G, T, 1), b"{}", makepath=True)
    out = store.write_blocking([Write(G, T, 0, b"{}", NO_NODE, me, group, topic)])
    assert isinstance(out[(G, T, 0)], StateFenced)
    assert zk.get_children(paths.share_topic(G, T)) == ["1"]
    # the same topic znode: written
    topic = zk.exists(paths.share_topic(G, T)).czxid
    assert store.write_blocking([Write(G, T, 0, b"{}", NO_NODE, me, group, topic)]) == {(G, T, 0): 0}


def test_a_topics_state_deleted_while_a_first_write_is_in_flight_stays_deleted(zk):
    """DeleteShareGroupOffsets of a topic (the group empty: its topic's znode and every share partition
    under it deleted) while a leader's first write of one of its share partitions waits: the create used
    to make the topic's znode again (the group's was only checked); it is refused, the request that
    loaded it gets an error, and the next load starts the partition afresh."""
    zk.create(paths.share_group(G), b'{"members":{}}', makepath=True)  # the coordinator saved the group
    zk.create(paths.share_partition(G, T, 1), encode({"start_offset": 0}, None), makepath=True)
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=10)
    store = GatedStore(zk)
    store.hold.set()

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog, 1, [1]), store)
        manager.start()
        try:
            loading = asyncio.ensure_future(manager.partition(G, T, 0))
            assert await asyncio.get_running_loop().run_in_executor(None, store.called.wait, 10)
            zk.delete(paths.share_topic(G, T), recursive=True)  # DeleteShareGroupOffsets of T
            store.gate.set()
            with pytest.raises(ShareStateUnavailable) as refused:
                await asyncio.wait_for(loading, 10)
            assert refused.value.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE  # the group is there
            assert zk.exists(paths.share_topic(G, T)) is None
            assert zk.exists(paths.share_group(G)) is not None
            store.hold.clear()
            held = await asyncio.wait_for(manager.partition(G, T, 0), 10)  # the next request: afresh
            assert held.ready and zk.get_children(paths.share_topic(G, T)) == ["0"]
        finally:
            store.gate.set()
            await manager.stop()

    asyncio.run(run())


def test_a_share_partition_of_a_group_with_no_znode_is_not_served_and_makes_none(zk):
    """A bare ShareFetch of a group nobody joined (or one deleted): its share partition waits a moment
    for the group's znode (the coordinator saves it in the background when a member joins), then is
    refused with GROUP_ID_NOT_FOUND, and no znode is made; the group saved during the wait is served."""
    plog = SimpleNamespace(log_start_offset=0, log_end_offset=10)

    async def run():
        manager = SharePartitionManager(_ctx(zk, plog, 1, [1]), ShareStateStore(zk, _zk_call), group_wait_s=0.3)
        manager.start()
        try:
            with pytest.raises(ShareGroupUnknown) as refused:
                await asyncio.wait_for(manager.partition(G, T, 0), 10)
            assert refused.value.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert zk.exists(paths.SHARE_GROUPS) is None or zk.get_children(paths.SHARE_GROUPS) == []
            manager.group_wait_s = 10
            loading = asyncio.ensure_future(manager.partition(G, T, 0))
            await asyncio.sleep(0)
            assert not loading.done()
            _saved(zk)  # the member's heartbeat saved the group
            held = await asyncio.wait_for(loading, 10)
            assert held.ready and _znode(zk)[1] == 0
        finally:
            await manager.stop()

    asyncio.run(run())
