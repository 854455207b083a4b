"""ZkGroupStore and CoordinatorElector against the real ZooKeeper (fixtures from tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from spark_coord.coordinator.core.elector import CoordinatorElector
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.storage.fencing import EpochCheck
from spark_coord.coordinator.storage.store import Fenced, StoredMember
from spark_coord.coordinator.storage.zk_store import ZkGroupStore
from spark_coord.zk import client as zkclient
from spark_coord.zk import model, paths
from spark_coord.zk.testing import expire_session


def _elect_by_hand(client) -> EpochCheck:
    """What the elector does, done directly: election node + /consumers bump in one multi."""
    client.ensure_path(paths.CONSUMERS)
    txn = client.transaction()
    txn.create(paths.COORDINATOR, b"1", ephemeral=True)
    txn.set_data(paths.CONSUMERS, b"")
    results = txn.commit()
    node = client.exists(paths.COORDINATOR)
    return EpochCheck(node.czxid, node.version, results[1].version)


def test_zk_store_writes_kafka_layout(zk):
    check = _elect_by_hand(zk)
    zk.ensure_path(paths.BROKER_TOPICS)
    zk.create(paths.topic("t"), model.topic_assignment({0: [1], 1: [1], 2: [1]}))
    store = ZkGroupStore(zk, lambda: check)

    async def main():
        member = StoredMember("c1", TopicCount.static({"t": 2}), True, "smallest", 6000)
        await store.save_member("g", member)
        await store.save_generation("g", 3)
        await store.commit_offsets("g", {("t", 0): 42, ("t", 1): 7})
        await store.commit_offsets("g", {("t", 0): 43})
        await store.write_owners("g", {("t", 0): "c1-0", ("t", 1): "c1-1", ("t", 2): "c1-0"})
        await store.write_owners("g", {("t", 0): "c1-1"})
        assert await store.topics() == {"t": 3}
        loaded = await store.load_groups()
        assert await store.read_offsets("g") == {("t", 0): 43, ("t", 1): 7}
        return loaded

    loaded = asyncio.run(main())
    # read back with plain kazoo: Kafka 0.8's layout
    assert zk.get("/consumers/g/offsets/t/0")[0] == b"43"
    assert zk.get("/consumers/g/offsets/t/1")[0] == b"7"
    assert zk.get("/consumers/g/owners/t/0")[0] == b"c1-1"
    assert zk.exists("/consumers/g/owners/t/1") is None and zk.exists("/consumers/g/owners/t/2") is None
    ids = json.loads(zk.get("/consumers/g/ids/c1")[0])
    assert ids["pattern"] == "static" and ids["subscription"] == {"t": 2} and ids["session_timeout_ms"] == 6000
    assert json.loads(zk.get("/consumers/g/state")[0])["generation"] == 3
    g = loaded["g"]
    assert g.generation_id == 3 and g.members["c1"].topic_count == TopicCount.static({"t": 2})
    assert g.offsets == {("t", 0): 43, ("t", 1): 7} and g.owners == {("t", 0): "c1-1"}
    asyncio.run(store.remove_member("g", "c1"))
    assert zk.get_children("/consumers/g/ids") == []
    zk.create("/consumers/g/offsets/t/9", b"garbage")  # hostile content is skipped, not fatal
    assert asyncio.run(store.load_groups())["g"].offsets == {("t", 0): 43, ("t", 1): 7}


def test_zk_store_drops_a_deleted_topics_offsets_and_owners(zk):
    check = _elect_by_hand(zk)
    store = ZkGroupStore(zk, lambda: check)

    async def main():
        await store.commit_offsets("g", {("t", 0): 42, ("t", 1): 7, ("u", 0): 3})
        await store.write_owners("g", {("t", 0): "c1-0", ("u", 0): "c1-0"})
        await store.delete_topic("g", "t")
        await store.delete_topic("g", "never-there")
        return await store.read_offsets("g"), await store.read_owners("g")

    offsets, owners = asyncio.run(main())
    assert offsets == {("u", 0): 3} and owners == {("u", 0): "c1-0"}
    assert zk.exists("/consumers/g/offsets/t") is None and zk.exists("/consumers/g/owners/t") is None
    assert zk.get("/consumers/g/offsets/u/0")[0] == b"3"


def test_deposed_coordinator_writes_are_fenced(zk, zk_connect):
    other = zkclient.connect(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
    try:
        old = _elect_by_hand(zk)
        store = ZkGroupStore(zk, lambda: old)
        asyncio.run(store.commit_offsets("g", {("t", 0): 1}))
        # the old coordinator's node goes (session trouble); another broker wins
        zk.delete(paths.COORDINATOR)
        with pytest.raises(Fenced):
            asyncio.run(store.commit_offsets("g", {("t", 0): 2}))
        new = _elect_by_hand(other)
        assert new.coordinator_version == old.coordinator_version  # the version alone cannot tell them apart
        assert new.epoch > old.epoch
        for write in (store.commit_offsets("g", {("t", 0): 3, ("t2", 0): 5}), store.save_generation("g", 9),
                      store.write_owners("g", {("t", 0): "x-0"}),
                      store.save_member("g", StoredMember("c", TopicCount.static({"t": 1})))):
            with pytest.raises(Fenced):
                asyncio.run(write)
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"1"  # nothing landed
        assert zk.exists("/consumers/g/offsets/t2") is None and zk.exists("/consumers/g/state") is None
        assert zk.exists("/consumers/g/owners") is None and zk.exists("/consumers/g/ids") is None
        asyncio.run(ZkGroupStore(other, lambda: new).commit_offsets("g", {("t", 0): 4}))
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"4"
        with pytest.raises(Fenced):
            asyncio.run(ZkGroupStore(zk, lambda: None).commit_offsets("g", {("t", 0): 5}))
    finally:
        zkclient.close(other)


async def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_elector_one_wins_then_the_other_takes_over_after_session_expiry(zk_connect):
    a = zkclient.connect(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
    b = zkclient.connect(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
    events: list[tuple[str, int | None]] = []

    async def main():
        loop = asyncio.get_running_loop()
        ea = CoordinatorElector(a, 1, loop, lambda e: events.append(("a-elected", e)),
                                lambda: events.append(("a-resigned", None)))
        eb = CoordinatorElector(b, 2, loop, lambda e: events.append(("b-elected", e)),
                                lambda: events.append(("b-resigned", None)))
        await ea.start()
        await eb.start()
        assert ea.is_coordinator and not eb.is_coordinator
        assert b.get(paths.COORDINATOR)[0] == b"1"
        first = ea.epoch
        await loop.run_in_executor(None, lambda: expire_session(a, timeout=30))
        await _wait_for(lambda: ("a-resigned", None) in events, 15, "a to resign")
        await _wait_for(lambda: eb.is_coordinator, 15, "b to take over")
        assert eb.epoch > first and b.get(paths.COORDINATOR)[0] == b"2"
        # a's store is fenced now, b's is not
        with pytest.raises(Fenced):
            await ZkGroupStore(a, lambda: EpochCheck(first, 0, 1)).save_generation("g", 1)
        await ZkGroupStore(b, eb.current_check).save_generation("g", 1)
        await asyncio.sleep(0.3)
        assert not ea.is_coordinator  # a re-electing with its new session found b in place
        b_epoch = eb.epoch
        await eb.stop()
        assert not eb.is_coordinator
        await _wait_for(lambda: ea.is_coordinator, 15, "a to take over after b stepped down")
        assert ea.epoch > b_epoch > first  # every election has a newer epoch
        await ea.stop()

    try:
        asyncio.run(main())
    finally:
        zkclient.close(a)
        zkclient.close(b)
    kinds = [k for k, _ in events]
    # a, suspended, keeps the role until it hears of the expiry; b may be elected before that (fenced)
    assert kinds[0] == "a-elected" and sorted(kinds[1:3]) == ["a-resigned", "b-elected"]
    assert kinds.count("b-resigned") == 1
