"""A cluster started before coordinator shards (one coordinator elected in ``/consumers/coordinator``)
comes up under shards with its groups' offsets.

The older version's coordinator is played by this test: the single election of
``/consumers/coordinator`` (``CoordinatorElector`` on its defaults) on a ZooKeeper
session of its own, and the group store fenced by that election, which writes a
group as the older version did (members, generation, offsets, owners).  Brokers of
the new version started beside it elect no shard while its node exists; their
first shard election fences it (``/consumers``' version is bumped); once its
session is closed the group's shard holder restores the group with its offsets.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from helpers import wait_until
from support import BROKER_OVERRIDES

from spark_coord.coordinator.core.elector import CoordinatorElector
from spark_coord.coordinator.core.shards import shard_of
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.storage.store import Fenced, StoredMember
from spark_coord.coordinator.storage.zk_store import ZkGroupStore
from spark_coord.zk import model, paths
from spark_coord.zk.client import close, connect
from testkit.zk_history import read_partitions, read_shard_holders

SHARDS = 50
GROUP, TOPIC = "legacy-orders", "legacy"
OFFSETS = {(TOPIC, 0): 41, (TOPIC, 1): 7, (TOPIC, 2): 1000}


def _legacy_coordinator(zk_connect: str):
    """A coordinator of the older version: elected in /consumers/coordinator, holding GROUP."""
    client = connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    loop = asyncio.new_event_loop()
    elector = CoordinatorElector(client, 900, loop, lambda epoch: None, lambda: None)
    store = ZkGroupStore(client, elector.current_check)

    async def write() -> None:
        await elector.start()
        assert elector.is_coordinator
        for cid in ("old-m0", "old-m1"):
            await store.save_member(GROUP, StoredMember(cid, TopicCount.static({TOPIC: 1})))
        await store.save_generation(GROUP, 4)
        await store.commit_offsets(GROUP, OFFSETS)
        await store.write_owners(GROUP, {(TOPIC, 0): "old-m0", (TOPIC, 1): "old-m0", (TOPIC, 2): "old-m1"})

    loop.run_until_complete(write())
    return client, loop, elector, store


def _create_topic(zk_connect: str) -> None:
    client = connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    try:
        client.ensure_path(paths.BROKER_TOPICS)
        client.create(paths.topic(TOPIC), model.topic_assignment(model.assign_partitions(3, [0])))
    finally:
        close(client)


def test_a_cluster_of_the_single_coordinator_comes_up_under_shards_with_its_offsets(zk_connect, tmp_path):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient

    from spark_coord.cluster import LocalCluster

    _create_topic(zk_connect)
    setup = connect(zk_connect, session_timeout_ms=10000, connection_timeout_ms=10000)
    legacy, loop, elector, store = _legacy_coordinator(zk_connect)
    cluster = LocalCluster(3, tmp_path / "cluster", zk_connect=zk_connect,
                           overrides=dict(BROKER_OVERRIDES, **{"coordinator.shards": SHARDS}))
    try:
        cluster.start()
        # the new brokers stand for no shard while the older coordinator serves every group
        wait_until(lambda: all(b"older version" in cluster.log_path(b).read_bytes() for b in range(3)), timeout=30,
                   message="every broker to see the older version's coordinator")
        assert all(h is None for h in read_shard_holders(setup).values())
        assert setup.exists(paths.COORDINATOR).ephemeralOwner == legacy.client_id[0]

        close(legacy)  # the older coordinator is gone: its node goes with its session
        holders = wait_until(lambda: (h := read_shard_holders(setup)) and None not in h.values() and h,
                             timeout=60, message="every shard elected")
        print(f"\nafter the older coordinator: shards per broker {dict(Counter(holders.values()))}")
        assert setup.exists(paths.COORDINATOR) is None  # never created by the new version
        holder = holders[shard_of(GROUP, SHARDS)]
        wait_until(lambda: f"group {GROUP} restored".encode() in cluster.log_path(holder).read_bytes(), timeout=30,
                   message=f"coordinator {holder} to restore {GROUP}")
        assert read_partitions(setup, GROUP, "offsets") == OFFSETS

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        asked = ConsumerGroupTopicPartitions(GROUP, [KafkaTopicPartition(TOPIC, p) for p in range(3)])
        answer = admin.list_consumer_group_offsets([asked], request_timeout=30)[GROUP].result(timeout=30)
        assert {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions} == OFFSETS
        described = admin.describe_consumer_groups([GROUP], request_timeout=30)[GROUP].result(timeout=30)
        assert described.coordinator.id == holder
    finally:
        cluster.stop()
        close(setup)
        loop.close()


def test_a_shard_election_fences_the_older_coordinator(zk_connect, tmp_path):
    """Elected before the new version's brokers, the older coordinator's next write is refused once a
    shard is elected (each shard election bumps /consumers)."""
    from spark_coord.cluster import LocalCluster

    _create_topic(zk_connect)
    legacy, loop, elector, store = _legacy_coordinator(zk_connect)
    cluster = LocalCluster(1, tmp_path / "cluster", zk_connect=zk_connect,
                           overrides=dict(BROKER_OVERRIDES, **{"coordinator.shards": 4}))
    try:
        cluster.start()
        # an operator removed the stale node while the older process still runs (its session lives on)
        legacy.delete(paths.COORDINATOR)
        wait_until(lambda: None not in read_shard_holders(legacy).values() and read_shard_holders(legacy),
                   timeout=30, message="the shards elected")
        try:
            loop.run_until_complete(store.commit_offsets(GROUP, {(TOPIC, 0): 99}))
        except Fenced:
            pass
        else:
            raise AssertionError("the older coordinator wrote after a shard election")
        assert read_partitions(legacy, GROUP, "offsets")[(TOPIC, 0)] == OFFSETS[(TOPIC, 0)]
    finally:
        cluster.stop()
        close(legacy)
        loop.close()
