"""Option checking (pure, then through Spark's load()), offset JSON, and the planning arithmetic."""

from __future__ import annotations

import pytest

from spark_coord.spark.offsets import from_json, split_ranges, starts_from_json, to_json
from spark_coord.spark.options import parse_sink_options, parse_source_options
from spark_coord.spark.stream import allocate

BASE = {"bootstrap.brokers": "127.0.0.1:9092", "subscribe": "a,b"}


def opts(**kw):
    out = dict(BASE)
    out.update(kw)
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize("options, streaming, names", [
    ({"subscribe": "a"}, True, "bootstrap.brokers"),
    (opts(**{"bootstrap.brokers": "nohost"}), True, "bootstrap.brokers"),
    (opts(assign='{"a": [0]}'), True, "subscribe, subscribePattern, assign"),
    (opts(subscribe=None), True, "subscribe, subscribePattern, assign"),
    (opts(subscribe=None, subscribePattern="(unclosed"), True, "subscribePattern"),
    (opts(subscribe=None, assign='{"a": "0"}'), True, "assign"),
    (opts(subscribe=None, assign="not json"), True, "assign"),
    (opts(startingOffsets="sometime"), True, "startingOffsets"),
    (opts(startingOffsets='{"a": {"0": -3}}'), True, "startingOffsets"),
    (opts(startingOffsets='{"zzz": {"0": 1}}'), True, "startingOffsets"),
    (opts(startingOffsets="group"), True, "startingOffsets"),
    (opts(endingOffsets="latest"), True, "endingOffsets"),
    (opts(endingOffsets='{"a": {"0": -2}}'), False, "endingOffsets"),
    (opts(startingOffsets="latest"), False, "startingOffsets"),
    (opts(maxOffsetsPerTrigger="0"), True, "maxOffsetsPerTrigger"),
    (opts(maxOffsetsPerTrigger="ten"), True, "maxOffsetsPerTrigger"),
    (opts(maxOffsetsPerTrigger="10"), False, "maxOffsetsPerTrigger"),
    (opts(minOffsetsPerTrigger="20", maxOffsetsPerTrigger="10"), True, "minOffsetsPerTrigger"),
    (opts(maxTriggerDelay="5m"), True, "maxTriggerDelay"),
    (opts(failOnDataLoss="maybe"), True, "failOnDataLoss"),
    (opts(members="2"), True, "members"),
    (opts(**{"kafka.bootstrap.servers": "x:1"}), True, "bootstrap.brokers: given twice"),
    (opts(**{"kafka.group.id": "g"}), True, "kafka.group.id: not taken by coordkafka: coordkafka's group.id"),
    (opts(**{"kafka.auto.offset.reset": "earliest"}), True, "kafka.auto.offset.reset: not taken"),
    (opts(**{"kafka.max.poll.records": "10"}), True, "kafka.max.poll.records: not a Kafka consumer setting"),
    (opts(**{"kafka.linger.ms": "10"}), True, "kafka.linger.ms: not a Kafka consumer setting"),
    (opts(**{"kafka.fetch.max.bytes": "x"}), True, "kafka.fetch.max.bytes: expected an integer"),
    (opts(**{"kafka.fetch.max.wait.ms": "1", "kafka.fetch.wait.max.ms": "2"}), True, "given twice"),
    (opts(**{"kafka.sasl.mechanisms": "GSSAPI", "kafka.security.protocol": "SASL_SSL",
             "kafka.sasl.username": "u", "kafka.sasl.password": "p"}), True, "kafka.sasl.mechanism: expected one of"),
    (opts(**{"kafka.session.timeout.ms": "6000"}), True, "kafka.session.timeout.ms: only meaningful with group.id"),
    (opts(subscribe="bad topic!"), True, "subscribe"),
    (opts(startingTimestamp="yesterday"), True, "startingTimestamp"),
    (opts(startingTimestamp="-5"), True, "startingTimestamp"),
    (opts(startingOffsetsByTimestamp='{"a": {"0": "noon"}}'), True, "startingOffsetsByTimestamp"),
    (opts(startingOffsetsByTimestamp='{"zzz": {"0": 1}}'), True, "startingOffsetsByTimestamp"),
    (opts(startingOffsetsByTimestampStrategy="earliest"), True, "startingOffsetsByTimestampStrategy"),
    (opts(endingTimestamp="1000"), True, "endingTimestamp"),
    (opts(endingOffsetsByTimestamp='{"a": {"0": 1}}'), True, "endingOffsetsByTimestamp"),
    (opts(endingOffsetsByTimestamp='{"a": {"0": -2}}'), False, "endingOffsetsByTimestamp"),
    (opts(maxRecordsPerPartition="0"), False, "maxRecordsPerPartition"),
    (opts(**{"fetchOffset.numRetries": "-1"}), True, "fetchOffset.numRetries"),
])
def test_bad_source_options_name_the_option(options, streaming, names):
    with pytest.raises(ValueError) as e:
        parse_source_options(options, streaming)
    assert str(e.value).startswith(names) or names in str(e.value)


