"""The consumer-group coordinator (seeds 003 sections 2-13).

One broker at a time is elected (``elector.CoordinatorElector``); the elected one
runs a ``coordinator.Coordinator``, made of the seeds' parts:

- ``registration``: RegisterConsumer checks, and the claims of members that come
  back (after a lost connection or a failover) into the generation they held;
- ``pings.PingScheduler``: pings every member every third of its session timeout
  and fails the ones whose pings expire (2/3 of it) too often;
- ``rebalancer.Rebalancer``: one task per group that needs a new assignment,
  StopFetcher / commit / generation / StartFetcher / owners (``group`` holds the
  group's state machine, ``assignors`` the assignments, ``delayed`` and
  ``purgatory`` the rounds and pings waiting for answers);
- ``offsets.OffsetCommitter``: offsets from ping and StopFetcher answers, claims
  and members' own CommitOffsets, checked and written to ZooKeeper in Kafka 0.8's
  layout (``store`` / ``zk_store``, every write fenced by the election);
- ``leadership.LeadershipLease``: no pings unless ZooKeeper confirmed the election
  lately, so a deposed coordinator renews no member's lease.

The core is built from injected parts -- a clock, a timer, a group store and
member channels -- so it runs in unit tests with a hand-advanced clock and in
production on the broker's event loop with the real ZooKeeper
(``broker.coordination`` is the glue).

The design: election and fencing in DESIGN.md "Coordinator shards", one holder per
partition in DESIGN.md "One holder at a time (invariant 1)", Kafka's members in
DESIGN.md "One registry, several doors".
"""
