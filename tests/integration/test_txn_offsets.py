"""AddOffsetsToTxn (KIP-98) at the transaction coordinator of three real broker processes.

A group joins a producer's transaction as a partition does (Kafka adds the group's
``__consumer_offsets`` partition; here the group id is kept in the transaction's znode): the answer
comes once the znode says so, a group already in changes nothing, the commit clears the groups with
the partitions.  Requests sent raw get Kafka's codes (NOT_COORDINATOR elsewhere, INVALID_REQUEST for no
transactional id, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or, to v0-1 clients,
INVALID_PRODUCER_EPOCH for a stale epoch) and the brokers keep serving.  The holder of the id's shard
SIGKILLed with a group in the open transaction: the next holder loads the group with it, and the
transaction ends there.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from helpers import local_cluster, wait_until

from spark_coord.client.connection import BrokerConnection
from spark_coord.coordinator.txn.store import id_path
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

pytestmark = pytest.mark.slow

ZK_SESSION_MS = 4000
TRANSACTIONAL_ID_NOT_FOUND = 105


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with local_cluster(zookeeper, tmp_path_factory.mktemp("txn-offsets"), 3, "txn-offsets", {
            "zookeeper.session.timeout.ms": ZK_SESSION_MS, "transaction.max.timeout.ms": 120000}) as c:
        _wait_balanced(c)
        yield c


def _wait_balanced(cluster) -> None:
    """Until every coordinator shard is held and the three brokers hold as many (within one), so no
    id's shard moves under a test."""
    from collections import Counter

    from spark_coord.zk.client import close, connect
    from testkit.zk_history import read_shard_holders

    zk = connect(cluster.zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        def balanced() -> bool:
            holders = read_shard_holders(zk)
            loads = Counter(holders.values())
            return bool(holders) and None not in loads and set(loads) == set(cluster.brokers) and \
                max(loads.values()) - min(loads.values()) <= 1
        wait_until(balanced, timeout=60, interval=0.2, message="the shards placed over the three brokers")
    finally:
        close(zk)


def _conn(cluster, broker_id: int) -> BrokerConnection:
    return BrokerConnection(*cluster.brokers[broker_id], timeout=10)


def _holder(cluster, tid: str) -> int:
    """The broker FindCoordinator names for ``tid``, once it serves the id."""
    def ask():
        for broker_id in cluster.brokers:
            if cluster.procs[broker_id].poll() is not None:
                continue
            with _conn(cluster, broker_id) as conn:
                r = conn.request(ApiKey.FIND_COORDINATOR, {"key": tid, "key_type": 1}, version=3)
            if r["error_code"] != ErrorCode.NONE or cluster.procs[r["node_id"]].poll() is not None:
                return None
            with _conn(cluster, r["node_id"]) as conn:
                (state,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})[
                    "transaction_states"]
            serving = state["error_code"] in (ErrorCode.NONE, TRANSACTIONAL_ID_NOT_FOUND)
            return (r["node_id"],) if serving else None  # a tuple: broker 0 is falsy
        return None
    return wait_until(ask, timeout=30, message=f"a coordinator for {tid}")[0]


def _describe(cluster, tid: str) -> dict:
    with _conn(cluster, _holder(cluster, tid)) as conn:
        (state,) = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})["transaction_states"]
        return state


def _znode(cluster, tid: str) -> dict:
    from spark_coord.zk.client import close, connect

    zk = connect(cluster.zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        data, _ = zk.get(id_path(tid))
        return json.loads(data)
    finally:
        close(zk)


def _init(conn, tid: str | None, version: int = 4) -> dict:
    return conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout_ms": 60000},
                        version=version)


def _add_offsets(conn, tid: str, pid: int, epoch: int, group: str, version: int = 3) -> int:
    return conn.request(ApiKey.ADD_OFFSETS_TO_TXN, {"transactional_id": tid, "producer_id": pid,
                                                    "producer_epoch": epoch, "group_id": group},
                        version=version)["error_code"]


def _end(conn, tid: str, pid: int, epoch: int, commit: bool = True) -> int:
    return conn.request(ApiKey.END_TXN, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                         "committed": commit}, version=3)["error_code"]


