"""ISO-8601 durations as Java's ``java.time.Duration.parse`` reads them, for ``by_duration:`` values.

Kafka's ``share.auto.offset.reset`` (and the consumer's ``auto.offset.reset``)
accept ``by_duration:<duration>``: start from the records of the last
``<duration>``.  Kafka parses the duration with ``Duration.parse``, so the same
texts are accepted here: ``PnDTnHnMn.nS``, letters in any case, every part
optional but at least one present (a ``T`` must be followed by one), each part
signed, a sign before the ``P`` negating the whole, seconds with up to nine
fraction digits after ``.`` or ``,``.  Years, months and weeks are not durations
(``P1Y`` and ``P1W`` are refused).  Kafka refuses a negative duration.
"""

from __future__ import annotations

import re

BY_DURATION_PREFIX = "by_duration:"

# java.time.Duration's own pattern (Duration.Lazy.PATTERN), ASCII digits only.
_PATTERN = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)

_NANOS = {"D": 86_400 * 10**9, "H": 3_600 * 10**9, "M": 60 * 10**9, "S": 10**9}
#: java.time.Duration holds seconds in a long.
_MAX_SECONDS = 2**63 - 1


def parse_duration_nanos(text: str) -> int:
    """The signed length of an ISO-8601 duration in nanoseconds; ``ValueError`` naming the text."""
    if not isinstance(text, str):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    m = _PATTERN.fullmatch(text)
    if not m or m.group(3) == "T" or not any(m.group(i) is not None for i in (2, 4, 5, 6)):
        raise ValueError(f"not an ISO-8601 duration (PnDTnHnMn.nS): {text!r}")
    sign, days, _, hours, minutes, seconds, fraction = m.groups()
    total = 0
    for part, unit in ((days, "D"), (hours, "H"), (minutes, "M"), (seconds, "S")):
        if part is not None:
            total += int(part) * _NANOS[unit]
    if fraction:
        nanos = int(fraction.ljust(9, "0"))
        total += -nanos if seconds.startswith("-") else nanos
    if sign == "-":
        total = -total
    if abs(total) // 10**9 > _MAX_SECONDS:
        raise ValueError(f"ISO-8601 duration out of range: {text!r}")
    return total


def parse_by_duration(text: str) -> int:
    """Milliseconds of a ``by_duration:`` value (``by_duration:PT1H`` -> 3600000) or of the bare
    duration (``P1DT2H30M``, ``PT0.5S``); ``ValueError`` for anything Kafka refuses, negative
    durations included.  Fractions of a millisecond are dropped (``Duration.toMillis``)."""
    if isinstance(text, str) and text.startswith(BY_DURATION_PREFIX):
        text = text[len(BY_DURATION_PREFIX):]
    nanos = parse_duration_nanos(text)
    if nanos < 0:
        raise ValueError(f"negative duration {text!r}: by_duration takes a duration of zero or more")
    return nanos // 1_000_000
