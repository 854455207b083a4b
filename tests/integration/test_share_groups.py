"""Share groups (KIP-932) judged by real confluent-kafka ``ShareConsumer``s (librdkafka 2.16) on
three broker processes: what each consumer was handed, with which delivery count, and what came
back after a release, a rejection, the delivery limit or a consumer's SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from helpers import wait_until
from share_support import SHARE_OVERRIDES, ShareReader, describe_share_group, produce, set_group_config
from support import BROKER_OVERRIDES

SHARE_CLUSTER = {**BROKER_OVERRIDES, **SHARE_OVERRIDES}
LIMIT = SHARE_OVERRIDES["group.share.delivery.count.limit"]

pytestmark = pytest.mark.parametrize("cluster", [SHARE_CLUSTER], indirect=True)


def _assignments(bootstrap: str, group: str) -> dict[str, set[tuple[str, int]]]:
    """client id -> (topic, partition)s, as the coordinator describes the group, once every member
    was told its assignment (its epoch is the group's); {} before."""
    g = describe_share_group(bootstrap, group)
    if g.error == 69:  # GROUP_ID_NOT_FOUND: no member joined yet
        return {}
    assert g.error == 0, g
    if any(m.epoch != g.epoch for m in g.members):
        return {}
    return {m.client_id: {(t, p) for t, ps in m.assignment.items() for p in ps} for m in g.members}


def _stop_all(readers) -> None:
    for r in readers:
        r.stop()


def test_three_share_consumers_one_explicit_release_reject_and_the_delivery_limit(cluster, create):
    """a and b (implicit) and x (explicit) share a 4-partition topic; x alone also reads a second
    topic, where the records it releases, rejects or releases forever go."""
    group, topic, own = "sg-three", "share-three", "share-three-x"
    create(topic, 4)
    create(own, 1)
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    before = [(p, f"pre-{p}-{i}".encode(), b"v") for p in range(4) for i in range(25)]
    produce(cluster.bootstrap, topic, before)

    def policy(m) -> str:
        key = m.key() or b""
        if key.startswith(b"rel-"):
            return "release" if m.delivery_count() == 1 else "accept"
        if key.startswith(b"rej-"):
            return "reject"
        if key.startswith(b"poison-"):
            return "release"
        return "accept"

    readers = [ShareReader("a", cluster.bootstrap, group, [topic]), ShareReader("b", cluster.bootstrap, group, [topic]),
               ShareReader("x", cluster.bootstrap, group, [topic, own], policy=policy)]
    for r in readers:
        r.start()

    def by_key(key: bytes):
        return [d for r in readers for d in r.deliveries if d.key == key]

    try:
        # every partition of the shared topic covered, each reader with at least one of it
        shared = {(topic, p) for p in range(4)}
        parts = wait_until(lambda: (a := _assignments(cluster.bootstrap, group)) and set(a) == {"a", "b", "x"}
                           and all(ps & shared for ps in a.values()) and set().union(*a.values()) >= shared and a,
                           timeout=60, interval=0.3, message="three members covering the 4 partitions")
        assert (own, 0) in parts["x"] and all((own, 0) not in parts[n] for n in "ab"), parts
        wait_until(lambda: set().union(*(r.seen() for r in readers)) >= {(p, o) for p in range(4) for o in range(25)},
                   timeout=60, message="the records produced before the consumers")
        specials = [(0, b"rel-1", b"v"), (0, b"rej-1", b"v"), (0, b"poison-1", b"v")] + \
                   [(0, f"after-{i}".encode(), b"v") for i in range(10)]
        produce(cluster.bootstrap, own, specials)
        wait_until(lambda: len(by_key(b"poison-1")) >= LIMIT and len(by_key(b"rel-1")) >= 2
                   and all(by_key(f"after-{i}".encode()) for i in range(10)), timeout=60,
                   message=lambda: f"poison {by_key(b'poison-1')}, rel {by_key(b'rel-1')}")
        # then a further lock period passes: nothing archived, rejected or accepted may come back
        time.sleep(SHARE_OVERRIDES["group.share.record.lock.duration.ms"] / 1000 + 2)
    finally:
        _stop_all(readers)
    assert not any(r.errors for r in readers), [r.errors for r in readers]
    rel, rej, poison = by_key(b"rel-1"), by_key(b"rej-1"), by_key(b"poison-1")
    # a RELEASE brings the record back, counted: to x (the only member of its partition) with count 2
    assert [(d.consumer, d.count, d.ack) for d in rel] == [("x", 1, "release"), ("x", 2, "accept")]
    # a REJECT archives it for good
    assert [(d.consumer, d.count) for d in rej] == [("x", 1)]
    # released at every delivery: archived at the limit, never delivered again
    assert [(d.consumer, d.count) for d in poison] == [("x", n) for n in range(1, LIMIT + 1)]
    # and the others kept flowing: each delivered once, accepted
    for i in range(10):
        assert [(d.consumer, d.count) for d in by_key(f"after-{i}".encode())] == [("x", 1)]
    # on the shared topic each record went to one consumer, once (nothing was released there)
    shared_deliveries = Counter((d.partition, d.offset) for r in readers for d in r.deliveries
                                if not d.key.startswith((b"rel-", b"rej-", b"poison-", b"after-")))
    assert set(shared_deliveries) == {(p, o) for p in range(4) for o in range(25)}
    assert max(shared_deliveries.values()) == 1, [k for k, n in shared_deliveries.items() if n > 1]


def test_eight_share_consumers_on_two_partitions_all_receive(cluster, create):
    group, topic = "sg-eight", "share-eight"
    create(topic, 2)
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    readers = [ShareReader(f"c{i}", cluster.bootstrap, group, [topic], config={"max.poll.records": 5})
               for i in range(8)]
    for r in readers:
        r.start()
    try:
        wait_until(lambda: len(_assignments(cluster.bootstrap, group)) == 8, timeout=60, interval=0.3,
                   message="eight members")
        a = _assignments(cluster.bootstrap, group)
        assert all(len(ps) == 1 for ps in a.values()), a  # more members than partitions: one each
        assert Counter(p for ps in a.values() for _, p in ps) == {0: 4, 1: 4}, a
        sent = 0
        deadline = time.time() + 60
        while not all(r.deliveries for r in readers):
            assert time.time() < deadline, [len(r.deliveries) for r in readers]
            produce(cluster.bootstrap, topic, [(p, f"k{sent + i}".encode(), b"v") for i in range(10) for p in (0, 1)])
            sent += 10
            time.sleep(0.2)
        wait_until(lambda: sum(len(r.seen()) for r in readers) >= sent * 2, timeout=60,
                   message="every record delivered")
    finally:
        _stop_all(readers)
    counts = Counter((d.partition, d.offset) for r in readers for d in r.deliveries)
    assert len(counts) == sent * 2
    assert max(counts.values()) == 1, [tp for tp, n in counts.items() if n > 1][:10]


HOLDER = r"""
import sys, time
from confluent_kafka import ShareConsumer
sc = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "client.id": "holder",
                    "share.acknowledgement.mode": "explicit"})
sc.subscribe([sys.argv[3]])
while True:
    try:
        msgs = sc.poll(0.5)
    except Exception:  # IllegalStateException: the records of the last poll are not acknowledged
        time.sleep(0.2)
        continue
    for m in msgs:
        if not m.error():
            print(m.partition(), m.offset(), m.delivery_count(), flush=True)
"""


def test_sigkill_of_a_share_consumer_holding_records(cluster, create, tmp_path):
    """It holds records it never acknowledges; SIGKILL: they reach the other consumer (counted twice),
    and nothing else is delivered twice."""
    group, topic = "sg-kill", "share-kill"
    create(topic, 1)
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    produce(cluster.bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(50)])
    out = tmp_path / "holder.out"
    with open(out, "w") as f:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, cluster.bootstrap, group, topic], stdout=f,
                                  stderr=subprocess.STDOUT, env=dict(os.environ))
    other = None
    try:
        held = wait_until(lambda: [tuple(map(int, line.split())) for line in out.read_text().splitlines()
                                   if line[:1].isdigit()], timeout=60, message="the holder's first records")
        other = ShareReader("other", cluster.bootstrap, group, [topic])
        other.start()
        wait_until(lambda: len(_assignments(cluster.bootstrap, group)) == 2, timeout=60, message="two members")
        time.sleep(1)  # the other polls while the holder holds: it must not be given the held records
        assert not other.seen() & {(p, o) for p, o, _ in held}
        assert holder.poll() is None, out.read_text()[-2000:]  # alive, holding, until killed
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        held_now = [tuple(map(int, line.split())) for line in out.read_text().splitlines() if line[:1].isdigit()]
        wait_until(lambda: other.seen() >= {(0, o) for o in range(50)}, timeout=60,
                   message=lambda: f"the other to get all 50 (has {len(other.seen())})")
    finally:
        if holder.poll() is None:
            holder.kill()
        if other is not None:
            other.stop()
    held_set = {(p, o) for p, o, _ in held_now}
    again = {(d.partition, d.offset): d.count for d in other.deliveries if (d.partition, d.offset) in held_set}
    assert again and set(again.values()) == {2}, again  # delivered again, its count kept
    counts = Counter((d.partition, d.offset) for d in other.deliveries)
    assert max(counts.values()) == 1


