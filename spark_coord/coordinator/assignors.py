"""Partition assignment: pure functions from subscriptions and partition counts to owners.

``range`` is Kafka 0.7/0.8's rule, per topic: sort the partitions and the
consumer threads that consume the topic; with ``n`` partitions and ``k``
threads each thread gets ``n // k`` consecutive partitions and the first
``n % k`` threads one more.

``roundrobin`` sorts all topic-partitions of the topics anyone subscribes to,
and deals them one at a time over the sorted list of all consumer threads,
skipping threads that do not consume that partition's topic.

Both return ``{(topic, partition): consumer_thread_id}``: every partition of a
subscribed, existing topic has exactly one owner (a dict cannot give one
partition two owners).
"""

from __future__ import annotations

import itertools
from typing import Callable, Mapping

from spark_coord.coordinator.subscription import TopicCount

Assignment = dict[tuple[str, int], str]
Assignor = Callable[[Mapping[str, TopicCount], Mapping[str, int]], Assignment]


def _threads_per_topic(members: Mapping[str, TopicCount], topics: Mapping[str, int]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for topic in sorted(topics):
        if topics[topic] <= 0:
            continue
        threads = [tid for cid, tc in members.items() for tid in tc.thread_ids(cid, topic)]
        if threads:
            out[topic] = sorted(threads)
    return out


def range_assign(members: Mapping[str, TopicCount], topics: Mapping[str, int]) -> Assignment:
    """Kafka's range assignment, topic by topic."""
    owners: Assignment = {}
    for topic, threads in _threads_per_topic(members, topics).items():
        n, k = topics[topic], len(threads)
        per, extra = divmod(n, k)
        for i, thread in enumerate(threads):
            start = per * i + min(i, extra)
            for p in range(start, start + per + (1 if i < extra else 0)):
                owners[(topic, p)] = thread
    return owners


def roundrobin_assign(members: Mapping[str, TopicCount], topics: Mapping[str, int]) -> Assignment:
    """All topic-partitions, sorted, dealt over all sorted threads that consume their topic."""
    per_topic = _threads_per_topic(members, topics)
    all_threads = sorted({t for threads in per_topic.values() for t in threads})
    if not all_threads:
        return {}
    consumes = {topic: set(threads) for topic, threads in per_topic.items()}
    owners: Assignment = {}
    ring = itertools.cycle(all_threads)
    for topic in sorted(per_topic):
        for p in range(topics[topic]):
            for thread in ring:  # terminates: at least one thread consumes the topic
                if thread in consumes[topic]:
                    owners[(topic, p)] = thread
                    break
    return owners


ASSIGNORS: dict[str, Assignor] = {"range": range_assign, "roundrobin": roundrobin_assign}


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name`` (``range`` or ``roundrobin``); ValueError naming it otherwise."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown partition assignment strategy {name!r} (known: {', '.join(ASSIGNORS)})") from None


def thread_owner(thread_id: str) -> str:
    """The consumer id of a consumer thread id ``<consumer_id>-<i>``."""
    return thread_id.rsplit("-", 1)[0]


def by_consumer(owners: Assignment) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """``{consumer_id: {thread_id: [(topic, partition), ...]}}`` from an assignment."""
    out: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for tp in sorted(owners):
        thread = owners[tp]
        out.setdefault(thread_owner(thread), {}).setdefault(thread, []).append(tp)
    return out
