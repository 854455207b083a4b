"""Share-partition state writes (``share.store``) against a real ZooKeeper when an answer is lost.

Found by the network nemesis (``bench/nemesis.py``, a 60-fault run with a share member): the
partition leader's state multi reached ZooKeeper, the connection dropped before the answer, and
the retry failed its version check against the leader's *own* write.  The leader took that for a
fence, dropped the share partitions and restored them from ZooKeeper: five records still locked by
a member were handed to it again with delivery count 2 (and the entries after the first in the
multi, never tried -- RuntimeInconsistency -- were taken for fenced as well).  A writer now
recognises its own earlier write (its identity -- writer and state epoch -- in the znode, at a
later version) and goes on from there; only someone else's write fences it, and the entries
ZooKeeper never tried are written again.
"""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss

from spark_coord.share.store import NO_NODE, ShareStateStore, StateFenced, Write, encode
from spark_coord.zk import paths

G, T = "sg", "topic"
#: This writer (a broker's incarnation and its state epoch on the share partition).
ME = ("1-aaaa", 1)


def _store(zk) -> ShareStateStore:
    zk.ensure_path(paths.share_group(G))  # saved by the group's coordinator when a member joined
    return ShareStateStore(zk, None)


def _key(p: int) -> tuple[str, str, int]:
    return (G, T, p)


def _znode(zk, p: int) -> tuple[bytes, int]:
    data, stat = zk.get(paths.share_partition(G, T, p))
    return data, stat.version


def _state(start: int, who: tuple[str, int] | None = ME) -> bytes:
    """A share partition's znode bytes at ``start``, written by ``who`` (None: an admin)."""
    return encode({"version": 1, "start": start, "ranges": []}, None, *(who or ()))


def _write(p: int, start: int, version: int) -> Write:
    return Write(G, T, p, _state(start), version, ME)


def test_a_retried_write_whose_first_try_was_applied_goes_on_from_there(zk):
    store = _store(zk)
    assert store.write_blocking([_write(0, 1, NO_NODE)]) == {_key(0): 0}
    # the write of start 2 at version 0 reached ZooKeeper, its answer did not
    zk.set(paths.share_partition(G, T, 0), _state(2), version=0)
    # the writer tries again with what it holds now, still at the version it last knew
    out = store.write_blocking([_write(0, 3, 0)])
    assert out == {_key(0): 2}
    assert _znode(zk, 0) == (_state(3), 2)


def test_the_same_bytes_sent_again_are_taken_as_written(zk):
    store = _store(zk)
    store.write_blocking([_write(0, 1, NO_NODE)])
    zk.set(paths.share_partition(G, T, 0), _state(2), version=0)
    assert store.write_blocking([_write(0, 2, 0)]) == {_key(0): 1}
    assert _znode(zk, 0) == (_state(2), 1)


def test_a_create_whose_answer_was_lost_is_not_a_fence(zk):
    store = _store(zk)
    zk.ensure_path(paths.share_topic(G, T))
    zk.create(paths.share_partition(G, T, 3), _state(1))
    assert store.write_blocking([_write(3, 1, NO_NODE)]) == {_key(3): 0}


def test_someone_elses_write_still_fences(zk):
    store = _store(zk)
    store.write_blocking([_write(0, 1, NO_NODE)])
    theirs = _state(9, ("2-bbbb", 2))
    zk.set(paths.share_partition(G, T, 0), theirs, version=0)
    out = store.write_blocking([_write(0, 3, 0)])
    assert isinstance(out[_key(0)], StateFenced) and (out[_key(0)].writer, out[_key(0)].epoch) == ("2-bbbb", 2)
    assert _znode(zk, 0) == (theirs, 1)
    # an admin's write (AlterShareGroupOffsets) names no writer
    zk.set(paths.share_partition(G, T, 0), _state(5, None), version=1)
    out = store.write_blocking([_write(0, 3, 1)])
    assert isinstance(out[_key(0)], StateFenced) and out[_key(0)].writer is None


def test_entries_after_a_fenced_one_in_a_multi_are_written_not_fenced(zk):
    store = _store(zk)
    first = store.write_blocking([_write(p, 0, NO_NODE) for p in range(4)])
    assert first == {_key(p): 0 for p in range(4)}
    zk.set(paths.share_partition(G, T, 1), b"someone else", version=0)
    out = store.write_blocking([_write(p, 1, 0) for p in range(4)])
    assert isinstance(out[_key(1)], StateFenced)
    assert {p: out[_key(p)] for p in (0, 2, 3)} == {0: 1, 2: 1, 3: 1}
    assert [_znode(zk, p)[0] for p in range(4)] == [_state(1), b"someone else", _state(1), _state(1)]