@pytest.mark.parametrize("victim", ["leader", "coordinator"])
def test_a_broker_sigkilled_while_share_consumers_acknowledge(cluster, create, czk, victim):
    """Two ShareConsumers accept and commit_sync every record; a partition leader (not the coordinator),
    or the group's coordinator, is SIGKILLed mid-stream and started again.  Every record is delivered,
    and no record the broker confirmed as accepted is ever delivered again."""
    from support import broker_log_has, leaders

    from testkit.zk_history import read_coordinator

    group, topic, n = f"sg-kill-{victim}", f"share-kill-{victim}", 600
    create(topic, 3)
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    produce(cluster.bootstrap, topic, [(p, f"k{p}-{i}".encode(), b"v") for i in range(n) for p in range(3)], batch=30)
    everything = {(p, o) for p in range(3) for o in range(n)}
    readers = [ShareReader(f"c{i}", cluster.bootstrap, group, [topic], confirm=True, pace=0.05,
                           config={"max.poll.records": 10}) for i in range(2)]
    for r in readers:
        r.start()

    def delivered():
        return set().union(*(r.seen() for r in readers))

    try:
        wait_until(lambda: len(delivered()) >= 300, timeout=60, message="the first records")
        coordinator = wait_until(lambda: (c := read_coordinator(czk, group)) is not None and (c,),
                                 message="the coordinator")[0]
        led = leaders(cluster.bootstrap, topic)
        if victim == "coordinator":
            target = coordinator
        else:
            target = next(b for b in sorted(set(led.values())) if b != coordinator)
        cluster.kill_broker(target)
        killed_at = len(delivered())
        cluster.start_broker(target)
        wait_until(lambda: delivered() >= everything, timeout=120,
                   message=lambda: f"every record delivered ({len(delivered())} of {len(everything)})")
        if victim == "coordinator":  # the new coordinator took both members back from the saved membership
            wait_until(lambda: sum(broker_log_has(cluster, b, f"share group {group}: member {m} taken back")
                                   for b in cluster.brokers for m in _member_ids(cluster, group)) >= 2,
                       timeout=30, message="both members taken back by the new coordinator")
        assert killed_at < len(everything)  # the fault came mid-stream
    finally:
        _stop_all(readers)
    confirmed: dict = {}
    for r in readers:
        for key, at in r.confirmed.items():
            confirmed[key] = min(at, confirmed.get(key, at))
    assert len(confirmed) > len(everything) // 2, len(confirmed)
    late = [(d.consumer, d.partition, d.offset, d.count) for r in readers for d in r.deliveries
            if (d.partition, d.offset) in confirmed and d.at > confirmed[(d.partition, d.offset)]]
    assert not late, f"delivered again after the broker confirmed them accepted: {late[:10]}"
    counts = Counter((d.partition, d.offset) for r in readers for d in r.deliveries)
    again = {k: c for k, c in counts.items() if c > 1}
    # redeliveries only for records in flight at the fault: far fewer than were read
    assert len(again) < len(everything) // 3, len(again)


