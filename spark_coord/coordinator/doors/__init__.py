"""The doors into the one group registry (DESIGN section 12): each translates a member protocol
into the core's Ping/StopFetcher/StartFetcher and back.

- ``classic``: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat...), eager and
  cooperative, and Kafka's offset and admin group APIs;
- ``consumer_group``: Kafka 4's consumer group protocol (KIP-848);
- ``share_group``: share groups (KIP-932), with ``share_admin`` for their offsets.

(The seeds' own channel is the core's ``MemberChannel``, served by the process hosting the
coordinator.)  A door depends on the coordinator only through ``core.interface.GroupCoordinator``
and never on another door: what a door must know of another door's members (a member's kind, its
Kafka member id) is on the registry's ``ConsumerRegistry`` and its channel.
"""
