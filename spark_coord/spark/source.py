"""The ``coordkafka`` DataSource: Spark's entry point to the readers and writers."""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSource

log = logging.getLogger(__name__)


class CoordKafkaDataSource(DataSource):
    """Read topics of a spark-coord (or any Kafka-protocol) cluster, or write rows to one.

    Name: ``coordkafka``.  Rows have the columns of Spark's built-in Kafka source:
    ``key binary, value binary, topic string, partition int, offset bigint,
    timestamp timestamp, timestampType int`` and, with ``includeHeaders``,
    ``headers array<struct<key: string, value: binary>>``.

    Options (Spark's Kafka source's names; a job written for ``format("kafka")`` runs unchanged)
    -------------------------------------------------------------------------------------------
    kafka.bootstrap.servers : str, required (``bootstrap.brokers`` is the same)
        ``host:port[,host:port...]`` of brokers to bootstrap from.
    subscribe | subscribePattern | assign : exactly one
        Comma-separated topics; a regular expression matched against whole topic
        names; or JSON ``{"topic": [0, 1]}``.  Subscriptions pick up new topics
        and partitions while a stream runs (new partitions start at earliest).
    startingOffsets : str, default ``latest`` (stream) / ``earliest`` (batch)
        ``earliest``, ``latest``, ``group`` (with group.id) or JSON
        ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest).
    startingTimestamp, startingOffsetsByTimestamp : take precedence over startingOffsets
        A timestamp (ms) for every partition, or JSON ``{"topic": {"0": ts}}`` naming
        every partition read: each starts at its first record at or after it (Kafka's
        offsetsForTimes); ``startingOffsetsByTimestampStrategy`` (``error``, default, or
        ``latest``) says what happens when no record is that recent.
    endingOffsets, endingTimestamp, endingOffsetsByTimestamp : batch reads only
        ``latest`` or JSON as above (-1 latest); the timestamp forms end before the first
        record at or after the timestamp (latest when there is none).
    maxOffsetsPerTrigger, minOffsetsPerTrigger, maxTriggerDelay : streams only
        Cap records per micro-batch (spread over partitions by lag); wait for at
        least this many records, but no longer than maxTriggerDelay (15m).
    failOnDataLoss : bool, default true
        Fail the query when records it planned are gone: removed by retention, or its
        topic deleted (or deleted and created again), naming the topic and partition;
        false logs a warning and goes on (from the log start, or the new topic's start).
    includeHeaders : bool, default false
    minPartitions, maxRecordsPerPartition : int
        Split offset ranges into more input partitions: at most maxRecordsPerPartition
        records each, then at least minPartitions of them.
    group.id : str, streams only
        Join this consumer group for real (unlike Spark's ``kafka.group.id``, which
        only names the group of its unmanaged consumers and is refused here): the query
        registers ``members`` group members with the coordinator, which assigns them
        partitions (shared with other queries and consumers of the group); committed
        micro-batches land in ZooKeeper as the group's offsets.  ``startingOffsets``
        then applies to partitions the group has no offset for.  ``groupIdPrefix`` has
        no meaning (a query without group.id uses no group) and is ignored with a warning.
    members : int, default 1
        Group members this query registers: threads of the driver-side process
        that hosts the reader, not executors (executors come and go without the
        group noticing).  It sets the query's share of the group: the coordinator
        splits the partitions over all members of the group, so a query with 3
        members beside a consumer with 1 is assigned about three quarters of them.
    session.timeout.ms : int, default 30000
        The members' session timeout (pings every third of it).
    kafka.group.protocol : str, default ``auto``
        How the members join the group: ``coordkafka`` through spark-coord's coordinator
        (ZooKeeper-backed; our brokers, or ``coordinator.bootstrap``), or ``consumer``,
        Kafka 4's consumer group protocol (KIP-848), the cluster's own group coordinator:
        the query's members are members of the cluster's group beside Kafka's consumers, and
        its committed micro-batches are the group's offsets in Kafka (no ZooKeeper, no
        coordinator of ours).  ``auto`` asks the brokers (ApiVersions): ``coordkafka`` where
        they serve spark-coord's coordinator, else ``consumer`` where they serve
        ConsumerGroupHeartbeat.  With ``consumer``, ``session.timeout.ms`` is the members'
        lease and should not exceed the cluster's ``group.consumer.session.timeout.ms``.
    kafka.<setting> : Kafka consumer settings the source implements
        ``kafka.fetch.max.bytes``, ``kafka.max.partition.fetch.bytes``,
        ``kafka.fetch.max.wait.ms``, ``kafka.fetch.min.bytes``, ``kafka.request.timeout.ms``,
        ``kafka.client.id``, ``kafka.session.timeout.ms`` and the security settings
        (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``), under the Java
        client's or librdkafka's names; any other is refused by name.
    kafkaConsumer.pollTimeoutMs, fetchOffset.numRetries, fetchOffset.retryIntervalMs
        Executors' fetch timeout; retries of the driver's offset look-ups.

    Reading a share group (KIP-932, a queue; streams only, with ``subscribe``)
    -------------------------------------------------------------------------
    kafka.share.group.id : str
        Read as one member of this share group: each micro-batch is the records the group
        hands the query (ShareFetch, from the driver-side reader), read by executors with
        plain Fetch; rows get a ``deliveryCount int`` column.  A record is accepted when the
        micro-batch holding it is committed; a failed or stopped query's records go back to
        the group.  ``maxOffsetsPerTrigger`` caps the records of one micro-batch.
    kafka.share.parallelism : int, default the number of partitions in the batch
        Input partitions (tasks) per micro-batch, whatever the topic's partition count.
    kafka.share.acknowledgements.path : str
        Where the ``spark_coord.spark.share_acks`` helpers (``release``, ``reject``,
        ``foreach_record``) leave rows to release or reject instead of accepting them;
        default a directory per group under the system's temporary directory.

    Sink options: ``kafka.bootstrap.servers``, ``topic`` (unless rows carry a ``topic``
    column), and Kafka producer settings: ``kafka.acks`` (all), ``kafka.compression.type``
    (none, gzip, snappy, lz4, zstd), ``kafka.batch.size``, ``kafka.linger.ms``,
    ``kafka.retries``, ``kafka.enable.idempotence`` (true: producer id and sequence numbers,
    so a retried Produce neither duplicates nor reorders), ``kafka.max.in.flight.requests.
    per.connection``, ``kafka.request.timeout.ms``, ``kafka.client.id`` and the security
    settings.  Input columns: ``value`` and optionally ``key``, ``topic``, ``partition``,
    ``headers``; other columns are not written.  Batch writes need ``mode("append")``
    (PySpark's Python data sources take only append and overwrite).

    Examples
    --------
    No registration is needed once the package is installed (Spark finds the
    ``pyspark_coordkafka`` module):

    >>> clicks = (spark.readStream.format("coordkafka")            # doctest: +SKIP
    ...           .option("kafka.bootstrap.servers", "127.0.0.1:9092")
    ...           .option("subscribe", "clicks")
    ...           .option("startingOffsets", "earliest")
    ...           .option("maxOffsetsPerTrigger", 10000)
    ...           .load())
    >>> (clicks.selectExpr("CAST(value AS STRING) AS page")        # doctest: +SKIP
    ...  .groupBy("page").count()
    ...  .writeStream.outputMode("complete").format("console").start())

    A bounded read, and a write:

    >>> df = (spark.read.format("coordkafka").option("kafka.bootstrap.servers", "127.0.0.1:9092")  # doctest: +SKIP
    ...       .option("subscribe", "clicks").load())
    >>> (df.select("key", "value").write.format("coordkafka")     # doctest: +SKIP
    ...  .mode("append").option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "copy").save())
    """

    @classmethod
    def name(cls) -> str:
        return "coordkafka"

    def _source_options(self, streaming: bool | None):
        from spark_coord.spark.options import parse_source_options

        return parse_source_options(self.options, streaming)

    def schema(self) -> str:
        """Called at ``load()``: the options are checked here, so mistakes surface before any query runs."""
        from spark_coord.spark.schema import source_ddl

        opts = self._source_options(None)
        return source_ddl(opts.include_headers, share=opts.share_group_id is not None)

    def reader(self, schema):
        from spark_coord.spark.batch import CoordKafkaBatchReader

        return CoordKafkaBatchReader(self._source_options(False))

    def streamReader(self, schema):
        opts = self._source_options(True)
        if opts.share_group_id is not None:
            from spark_coord.spark.share import ShareStreamReader

            return ShareStreamReader(opts)
        from spark_coord.spark.stream import CoordKafkaStreamReader

        return CoordKafkaStreamReader(opts)

    def _sink(self, schema):
        from spark_coord.spark.options import parse_sink_options
        from spark_coord.spark.sink import check_input_schema

        opts = parse_sink_options(self.options)
        return opts, check_input_schema(schema, opts)

    def writer(self, schema, overwrite: bool):
        from spark_coord.spark.sink import CoordKafkaWriter

        return CoordKafkaWriter(*self._sink(schema))

    def streamWriter(self, schema, overwrite: bool):
        from spark_coord.spark.sink import CoordKafkaStreamWriter

        return CoordKafkaStreamWriter(*self._sink(schema))
