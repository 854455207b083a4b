"""The transaction coordinator without I/O: Kafka's transaction state machine (``coordinator.txn.state``)
and the shard's ``TxnCoordinator`` driven with an in-memory store, a hand-advanced clock and marker
leaders that answer as told (the ZooKeeper store and the markers over the wire are covered by
tests/integration/test_transactions.py on real brokers)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from txn_memory_store import MemoryStore

from spark_coord.coordinator.txn import state as st
from spark_coord.coordinator.txn.coordinator import NO_PARTITION, TxnCoordinator, TxnSettings
from spark_coord.coordinator.txn.state import IllegalTransition, TxnMetadata, TxnState
from spark_coord.errors import ErrorCode

E = ErrorCode
TP = ("t", 0)


def meta(state=TxnState.EMPTY, pid=7, epoch=3, **kw) -> TxnMetadata:
    return TxnMetadata("tx", pid, epoch, 60000, state, **kw)


# ---------------------------------------------------------------------------------------------- the state machine
@pytest.mark.parametrize("target", list(TxnState))
@pytest.mark.parametrize("source", list(TxnState))
def test_transitions_are_kafkas(source, target):
    allowed = {
        TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
        TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
        TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
        TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
        TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
        TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
        TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
        TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
    }[target]
    txn = meta(source)
    if source in allowed:
        assert txn.transition_to(target).state == target
    else:
        with pytest.raises(IllegalTransition):
            txn.transition_to(target)


def test_json_round_trip_and_bad_content():
    txn = meta(TxnState.ONGOING, partitions=frozenset({("a/b", 1), ("c", 0)}), start_ms=5, update_ms=6,
               last_producer_id=2, last_producer_epoch=9)
    assert TxnMetadata.from_json("tx", txn.to_json()) == txn
    assert txn.topics() == {"a/b": [1], "c": [0]}
    for bad in (b"", b"{}", b'{"state": "Nope", "producerId": 1, "producerEpoch": 0, "timeoutMs": 1}', b"[1]"):
        with pytest.raises(ValueError):
            TxnMetadata.from_json("tx", bad)


def test_state_names_are_kafkas():
    assert [s.value for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                           "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert TxnState.parse("Ongoing") is TxnState.ONGOING and TxnState.parse("ongoing") is None


def test_init_producer_id_bumps_the_epoch_and_recognises_a_retry():
    d = st.init_producer_id(meta(TxnState.COMPLETE_COMMIT), 1000, 50, None)
    assert d.code == E.NONE and d.write is not None
    new = d.write
    assert (new.state, new.producer_id, new.producer_epoch, new.timeout_ms) == (TxnState.EMPTY, 7, 4, 1000)
    assert (new.last_producer_id, new.last_producer_epoch) == (7, 3)
    # a retry naming the epoch it had (KIP-360) gets the same answer, nothing written
    assert st.init_producer_id(new, 1000, 60, None, expected=(7, 3)) == st.Decision(E.NONE)
    # the current producer resumes: bumped again
    assert st.init_producer_id(new, 1000, 60, None, expected=(7, 4)).write.producer_epoch == 5
    # another producer id or an older epoch: fenced
    assert st.init_producer_id(new, 1000, 60, None, expected=(8, 4)).code == E.PRODUCER_FENCED
    assert st.init_producer_id(new, 1000, 60, None, expected=(7, 1)).code == E.PRODUCER_FENCED


def test_init_producer_id_takes_a_new_producer_id_at_the_last_epoch():
    d = st.init_producer_id(meta(epoch=st.MAX_EPOCH), 1000, 50, new_producer_id=99)
    assert (d.write.producer_id, d.write.producer_epoch, d.write.last_producer_id) == (99, 0, 7)


@pytest.mark.parametrize("state", [TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                                   TxnState.PREPARE_EPOCH_FENCE])
def test_init_producer_id_while_a_transaction_is_open_or_ending(state):
    assert st.init_producer_id(meta(state), 1000, 50, None).code == E.CONCURRENT_TRANSACTIONS


def test_fencing_an_open_transaction_bumps_the_epoch_into_prepare_abort():
    txn = meta(TxnState.ONGOING, partitions=frozenset({TP}), start_ms=0)
    fenced = st.fence_open(txn, 10)
    assert (fenced.state, fenced.producer_epoch, fenced.partitions) == (TxnState.PREPARE_ABORT, 4, frozenset({TP}))
    assert st.fence_for_timeout(txn, 59_999) is None
    assert st.fence_for_timeout(txn, 60_000).producer_epoch == 4
    assert st.fence_for_timeout(meta(TxnState.EMPTY), 10**9) is None
    assert st.fence_open(meta(TxnState.ONGOING, epoch=st.MAX_EPOCH), 1).producer_epoch == st.MAX_EPOCH


def test_add_partitions_codes():
    empty = meta()
    d = st.add_partitions(empty, 7, 3, {TP}, 100)
    assert d.code == E.NONE and d.write.state == TxnState.ONGOING and d.write.start_ms == 100
    ongoing = d.write
    assert st.add_partitions(ongoing, 7, 3, {TP}, 200) == st.Decision(E.NONE)  # nothing new: no write
    grown = st.add_partitions(ongoing, 7, 3, {("t", 1)}, 200).write
    assert grown.partitions == {TP, ("t", 1)} and grown.start_ms == 100
    assert st.add_partitions(ongoing, 8, 3, {TP}, 1).code == E.INVALID_PRODUCER_ID_MAPPING
    assert st.add_partitions(ongoing, 7, 2, {TP}, 1).code == E.PRODUCER_FENCED
    assert st.add_partitions(ongoing, 7, 4, {TP}, 1).code == E.PRODUCER_FENCED
    assert st.add_partitions(meta(TxnState.PREPARE_COMMIT), 7, 3, {TP}, 1).code == E.CONCURRENT_TRANSACTIONS
    assert st.add_partitions(meta(TxnState.COMPLETE_ABORT), 7, 3, {TP}, 1).write.state == TxnState.ONGOING


@pytest.mark.parametrize("state,commit,code", [
    (TxnState.EMPTY, True, E.INVALID_TXN_STATE), (TxnState.EMPTY, False, E.INVALID_TXN_STATE),
    (TxnState.COMPLETE_COMMIT, True, E.NONE), (TxnState.COMPLETE_COMMIT, False, E.INVALID_TXN_STATE),
    (TxnState.COMPLETE_ABORT, False, E.NONE), (TxnState.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
    (TxnState.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS), (TxnState.PREPARE_COMMIT, False, E.INVALID_TXN_STATE),
    (TxnState.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS), (TxnState.PREPARE_ABORT, True, E.INVALID_TXN_STATE),
])
def test_end_txn_codes_outside_ongoing(state, commit, code):
    assert st.end_txn(meta(state), 7, 3, commit, 1) == st.Decision(code)


def test_end_txn_prepares_and_complete_clears():
    ongoing = meta(TxnState.ONGOING, partitions=frozenset({TP}), start_ms=1)
    assert st.end_txn(ongoing, 7, 2, True, 5).code == E.PRODUCER_FENCED
    assert st.end_txn(ongoing, 6, 3, True, 5).code == E.INVALID_PRODUCER_ID_MAPPING
    prepared = st.end_txn(ongoing, 7, 3, True, 5).write
    assert prepared.state == TxnState.PREPARE_COMMIT and prepared.partitions == {TP}
    done = st.complete(prepared, 6)
    assert (done.state, done.partitions, done.start_ms) == (TxnState.COMPLETE_COMMIT, frozenset(), -1)
    assert st.complete(st.end_txn(ongoing, 7, 3, False, 5).write, 6).state == TxnState.COMPLETE_ABORT


OPS = hst.lists(hst.tuples(hst.sampled_from(["init", "add", "commit", "abort", "complete", "timeout"]),
                           hst.integers(0, 2)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_any_sequence_moves_only_along_kafkas_transitions(ops):
    """Whatever the requests, every write the decisions make is a legal move, the epoch never goes
    down for one producer id, and a stale epoch never changes anything."""
    txn = meta(TxnState.EMPTY, pid=1, epoch=0)
    now = 0
    for op, skew in ops:
        now += 1000
        epoch = txn.producer_epoch - skew  # skew > 0: a zombie of an older epoch
        if op == "init":
            d = st.init_producer_id(txn, 60000, now, 1000 + now)
        elif op == "add":
            d = st.add_partitions(txn, txn.producer_id, epoch, {("t", skew)}, now)
        elif op in ("commit", "abort"):
            d = st.end_txn(txn, txn.producer_id, epoch, op == "commit", now)
        elif op == "complete":
            d = st.Decision(E.NONE, st.complete(txn, now) if txn.state.preparing else None)
        else:
            d = st.Decision(E.NONE, st.fence_for_timeout(txn, now + 10**6))
        if skew and op in ("add", "commit", "abort"):
            assert d.code == E.PRODUCER_FENCED and d.write is None
        if d.write is not None:
            new = d.write
            assert txn.state in st.VALID_PREVIOUS[new.state] or (
                new.state == TxnState.PREPARE_ABORT and txn.state == TxnState.ONGOING)
            assert new.producer_id != txn.producer_id or new.producer_epoch >= txn.producer_epoch
            txn = new


# ---------------------------------------------------------------------------------------------- the coordinator
class Leaders:
    """Partition leaders that take markers, or refuse them while ``down`` names the broker."""

    def __init__(self):
        self.down: set[int] = set()
        self.markers: list[tuple[int, dict]] = []

    def leader_of(self, topic, partition):
        return NO_PARTITION if topic == "gone" else partition % 2

    async def send(self, leader, markers):
        if leader in self.down:
            raise ConnectionError(f"broker {leader} down")
        out = {}
        for m in markers:
            self.markers.append((leader, m))
            for t in m["topics"]:
                for p in t["partition_indexes"]:
                    out[(t["name"], p)] = E.NONE
        return out


def make(store=None, leaders=None, clock=None):
    store = store or MemoryStore()
    leaders = leaders or Leaders()
    clock = clock if clock is not None else [1_000]
    ids = iter(range(100, 200))

    async def allocate():
        return next(ids)

    coordinator = TxnCoordinator(store, allocate, leaders.leader_of, leaders.send, lambda: 5,
                                 TxnSettings(max_timeout_ms=60_000, abort_interval_s=3600), now_ms=lambda: clock[0])
    return coordinator, store, leaders, clock


async def settle(coordinator, predicate, rounds=400):
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not settled")


def test_a_transaction_commits_with_markers_to_every_leader():
    async def run():
        c, store, leaders, _ = make()
        await c.activate()
        assert await c.init_producer_id("tx", 70_000) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
        assert await c.init_producer_id("tx", 0) == (E.INVALID_TRANSACTION_TIMEOUT, -1, -1)
        assert await c.init_producer_id("tx", 30_000) == (E.NONE, 100, 0)
        assert await c.end_txn("tx", 100, 0, True) == E.INVALID_TXN_STATE
        assert await c.add_partitions("tx", 100, 0, {("t", 0), ("t", 1), ("gone", 0)}) == E.NONE
        assert await c.add_partitions("tx", 101, 0, {("t", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("other", 100, 0, {("t", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
        assert await c.end_txn("tx", 100, 0, True) == E.NONE
        assert store.nodes["tx"][0].state == TxnState.PREPARE_COMMIT  # durable before the answer
        await settle(c, lambda: c.describe("tx").state == TxnState.COMPLETE_COMMIT)
        sent = sorted((leader, m["transaction_result"], m["coordinator_epoch"], m["producer_epoch"],
                       [(t["name"], t["partition_indexes"]) for t in m["topics"]]) for leader, m in leaders.markers)
        assert sent == [(0, True, 5, 0, [("t", [0])]), (1, True, 5, 0, [("t", [1])])]
        assert await c.end_txn("tx", 100, 0, True) == E.NONE  # a retry of the completed commit
        assert await c.end_txn("tx", 100, 0, False) == E.INVALID_TXN_STATE
        await c.deactivate()

    asyncio.run(run())


def test_markers_wait_for_a_leader_that_is_down_and_a_new_holder_completes():
    async def run():
        c, store, leaders, clock = make()
        await c.activate()
        await c.init_producer_id("tx", 30_000)
        await c.add_partitions("tx", 100, 0, {("t", 0), ("t", 1)})
        leaders.down.add(1)
        assert await c.end_txn("tx", 100, 0, False) == E.NONE
        await asyncio.sleep(0.2)
        assert c.describe("tx").state == TxnState.PREPARE_ABORT
        assert await c.add_partitions("tx", 100, 0, {("t", 0)}) == E.CONCURRENT_TRANSACTIONS
        assert await c.end_txn("tx", 100, 0, False) == E.CONCURRENT_TRANSACTIONS
        await c.deactivate()  # the shard is lost with the markers pending ...
        leaders.down.clear()
        again, _, leaders2, _ = make(store=store, clock=clock)
        await again.activate()  # ... and its next holder sends them all again, then completes
        await settle(again, lambda: again.describe("tx").state == TxnState.COMPLETE_ABORT)
        assert sorted(leader for leader, _ in leaders2.markers) == [0, 1]
        await again.deactivate()

    asyncio.run(run())


def test_a_new_producer_fences_the_open_transaction():
    async def run():
        c, store, leaders, _ = make()
        await c.activate()
        await c.init_producer_id("tx", 30_000)
        await c.add_partitions("tx", 100, 0, {("t", 0)})
        assert await c.init_producer_id("tx", 30_000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
        assert store.nodes["tx"][0].state == TxnState.PREPARE_ABORT and store.nodes["tx"][0].producer_epoch == 1
        await settle(c, lambda: c.describe("tx").state == TxnState.COMPLETE_ABORT)
        assert [(m["producer_epoch"], m["transaction_result"]) for _, m in leaders.markers] == [(1, False)]
        assert await c.init_producer_id("tx", 30_000) == (E.NONE, 100, 2)
        assert await c.end_txn("tx", 100, 0, True) == E.PRODUCER_FENCED  # the zombie
        assert await c.add_partitions("tx", 100, 1, {("t", 0)}) == E.PRODUCER_FENCED
        await c.deactivate()

    asyncio.run(run())


def test_a_transaction_past_its_timeout_is_aborted_with_the_epoch_bumped():
    async def run():
        c, store, leaders, clock = make()
        await c.activate()
        await c.init_producer_id("tx", 10_000)
        await c.add_partitions("tx", 100, 0, {("t", 0)})
        clock[0] += 9_999
        await c.abort_timed_out()
        assert c.describe("tx").state == TxnState.ONGOING
        clock[0] += 1
        await c.abort_timed_out()
        await settle(c, lambda: c.describe("tx").state == TxnState.COMPLETE_ABORT)
        assert c.describe("tx").producer_epoch == 1
        assert await c.end_txn("tx", 100, 0, True) == E.PRODUCER_FENCED
        await c.deactivate()

    asyncio.run(run())


def test_a_fenced_coordinator_answers_not_coordinator_and_adopts_nothing():
    async def run():
        c, store, _, _ = make()
        await c.activate()
        await c.init_producer_id("tx", 10_000)
        store.fenced = True
        assert await c.add_partitions("tx", 100, 0, {("t", 0)}) == E.NOT_COORDINATOR
        assert c.describe("tx").state == TxnState.EMPTY
        await c.deactivate()

    asyncio.run(run())
