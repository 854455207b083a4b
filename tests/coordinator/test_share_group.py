"""The share-group door (KIP-932) on the coordinator core, with a hand-advanced clock: Kafka's simple
assignment, epochs told with answers, fencing, liveness, the one-type-per-group-id rule, and members
taken back by a newly elected coordinator from the membership it saved."""

from __future__ import annotations

import uuid

from coord_harness import Harness, async_test

from spark_coord.coordinator.core.config import CoordinatorConfig
from spark_coord.coordinator.core.coordinator import Coordinator
from spark_coord.coordinator.doors.consumer_group import ConsumerGroups
from spark_coord.coordinator.doors.share_group import (
    ShareGroups,
    decode_membership,
    encode_membership,
    simple_assignment,
)
from spark_coord.errors import ErrorCode

SESSION, INTERVAL = 6000, 1000


class Sharer:
    """What a share consumer (librdkafka's) sends: it joins with epoch 0, then heartbeats with the
    epoch it was told and takes each assignment an answer carries."""

    def __init__(self, door: ShareGroups, topics=("t",), group: str = "sg"):
        self.door, self.group, self.topics = door, group, list(topics)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.partitions: set[tuple[bytes, int]] = set()

    def heartbeat(self, epoch: int | None = None, topics=None) -> dict:
        epoch = self.epoch if epoch is None else epoch
        names = self.topics if epoch == 0 else topics
        out = self.door.heartbeat({"group_id": self.group, "member_id": self.member_id, "member_epoch": epoch,
                                   "rack_id": None, "subscribed_topic_names": names}, "rdkafka", "127.0.0.1")
        if out["error_code"] == 0 and epoch >= 0:
            self.epoch = out["member_epoch"]
            if out["assignment"] is not None:
                self.partitions = {(e["topic_id"], p) for e in out["assignment"]["topic_partitions"]
                                   for p in e["partitions"]}
        return out


async def _start(topics=None) -> tuple[Harness, ShareGroups]:
    h = await Harness(topics or {"t": 4}, share_session_timeout_ms=SESSION,
                      share_heartbeat_interval_ms=INTERVAL).start()
    h.coord.topic_ids = {t: uuid.uuid4().bytes for t in h.coord.topics}
    return h, ShareGroups(h.coord)


def test_simple_assignment_covers_every_partition_and_balances():
    # fewer members than partitions: one member per partition, shares differ by at most one
    a = simple_assignment({"m1": ["t"], "m2": ["t"], "m3": ["t"]}, {"t": 4})
    assert sorted(p for m in a.values() for p in m["t"]) == [0, 1, 2, 3]
    assert sorted(len(m["t"]) for m in a.values()) == [1, 1, 2]
    # more members than partitions: every member gets one, every partition has several
    a = simple_assignment({f"m{i}": ["t"] for i in range(8)}, {"t": 2})
    assert all(len(m["t"]) == 1 for m in a.values())
    assert sorted(m["t"][0] for m in a.values()) == [0, 0, 0, 0, 1, 1, 1, 1]
    # a topic nobody subscribes to, or that has no partitions, is nobody's
    assert simple_assignment({"m1": ["t", "gone"]}, {"t": 1, "u": 3}) == {"m1": {"t": [0]}}


@async_test
async def test_members_join_share_the_partitions_and_learn_new_epochs_from_answers():
    h, door = await _start()
    a, b = Sharer(door), Sharer(door)
    out = a.heartbeat()
    assert out["error_code"] == 0 and out["member_epoch"] == 1 and out["heartbeat_interval_ms"] == INTERVAL
    assert len(a.partitions) == 4
    assert a.heartbeat()["assignment"] is None  # nothing changed
    b.heartbeat()
    assert len(b.partitions) == 2
    # a has not heard yet: its epoch 1 is still good, and the answer moves it on with its new share
    out = a.heartbeat()
    assert out["member_epoch"] == b.epoch and len(a.partitions) == 2 and not a.partitions & b.partitions
    # an epoch it never had is fenced; an unknown member is told so (it joins again)
    assert a.heartbeat(epoch=a.epoch + 5)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    stranger = Sharer(door)
    assert stranger.heartbeat(epoch=3)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    # leaving: the other takes every partition with its next answer
    assert a.heartbeat(epoch=-1)["member_epoch"] == -1
    b.heartbeat()
    assert len(b.partitions) == 4
    await h.coord.deactivate()


