"""The coordinator protocol's api keys (DESIGN section 4: keys no Kafka version uses).

After RegisterConsumer the channel is driven by the coordinator: it sends Ping,
StopFetcher and StartFetcher requests and the member answers each one.
"""

from __future__ import annotations

from enum import IntEnum


class CoordinatorApi(IntEnum):
    CLUSTER_METADATA = 1000
    REGISTER_CONSUMER = 1001
    PING = 1002
    STOP_FETCHER = 1003
    START_FETCHER = 1004


#: Offset a StartFetcher carries for a partition the group never committed:
#: the member applies its ``auto.offset.reset`` (smallest or largest).
NO_OFFSET = -1
