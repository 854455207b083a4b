"""The admin APIs' codecs (issue 30) against kafka-python's, which are generated from Kafka's JSON
message definitions: CreatePartitions (37), DeleteRecords (21), OffsetDelete (47), DescribeLogDirs (35),
Describe/AlterUserScramCredentials (50, 51) and DescribeProducers (61).

For every served version, a body filled with non-default values (``wire_samples``) is encoded by our
codec; kafka-python must decode those bytes and encode them back to the same bytes, so a field in the
wrong place, of the wrong width, or flexible where Kafka is not, shows.  Versions kafka-python 3.0 no
longer knows (DescribeLogDirs v0, removed in Kafka 4.0) are checked against v1, which Kafka defines
as the same shape.
"""

from __future__ import annotations

import pytest
from wire_samples import sample_body

from spark_coord.wire import registry
from spark_coord.wire.registry import ApiKey
from spark_coord.wire.types import Reader

ADMIN = [ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_RECORDS, ApiKey.OFFSET_DELETE, ApiKey.DESCRIBE_LOG_DIRS,
         ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_PRODUCERS]
SERVED = {ApiKey.CREATE_PARTITIONS: (0, 3), ApiKey.DELETE_RECORDS: (0, 2), ApiKey.OFFSET_DELETE: (0, 0),
          ApiKey.DESCRIBE_LOG_DIRS: (0, 4), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
          ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.DESCRIBE_PRODUCERS: (0, 0)}
CASES = [(k, v, kind) for k in ADMIN for v in range(SERVED[k][0], SERVED[k][1] + 1) for kind in ("request", "response")]


def _kafka_python_class(api_key: int, kind: str):
    from kafka.protocol.admin import cluster, topics, transactions, users
    from kafka.protocol.consumer import group

    module, base = {ApiKey.CREATE_PARTITIONS: (topics, "CreatePartitions"),
                    ApiKey.DELETE_RECORDS: (topics, "DeleteRecords"), ApiKey.OFFSET_DELETE: (group, "OffsetDelete"),
                    ApiKey.DESCRIBE_LOG_DIRS: (cluster, "DescribeLogDirs"),
                    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (users, "DescribeUserScramCredentials"),
                    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (users, "AlterUserScramCredentials"),
                    ApiKey.DESCRIBE_PRODUCERS: (transactions, "DescribeProducers")}[api_key]
    return getattr(module, f"{base}{kind.capitalize()}")


@pytest.mark.parametrize("api_key, version, kind", CASES,
                         ids=[f"{registry.api_name(k)}-v{v}-{kind}" for k, v, kind in CASES])
def test_kafka_python_reads_and_writes_the_same_bytes(api_key, version, kind):
    body = sample_body(api_key, version, kind, seed=3, with_nulls=False)
    ours = _encoded(api_key, version, kind, body)
    theirs_class = _kafka_python_class(api_key, kind)
    their_version = max(version, 1) if api_key == ApiKey.DESCRIBE_LOG_DIRS else version
    decoded = theirs_class.decode(ours, version=their_version)
    assert bytes(decoded.encode()) == ours  # (a decoded message keeps its version)
    # and ours decodes its own bytes back to the body
    entry = registry.lookup(api_key, version)
    codec = entry.request if kind == "request" else entry.response
    r = Reader(memoryview(ours))
    again = codec.decode(r)
    assert _encoded(api_key, version, kind, again) == ours


def _encoded(api_key: int, version: int, kind: str, body: dict) -> bytes:
    from spark_coord.wire import protocol
    from spark_coord.wire.protocol import RequestHeader

    if kind == "request":
        frame = protocol.encode_request(api_key, version, 1, "t", body)
        entry = registry.lookup(api_key, version)
        header = 2 + 2 + 4 + 2 + 1 + (1 if entry.request_header_version >= 2 else 0)  # client id "t"
        return frame[4 + header:]
    parts = protocol.encode_response(RequestHeader(api_key, version, 1, "t"), body)
    frame = b"".join(bytes(p) for p in parts)
    entry = registry.lookup(api_key, version)
    return frame[4 + 4 + (1 if entry.response_header_version >= 1 else 0):]


def test_create_partitions_null_assignments_and_delete_records_high_watermark():
    from spark_coord.wire import protocol

    body = {"topics": [{"name": "t", "count": 4, "assignments": None}], "timeout_ms": 1000, "validate_only": True}
    for version in range(4):
        frame = protocol.encode_request(ApiKey.CREATE_PARTITIONS, version, 1, "t", body)
        _, decoded = protocol.decode_request(memoryview(frame)[4:])
        assert decoded["topics"][0]["assignments"] is None and decoded["validate_only"] is True
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": -1}]}], "timeout_ms": 1000}
    frame = protocol.encode_request(ApiKey.DELETE_RECORDS, 2, 1, "t", body)
    _, decoded = protocol.decode_request(memoryview(frame)[4:])
    assert decoded["topics"][0]["partitions"][0]["offset"] == -1