def test_good_source_options():
    o = parse_source_options({k.lower(): v for k, v in opts(
        startingOffsets='{"a": {"0": 5, "1": -2}}', maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10",
        maxTriggerDelay="30s", includeHeaders="TRUE", failOnDataLoss="false", path="ignored").items()}, True)
    assert o.subscribe == ("a", "b")
    assert o.starting == {"a": {0: 5, 1: -2}}
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 10, 30000)
    assert o.include_headers and not o.fail_on_data_loss
    assert parse_source_options(opts(), False).starting == "earliest"
    assert parse_source_options(opts(), True).starting == "latest"


def test_spark_kafka_names_pass_through():
    o = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "kafka.fetch.max.bytes": "2048",
                              "kafka.max.partition.fetch.bytes": "4096", "kafka.fetch.wait.max.ms": "7",
                              "kafka.fetch.min.bytes": "3", "kafka.request.timeout.ms": "1234",
                              "kafka.client.id": "job", "kafkaConsumer.pollTimeoutMs": "5000",
                              "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanisms": "PLAIN",
                              "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                        'required username="u" password="secret";',
                              "kafka.ssl.truststore.location": "/ca.pem", "groupIdPrefix": "ignored",
                              "startingTimestamp": "1000", "maxRecordsPerPartition": "50",
                              "fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "100"}, True)
    assert o.bootstrap == "h:1"
    assert (o.fetch_max_bytes, o.max_partition_fetch_bytes, o.fetch_max_wait_ms, o.fetch_min_bytes) == \
        (2048, 4096, 7, 3)
    assert (o.socket_timeout_ms, o.poll_timeout_ms, o.client_id) == (1234, 5000, "job")
    assert (o.security.protocol, o.security.mechanism, o.security.username, o.security.ca_location) == \
        ("SASL_SSL", "PLAIN", "u", "/ca.pem")
    assert "secret" not in repr(o)
    assert (o.starting_timestamp, o.max_records_per_partition, o.offset_retries, o.offset_retry_interval_ms) == \
        (1000, 50, 5, 100)
    assert parse_source_options(opts(startingOffsetsByTimestamp='{"a": {"0": 5, "1": -1}}'), False) \
        .starting_by_timestamp == {"a": {0: 5, 1: -1}}


def test_sink_takes_kafka_producer_settings():
    o = parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "20", "kafka.acks": "all",
                            "kafka.compression.type": "lz4", "kafka.batch.size": "65536", "kafka.retries": "3",
                            "kafka.max.in.flight.requests.per.connection": "2", "includeHeaders": "true"})
    assert (o.bootstrap, o.linger_ms, o.acks, o.compression, o.batch_size, o.retries, o.max_in_flight) == \
        ("h:1", 20, -1, "lz4", 65536, 3, 2)
    assert o.idempotence  # Kafka's default
    assert not parse_sink_options({"bootstrap.brokers": "h:1", "kafka.enable.idempotence": "false"}).idempotence
    assert not parse_sink_options({"bootstrap.brokers": "h:1", "acks": "1"}).idempotence  # Kafka: acks=1 turns it off
    with pytest.raises(ValueError, match="^kafka.acks: the idempotent sink needs acks=all"):
        parse_sink_options({"bootstrap.brokers": "h:1", "kafka.acks": "1", "kafka.enable.idempotence": "true"})
    with pytest.raises(ValueError, match="^kafka.max.in.flight.requests.per.connection: at most 5"):
        parse_sink_options({"bootstrap.brokers": "h:1", "kafka.max.in.flight.requests.per.connection": "6",
                            "kafka.enable.idempotence": "true"})
    for refused, why in (("kafka.partitioner.class", "Java classes"), ("kafka.value.serializer", "Spark's rule"),
                         ("kafka.transactional.id", "transactions"), ("kafka.buffer.memory", "not a Kafka producer")):
        with pytest.raises(ValueError, match=f"^{refused}: .*{why}"):
            parse_sink_options({"bootstrap.brokers": "h:1", refused: "x"})


