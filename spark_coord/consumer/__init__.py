"""The thin consumer (DESIGN 7): a group member driven by the broker-side coordinator.

``Consumer`` is the public API; ``ConsumerCoordinatorConnector`` owns the channel to
the coordinator; ``FetcherManager`` fetches the assigned partitions from their
leaders into a ``PartitionBuffer``.
"""

from spark_coord.consumer.consumer import Consumer, Record, default_consumer_id  # noqa: F401
from spark_coord.consumer.connector import ConsumerCoordinatorConnector, Registration  # noqa: F401