def test_api_versions_advertises_add_offsets_to_txn(cluster):
    for broker_id in cluster.brokers:
        with _conn(cluster, broker_id) as conn:
            assert conn.broker_versions[ApiKey.ADD_OFFSETS_TO_TXN] == (0, 4)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_groups_join_the_transaction_durably_and_the_commit_clears_them(cluster, version):
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    with _conn(cluster, holder) as conn:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(conn, tid, pid, epoch, "g-1", version) == ErrorCode.NONE
        state = _describe(cluster, tid)
        assert state["transaction_state"] == "Ongoing" and state["producer_id"] == pid, state
        node = _znode(cluster, tid)
        assert (node["state"], node["groups"], node["partitions"]) == ("Ongoing", ["g-1"], []), node
        started = node["startMs"]
        assert _add_offsets(conn, tid, pid, epoch, "g-1", version) == ErrorCode.NONE  # in already: no write
        assert _znode(cluster, tid) == node
        assert _add_offsets(conn, tid, pid, epoch, "g-0", version) == ErrorCode.NONE
        node = _znode(cluster, tid)
        assert (node["groups"], node["startMs"]) == (["g-0", "g-1"], started), node
        assert _end(conn, tid, pid, epoch) == ErrorCode.NONE
    wait_until(lambda: _znode(cluster, tid)["state"] == "CompleteCommit", timeout=10, message="the commit completed")
    assert _znode(cluster, tid)["groups"] == []


def test_bad_requests_get_kafkas_codes_and_the_brokers_keep_serving(cluster):
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    other = next(b for b in cluster.brokers if b != holder)
    with _conn(cluster, holder) as conn, _conn(cluster, other) as elsewhere:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(elsewhere, tid, pid, epoch, "g") == ErrorCode.NOT_COORDINATOR
        assert _add_offsets(conn, "", pid, epoch, "g") == ErrorCode.INVALID_REQUEST
        assert _add_offsets(conn, tid, pid + 1000, epoch, "g") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _add_offsets(conn, tid, pid, epoch + 1, "g") == ErrorCode.PRODUCER_FENCED
        assert _add_offsets(conn, tid, pid, epoch, "g") == ErrorCode.NONE
        # a new producer of the id: the open transaction is aborted with the epoch bumped
        assert _init(conn, tid)["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
        r2 = wait_until(lambda: (r := _init(conn, tid))["error_code"] == ErrorCode.NONE and r, timeout=10,
                        message="InitProducerId once the abort completed")
        assert (r2["producer_id"], r2["producer_epoch"]) == (pid, epoch + 2)
        assert _znode(cluster, tid)["groups"] == []  # the new producer starts with none
        assert _add_offsets(conn, tid, pid, epoch, "g") == ErrorCode.PRODUCER_FENCED
        for old in (0, 1):  # clients older than KIP-588 are told INVALID_PRODUCER_EPOCH
            assert _add_offsets(conn, tid, pid, epoch, "g", version=old) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _add_offsets(conn, tid, pid, epoch, "g", version=2) == ErrorCode.PRODUCER_FENCED
        # still serving: the current producer's transaction, another id, a group key
        assert _add_offsets(conn, tid, pid, epoch + 2, "g") == ErrorCode.NONE
        assert _end(conn, tid, pid, epoch + 2, commit=False) == ErrorCode.NONE
        assert _init(elsewhere, None)["error_code"] == ErrorCode.NONE
        assert conn.request(ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}, version=3)["error_code"] == 0
    wait_until(lambda: _describe(cluster, tid)["transaction_state"] == "CompleteAbort", timeout=10,
               message="the abort completed")


def test_the_next_holder_loads_the_groups_of_an_open_transaction(cluster):
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    holder = _holder(cluster, tid)
    with _conn(cluster, holder) as conn:
        r = _init(conn, tid)
        assert r["error_code"] == ErrorCode.NONE
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert _add_offsets(conn, tid, pid, epoch, "g-killed") == ErrorCode.NONE
    cluster.kill_broker(holder)
    started = time.monotonic()
    try:
        new_holder = wait_until(lambda: (h := _holder(cluster, tid)) != holder and (h,), timeout=30,
                                message="another broker holds the id's shard")[0]
        moved_s = time.monotonic() - started
        assert _describe(cluster, tid)["transaction_state"] == "Ongoing"
        with _conn(cluster, new_holder) as conn:
            # the group is in the loaded transaction: adding it again writes nothing
            node = _znode(cluster, tid)
            assert node["groups"] == ["g-killed"], node
            assert _add_offsets(conn, tid, pid, epoch, "g-killed") == ErrorCode.NONE
            assert _znode(cluster, tid) == node
            assert _end(conn, tid, pid, epoch) == ErrorCode.NONE
        wait_until(lambda: _znode(cluster, tid)["state"] == "CompleteCommit", timeout=10,
                   message="the commit completed by the next holder")
    finally:
        cluster.start_broker(holder)
    print(f"coordinator {holder} killed; {new_holder} served the id {moved_s:.1f} s later")
    _wait_balanced(cluster)
