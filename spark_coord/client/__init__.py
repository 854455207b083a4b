"""Synchronous Kafka-protocol clients: one broker connection (``connection``), and on
top of it cluster metadata, topic administration and the producer/consumer tools.

``BrokerConnection`` negotiates versions with ApiVersions and is safe to share
between threads; ``BrokerConnectionError`` (a ConnectionError) reports I/O failure.
"""

from spark_coord.client.connection import BrokerConnection, BrokerConnectionError

__all__ = ["BrokerConnection", "BrokerConnectionError"]
