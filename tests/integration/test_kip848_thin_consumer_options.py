"""The KIP-848 thin consumer's group options on our brokers:

* static membership (``group_instance_id``): a member closed (epoch -2) and started again with the
  same instance id within the session timeout gets its partitions back, in the same epoch, while
  the other member's assignment does not change; a second live member with an instance id in use
  is refused (UNRELEASED_INSTANCE_ID, raised by the consumer);
* a subscription by regular expression, matched by the coordinator (``SubscribedTopicRegex``),
  which also gives the member a matching topic created later;
* ``spark-coord consume`` with an assignor the coordinator does not know: one error line
  (UNSUPPORTED_ASSIGNOR) and exit status 1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from helpers import wait_until
from kip848_readers import ThinReader, committed, produce
from support import log_end

PARTITIONS = 6


def _thin(bootstrap: str, group: str, name: str, **kwargs) -> ThinReader:
    from spark_coord.consumer.consumer import Consumer

    reader = ThinReader(Consumer(bootstrap, group, group_protocol="consumer", auto_offset_reset="smallest",
                                 auto_commit_interval_ms=200, session_timeout_ms=6000, **kwargs), name)
    reader.start()
    return reader


def _states(*readers) -> list[tuple[str, int]]:
    return [(r.consumer.connector.state.name, r.consumer.connector.epoch) for r in readers]


def _settled(*readers) -> bool:
    from spark_coord.consumer.kip848 import MemberState

    states = _states(*readers)
    return all(state == MemberState.STABLE.name for state, _ in states) and len({e for _, e in states}) == 1


def test_a_static_member_restarted_within_the_session_timeout_gets_its_partitions_back(cluster, create):
    from spark_coord.errors import ErrorCode, KafkaError

    group, topic = "g-kip848-static", "k848static"
    bootstrap = cluster.bootstrap
    create(topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS, 10)
    s1, s2 = (_thin(bootstrap, group, n, topics=[topic], group_instance_id=f"instance-{n}") for n in ("s1", "s2"))
    readers = [s1, s2]
    try:
        wait_until(lambda: sorted(s1.owned() | s2.owned()) == list(range(PARTITIONS)) and s1.owned() and s2.owned(),
                   timeout=60, message=lambda: f"s1 {s1.owned()} and s2 {s2.owned()} to split the partitions")
        ends = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group) == ends, timeout=60,
                   message=lambda: f"commits at {ends}: {committed(bootstrap, group)}")
        # the group settled: both members reconciled to the group's epoch (a member's epoch moves on
        # when the group's does, even with its partitions unchanged)
        wait_until(lambda: _settled(s1, s2), timeout=30, message=lambda: f"the group to settle: {_states(s1, s2)}")
        held, epoch = s1.owned(), s1.consumer.connector.epoch
        s2_assignments, s2_epoch = list(s2.assignments), s2.consumer.connector.epoch

        s1.stop()  # commits and leaves with epoch -2: its partitions wait for it
        assert s1.consumer.connector.left_cleanly
        produce(bootstrap, topic, PARTITIONS, 10, start=PARTITIONS * 10)
        again = _thin(bootstrap, group, "s1-again", topics=[topic], group_instance_id="instance-s1")
        readers.append(again)
        wait_until(lambda: again.owned() == held, timeout=30,
                   message=lambda: f"the restarted s1 to get {held} back: {again.owned()}")
        assert again.consumer.consumer_id != s1.consumer.consumer_id  # a new member id, the same instance
        assert again.consumer.connector.epoch == epoch
        ends = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group) == ends, timeout=60,
                   message=lambda: f"commits at {ends}: {committed(bootstrap, group)}")
        assert s2.assignments == s2_assignments and s2.consumer.connector.epoch == s2_epoch, \
            f"s2 moved: {s2.assignments} (was {s2_assignments})"

        # a second live member with an instance id in use: refused for good, the holder unmoved
        twin = _thin(bootstrap, group, "s2-twin", topics=[topic], group_instance_id="instance-s2")
        readers.append(twin)
        wait_until(lambda: twin.error is not None, timeout=30, message="the twin to be refused")
        assert isinstance(twin.error, KafkaError) and twin.error.code == ErrorCode.UNRELEASED_INSTANCE_ID, \
            repr(twin.error)
        assert "instance-s2" in str(twin.error)
        assert s2.assignments == s2_assignments and s2.error is None
    finally:
        for r in readers:
            if not r.closed:
                r.stop()
    reads = Counter(x for r in readers for x in r.read())
    assert set(reads) == {(p, o) for (_, p), end in ends.items() for o in range(end)}
    assert [x for x, n in reads.items() if n > 1] == [], "records read twice"


def test_a_regex_subscription_is_matched_by_the_coordinator(cluster, create):
    group, bootstrap = "g-kip848-regex", cluster.bootstrap
    for topic in ("rx-a", "rx-b", "other"):
        create(topic, 2)
        produce(bootstrap, topic, 2, 5)
    reader = _thin(bootstrap, group, "r1", pattern="rx-.*")
    try:
        wanted = {(t, p) for t in ("rx-a", "rx-b") for p in range(2)}
        wait_until(lambda: set(reader.consumer.assignment()) == wanted, timeout=60,
                   message=lambda: f"rx-a and rx-b, not other: {reader.consumer.assignment()}")
        create("rx-c", 2)
        produce(bootstrap, "rx-c", 2, 5)
        wanted |= {("rx-c", 0), ("rx-c", 1)}
        wait_until(lambda: set(reader.consumer.assignment()) == wanted, timeout=60,
                   message=lambda: f"rx-c, created later, to be assigned: {reader.consumer.assignment()}")
        wait_until(lambda: committed(bootstrap, group) == {tp: 5 for tp in wanted}, timeout=60,
                   message=lambda: f"every matching partition read and committed: {committed(bootstrap, group)}")
    finally:
        reader.stop()
    assert reader.error is None and len(reader.read()) == 30


def test_consume_with_an_unknown_assignor_ends_in_one_error_line(cluster, create):
    create("k848assignor", 1)
    done = subprocess.run([sys.executable, "-m", "spark_coord.cli", "consume", "-b", cluster.bootstrap,
                           "--group", "g-kip848-assignor", "--group-protocol", "consumer", "--topic", "k848assignor",
                           "--group-remote-assignor", "bogus"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "ERROR" in last and "UNSUPPORTED_ASSIGNOR" in last and "g-kip848-assignor" in last, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