def test_unknown_option_gets_a_suggestion():
    with pytest.raises(ValueError, match="(?i)maxOffsetPerTrigger.*did you mean 'maxOffsetsPerTrigger'"):
        parse_source_options(opts(maxOffsetPerTrigger="1"), True)


def test_sink_options():
    assert parse_sink_options({"bootstrap.brokers": "h:1", "acks": "all"}).acks == -1
    with pytest.raises(ValueError, match="^compression"):
        parse_sink_options({"bootstrap.brokers": "h:1", "compression": "brotli"})
    with pytest.raises(ValueError, match="^acks"):
        parse_sink_options({"bootstrap.brokers": "h:1", "acks": "2"})
    with pytest.raises(ValueError, match="^kafka.bootstrap.servers: required"):
        parse_sink_options({"topic": "t"})


def test_offset_json_round_trip_is_canonical():
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 5}
    j = to_json(offsets, {("a", 2): 1})
    assert list(j) == ["a", "b", "$from"] and list(j["a"]) == ["2", "10"]
    assert from_json(j) == offsets and starts_from_json(j) == {("a", 2): 1}
    with pytest.raises(ValueError):
        from_json({"a": {"0": "x"}})


def test_allocate_caps_exactly_and_in_proportion_to_lag():
    lag = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 0, ("t", 3): 333}
    take = allocate(lag, 100)
    assert sum(take.values()) == 100
    assert all(take[tp] <= lag[tp] for tp in lag)
    assert take[("t", 0)] > take[("t", 3)] > take[("t", 1)] and take[("t", 2)] == 0
    assert allocate(lag, None) == lag and allocate(lag, 10**6) == lag


def test_max_records_per_partition_cuts_ranges_then_min_partitions_cuts_more():
    ranges = {("t", 0): (0, 1000), ("t", 1): (5, 15)}
    pieces = split_ranges(ranges, None, 300)
    assert pieces == [(("t", 0), 0, 250), (("t", 0), 250, 500), (("t", 0), 500, 750), (("t", 0), 750, 1000),
                      (("t", 1), 5, 15)]
    more = split_ranges(ranges, 12, 300)
    assert len(more) >= 12 and max(e - s for _, s, e in more) <= 250
    assert sorted(o for tp, s, e in more if tp == ("t", 0) for o in range(s, e)) == list(range(1000))


def test_split_ranges_is_deterministic_and_covers_everything():
    ranges = {("t", 0): (0, 1000), ("t", 1): (5, 15), ("t", 2): (3, 3)}
    pieces = split_ranges(ranges, 8)
    assert pieces == split_ranges(dict(reversed(list(ranges.items()))), 8)
    assert len(pieces) >= 8
    for tp, (s, e) in ranges.items():
        mine = sorted((a, b) for t, a, b in pieces if t == tp)
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(s, e))


@pytest.mark.parametrize("options, name", [
    ({"subscribe": "x"}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "x", "kafka.max.poll.records": "5"},
     "kafka.max.poll.records"),
    ({"bootstrap.brokers": "127.0.0.1:1", "subscribe": "x", "startingOffsets": "yesterday"}, "startingOffsets"),
    ({"bootstrap.brokers": "127.0.0.1:1", "subscribe": "x", "noSuchOption": "1"}, "nosuchoption"),
    ({"bootstrap.brokers": "127.0.0.1:1", "assign": '{"x":[0]}', "group.id": "g"}, "group.id"),
])
def test_bad_options_fail_at_load(spark, options, name):
    for make in (lambda: spark.read, lambda: spark.readStream):
        r = make().format("coordkafka")
        for k, v in options.items():
            r = r.option(k, v)
        with pytest.raises(Exception) as e:
            r.load()
        assert name in str(e.value)
