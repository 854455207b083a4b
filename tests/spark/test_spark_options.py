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
    (opts(**{"kafka.bootstrap.servers": "x:1"}), True, "kafka.bootstrap.servers"),
    (opts(subscribe="bad topic!"), True, "subscribe"),
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


def test_unknown_option_gets_a_suggestion():
    with pytest.raises(ValueError, match="(?i)maxOffsetPerTrigger.*did you mean 'maxOffsetsPerTrigger'"):
        parse_source_options(opts(maxOffsetPerTrigger="1"), True)


def test_sink_options():
    assert parse_sink_options({"bootstrap.brokers": "h:1", "acks": "all"}).acks == -1
    with pytest.raises(ValueError, match="^compression"):
        parse_sink_options({"bootstrap.brokers": "h:1", "compression": "brotli"})
    with pytest.raises(ValueError, match="^acks"):
        parse_sink_options({"bootstrap.brokers": "h:1", "acks": "2"})


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
    ({"subscribe": "x"}, "bootstrap.brokers"),
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
