"""The group core: one registry of groups and members, and the coordinator that drives it.

``coordinator.Coordinator`` holds the groups (``group``: ``GroupRegistry``, ``ConsumerRegistry``,
the group state machine) and is made of the seeds' parts, each its own module and each typed
against ``interface.CoordinatorCore`` rather than the class that composes them: ``pings``
(failure detection), ``rebalancer`` (StopFetcher/StartFetcher rounds, waiting in ``delayed`` and
``purgatory``), ``offsets`` (offsets in, ZooKeeper out), ``leadership`` (no pings unless the
election was confirmed lately), ``registration`` (RegisterConsumer checks and claims).
``assignors`` and ``subscription`` compute assignments, ``elector`` and ``shards`` decide which
coordinator holds which shard, ``channel``/``lease`` are a member as the core sees it, ``clock``
is injected time.  Nothing here imports a door (``coordinator.doors``) or a handler.
"""
