"""The coordinator's front door: one module per API it serves.

Each module exports ``API``: a ``GroupApi`` with the api key, its name, an async
``handle(door, ctx, conn, header, body)`` that returns a version-agnostic response
dict (or ``door.deferred`` when it answers later), and ``error_response(body,
code)``, the answer carrying one error code wherever the response has one.  The
process that serves them (a broker, or a standalone coordinator) implements
``FrontDoor`` and turns these into its request handlers (``broker.coordination``).

The seeds' own APIs: ClusterMetadata, RegisterConsumer, CommitOffsets and the
coordinator's DescribeGroups.  Kafka's group APIs: FindCoordinator; JoinGroup,
SyncGroup, Heartbeat and LeaveGroup, served through ``classic.ClassicGroups``; OffsetCommit,
OffsetFetch and OffsetDelete through ``group_offsets.GroupOffsets``, ListGroups,
DescribeGroups and DeleteGroups through ``group_admin.GroupAdmin``, for every kind of group;
and Kafka 4's consumer group protocol, ConsumerGroupHeartbeat and ConsumerGroupDescribe,
through ``consumer_group.ConsumerGroups``; share groups (KIP-932), ShareGroupHeartbeat and
ShareGroupDescribe, through ``share_group.ShareGroups``, and their offsets' admin APIs,
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets, through
``share_admin`` (the share-partition state the leaders keep in ZooKeeper).  The transaction
coordinator's APIs (KIP-98, KIP-664), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions, through the shard's ``txn.coordinator.TxnCoordinator``
(FindCoordinator with key type 1 names it; InitProducerId, a broker handler, reaches it through the
same door); TxnOffsetCommit, the offsets of a transaction, through the group's ``GroupOffsets``.
Authorization (Kafka's ACLs on groups and topics) is checked here, before
anything reaches the coordinator (``authz``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.coordinator.handlers.base import GroupApi


def group_apis() -> "list[GroupApi]":
    """Every API of the front door."""
    from spark_coord.coordinator.handlers import (
        add_offsets_to_txn,
        add_partitions_to_txn,
        alter_share_group_offsets,
        cluster_metadata,
        commit_offsets,
        consumer_group_describe,
        consumer_group_heartbeat,
        delete_groups,
        delete_share_group_offsets,
        describe_groups,
        describe_members,
        describe_share_group_offsets,
        describe_transactions,
        end_txn,
        find_coordinator,
        heartbeat,
        join_group,
        leave_group,
        list_groups,
        list_transactions,
        offset_commit,
        offset_delete,
        offset_fetch,
        register_consumer,
        share_group_describe,
        share_group_heartbeat,
        sync_group,
        txn_offset_commit,
    )

    return [cluster_metadata.API, register_consumer.API, describe_members.API, commit_offsets.API,
            find_coordinator.API, join_group.API, sync_group.API, heartbeat.API, leave_group.API,
            offset_commit.API, offset_fetch.API, list_groups.API, describe_groups.API, delete_groups.API,
            consumer_group_heartbeat.API, consumer_group_describe.API, share_group_heartbeat.API,
            share_group_describe.API, describe_share_group_offsets.API, alter_share_group_offsets.API,
            delete_share_group_offsets.API, offset_delete.API, add_partitions_to_txn.API, add_offsets_to_txn.API,
            txn_offset_commit.API, end_txn.API, describe_transactions.API, list_transactions.API]
