"""The thin consumer: a group member driven by the broker-side coordinator.

It is the member behind the seeds' door of DESIGN.md "One registry, several doors".

``Consumer`` is the public API; ``ConsumerCoordinatorConnector`` owns the channel to
the coordinator; ``FetcherManager`` fetches the assigned partitions from their
leaders into a ``PartitionBuffer``.
"""

from spark_coord.consumer.connector import ConsumerCoordinatorConnector, Registration  # noqa: F401
from spark_coord.consumer.consumer import Consumer, Record, default_consumer_id  # noqa: F401
