"""The coordinator protocol's api keys, as the coordinator core names them.

The keys and their message schemas are declared once, in ``spark_coord.wire.coordinator``
(keys no Kafka version uses: the coordinator APIs of docs/reference/protocol.md).  After RegisterConsumer the channel is
driven by the coordinator: it sends Ping, StopFetcher and StartFetcher requests and the
member answers each one.
"""

from __future__ import annotations

from spark_coord.wire.coordinator import NO_OFFSET
from spark_coord.wire.coordinator import CoordinatorApiKey as CoordinatorApi

__all__ = ["CoordinatorApi", "NO_OFFSET"]