def test_records_held_at_their_last_delivery_when_the_leader_is_sigkilled_are_never_handed_out_again(
        cluster, create, czk):
    """Seen from outside: a ShareConsumer releases records until their last allowed delivery and
    holds them then; the partition's leader is SIGKILLed and started again: the next consumer was
    handed all of them once more, with a delivery count beyond the limit.  The crash ends their
    locks as running out would: they are ARCHIVED, and the next consumer gets only what came after."""
    import json

    from confluent_kafka import AcknowledgeType, ShareConsumer
    from support import leaders

    group, topic, n = "sg-limit-crash", "share-limit-crash", 20
    lock_s = SHARE_OVERRIDES["group.share.record.lock.duration.ms"] / 1000
    create(topic, 1)
    set_group_config(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    produce(cluster.bootstrap, topic, [(0, f"k{i}".encode(), b"v") for i in range(n)], batch=n)
    holder = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": "holder",
                            "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    held: dict[int, float] = {}

    def hold_at_the_limit() -> bool:
        released = False
        for m in holder.poll(0.2):
            assert m.error() is None, m.error()
            assert m.delivery_count() <= LIMIT, (m.offset(), m.delivery_count())
            if m.delivery_count() < LIMIT:
                holder.acknowledge(m, AcknowledgeType.RELEASE)
                released = True
            else:
                held.setdefault(m.offset(), time.monotonic())
        if released:
            holder.commit_sync(10)
        return len(held) == n

    def written() -> list:
        data, _ = czk.get(f"/share-groups/{group}/{topic}/0")
        return json.loads(data)["ranges"]

    next_reader = None
    try:
        wait_until(hold_at_the_limit, timeout=60, message=lambda: f"{n} records held at delivery {LIMIT}; "
                                                                  f"have {len(held)}")
        # the acquisitions are written behind: the state of all n at count LIMIT is in ZooKeeper
        wait_until(lambda: [r[:2] + r[3:] for r in written()] == [[0, n - 1, LIMIT]], timeout=10,
                   message=lambda: f"the held records' state written: {written()}")
        leader = leaders(cluster.bootstrap, topic)[0]
        cluster.kill_broker(leader)
        assert time.monotonic() - min(held.values()) < lock_s, "the locks ran out before the kill: no verdict"
        cluster.start_broker(leader)
        produce(cluster.bootstrap, topic, [(0, b"after", b"v")])
        next_reader = ShareReader("next", cluster.bootstrap, group, [topic])
        next_reader.start()
        wait_until(lambda: (0, n) in next_reader.seen(), timeout=60, message="the record produced after the crash")
        got = sorted((d.offset, d.count) for d in next_reader.deliveries)
        assert got == [(n, 1)], f"handed out again after the crash (offset, delivery count): {got}"
    finally:
        if next_reader is not None:
            next_reader.stop()
        holder.close()


def _member_ids(cluster, group: str) -> list[str]:
    return [m.member_id for m in describe_share_group(cluster.bootstrap, group).members]


def test_three_cli_members_of_a_share_group_split_a_topic_with_one_partition(cluster, create, tmp_path):
    """``spark-coord consume --share-group`` (our thin share consumer) three times on one partition:
    the records are split between them and every record is printed once."""
    group, topic, n = "sg-cli", "share-cli", 300
    create(topic, 1)
    outs, procs = [], []
    for i in range(3):
        out = tmp_path / f"member-{i}.out"
        outs.append(out)
        with open(out, "w") as f:
            procs.append(subprocess.Popen([sys.executable, "-m", "spark_coord.cli", "--log-level", "WARNING",
                                           "consume", "-b", cluster.bootstrap, "--share-group", group,
                                           "--topic", topic, "-K", ":"], stdout=f, stderr=subprocess.STDOUT))
    try:
        # all three in the group and told the same epoch; the share partition starts at the log end
        # ("latest") with the first fetch, so records are produced once every member fetches
        def told(g):  # every member told the group's epoch
            return g.error == 0 and all(m.epoch == g.epoch for m in g.members) and len(g.members)

        wait_until(lambda: told(describe_share_group(cluster.bootstrap, group)) == 3, timeout=60, interval=0.3,
                   message="three members")
        produce(cluster.bootstrap, topic, [(0, b"warm", b"up")])
        wait_until(lambda: any("warm:up" in o.read_text() for o in outs), timeout=30, message="the first record")
        for i in range(0, n, 10):  # small record batches, so the members take turns
            produce(cluster.bootstrap, topic, [(0, f"k{j}".encode(), b"v") for j in range(i, i + 10)], batch=10)

        def printed() -> list[str]:
            return [line.split(":")[0] for o in outs for line in o.read_text().splitlines()
                    if line.startswith("k") and ":" in line]

        wait_until(lambda: len(set(printed())) >= n, timeout=60,
                   message=lambda: f"every record printed ({len(set(printed()))} of {n})")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(30) for p in procs]
    assert codes == [0, 0, 0], [o.read_text()[-2000:] for o in outs]
    lines = printed()
    assert sorted(lines) == sorted(f"k{j}" for j in range(n)), Counter(lines).most_common(3)  # each once
    per_member = [sum(1 for line in o.read_text().splitlines() if line.startswith("k")) for o in outs]
    # the records were split: no member printed them all.  (Which members win the race for each new
    # batch is not fixed: one run saw 70 / 230 / 0, so "every member prints some" is not asserted.)
    assert sum(1 for c in per_member if c > 0) >= 2, per_member
