"""The ``coordkafka`` PySpark data source: batch and streaming reads of topics, and a sink.

``spark.readStream.format("coordkafka")`` works without ``register()`` because the
installed module ``pyspark_coordkafka`` exposes ``DefaultSource`` (Spark 4 looks up
modules named ``pyspark_*``).  Modules here import pyspark and pyarrow lazily where
they can, so Spark's planner workers start fast.
"""
