"""One retriable flag for every client, as Kafka defines it."""

import kafka.errors

from spark_coord.errors import RETRIABLE, ErrorCode, is_retriable

#: Where kafka-python's flags differ from Kafka's Java client, which this table follows:
#: CorruptRecordException is a RetriableException in Java (corruption may happen in transit).
JAVA_ONLY = {ErrorCode.CORRUPT_MESSAGE}


def test_retriable_as_kafka_defines_it():
    for code in ErrorCode:
        peer = kafka.errors.kafka_errors.get(int(code))
        if peer is None or code in JAVA_ONLY:
            continue
        assert code.retriable == bool(peer.retriable), f"{code.name}: kafka-python says {peer.retriable}"
    assert all(code.retriable for code in JAVA_ONLY)


def test_network_exception_and_leadership_errors_are_retried_fatal_ones_are_not():
    for code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE):
        assert is_retriable(code) and is_retriable(int(code))
    for code in (ErrorCode.NONE, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.OFFSET_OUT_OF_RANGE,
                 ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_RECORD, ErrorCode.STALE_GENERATION):
        assert not is_retriable(code)
    assert not is_retriable(9999)  # a code nobody knows is not retried


def test_producer_and_fetchers_share_the_table():
    from spark_coord.client import producer
    from spark_coord.consumer import fetcher

    assert fetcher.is_retriable is is_retriable
    assert producer.is_retriable is is_retriable
    assert not hasattr(producer, "RETRIABLE") and RETRIABLE


def test_codes_carry_kafkas_names():
    """Numbers and names agree with Kafka's table (81-86 were once shifted here)."""
    for code in ErrorCode:
        peer = kafka.errors.kafka_errors.get(int(code))
        if peer is not None and code > 0:
            assert peer.message.replace("_", "") == code.name.replace("_", "") or peer.message in _RENAMED, \
                f"{int(code)}: ours {code.name}, Kafka's {peer.message}"


#: kafka-python's names where Kafka's (``org.apache.kafka.common.protocol.Errors``, ours) differ.
_RENAMED = {"NOT_LEADER_FOR_PARTITION", "MESSAGE_SIZE_TOO_LARGE", "INVALID_TOPIC", "INVALID_REPLICATION_ASSIGNMENT"}
