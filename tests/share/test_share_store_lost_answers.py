"""Share-partition state writes (``share.store``) against a real ZooKeeper when an answer is lost.

Found by the network nemesis (``bench/nemesis.py``, a 60-fault run with a share member): the
partition leader's state multi reached ZooKeeper, the connection dropped before the answer, and
the retry failed its version check against the leader's *own* write.  The leader took that for a
fence, dropped the share partitions and restored them from ZooKeeper: five records still locked by
a member were handed to it again with delivery count 2 (and the entries after the first in the
multi, never tried -- RuntimeInconsistency -- were taken for fenced as well).  A writer now
recognises its own earlier write (its bytes, at a later version) and goes on from there; only
someone else's write fences it, and the entries ZooKeeper never tried are written again.
"""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss

from spark_coord.share.store import NO_NODE, ShareStateStore, StateFenced, Write
from spark_coord.zk import paths

G, T = "sg", "topic"


def _store(zk) -> ShareStateStore:
    return ShareStateStore(zk, None)


def _key(p: int) -> tuple[str, str, int]:
    return (G, T, p)


def _znode(zk, p: int) -> tuple[bytes, int]:
    data, stat = zk.get(paths.share_partition(G, T, p))
    return data, stat.version


def test_a_retried_write_whose_first_try_was_applied_goes_on_from_there(zk):
    store = _store(zk)
    assert store.write_blocking([Write(G, T, 0, b"a", NO_NODE)]) == {_key(0): 0}
    # the write of b"b" at version 0 reached ZooKeeper, its answer did not
    zk.set(paths.share_partition(G, T, 0), b"b", version=0)
    # the writer tries again with what it holds now, still at the version it last knew
    out = store.write_blocking([Write(G, T, 0, b"c", 0, unsure=(b"b",))])
    assert out == {_key(0): 2}
    assert _znode(zk, 0) == (b"c", 2)


def test_the_same_bytes_sent_again_are_taken_as_written(zk):
    store = _store(zk)
    store.write_blocking([Write(G, T, 0, b"a", NO_NODE)])
    zk.set(paths.share_partition(G, T, 0), b"b", version=0)
    assert store.write_blocking([Write(G, T, 0, b"b", 0)]) == {_key(0): 1}
    assert _znode(zk, 0) == (b"b", 1)


def test_a_create_whose_answer_was_lost_is_not_a_fence(zk):
    store = _store(zk)
    zk.ensure_path(paths.share_topic(G, T))
    zk.create(paths.share_partition(G, T, 3), b"first")
    assert store.write_blocking([Write(G, T, 3, b"first", NO_NODE)]) == {_key(3): 0}


def test_someone_elses_write_still_fences(zk):
    store = _store(zk)
    store.write_blocking([Write(G, T, 0, b"a", NO_NODE)])
    zk.set(paths.share_partition(G, T, 0), b"the new leader's", version=0)
    out = store.write_blocking([Write(G, T, 0, b"c", 0, unsure=(b"b",))])
    assert isinstance(out[_key(0)], StateFenced)
    assert _znode(zk, 0) == (b"the new leader's", 1)


def test_entries_after_a_fenced_one_in_a_multi_are_written_not_fenced(zk):
    store = _store(zk)
    first = store.write_blocking([Write(G, T, p, b"v0", NO_NODE) for p in range(4)])
    assert first == {_key(p): 0 for p in range(4)}
    zk.set(paths.share_partition(G, T, 1), b"someone else", version=0)
    out = store.write_blocking([Write(G, T, p, b"v1", 0) for p in range(4)])
    assert isinstance(out[_key(1)], StateFenced)
    assert {p: out[_key(p)] for p in (0, 2, 3)} == {0: 1, 2: 1, 3: 1}
    assert [_znode(zk, p)[0] for p in range(4)] == [b"v1", b"someone else", b"v1", b"v1"]


def test_a_whole_multi_applied_before_its_answer_was_lost_is_recognised_entry_by_entry(zk):
    store = _store(zk)
    store.write_blocking([Write(G, T, p, b"v0", NO_NODE) for p in range(5)])
    # the multi writing b"v1" everywhere was applied; its answer lost
    t = zk.transaction()
    for p in range(5):
        t.set_data(paths.share_partition(G, T, p), b"v1", version=0)
    t.commit()
    out = store.write_blocking([Write(G, T, p, b"v2", 0, unsure=(b"v1",)) for p in range(5)])
    assert out == {_key(p): 2 for p in range(5)}
    assert {_znode(zk, p) for p in range(5)} == {(b"v2", 2)}


def test_the_manager_remembers_what_it_sent_when_the_answer_never_came():
    """``SharePartitionManager._written`` with a write that raised: the data sent is kept as unsure for
    the next write, and forgotten once a write succeeds."""
    import asyncio

    from spark_coord.share.manager import _Held

    class Loopless:
        _loop = None
        _timer = None
        _inflight = None
        _dirty: set = set()

    from spark_coord.share.manager import SharePartitionManager

    held = _Held(key=_key(0), sp=None, topic_id=None, zversion=4)
    mgr = Loopless()
    loop = asyncio.new_event_loop()
    try:
        failed = loop.create_future()
        failed.set_exception(ConnectionLoss())
        SharePartitionManager._written(mgr, failed, [(held, 7, b"sent")])
        assert held.unsure == (b"sent",) and held.zversion == 4 and _key(0) in mgr._dirty
    finally:
        loop.close()


def test_many_large_share_states_are_written_in_multis_that_fit_zookeepers_request_limit(zk):
    """Seen from outside: fragmented windows snapshot to about 160 KB each at 10,000 locks, and seven
    of them in one multi passed ZooKeeper's 1 MB request limit (jute.maxbuffer): ZooKeeper dropped
    the connection, the writer took it for an outage and sent the same multi every 0.5 s, and every
    acknowledgement on the broker stalled.  Multis are bounded in bytes as well as in operations."""
    from spark_coord.share.partition import SharePartition
    from spark_coord.share.store import MAX_MULTI_BYTES, encode

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
    own lost-answer write, and two writers went on.  Each znode now names its writer (the broker
    and its incarnation)."""
    from spark_coord.share.partition import SharePartition
    from spark_coord.share.store import decode, encode

    snap = SharePartition(7).snapshot()
    mine, theirs = encode(snap, None, writer="2-aaaa"), encode(snap, None, writer="1-bbbb")
    assert mine != theirs and decode(mine) == decode(theirs) == (snap, None)
    store = _store(zk)
    assert store.write_blocking([Write(G, T, 0, b"first", NO_NODE)]) == {_key(0): 0}
    # this writer sent ``mine`` at version 0 and lost the answer; another wrote the same state meanwhile
    zk.set(paths.share_partition(G, T, 0), theirs, version=0)
    out = store.write_blocking([Write(G, T, 0, encode(SharePartition(8).snapshot(), None, writer="2-aaaa"), 0,
                                      unsure=(mine,))])
    assert isinstance(out[_key(0)], StateFenced)
    assert _znode(zk, 0) == (theirs, 1)
