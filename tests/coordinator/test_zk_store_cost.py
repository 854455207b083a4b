"""What ZkGroupStore costs in ZooKeeper requests, and that its shortcuts never weaken fencing.

Requests are counted at the kazoo client (every ``*_async`` call and every
transaction); the store against the real ZooKeeper of tests/conftest.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from spark_coord.coordinator.storage.fencing import EpochCheck
from spark_coord.coordinator.storage.store import Fenced
from spark_coord.coordinator.storage.zk_store import ZkGroupStore
from spark_coord.zk import client as zkclient
from spark_coord.zk import paths

N = 1000  # partitions: a rebalance of a big group


class CountingClient:
    """A kazoo client that counts the requests made through it (a multi counts once)."""

    COUNTED = ("get_async", "get_children_async", "exists_async", "transaction")

    def __init__(self, client: Any):
        self._client = client
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self.COUNTED:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)
        return counted

    def take(self) -> Counter[str]:
        """The counts since the last ``take``."""
        out, self.calls = self.calls, Counter()
        return out


def _elect(client) -> EpochCheck:
    client.ensure_path(paths.CONSUMERS)
    txn = client.transaction()
    txn.create(paths.COORDINATOR, b"1", ephemeral=True)
    txn.set_data(paths.CONSUMERS, b"")
    results = txn.commit()
    node = client.exists(paths.COORDINATOR)
    return EpochCheck(node.czxid, node.version, results[1].version)


def _offsets(base: int) -> dict[tuple[str, int], int]:
    return {("t", p): base + p for p in range(N)}


def _owners(n_members: int) -> dict[tuple[str, int], str]:
    return {("t", p): f"c{p % n_members}-0" for p in range(N)}


def test_steady_state_commit_is_one_multi_per_500_offsets_without_reads(zk):
    check = _elect(zk)
    counting = CountingClient(zk)
    store = ZkGroupStore(counting, lambda: check)  # type: ignore[arg-type]

    async def main():
        await store.commit_offsets("g", _offsets(0))   # first commit: existence learnt once, pipelined
        first = counting.take()
        await store.commit_offsets("g", _offsets(10))  # then: set_data only
        second = counting.take()
        await store.commit_offsets("g", {("t", 0): 10, ("t", 1): 99})  # ("t", 0) unchanged: not rewritten
        third = counting.take()
        return first, second, third

    first, second, third = asyncio.run(main())
    assert first["exists_async"] <= N + 3 and first["transaction"] == 2, first
    assert second == Counter({"transaction": 2}), second
    assert third == Counter({"transaction": 1}), third
    assert zk.get("/consumers/g/offsets/t/999")[0] == b"1009" and zk.get("/consumers/g/offsets/t/1")[0] == b"99"


def test_owners_are_compared_with_what_was_written_not_reread(zk):
    check = _elect(zk)
    counting = CountingClient(zk)
    store = ZkGroupStore(counting, lambda: check)  # type: ignore[arg-type]

    async def main():
        assert await store.read_owners("g") == {}       # one (empty) listing
        await store.write_owners("g", _owners(10))
        counting.take()
        assert await store.read_owners("g") == _owners(10)  # from what this store wrote
        assert not counting.take()
        await store.write_owners("g", {**_owners(10), ("t", 0): "new-0"})  # one change: one small multi
        changed = counting.take()
        await store.write_owners("g", {})  # everything deleted, without reading first
        cleared = counting.take()
        return changed, cleared

    changed, cleared = asyncio.run(main())
    assert changed == Counter({"transaction": 1}), changed
    assert cleared == Counter({"transaction": 2}), cleared
    assert zk.get_children("/consumers/g/owners/t") == []


def test_cold_store_reads_owners_pipelined_and_writes_only_differences(zk, zk_connect):
    check = _elect(zk)
    asyncio.run(ZkGroupStore(zk, lambda: check).write_owners("g", _owners(4)))
    counting = CountingClient(zk)
    store = ZkGroupStore(counting, lambda: check)  # type: ignore[arg-type]  # a fresh store knows nothing
    asyncio.run(store.write_owners("g", _owners(5)))
    calls = counting.take()
    assert calls["get_async"] == N and calls["get_children_async"] == 2, calls
    assert calls["exists_async"] == 0 and calls["transaction"] == 2, calls
    assert {zk.get(f"/consumers/g/owners/t/{p}")[0].decode() for p in range(5)} == {f"c{p}-0" for p in range(5)}


def test_wrong_hints_are_forgotten_and_the_write_lands(zk):
    check = _elect(zk)
    store = ZkGroupStore(zk, lambda: check)
    asyncio.run(store.commit_offsets("g", {("t", 0): 1, ("t", 1): 1}))
    asyncio.run(store.write_owners("g", {("t", 0): "a-0"}))
    zk.delete("/consumers/g", recursive=True)  # someone removes the group behind our back
    asyncio.run(store.commit_offsets("g", {("t", 0): 2, ("t", 1): 2}))
    asyncio.run(store.write_owners("g", {("t", 0): "b-0", ("t", 1): "b-0"}))
    assert zk.get("/consumers/g/offsets/t/0")[0] == b"2" and zk.get("/consumers/g/offsets/t/1")[0] == b"2"
    assert sorted(zk.get_children("/consumers/g/owners/t")) == ["0", "1"]
    zk.create("/consumers/g/owners/t/7", b"x-0")  # ... or adds a node we did not know about
    asyncio.run(store.write_owners("g", {("t", 7): "c-0"}))
    assert zk.get("/consumers/g/owners/t/7")[0] == b"c-0"


def test_cached_writes_are_still_fenced_after_another_election(zk, zk_connect):
    other = zkclient.connect(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
    try:
        old = _elect(zk)
        term = {"check": old}
        store = ZkGroupStore(zk, lambda: term["check"])
        asyncio.run(store.commit_offsets("g", {("t", 0): 1}))
        asyncio.run(store.write_owners("g", {("t", 0): "a-0"}))
        zk.delete(paths.COORDINATOR)
        new = _elect(other)
        # every write fails, including ones with nothing left to change (only the checks are sent)
        for write in (store.commit_offsets("g", {("t", 0): 1}), store.commit_offsets("g", {("t", 0): 2}),
                      store.write_owners("g", {("t", 0): "a-0"}), store.write_owners("g", {})):
            with pytest.raises(Fenced):
                asyncio.run(write)
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"1" and zk.get("/consumers/g/owners/t/0")[0] == b"a-0"
        # the new coordinator changes things; our store, elected again later, must not trust its old picture
        newer = ZkGroupStore(other, lambda: new)
        asyncio.run(newer.write_owners("g", {("t", 1): "b-0"}))
        asyncio.run(newer.commit_offsets("g", {("t", 0): 5}))
        other.delete(paths.COORDINATOR)
        term["check"] = _elect(zk)
        assert asyncio.run(store.read_owners("g")) == {("t", 1): "b-0"}
        asyncio.run(store.commit_offsets("g", {("t", 0): 1}))  # not skipped as "unchanged"
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"1"
    finally:
        zkclient.close(other)


def test_many_groups_commit_in_one_multi_per_500_offsets(zk):
    """The committer's tick writes every dirty group together: 1,200 groups' offsets cost three
    fenced multis, not 1,200 transactions."""
    check = _elect(zk)
    counting = CountingClient(zk)
    store = ZkGroupStore(counting, lambda: check)  # type: ignore[arg-type]
    groups = [f"g{i}" for i in range(1200)]

    async def main():
        await store.commit_offsets_many({g: {("t", 0): 1} for g in groups})  # creates, existence learnt once
        counting.take()
        await store.commit_offsets_many({g: {("t", 0): 2, ("t", 1): 5} for g in groups[:200]}
                                        | {g: {("t", 0): 2} for g in groups[200:]})
        return counting.take()

    calls = asyncio.run(main())
    assert calls["transaction"] == 3, calls  # 1,400 offsets: 500 + 500 + 400
    assert zk.get("/consumers/g0/offsets/t/1")[0] == b"5" and zk.get("/consumers/g1199/offsets/t/0")[0] == b"2"
    assert not zk.exists("/consumers/g1199/offsets/t/1")


def test_many_groups_commit_is_fenced(zk, zk_connect):
    check = _elect(zk)
    store = ZkGroupStore(zk, lambda: check)
    asyncio.run(store.commit_offsets_many({"a": {("t", 0): 1}, "b": {("t", 0): 1}}))
    zk.set("/consumers", b"")  # another election bumped the fencing node
    with pytest.raises(Fenced):
        asyncio.run(store.commit_offsets_many({"a": {("t", 0): 2}, "b": {("t", 0): 2}}))
    assert zk.get("/consumers/a/offsets/t/0")[0] == b"1" and zk.get("/consumers/b/offsets/t/0")[0] == b"1"
