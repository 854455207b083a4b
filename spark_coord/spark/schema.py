"""The row schema of Spark's built-in Kafka source, which ``coordkafka`` produces too.

Kept as DDL so it reads like Spark's documentation; ``records.arrow.kafka_schema``
is its Arrow twin (the executors' RecordBatches must equal Spark's Arrow
conversion of this schema, which the tests check).
"""

from __future__ import annotations

BASE_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
            "timestamp TIMESTAMP, timestampType INT")
HEADERS_DDL = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
#: Rows read from a share group carry the delivery count the broker gave them (1 the first time).
SHARE_DDL = "deliveryCount INT"


def source_ddl(include_headers: bool, share: bool = False) -> str:
    """DDL of the rows read from a topic, with the ``headers`` column when ``includeHeaders`` is true
    and ``deliveryCount`` last when the topic is read through a share group."""
    ddl = f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL
    return f"{ddl}, {SHARE_DDL}" if share else ddl
