"""The share-state notifications (``share.changes``): their format, and a broker dropping what it
holds of a group an admin changed, so the next fetch reads the new state."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from spark_coord.errors import ErrorCode
from spark_coord.share.changes import ShareStateChanges, encode_change, parse_change


def test_a_notification_names_the_group_and_its_topics():
    assert parse_change(encode_change("g", ["b", "a", "a"])) == ("g", frozenset({"a", "b"}))
    assert parse_change(encode_change("g")) == ("g", None)
    for bad in (b"", b"{}", b"[1]", b'{"version":2,"group":"g"}', b'{"version":1,"group":"a/b"}',
                b'{"version":1,"group":"g","topics":"t"}'):
        assert parse_change(bad) is None, bad


def test_drop_forgets_the_groups_partitions_of_the_named_topics():
    """The broker's own manager: what it held of the group's named topics is dropped, acknowledgements
    waiting for their write answered FENCED_STATE_EPOCH, long polls on them woken."""
    from spark_coord.share.manager import SharePartitionManager, _Held
    from spark_coord.share.partition import SharePartition

    loop = asyncio.new_event_loop()
    woken = []
    ctx = SimpleNamespace(zk=None, zk_call=None, appends=SimpleNamespace(notify=woken.append))
    manager = SharePartitionManager(ctx)
    keys = [("g", "t", 0), ("g", "u", 0), ("h", "t", 0)]
    for key in keys:
        manager.held[key] = _Held(key, SharePartition(0), None)
    a = manager.held[keys[0]]
    waiting = loop.create_future()
    a.waiters.append((1, waiting))
    changes = ShareStateChanges.__new__(ShareStateChanges)
    changes.manager = manager
    assert changes.drop("g", frozenset({"t"})) == 1
    assert set(manager.held) == {("g", "u", 0), ("h", "t", 0)}
    assert a.gone and waiting.result() == ErrorCode.FENCED_STATE_EPOCH and not a.waiters
    assert woken == [("t", 0)]
    assert changes.drop("g") == 1 and set(manager.held) == {("h", "t", 0)}
    assert changes.drop("nobody") == 0
    loop.close()