def test_a_whole_multi_applied_before_its_answer_was_lost_is_recognised_entry_by_entry(zk):
    store = _store(zk)
    store.write_blocking([_write(p, 0, NO_NODE) for p in range(5)])
    # the multi writing start 1 everywhere was applied; its answer lost
    t = zk.transaction()
    for p in range(5):
        t.set_data(paths.share_partition(G, T, p), _state(1), version=0)
    t.commit()
    out = store.write_blocking([_write(p, 2, 0) for p in range(5)])
    assert out == {_key(p): 2 for p in range(5)}
    assert {_znode(zk, p) for p in range(5)} == {(_state(2), 2)}


def test_the_manager_writes_again_when_the_answer_never_came():
    """``SharePartitionManager._written`` with a write that raised: the share partition stays dirty at
    the version it knew (its next write recognises the lost one by identity), and a retry is timed."""
    import asyncio

    from spark_coord.share.manager import SharePartitionManager, _Held

    class Loopless:
        _loop = None
        _timer = None
        _inflight = None
        _dirty: set = set()

    held = _Held(key=_key(0), sp=None, topic_id=None, zversion=4)
    mgr = Loopless()
    loop = asyncio.new_event_loop()
    try:
        failed = loop.create_future()
        failed.set_exception(ConnectionLoss())
        SharePartitionManager._written(mgr, failed, [(held, 7, b"sent")])
        assert held.zversion == 4 and not held.gone and _key(0) in mgr._dirty
    finally:
        loop.close()


def test_many_large_share_states_are_written_in_multis_that_fit_zookeepers_request_limit(zk):
    """Seen from outside: fragmented windows snapshot to about 160 KB each at 10,000 locks, and seven
    of them in one multi passed ZooKeeper's 1 MB request limit (jute.maxbuffer): ZooKeeper dropped
    the connection, the writer took it for an outage and sent the same multi every 0.5 s, and every
    acknowledgement on the broker stalled.  Multis are bounded in bytes as well as in operations."""
    from spark_coord.share.partition import SharePartition
    from spark_coord.share.store import MAX_MULTI_BYTES

    sp = SharePartition(0, delivery_count_limit=5, max_in_flight=10_000)
    sp.acquire("h", [(0, 9_999)], max_records=1, lock_deadline=1)  # the first record held: the window stays
    sp.acquire("a", [(0, 9_999)], max_records=10_000, lock_deadline=1)
    for o in range(1, 10_000):  # accept and reject alternately: one range per offset
        assert sp.acknowledge("a", o, o, [1 if o % 2 else 3]) == 0
    data = encode(sp.snapshot(), bytes(16))
    assert 100_000 < len(data) < MAX_MULTI_BYTES
    store = _store(zk)
    writes = [Write(G, T, p, data, NO_NODE) for p in range(16)]
    assert store.write_blocking(writes) == {_key(p): 0 for p in range(16)}
    assert store.multis >= -(-16 * len(data) // MAX_MULTI_BYTES)
    assert all(_znode(zk, p) == (data, 0) for p in range(16))


def test_another_writers_identical_state_is_not_taken_for_this_writers_own(zk):
    """Found in review: a writer recognised its own earlier write by content alone, so another
    broker's write of the same state (the same records acknowledged the same way) passed for its
    own lost-answer write, and two writers went on.  Each znode names its writer (the broker and
    its incarnation) and state epoch, and only that identity counts."""
    from spark_coord.share.partition import SharePartition
    from spark_coord.share.store import decode

    snap = SharePartition(7).snapshot()
    mine, theirs = encode(snap, None, "2-aaaa", 1), encode(snap, None, "1-bbbb", 1)
    assert mine != theirs and decode(mine) == decode(theirs) == (snap, None)
    store = _store(zk)
    assert store.write_blocking([Write(G, T, 0, mine, NO_NODE, ("2-aaaa", 1))]) == {_key(0): 0}
    # this writer sent ``mine`` again at version 0 and lost the answer; another wrote the same state meanwhile
    zk.set(paths.share_partition(G, T, 0), theirs, version=0)
    out = store.write_blocking([Write(G, T, 0, encode(SharePartition(8).snapshot(), None, "2-aaaa", 1), 0,
                                      ("2-aaaa", 1))])
    assert isinstance(out[_key(0)], StateFenced)
    assert _znode(zk, 0) == (theirs, 1)
