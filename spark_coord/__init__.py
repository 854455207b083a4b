"""spark-coord: Kafka-wire brokers, a ZooKeeper-elected group coordinator, and a
PySpark streaming source (``format("coordkafka")``) that joins its groups."""

__version__ = "0.1.0"
