"""``by_duration:`` values: ISO-8601 durations as java.time.Duration.parse reads them (no processes)."""

from __future__ import annotations

import pytest

from spark_coord.configs import parse_by_duration
from spark_coord.configs.durations import parse_duration_nanos

HOUR = 3_600_000


@pytest.mark.parametrize("text, ms", [
    ("by_duration:PT1H", HOUR),
    ("PT1H", HOUR),
    ("P1DT2H30M", 24 * HOUR + 2 * HOUR + 30 * 60_000),
    ("PT0.5S", 500),
    ("PT0,5S", 500),            # Java takes a comma too
    ("PT1.S", 1000),            # and an empty fraction
    ("PT0.123456789S", 123),    # nanoseconds, cut to milliseconds (Duration.toMillis)
    ("P2D", 2 * 24 * HOUR),
    ("pt15m", 15 * 60_000),     # letters in any case
    ("PT0S", 0),                # zero is fine
    ("P0D", 0),
    ("PT-1H61M", 60_000),       # signed parts add up
    ("-PT-1H", HOUR),           # a leading sign negates the whole
    ("+PT1M", 60_000),
    ("PT36H", 36 * HOUR),
])
def test_durations_kafka_accepts(text, ms):
    assert parse_by_duration(text) == ms


@pytest.mark.parametrize("text", [
    "by_duration:",             # Kafka: the duration part is missing
    "by_duration",
    "by_duration:invalid",
    "by_duration:-PT1H",        # negative: Kafka refuses
    "PT-0.5S",
    "P1Y",                      # years and months are not java.time.Duration's
    "P1M",
    "P1W",
    "P",                        # nothing after P
    "PT",                       # a T must be followed by a time part
    "P1DT",
    "1H",
    "PT1H ",                    # no blanks
    "PT1.1234567890S",          # at most nine fraction digits
    "PT١H",                     # ASCII digits only
    "",
])
def test_durations_kafka_refuses(text):
    with pytest.raises(ValueError):
        parse_by_duration(text)


def test_nanosecond_precision_and_range():
    assert parse_duration_nanos("PT0.000000001S") == 1
    assert parse_duration_nanos("-PT1S") == -10**9
    with pytest.raises(ValueError, match="out of range"):
        parse_duration_nanos("PT99999999999999999999S")
