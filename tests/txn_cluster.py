"""What the transaction tests share (tests/integration, tests/apache_kafka): a three-broker cluster whose
coordinator shards are placed evenly, topics with partition i led by broker i, and the questions they ask of the
broker holding a transactional id (FindCoordinator, DescribeTransactions)."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from typing import Iterator

from helpers import local_cluster, wait_until

from spark_coord.client.connection import BrokerConnection
from spark_coord.client.metadata import ClusterClient
from spark_coord.errors import ErrorCode
from spark_coord.wire.registry import ApiKey

ZK_SESSION_MS = 4000
TRANSACTIONAL_ID_NOT_FOUND = 105


@contextlib.contextmanager
def txn_cluster(zookeeper, tmp_path_factory, name: str, overrides: dict | None = None) -> Iterator:
    """Three brokers (ZooKeeper sessions of ``ZK_SESSION_MS``, so a SIGKILLed holder's shards move within
    seconds; transaction timeouts up to 120 s) with ``overrides``, yielded once the shards are balanced."""
    with local_cluster(zookeeper, tmp_path_factory.mktemp(name), 3, name, {
            "zookeeper.session.timeout.ms": ZK_SESSION_MS, "transaction.max.timeout.ms": 120000,
            **(overrides or {})}) as c:
        wait_balanced(c)
        yield c


def wait_balanced(cluster) -> None:
    """Until every coordinator shard is held and the three brokers hold as many (within one): the
    placement right after a start (or a restart) moves shards, and an id's shard moving mid-test answers
    NOT_COORDINATOR."""
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


def conn(cluster, broker_id: int) -> BrokerConnection:
    return BrokerConnection(*cluster.brokers[broker_id], timeout=10)


def topic(cluster, prefix: str = "txn") -> str:
    """A new topic with partition i led by broker i (as many partitions as brokers), known to every broker
    before it is used."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    brokers = sorted(cluster.brokers)
    with ClusterClient(cluster.bootstrap) as c:
        r = c.request_any(ApiKey.CREATE_TOPICS, {"timeout_ms": 30000, "validate_only": False, "topics": [
            {"name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
             "assignments": [{"partition_index": i, "broker_ids": [b]} for i, b in enumerate(brokers)]}]})
        assert r["topics"][0]["error_code"] == ErrorCode.NONE, r
    for broker_id in brokers:
        with conn(cluster, broker_id) as c:
            wait_until(lambda: all(t["error_code"] == ErrorCode.NONE and len(t["partitions"]) == len(brokers)
                                   for t in c.request(ApiKey.METADATA, {"topics": [{"name": name}]})["topics"]),
                       timeout=15, message=f"broker {broker_id} knows {name}")
    return name


def holder(cluster, tid: str) -> int:
    """The broker FindCoordinator names for ``tid``, once it serves the id (waits while its shard is
    being elected or loaded, and while the named broker is one the test killed)."""
    def ask():
        for broker_id in cluster.brokers:
            if cluster.procs[broker_id].poll() is not None:
                continue
            with conn(cluster, broker_id) as c:
                r = c.request(ApiKey.FIND_COORDINATOR, {"key": tid, "key_type": 1}, version=3)
            if r["error_code"] != ErrorCode.NONE or cluster.procs[r["node_id"]].poll() is not None:
                return None
            with conn(cluster, r["node_id"]) as c:
                (state,) = c.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})[
                    "transaction_states"]
            serving = state["error_code"] in (ErrorCode.NONE, TRANSACTIONAL_ID_NOT_FOUND)
            return (r["node_id"],) if serving else None  # a tuple: broker 0 is falsy
        return None
    return wait_until(ask, timeout=30, message=f"a coordinator for {tid}")[0]


def describe(cluster, tid: str) -> dict:
    """DescribeTransactions of ``tid`` at its coordinator."""
    with conn(cluster, holder(cluster, tid)) as c:
        (state,) = c.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})["transaction_states"]
        return state
