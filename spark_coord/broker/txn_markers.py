"""What a broker's transaction coordinators do across the cluster (KIP-98; DESIGN.md, "Transactions
(KIP-98)"): ``TxnRoutes`` says where a transaction's markers go (a partition's leader; for a
group's offsets, Kafka's ``__consumer_offsets`` partition numbered by the group's shard, at the
shard's holder) and hands such a group marker to the shard's coordinator here; ``MarkerChannel``
sends the markers with WriteTxnMarkers on the inter-broker listener (this broker's own partitions
too, so there is one path), keeping a connection per leader, with the broker's client credentials
for that listener when it speaks TLS or SASL (``security.client.inter_broker``, Kafka's keys);
``pending_partitions`` reads which partitions of a group have offsets waiting in open transactions
(``/consumers/<group>/pending/*``), for OffsetFetch's require_stable on a broker that does not hold
the group."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from spark_coord.coordinator.txn.coordinator import NO_PARTITION
from spark_coord.errors import ErrorCode

#: Kafka's group offsets topic: a transaction's marker for its groups names partition ``shard`` of it
#: (``GroupOffsets.end_transaction`` on the shard's holder; no such topic exists here).
GROUP_OFFSETS_TOPIC = "__consumer_offsets"


class MarkerChannel:
    """WriteTxnMarkers to partition leaders over the wire, a connection per leader (made and used on
    worker threads, under one lock)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._conns: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._security: Any = None

    async def send(self, leader: int, markers: list[dict]) -> dict[tuple[str, int], int]:
        """WriteTxnMarkers to ``leader`` on its inter-broker listener: the error code per partition.
        Raises ConnectionError/OSError when the leader is out of reach (the caller tries again)."""
        from spark_coord.wire.registry import ApiKey

        answer = await self.request(leader, ApiKey.WRITE_TXN_MARKERS, {"markers": markers})
        return {(t.get("name"), p.get("partition_index")): p.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                for m in answer.get("markers") or [] for t in m.get("topics") or [] for p in t.get("partitions") or []}

    async def describe_transaction(self, coordinator: int, transactional_id: str) -> dict:
        """DescribeTransactions of one id at its coordinator ``coordinator``: the id's state as it
        answers it (a partition leader's Produce check, ``broker.txn_verify``).  Raises as ``send``."""
        from spark_coord.wire.registry import ApiKey

        answer = await self.request(coordinator, ApiKey.DESCRIBE_TRANSACTIONS,
                                    {"transactional_ids": [transactional_id]})
        states = answer.get("transaction_states") or []
        if not states:
            raise ConnectionError(f"broker {coordinator} answered DescribeTransactions with no state")
        return states[0]

    async def request(self, broker_id: int, api: Any, body: dict) -> dict:
        """One request to ``broker_id`` on its inter-broker listener, on this channel's connection to it
        (made and used on a worker thread); raises ConnectionError/OSError when the
        broker is out of reach."""
        from spark_coord.client.connection import BrokerConnection

        listener = self.broker.security.listener_config.inter_broker
        info = self.broker.view.brokers.get(broker_id)
        ep = info.endpoint_for(listener) if info is not None else None
        if ep is None:
            raise ConnectionError(f"broker {broker_id} has no endpoint on {listener}")

        security = self.security()

        def call() -> dict:
            with self._lock:
                conn = self._conns.get(broker_id)
                if conn is None or (conn.host, conn.port) != (ep.host, ep.port) or not conn.usable():
                    if conn is not None:
                        conn.close()
                    conn = self._conns[broker_id] = BrokerConnection(
                        ep.host, ep.port, client_id=f"spark-coord-txn-{self.broker.broker_id}", timeout=10.0,
                        security=security)
            try:
                return conn.request(api, body)
            except BaseException:
                conn.close()
                self._conns.pop(broker_id, None)
                raise

        return await asyncio.get_running_loop().run_in_executor(None, call)

    def security(self) -> Any:
        """The ``ClientSecurity`` of this broker on its inter-broker listener (``security.client.inter_broker``:
        the listener's protocol, the broker's SASL credentials and trust store), read once; raises
        ConnectionError naming the missing setting, which the caller logs and retries as any other."""
        if self._security is None:
            from spark_coord.config import ConfigError
            from spark_coord.security.client import inter_broker

            listeners = self.broker.security.listener_config
            try:
                self._security = inter_broker(self.broker.config, listeners.listener(listeners.inter_broker))
            except ConfigError as e:
                raise ConnectionError(f"inter-broker credentials: {e}") from None
        return self._security

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()


class TxnRoutes:
    """The broker's ``CoordinationService`` as its transaction coordinators and its WriteTxnMarkers
    handler see it: each partition's leader for markers, and the markers of the groups' offsets."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def leader_of(self, topic: str, partition: int) -> int | None:
        """A partition's leader for its markers (``NO_PARTITION`` when the partition does not exist);
        for Kafka's ``__consumer_offsets`` partition ``n``, the holder of coordinator shard ``n`` (None
        while nobody holds it), which takes the marker for the transaction's groups of that shard."""
        if topic == GROUP_OFFSETS_TOPIC:
            holder = self.service.holders.get(partition, (-1, -1))[0]
            return holder if holder >= 0 else None
        leader = self.service.broker.view.leader(topic, partition)
        return NO_PARTITION if leader is None else leader

    def group_partition(self, group_id: str) -> tuple[str, int] | None:
        """The partition a transaction's marker for ``group_id`` goes to: Kafka's ``__consumer_offsets``
        partition numbered by the group's shard (None while the shard count is unknown)."""
        s = self.service.shard_of(group_id)
        return None if s is None else (GROUP_OFFSETS_TOPIC, s)

    async def group_marker(self, shard: int, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """A transaction marker for the groups of ``shard`` (WriteTxnMarkers of ``__consumer_offsets``
        partition ``shard``): their pending offsets of the producer committed or dropped by the shard's
        coordinator here; NOT_LEADER_OR_FOLLOWER where this broker does not hold the shard (the
        transaction coordinator asks the holder again), COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        role = self.service.shards.get(shard)
        if role is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        code = role.not_serving()
        if code is not None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER if code == ErrorCode.NOT_COORDINATOR else code
        code = await role.offsets.end_transaction(producer_id, producer_epoch, commit)
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if code == ErrorCode.NOT_COORDINATOR else code


async def pending_partitions(zk: Any, group_id: str) -> set[tuple[str, int]]:
    """The partitions of ``group_id`` with offsets pending in open transactions, from ZooKeeper."""
    from spark_coord.coordinator.doors.group_offsets import PendingOffsets
    from spark_coord.coordinator.storage import zk_async
    from spark_coord.coordinator.storage.zk_store import pending_root

    root = pending_root(group_id)
    nodes = await zk_async.get_children(zk, root)
    docs = await zk_async.get_many(zk, [f"{root}/{n}" for n in nodes])
    out: set[tuple[str, int]] = set()
    for data in docs.values():
        try:
            out |= set(PendingOffsets.from_json(data).offsets)
        except ValueError:
            continue
    return out
