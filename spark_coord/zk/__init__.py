"""ZooKeeper: every path (``paths``), Kafka's znode formats (``model``), kazoo
connections and their hand-off to asyncio (``client``), the embedded Apache
ZooKeeper server (``embedded``) and a session-expiry helper for tests (``testing``).

Import the submodule you need; this package imports nothing heavy by itself.
"""
