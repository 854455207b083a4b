"""The consumer-group coordinator (seeds 003 sections 2-11, DESIGN section 6).

One broker at a time is elected (``elector.CoordinatorElector``); the elected one
runs a ``coordinator.Coordinator``: it registers group members, pings them,
rebalances groups with StopFetcher/StartFetcher rounds, and commits the offsets
members report to ZooKeeper in Kafka 0.8's layout (``store.ZkGroupStore``).

The core is built from injected parts -- a clock, a timer, a group store and
member channels -- so it runs in unit tests with a hand-advanced clock and in
production on the broker's event loop with the real ZooKeeper.
"""
