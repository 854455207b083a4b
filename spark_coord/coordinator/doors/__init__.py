"""The doors into the one group registry (DESIGN.md "One registry, several doors"): each translates
a member protocol into the core's Ping/StopFetcher/StartFetcher and back.

- ``classic``: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), eager
  and cooperative, with ``initial_join`` for the initial rebalance delay of an empty group;
- ``consumer_group``: Kafka 4's consumer group protocol (KIP-848);
- ``share_group``: share groups (KIP-932), with ``share_admin`` for their offsets.

Beside them, the Kafka APIs that serve every kind of group (as Kafka's ``OffsetMetadataManager``
stands beside its ``GroupMetadataManager``): ``group_offsets`` (OffsetCommit, OffsetFetch,
OffsetDelete) and ``group_admin`` (ListGroups, DescribeGroups, DeleteGroups); ``common`` holds
what these modules share.

(The seeds' own channel is the core's ``MemberChannel``, served by the process hosting the
coordinator.)  A door depends on the coordinator only through ``core.interface.GroupCoordinator``
and never on another door: what a door must know of another door's members (a member's kind, its
Kafka member id) is on the registry's ``ConsumerRegistry`` and its channel (``describe()``), or
handed in by whoever composes the doors (``broker.coordination.ShardRole``).
"""
