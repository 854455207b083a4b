"""Spark 4 finds installed modules named ``pyspark_*`` that expose ``DefaultSource``
and registers them under ``DefaultSource.name()``; this one makes
``spark.read.format("coordkafka")`` and friends work with no ``register()`` call.

The module must be importable by the Python that Spark's workers run
(``PYSPARK_PYTHON``): ``spark-submit.sh`` and the test fixtures point it at the
project's environment.
"""

from spark_coord.spark.source import CoordKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
