"""``transactional.id.expiration.ms``: a transactional id with no transaction open or completing and no
change for that long is removed by its coordinator's periodic cleanup, as Kafka's
``removeExpiredTransactionalIds`` does.

The rule (``state.expired``) for every state; the coordinator on a store in memory (an expired id's
node deleted at the version held, an Ongoing id left to its timeout, a deposed coordinator removing
nothing, the id starting afresh with a new producer id after); and one real broker with a small value:
confluent-kafka's committed transaction's id is gone from ZooKeeper and DescribeTransactions, while an
id with a transaction open stays."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import local_cluster, wait_until
from txn_memory_store import MemoryStore

from spark_coord.coordinator.txn import state as st
from spark_coord.coordinator.txn.coordinator import TxnCoordinator, TxnSettings
from spark_coord.coordinator.txn.state import TxnMetadata, TxnState
from spark_coord.errors import ErrorCode as E

DAY_MS = 86_400_000


@pytest.mark.parametrize("state", list(TxnState))
def test_only_ids_with_nothing_open_expire(state):
    txn = TxnMetadata("tx", 7, 0, 60_000, state, update_ms=1_000)
    idle = state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
    assert st.expired(txn, 1_000 + DAY_MS, DAY_MS) == idle
    assert not st.expired(txn, 1_000 + DAY_MS - 1, DAY_MS)


def test_the_coordinator_removes_idle_ids_fenced():
    async def run():
        store, clock, ids = MemoryStore(), [1_000], iter(range(100, 200))

        async def allocate():
            return next(ids)

        async def send(leader, markers):
            return {(t["name"], p): E.NONE for m in markers for t in m["topics"] for p in t["partition_indexes"]}

        c = TxnCoordinator(store, allocate, lambda t, p: 0, send, lambda: 5,
                           TxnSettings(max_timeout_ms=3 * DAY_MS, abort_interval_s=3600, id_expiration_ms=DAY_MS),
                           now_ms=lambda: clock[0])
        await c.activate()
        assert await c.init_producer_id("idle", 60_000) == (E.NONE, 100, 0)
        assert await c.init_producer_id("open", 2 * DAY_MS) == (E.NONE, 101, 0)
        assert await c.add_partitions("open", 101, 0, {("t", 0)}) == E.NONE
        clock[0] += DAY_MS - 1
        await c.remove_expired()
        assert set(store.nodes) == {"idle", "open"}  # not idle long enough
        clock[0] += 1
        store.fenced = True  # a deposed coordinator removes nothing, and keeps serving what it holds
        await c.remove_expired()
        assert set(store.nodes) == {"idle", "open"} and c.describe("idle") is not None
        store.fenced = False
        await c.remove_expired()
        assert set(store.nodes) == {"open"} and c.describe("idle") is None  # Ongoing: left to its timeout
        assert c.describe("open").state == TxnState.ONGOING
        assert await c.init_producer_id("idle", 60_000) == (E.NONE, 102, 0)  # afresh, a new producer id
        await c.deactivate()

    asyncio.run(run())


@pytest.mark.slow
def test_a_broker_removes_an_expired_id_from_zookeeper(zookeeper, tmp_path):
    from spark_coord.client.connection import BrokerConnection
    from spark_coord.coordinator.txn.store import id_path
    from spark_coord.wire.registry import ApiKey
    from spark_coord.zk.client import close, connect

    expiration_ms = 1500
    with local_cluster(zookeeper, tmp_path, 1, "txn_id_expiry", {
            "transactional.id.expiration.ms": expiration_ms,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}) as cluster:
        (broker_id,) = cluster.brokers
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("expiry", 1, 1)])["expiry"].result(30)
        failed: list = []
        done, left_open = f"done-{uuid.uuid4().hex[:6]}", f"open-{uuid.uuid4().hex[:6]}"
        for tid, commit in ((done, True), (left_open, False)):
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                          "transaction.timeout.ms": 60000})
            p.init_transactions(30)
            p.begin_transaction()
            p.produce("expiry", b"v", on_delivery=lambda err, _msg: failed.append(err) if err else None)
            assert p.flush(30) == 0 and not failed, failed
            if commit:
                p.commit_transaction(30)

        def state(tid: str) -> dict:
            with BrokerConnection(*cluster.brokers[broker_id], timeout=10) as conn:
                (s,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})["transaction_states"]
                return s

        zk = connect(cluster.zk_connect)
        try:
            assert zk.exists(id_path(done)) and state(done)["transaction_state"] == "CompleteCommit"
            wait_until(lambda: state(done)["error_code"] == 105, timeout=20, interval=0.2,  # TRANSACTIONAL_ID_NOT_FOUND
                       message=f"{done} expired")
            assert zk.exists(id_path(done)) is None
            assert state(left_open)["transaction_state"] == "Ongoing" and zk.exists(id_path(left_open))
        finally:
            close(zk)
        with BrokerConnection(*cluster.brokers[broker_id], timeout=10) as conn:  # the id starts afresh
            r = conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": done, "transaction_timeout_ms": 60000})
            assert r["error_code"] == E.NONE and r["producer_epoch"] == 0
