"""What the coordinator keeps in ZooKeeper: ``store.GroupStore`` (the interface, and an in-memory
store for unit tests), ``zk_store.ZkGroupStore`` (Kafka 0.8's consumer layout), every write fenced
by the election (``fencing.EpochCheck``, ``zk_fenced.FencedWriter``, planned with ``zk_cache``),
and ``zk_async``, kazoo's calls made awaitable."""
