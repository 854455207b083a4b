"""What a member subscribes to: Kafka 0.8's ``TopicCount``.

Either *static* -- ``{topic: streams}`` -- or *wildcard* -- one regular
expression (matched against the whole topic name, as Kafka's whitelist does)
with a number of streams for every matching topic.  Each stream is a consumer
thread with the id ``<consumer_id>-<i>``; partitions are assigned to threads.

The ZooKeeper form is Kafka 0.8's member registration subscription:
``{"pattern": "static", "subscription": {"t": 2}}`` or
``{"pattern": "white_list", "subscription": {"<regex>": 2}}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from spark_coord.zk import paths

#: Most streams (threads) one member may ask for per topic.
MAX_STREAMS = 1024
#: Longest subscription regex we compile (bounds compile time and memory).
MAX_PATTERN_LENGTH = 1000
#: Most topics in one static subscription.
MAX_TOPICS = 10000

STATIC = "static"
WHITE_LIST = "white_list"


def _streams(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STREAMS:
        raise ValueError(f"{what}: streams must be an integer in 1..{MAX_STREAMS}, got {value!r}")
    return value


@dataclass(frozen=True)
class TopicCount:
    """A member's subscription; build it with ``static`` / ``wildcard`` / ``from_request``."""

    topics: tuple[tuple[str, int], ...] = ()
    pattern: str | None = None
    pattern_streams: int = 0
    _regex: "re.Pattern[str] | None" = field(default=None, compare=False, repr=False)

    @classmethod
    def static(cls, topics: Mapping[str, int]) -> "TopicCount":
        if not isinstance(topics, Mapping) or not topics:
            raise ValueError("a static subscription needs at least one topic")
        if len(topics) > MAX_TOPICS:
            raise ValueError(f"a static subscription may name at most {MAX_TOPICS} topics, got {len(topics)}")
        items = tuple(sorted((paths.validate_topic(t), _streams(f"topic {t!r}", n)) for t, n in topics.items()))
        return cls(topics=items)

    @classmethod
    def wildcard(cls, pattern: str, streams: int) -> "TopicCount":
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"subscription pattern must be a non-empty string, got {pattern!r}")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise ValueError(f"subscription pattern {pattern[:40]!r}... is longer than {MAX_PATTERN_LENGTH} characters")
        try:
            regex = re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as e:
            raise ValueError(f"invalid subscription pattern {pattern!r}: {e}") from None
        return cls(pattern=pattern, pattern_streams=_streams(f"pattern {pattern!r}", streams), _regex=regex)

    @classmethod
    def from_request(cls, topics: Any, pattern: Any, pattern_streams: Any) -> "TopicCount":
        """From RegisterConsumer's ``topics: [{topic, streams}]``, ``pattern``, ``pattern_streams``.

        Exactly one of a non-empty ``topics`` list and a ``pattern`` must be given;
        anything else raises ``ValueError`` saying what is wrong."""
        has_topics = bool(topics)
        has_pattern = pattern not in (None, "")
        if has_topics == has_pattern:
            raise ValueError("subscribe either to a list of topics or to a pattern (exactly one of them)")
        if has_pattern:
            return cls.wildcard(pattern, pattern_streams)
        if not isinstance(topics, (list, tuple)):
            raise ValueError(f"topics must be a list of {{topic, streams}}, got {type(topics).__name__}")
        counts: dict[str, int] = {}
        for entry in topics:
            if not isinstance(entry, Mapping) or "topic" not in entry:
                raise ValueError(f"topics entry {entry!r} is not {{topic, streams}}")
            topic = entry["topic"]
            if topic in counts:
                raise ValueError(f"topic {topic!r} is listed twice")
            counts[topic] = entry.get("streams", 1)
        return cls.static(counts)

    # ------------------------------------------------------------------ queries

    @property
    def is_wildcard(self) -> bool:
        return self.pattern is not None

    def regex(self) -> "re.Pattern[str]":
        regex = self._regex
        if regex is None:
            regex = re.compile(self.pattern or "")
            object.__setattr__(self, "_regex", regex)
        return regex

    def matches(self, topic: str) -> bool:
        """Does this subscription cover ``topic``?"""
        if self.pattern is not None:
            return self.regex().fullmatch(topic) is not None
        return any(t == topic for t, _ in self.topics)

    def streams_for(self, topic: str) -> int:
        """How many consumer threads this member runs for ``topic`` (0: not subscribed)."""
        if self.pattern is not None:
            return self.pattern_streams if self.matches(topic) else 0
        return dict(self.topics).get(topic, 0)

    def thread_ids(self, consumer_id: str, topic: str) -> list[str]:
        """The consumer thread ids ``<consumer_id>-<i>`` that consume ``topic``."""
        return [f"{consumer_id}-{i}" for i in range(self.streams_for(topic))]

    def topics_in(self, available: Iterable[str]) -> list[str]:
        """The topics of ``available`` this subscription covers, sorted."""
        return sorted(t for t in available if self.matches(t))

    def static_topics(self) -> list[str]:
        return [t for t, _ in self.topics]

    # --------------------------------------------------------------- ZooKeeper

    def to_json(self) -> dict[str, Any]:
        """Kafka 0.8's ``pattern`` + ``subscription`` fields of a member registration."""
        if self.pattern is not None:
            return {"pattern": WHITE_LIST, "subscription": {self.pattern: self.pattern_streams}}
        return {"pattern": STATIC, "subscription": dict(self.topics)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TopicCount":
        """Inverse of ``to_json``; ``ValueError`` on anything else."""
        kind = doc.get("pattern")
        sub = doc.get("subscription")
        if not isinstance(sub, Mapping) or not sub:
            raise ValueError(f"member subscription {sub!r} is not a non-empty object")
        if kind == STATIC:
            return cls.static(dict(sub))
        if kind == WHITE_LIST and len(sub) == 1:
            (pattern, streams), = sub.items()
            return cls.wildcard(pattern, streams)
        raise ValueError(f"unsupported subscription pattern {kind!r}")

    def describe(self) -> str:
        if self.pattern is not None:
            return f"/{self.pattern}/ x{self.pattern_streams}"
        return ", ".join(f"{t} x{n}" for t, n in self.topics)