@async_test
async def test_quick_joins_never_fence_a_member_that_heard_of_none_of_them():
    h, door = await _start()
    a = Sharer(door)
    a.heartbeat()
    for _ in range(3):
        Sharer(door).heartbeat()  # three joins, each a new group epoch, before a heartbeats again
    out = a.heartbeat()
    assert out["error_code"] == 0 and len(a.partitions) == 1
    await h.coord.deactivate()


@async_test
async def test_a_silent_member_is_removed_after_its_session():
    h, door = await _start()
    a, b = Sharer(door), Sharer(door)
    a.heartbeat(), b.heartbeat()
    for _ in range(4):
        await h.advance(SESSION // 4)
        b.heartbeat()
    group = door.describe("sg")
    assert set(group.members) == {b.member_id}
    b.heartbeat()
    assert len(b.partitions) == 4
    await h.coord.deactivate()


@async_test
async def test_a_group_id_is_of_one_type_at_a_time():
    h, door = await _start()
    Sharer(door).heartbeat()
    consumer = ConsumerGroups(h.coord)
    out = await consumer.heartbeat({"group_id": "sg", "member_id": "m", "member_epoch": 0,
                                    "subscribed_topic_names": ["t"]}, 1, "rdkafka", "127.0.0.1")
    assert out["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    h.register("c1", group="kafka-group")
    await h.settle()
    out = Sharer(door, group="kafka-group").heartbeat()
    assert out["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND and "not a share group" in out["error_message"]
    await h.coord.deactivate()


@async_test
async def test_a_new_coordinator_takes_the_members_back_from_the_saved_membership():
    h, door = await _start()
    a, b = Sharer(door), Sharer(door)
    a.heartbeat(), b.heartbeat(), a.heartbeat()
    await h.settle()  # the saves run
    saved = h.store.share_groups["sg"]
    epoch, members = decode_membership(saved)
    assert set(members) == {a.member_id, b.member_id} and epoch >= 2
    # the coordinator fails over: a new one on the same store is elected and restores the group
    await h.coord.deactivate()
    door.reset()
    c2 = Coordinator(CoordinatorConfig(share_session_timeout_ms=SESSION, share_heartbeat_interval_ms=INTERVAL),
                     h.store, h.timer, h.timer.clock, lambda: [(0, "127.0.0.1", 9092)])
    door2 = ShareGroups(c2)
    await c2.activate(99)
    c2.topic_ids = dict(h.coord.topic_ids)
    door2.on_topics_changed()
    a.door = b.door = door2
    # both heartbeat in the epochs they had: taken back, no UNKNOWN_MEMBER_ID, no join
    for s in (a, b):
        out = s.heartbeat()
        assert out["error_code"] == 0, out
    assert len(a.partitions) == 2 and len(b.partitions) == 2 and not a.partitions & b.partitions
    # a member that never comes back is removed after its session timeout
    for _ in range(4):
        await h.advance(SESSION // 4)
        a.heartbeat()
    assert set(door2.describe("sg").members) == {a.member_id}
    await c2.deactivate()


def test_saved_membership_round_trips_and_garbage_is_refused():
    from spark_coord.coordinator.doors.share_group import ShareGroup, ShareMember

    g = ShareGroup("sg", epoch=7)
    g.members["m"] = ShareMember("m", "rdkafka", "10.0.0.1", None, ["b", "a"], epoch=7, target_epoch=7)
    assert decode_membership(encode_membership(g)) == (7, {"m": (["a", "b"], 7, "rdkafka", "10.0.0.1")})
    assert decode_membership(b"") == (0, {})
    for bad in (b"x", b"[]", b'{"version":2}', b'{"version":1,"epoch":-1,"members":{}}',
                b'{"version":1,"epoch":1,"members":{"m":{"topics":[""],"epoch":1}}}'):
        try:
            decode_membership(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
