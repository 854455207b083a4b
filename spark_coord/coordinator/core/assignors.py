"""Partition assignment: pure functions from subscriptions, partition counts and the
current owners to new owners.

``sticky`` (the default) keeps every partition with its current owner where it can
and moves as few partitions as balance needs: with the same subscription for
every consumer thread, each thread ends with ``n // k`` or ``n // k + 1`` of the
``n`` partitions (``k`` threads), the threads that held most keep the larger
shares, and only partitions above a thread's share, or whose owner is gone,
move -- to the least loaded threads, in a fixed order.  With different
subscriptions it keeps owners too, places each free partition on the least
loaded thread that may take it, and then moves partitions one at a time from a
thread to one holding at least two fewer that may take them, until no such
move is left.  The same input always gives the same answer.

``range`` is Kafka 0.7/0.8's rule, per topic: sort the partitions and the
consumer threads that consume the topic; with ``n`` partitions and ``k``
threads each thread gets ``n // k`` consecutive partitions and the first
``n % k`` threads one more.

``roundrobin`` sorts all topic-partitions of the topics anyone subscribes to,
and deals them one at a time over the sorted list of all consumer threads,
skipping threads that do not consume that partition's topic.

All return ``{(topic, partition): consumer_thread_id}``: every partition of a
subscribed, existing topic has exactly one owner (a dict cannot give one
partition two owners).  ``range`` and ``roundrobin`` ignore the current owners:
they are Kafka 0.8's rules, kept for those who ask for them.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Mapping

from spark_coord.coordinator.core.subscription import TopicCount

Assignment = dict[tuple[str, int], str]
#: ``assignor(members, topics, previous)``: ``previous`` is the current ``{partition: thread}``.
Assignor = Callable[[Mapping[str, TopicCount], Mapping[str, int], Mapping[tuple[str, int], str]], Assignment]


def _threads_per_topic(members: Mapping[str, TopicCount], topics: Mapping[str, int]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for topic in sorted(topics):
        if topics[topic] <= 0:
            continue
        threads = [tid for cid, tc in members.items() for tid in tc.thread_ids(cid, topic)]
        if threads:
            out[topic] = sorted(threads)
    return out


def range_assign(members: Mapping[str, TopicCount], topics: Mapping[str, int],
                 previous: Mapping[tuple[str, int], str] | None = None) -> Assignment:
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


def roundrobin_assign(members: Mapping[str, TopicCount], topics: Mapping[str, int],
                      previous: Mapping[tuple[str, int], str] | None = None) -> Assignment:
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


def sticky_assign(members: Mapping[str, TopicCount], topics: Mapping[str, int],
                  previous: Mapping[tuple[str, int], str] | None = None) -> Assignment:
    """Balanced with the fewest moves from ``previous`` (see the module docstring)."""
    per_topic = _threads_per_topic(members, topics)
    threads = sorted({th for ths in per_topic.values() for th in ths})
    if not threads:
        return {}
    previous = previous or {}
    owned: dict[str, list[tuple[str, int]]] = {th: [] for th in threads}
    free: list[tuple[str, int]] = []
    for topic, eligible in per_topic.items():
        allowed = set(eligible)
        for p in range(topics[topic]):
            holder = previous.get((topic, p))
            if holder in allowed:
                owned[holder].append((topic, p))
            else:
                free.append((topic, p))
    if len({tuple(t for t, ths in per_topic.items() if th in ths) for th in threads}) == 1:
        _balance_by_quota(threads, owned, free)
    else:
        _balance_by_moves(per_topic, owned, free)
    return {tp: th for th, tps in owned.items() for tp in tps}


def _balance_by_quota(threads: list[str], owned: dict[str, list[tuple[str, int]]],
                      free: list[tuple[str, int]]) -> None:
    """Every thread may take every partition: shares of n // k or n // k + 1, the larger ones for
    the threads holding most (fewest moves); partitions above a share and free ones go to the
    threads below theirs, least loaded first."""
    n = sum(len(tps) for tps in owned.values()) + len(free)
    base, extra = divmod(n, len(threads))
    order = sorted(threads, key=lambda th: (-len(owned[th]), th))
    quota = {th: base + (1 if i < extra else 0) for i, th in enumerate(order)}
    for th in threads:
        tps = sorted(owned[th])
        if len(tps) > quota[th]:
            free.extend(tps[quota[th]:])
            tps = tps[:quota[th]]
        owned[th] = tps
    heap = [(len(owned[th]), th) for th in threads if len(owned[th]) < quota[th]]
    heapq.heapify(heap)
    for tp in sorted(free):
        load, th = heapq.heappop(heap)
        owned[th].append(tp)
        if load + 1 < quota[th]:
            heapq.heappush(heap, (load + 1, th))


def _balance_by_moves(per_topic: dict[str, list[str]], owned: dict[str, list[tuple[str, int]]],
                      free: list[tuple[str, int]]) -> None:
    """Different subscriptions: free partitions to the least loaded thread that may take them, then
    single moves from a thread to one holding two fewer, while there is one (each move lowers the
    sum of squared loads, so this ends)."""
    for tp in sorted(free):
        th = min(per_topic[tp[0]], key=lambda t: (len(owned[t]), t))
        owned[th].append(tp)
    moved = True
    while moved:
        moved = False
        for src in sorted(owned, key=lambda t: (-len(owned[t]), t)):
            for tp in sorted(owned[src], reverse=True):
                dst = min(per_topic[tp[0]], key=lambda t: (len(owned[t]), t))
                if len(owned[dst]) + 2 <= len(owned[src]):
                    owned[src].remove(tp)
                    owned[dst].append(tp)
                    moved = True
                    break
            if moved:
                break


def sticky_range_assign(members: Mapping[str, TopicCount], topics: Mapping[str, int],
                        previous: Mapping[tuple[str, int], str] | None = None) -> Assignment:
    """Balanced topic by topic, with the fewest moves: each topic's partitions are shared by the
    threads that consume it as ``range`` shares them (``n // k`` or ``n // k + 1`` each), but
    partitions stay with their holders where the shares allow (Kafka 4's server-side ``range``
    assignor, KIP-848: balanced per topic and sticky)."""
    previous = previous or {}
    owners: Assignment = {}
    for topic, threads in _threads_per_topic(members, topics).items():
        owned: dict[str, list[tuple[str, int]]] = {th: [] for th in threads}
        free: list[tuple[str, int]] = []
        for p in range(topics[topic]):
            holder = previous.get((topic, p))
            (owned[holder] if holder in owned else free).append((topic, p))
        _balance_by_quota(threads, owned, free)
        owners.update({tp: th for th, tps in owned.items() for tp in tps})
    return owners


ASSIGNORS: dict[str, Assignor] = {"sticky": sticky_assign, "range": range_assign, "roundrobin": roundrobin_assign}

#: KIP-848's server-side assignors (``group.remote.assignor``), by the names clients send.
SERVER_ASSIGNORS: dict[str, Assignor] = {"uniform": sticky_assign, "range": sticky_range_assign}


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name`` (``sticky``, ``range`` or ``roundrobin``); ValueError naming it otherwise."""
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
