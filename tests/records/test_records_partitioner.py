"""Keys land where other Kafka producers would put them (Kafka's murmur2 rule)."""

from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from spark_coord.records.partitioner import murmur2, partition_for_key


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data):
    assert murmur2(data) == kafka_python_murmur2(bytearray(data)) & 0xFFFFFFFF


def test_known_java_values():
    # Values of org.apache.kafka.common.utils.Utils.murmur2 (from Kafka's own UtilsTest).
    assert murmur2(b"21") - (1 << 32) == -973932308
    assert murmur2(b"foobar") - (1 << 32) == -790332482
    assert murmur2(b"a-little-bit-long-string") - (1 << 32) == -985981536


def test_partition_for_key_is_stable_and_in_range():
    for n in (1, 3, 12):
        for key in (b"a", b"user-42", b""):
            p = partition_for_key(key, n)
            assert 0 <= p < n
            assert p == partition_for_key(key, n)
