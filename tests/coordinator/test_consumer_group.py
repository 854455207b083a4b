"""Kafka 4's consumer group protocol (KIP-848) on the coordinator core (``coordinator.consumer_group``),
with a hand-driven clock: joining, reconciliation (a partition reaches its new owner only after the
old one stopped owning it), leaving, failure, epochs and their errors, server-side assignors,
regular-expression subscriptions, static membership, offsets, describing, and members taken back
after a failover."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from coord_harness import Harness, admin_of, async_test, offsets_of

from spark_coord.coordinator.core.group import LEASE_MARGIN_MS, GroupState, registry_key
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.doors.classic import ClassicGroups
from spark_coord.coordinator.doors.consumer_group import JOIN_WAIT_MS, ConsumerGroups
from spark_coord.coordinator.storage.store import StoredGroup, StoredMember
from spark_coord.errors import ErrorCode

SESSION, INTERVAL = 6000, 1000


class Modern:
    """What a consumer with group.protocol=consumer sends, step by step: it takes its assignment
    from each answer that carries one (revoking what the new one lacks at once) and says what it
    owns in its next heartbeat."""

    def __init__(self, h: Harness, door: ConsumerGroups, topics=("t",), group: str = "g", instance: str | None = None,
                 regex: str | None = None, assignor: str | None = None, member_id: str | None = None):
        self.h, self.door, self.group = h, door, group
        self.topics, self.regex, self.instance, self.assignor = list(topics), regex, instance, assignor
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.owned: set[tuple[str, int]] = set()
        self.revoked: list[set[tuple[str, int]]] = []
        self.assigned: list[set[tuple[str, int]]] = []
        self.changed = True  # tell what it owns in the next heartbeat

    def body(self, epoch: int | None = None, full: bool = False) -> dict:
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0 or full
        by_topic: dict[str, list[int]] = {}
        for t, p in self.owned:
            by_topic.setdefault(t, []).append(p)
        return {"group_id": self.group, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": self.instance, "rack_id": None, "rebalance_timeout_ms": 30000 if joining else -1,
                "subscribed_topic_names": (None if self.regex else self.topics) if joining else None,
                "subscribed_topic_regex": self.regex if joining else None,
                "server_assignor": self.assignor if joining else None,
                "topic_partitions": [{"topic_id": self.h.coord.topic_ids[t], "partitions": sorted(ps)}
                                     for t, ps in sorted(by_topic.items())] if (self.changed or joining) else None}

    async def heartbeat(self, epoch: int | None = None, version: int = 1, full: bool = False) -> dict:
        answer = await self.door.heartbeat(self.body(epoch, full), version, "rdkafka", "127.0.0.1")
        self.changed = False
        if answer["error_code"] == 0:
            self.epoch = answer["member_epoch"]
            if answer["assignment"] is not None:
                names = {tid: t for t, tid in self.h.coord.topic_ids.items()}
                new = {(names[e["topic_id"]], p) for e in answer["assignment"]["topic_partitions"]
                       for p in e["partitions"]}
                if self.owned - new:
                    self.revoked.append(self.owned - new)
                if new - self.owned:
                    self.assigned.append(new - self.owned)
                self.changed = new != self.owned
                self.owned = new
        return answer

    async def join(self, **kw) -> dict:
        """Join; when no assignment is ready, the joining heartbeat is answered after JOIN_WAIT_MS."""
        task = asyncio.get_running_loop().create_task(self.heartbeat(0, **kw))
        await self.h.settle()
        if not task.done():
            await self.h.advance(JOIN_WAIT_MS)
        answer = await asyncio.wait_for(task, 5)
        assert answer["error_code"] == 0, answer
        return answer


async def _start(topics=None, **cfg) -> tuple[Harness, ConsumerGroups, ClassicGroups]:
    cfg.setdefault("consumer_session_timeout_ms", SESSION)
    cfg.setdefault("consumer_heartbeat_interval_ms", INTERVAL)
    h = await Harness(topics or {"t": 6}, **cfg).start()
    h.coord.topic_ids = {t: uuid.uuid4().bytes for t in h.coord.topics}
    door = ConsumerGroups(h.coord)
    return h, door, ClassicGroups(h.coord, door)


async def _settle(h: Harness, *clients: Modern, rounds: int = 6) -> None:
    """Everyone heartbeats a few times (the coordinator's rounds run in between)."""
    for _ in range(rounds):
        for c in clients:
            assert (await c.heartbeat())["error_code"] == 0
        await h.settle()


@async_test
async def test_a_member_joins_and_gets_every_partition_in_its_first_answer():
    h, door, _ = await _start()
    a = Modern(h, door)
    answer = await a.join()
    assert answer["member_id"] == a.member_id and answer["member_epoch"] >= 1
    assert answer["heartbeat_interval_ms"] == INTERVAL
    assert a.owned == {("t", p) for p in range(6)}
    g = h.group()
    assert g.members[a.member_id].kind == "consumer" and g.members[a.member_id].incremental
    assert (await a.heartbeat())["assignment"] is None  # nothing changed: no assignment in the answer


@async_test
async def test_a_partition_moves_only_after_its_old_owner_stopped_owning_it():
    h, door, _ = await _start()
    a, b = Modern(h, door), Modern(h, door)
    await a.join()
    await b.join()
    assert b.owned == set()  # a still owns everything
    answer = await a.heartbeat()  # a learns its new assignment: three partitions fewer
    assert len(a.owned) == 3 and len(a.revoked) == 1 and answer["member_epoch"] > 1
    moved = a.revoked[0]
    await b.heartbeat()
    assert b.owned == set()  # a has not said yet that it gave them up
    await a.heartbeat()  # ...now it has
    await h.settle()
    await b.heartbeat()
    assert b.owned == moved and b.assigned == [moved]
    await _settle(h, a, b)
    assert a.revoked == [moved] and not a.owned & b.owned and len(a.owned | b.owned) == 6
    assert h.group().state == GroupState.STABLE


@async_test
async def test_a_member_that_leaves_hands_its_partitions_over_at_once():
    h, door, _ = await _start()
    a, b = Modern(h, door), Modern(h, door)
    await a.join()
    await b.join()
    await _settle(h, a, b)
    began = h.timer.clock.now_ms()
    answer = await a.heartbeat(-1)
    assert answer["error_code"] == 0 and answer["member_epoch"] == -1
    await h.settle()
    await b.heartbeat()
    assert b.owned == {("t", p) for p in range(6)} and h.timer.clock.now_ms() == began  # no timeout waited for
    assert (await a.heartbeat(5))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


@async_test
async def test_a_silent_member_is_failed_after_its_session_and_its_partitions_move():
    h, door, _ = await _start(max_ping_retries=0)
    a, b = Modern(h, door), Modern(h, door)
    await a.join()
    await b.join()
    await _settle(h, a, b)
    held = set(b.owned)
    for _ in range(10):  # a heartbeats every interval, b never again
        await h.advance(INTERVAL)
        await a.heartbeat()
    await h.advance(SESSION + LEASE_MARGIN_MS)
    await a.heartbeat()
    await h.settle()
    await a.heartbeat()
    assert held <= a.owned and a.owned == {("t", p) for p in range(6)}
    assert (await b.heartbeat())["error_code"] in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH)


@async_test
async def test_epochs_and_the_errors_clients_act_on():
    h, door, _ = await _start()
    a = Modern(h, door)
    await a.join()
    assert (await a.heartbeat(a.epoch + 5))["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert (await Modern(h, door).heartbeat(3))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await a.heartbeat())["error_code"] == 0  # the right epoch goes on working
    bad = [(dict(a.body(0), member_id=""), 1, ErrorCode.INVALID_REQUEST),  # v1: the client makes its id up
           (dict(a.body(0), subscribed_topic_names=None), 1, ErrorCode.INVALID_REQUEST),
           (dict(a.body(0), member_epoch=-7), 1, ErrorCode.INVALID_REQUEST),
           (dict(a.body(0), server_assignor="magic"), 1, ErrorCode.UNSUPPORTED_ASSIGNOR),
           (dict(a.body(0), subscribed_topic_names=None, subscribed_topic_regex="("), 1,
            ErrorCode.INVALID_REGULAR_EXPRESSION),
           (dict(a.body(0), subscribed_topic_names=None, subscribed_topic_regex="t(?=x)"), 1,
            ErrorCode.INVALID_REGULAR_EXPRESSION),
           (dict(a.body(0), group_id=""), 1, ErrorCode.INVALID_GROUP_ID),
           (dict(a.body(-2)), 1, ErrorCode.INVALID_REQUEST)]  # -2 is for static members
    for body, version, code in bad:
        assert (await door.heartbeat(body, version, "c", "h"))["error_code"] == code, body
    v0 = asyncio.get_running_loop().create_task(
        door.heartbeat(dict(Modern(h, door).body(0), member_id=""), 0, "c", "h"))
    await h.advance(JOIN_WAIT_MS)  # nothing to give it at once: answered after the join wait
    v0 = await asyncio.wait_for(v0, 5)
    assert v0["error_code"] == 0 and v0["member_id"]  # v0: the coordinator makes the id up
    assert (await a.heartbeat())["error_code"] == 0


@async_test
async def test_the_server_assignor_members_ask_for_decides():
    h, door, _ = await _start({"a": 3, "b": 3})
    x = Modern(h, door, topics=("a", "b"), assignor="range")
    y = Modern(h, door, topics=("a", "b"), assignor="range")
    await x.join()
    await y.join()
    await _settle(h, x, y)
    for topic in ("a", "b"):  # range: balanced topic by topic (so one member may have 4 of 6, as in Kafka)
        assert sorted(sum(1 for t, _ in c.owned if t == topic) for c in (x, y)) == [1, 2]
    assert not x.owned & y.owned and len(x.owned | y.owned) == 6
    described = door.describe(["g"])["groups"][0]
    assert described["assignor_name"] == "range"


@async_test
async def test_a_regular_expression_subscription_picks_up_new_topics():
    h, door, _ = await _start({"ev-a": 2, "other": 2})
    a = Modern(h, door, topics=(), regex="ev-.*")
    await a.join()
    assert a.owned == {("ev-a", 0), ("ev-a", 1)}
    h.coord.on_topics_changed({"ev-a": 2, "other": 2, "ev-b": 1}, complete=True, ids={"ev-b": uuid.uuid4().bytes})
    await h.settle()
    await a.heartbeat()
    assert ("ev-b", 0) in a.owned and not any(t == "other" for t, _ in a.owned)


@async_test
async def test_a_static_member_that_restarts_within_its_session_gets_its_partitions_back_with_no_rebalance():
    h, door, _ = await _start()
    a, b = Modern(h, door, instance="host-a"), Modern(h, door)
    await a.join()
    await b.join()
    await _settle(h, a, b)
    held, epoch, b_epoch, b_sent = set(a.owned), a.epoch, b.epoch, len(b.assigned) + len(b.revoked)
    assert (await a.heartbeat(-2))["member_epoch"] == -2  # a temporary leave: its partitions wait
    await h.settle()
    await b.heartbeat()
    assert h.group().members["host-a"].channel is None and len(b.owned) == 3
    a2 = Modern(h, door, instance="host-a")  # the restarted process: a new member id
    a2.owned = set()
    answer = await a2.join()
    assert answer["member_epoch"] == epoch and a2.owned == held
    await _settle(h, a2, b)
    assert b.epoch == b_epoch and len(b.assigned) + len(b.revoked) == b_sent  # nobody else moved
    other = asyncio.get_running_loop().create_task(Modern(h, door, instance="host-a").heartbeat(0))
    assert (await asyncio.wait_for(other, 5))["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID
    assert (await a.heartbeat(epoch))["error_code"] in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH)
    d = door.describe(["g"])["groups"][0]
    assert {m["instance_id"] for m in d["members"]} == {"host-a", None}
    assert {m["member_id"] for m in d["members"]} == {a2.member_id, b.member_id}


@async_test
async def test_offsets_of_consumer_members_go_through_offset_commit():
    h, door, classic = await _start()
    a = Modern(h, door)
    await a.join()
    tp = sorted(a.owned)[0]

    async def commit(epoch: int, member_id: str | None = None) -> int:
        body = {"group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": member_id or a.member_id,
                "topics": [{"name": tp[0], "partitions": [{"partition_index": tp[1], "committed_offset": 17}]}]}
        return (await offsets_of(classic).offset_commit(body, 9))["topics"][0]["partitions"][0]["error_code"]

    assert await commit(a.epoch + 3) == ErrorCode.STALE_MEMBER_EPOCH
    assert await commit(a.epoch) == 0 and h.store.groups["g"].offsets[tp] == 17
    assert await commit(a.epoch, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID


@async_test
async def test_describe_and_list_a_mixed_group():
    h, door, classic = await _start()
    native, _ = h.register("native", version=2)
    await h.settle()
    a = Modern(h, door)
    await a.join()
    await _settle(h, a)
    listed = admin_of(classic).list_groups({"types_filter": ["consumer"]})["groups"]
    assert [g["group_id"] for g in listed] == ["g"] and listed[0]["group_type"] == "consumer"
    assert admin_of(classic).list_groups({"types_filter": ["classic"]})["groups"] == []
    d = door.describe(["g", "nope"])["groups"]
    assert d[1]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    members = {m["member_id"]: m for m in d[0]["members"]}
    assert members[a.member_id]["member_type"] == 1 and members["native"]["member_type"] == -1
    assigned = {(tp["topic_name"], p) for m in members.values() for tp in m["assignment"]["topic_partitions"]
                for p in tp["partitions"]}
    assert assigned == {("t", p) for p in range(6)}
    classic_view = admin_of(classic).describe_groups({"groups": ["g"]})["groups"][0]
    assert {m["member_id"] for m in classic_view["members"]} == {"native", a.member_id}


async def _restored_member(mid: str | None = None) -> tuple[Harness, Modern]:
    """A coordinator that restored group g from ZooKeeper after a failover: one KIP-848 member
    (member id ``mid``, a new uuid by default), saved in epoch 7 with all four partitions of t,
    not heard from yet."""
    h = Harness({"t": 4}, consumer_session_timeout_ms=SESSION, consumer_heartbeat_interval_ms=INTERVAL)
    mid = mid or str(uuid.uuid4())
    key = registry_key(mid)
    h.store.groups["g"] = StoredGroup("g", generation_id=7, members={
        key: StoredMember(key, TopicCount.static({"t": 1}), False, "largest", SESSION, epoch=7, incremental=True,
                          kind="consumer")}, owners={("t", p): f"{key}-0" for p in range(4)})
    await h.start()
    h.coord.topic_ids = {"t": uuid.uuid4().bytes}
    return h, Modern(h, ConsumerGroups(h.coord), member_id=mid)


@async_test
async def test_a_consumer_member_is_taken_back_after_a_failover_in_its_epoch():
    h, a = await _restored_member()
    mid = a.member_id
    a.owned, a.epoch = {("t", p) for p in range(4)}, 8
    assert (await a.heartbeat())["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH  # newer than any it was sent
    a.epoch, a.changed = 7, True
    answer = await a.heartbeat()
    assert answer["error_code"] == 0 and answer["member_epoch"] == 7
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 7 and g.members[mid].channel is not None
    await a.heartbeat()
    assert a.owned == {("t", p) for p in range(4)} and a.revoked == []


@async_test
async def test_a_member_told_an_older_epoch_is_taken_back_in_the_newest_with_its_assignment():
    """The coordinator died after saving epoch 7 for the member and before an answer told it so:
    the member heartbeats in epoch 5 and is answered epoch 7 with its whole assignment, nothing moves."""
    h, a = await _restored_member()
    a.owned, a.epoch, a.changed = {("t", 0), ("t", 1)}, 5, False  # the StartFetcher of epoch 7 never reached it
    answer = await a.heartbeat()
    assert answer["error_code"] == 0 and answer["member_epoch"] == 7
    assert a.owned == {("t", p) for p in range(4)} and a.revoked == []
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 7
    assert set(g.owners) == {("t", p) for p in range(4)}


@async_test
async def test_malformed_heartbeats_change_nothing():
    h, door, _ = await _start()
    a = Modern(h, door)
    await a.join()
    g = h.group()
    before = (g.generation_id, dict(g.owners), set(g.members))
    for body in [{"group_id": "g", "member_id": a.member_id, "member_epoch": "x"},
                 {"group_id": "g", "member_id": a.member_id, "member_epoch": a.epoch,
                  "topic_partitions": [{"topic_id": b"\x00" * 16, "partitions": [0, -1]}]},
                 {"group_id": "g", "member_id": a.member_id, "member_epoch": a.epoch,
                  "topic_partitions": [{"topic_id": b"short", "partitions": [1]}]}]:
        answer = await door.heartbeat(body, 1, "c", "h")
        assert answer["error_code"] in (0, ErrorCode.INVALID_REQUEST)
    await h.settle()
    assert (g.generation_id, dict(g.owners), set(g.members)) == before
    assert (await a.heartbeat())["error_code"] == 0


# ------------------------------------------------------------------ fuzzing
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ANSWERED = {ErrorCode.NONE, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_GROUP_ID, ErrorCode.UNSUPPORTED_ASSIGNOR,
            ErrorCode.INVALID_REGULAR_EXPRESSION, ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.UNRELEASED_INSTANCE_ID}
_INT32 = st.integers(-2**31, 2**31 - 1)


def _heartbeats():
    """Heartbeat bodies as the wire decodes them (each field of its schema type), near the real
    ones: known and unknown ids, epochs around the member's, odd subscriptions and regexes."""
    names = st.lists(st.sampled_from(["t", "u", "", "nope", "x" * 300, "a/b"]), max_size=3)
    owned = st.lists(st.fixed_dictionaries({
        "topic_id": st.one_of(st.just(b"t"), st.binary(min_size=16, max_size=16), st.just(bytes(16))),
        "partitions": st.lists(st.one_of(st.integers(-2, 8), _INT32), max_size=4)}), max_size=3)
    return st.fixed_dictionaries({
        "group_id": st.one_of(st.just("g"), st.sampled_from(["", "h", "/", "a" * 300]), st.text(max_size=8)),
        "member_id": st.one_of(st.sampled_from(["a", "b", "", "x/y", "%2F", "."]), st.text(max_size=8)),
        "member_epoch": st.one_of(st.integers(-3, 12), _INT32),
        "instance_id": st.one_of(st.none(), st.sampled_from(["i1", "i2", "", "/"])),
        "rack_id": st.one_of(st.none(), st.text(max_size=4)),
        "rebalance_timeout_ms": st.one_of(st.integers(-5, 60000), _INT32),
        "subscribed_topic_names": st.one_of(st.none(), names),
        "subscribed_topic_regex": st.one_of(st.none(), st.sampled_from(["", "t.*", "(", "(?=x)", "[a-", "a{99999}"]),
                                            st.text(max_size=6)),
        "server_assignor": st.one_of(st.none(), st.sampled_from(["uniform", "range", "magic", ""])),
        "topic_partitions": st.one_of(st.none(), owned)})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(st.tuples(_heartbeats(), st.sampled_from([0, 1])), min_size=1, max_size=6))
def test_arbitrary_heartbeats_get_an_error_code_and_never_break_the_group(bodies):
    """Whatever heartbeats arrive, each gets an answer with one of the protocol's error codes, no
    partition ever has two holders, and a member that heartbeats correctly keeps working."""

    async def run():
        h, door, _ = await _start()
        tid = h.coord.topic_ids["t"]
        a = Modern(h, door)
        await a.join()
        for body, version in bodies:
            body = dict(body)
            if body.get("topic_partitions"):
                body["topic_partitions"] = [dict(e, topic_id=tid if e["topic_id"] == b"t" else e["topic_id"])
                                            for e in body["topic_partitions"]]
            task = asyncio.get_running_loop().create_task(door.heartbeat(body, version, "fuzz", "127.0.0.1"))
            await h.settle()
            if not task.done():
                await h.advance(JOIN_WAIT_MS)
            answer = await asyncio.wait_for(task, 5)
            assert answer["error_code"] in ANSWERED, (body, answer)
            g = h.coord.groups.get("g")
            if g is not None:
                held = [tp for m in g.members.values() for tp in m.owned()]
                assert len(held) == len(set(held)), g.members
            door.describe(["g", body["group_id"]])
        answer = await a.heartbeat()
        assert answer["error_code"] in (0, ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)
        if answer["error_code"]:  # a fuzzed heartbeat spoke for it (same member id): it joins again
            a.epoch, a.owned = 0, set()
            await a.join()
        await _settle(h, a)
        assert a.owned <= {("t", p) for p in range(6)} and a.owned

    asyncio.run(run())


#: A member id as librdkafka makes them (22 characters of standard base64): '/' and '+' in it.
LIBRDKAFKA_MEMBER_ID = "ZL8b/vlCRL2qenSceB0+DQ"


@async_test
@pytest.mark.parametrize("mid", [None, LIBRDKAFKA_MEMBER_ID], ids=["uuid", "base64"])
async def test_a_restored_consumer_members_commit_before_its_heartbeat_is_taken_and_leaves_it_absent(mid):
    """After a failover or a handover a KIP-848 member may commit before it heartbeats: as Kafka
    takes commits from the members it loaded, the commit lands, in an epoch the member can have
    and for the partitions it is counted for, and does not take the member back (as a classic one
    or at all): its heartbeat in its epoch does, with nothing lost or fenced.  A member id with a
    '/' (librdkafka's are base64) was refused UNKNOWN_MEMBER_ID here, so a member whose heartbeats
    were held up lost every commit until its session ran out and its partitions were read again."""
    h, a = await _restored_member(mid)
    mid = a.member_id
    key = registry_key(mid)
    door = ClassicGroups(h.coord, a.door)
    offsets = offsets_of(door)

    def commit(epoch: int, partition: int, offset: int) -> dict:
        return {"group_id": "g", "member_id": mid, "generation_id_or_member_epoch": epoch,
                "topics": [{"name": "t", "partitions": [{"partition_index": partition, "committed_offset": offset}]}]}

    def code(answer: dict) -> int:
        return answer["topics"][0]["partitions"][0]["error_code"]

    assert code(await offsets.offset_commit(commit(7, 0, 5), 9)) == 0
    assert h.store.groups["g"].offsets[("t", 0)] == 5
    assert code(await offsets.offset_commit(commit(8, 1, 5), 9)) == ErrorCode.STALE_MEMBER_EPOCH  # never sent it
    assert code(await offsets.offset_commit(commit(7, 1, 3), 9)) == 0
    assert h.store.groups["g"].offsets[("t", 1)] == 3
    member = h.group().members[key]
    assert member.kind == "consumer" and member.channel is None  # still absent: a commit is not a heartbeat
    # a classic heartbeat under its id does not take it back either; it is told to wait
    beat = door.heartbeat({"group_id": "g", "member_id": mid, "generation_id": 7})
    assert beat["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert h.group().members[key].channel is None

    a.owned, a.epoch, a.changed = {("t", p) for p in range(4)}, 7, True
    beat = await a.heartbeat()
    assert beat["error_code"] == 0 and beat["member_epoch"] == 7
    assert a.revoked == [] and h.group().members[key].channel is not None
    assert code(await offsets.offset_commit(commit(7, 0, 9), 9)) == 0  # and as a live member
    assert h.store.groups["g"].offsets[("t", 0)] == 9


@async_test
@pytest.mark.parametrize("taken_back", [False, True], ids=["absent", "taken-back"])
async def test_a_late_commit_of_a_restored_member_does_not_move_its_stored_offset_back(taken_back):
    """The new coordinator restores offset 50 of t-0, which the member committed under the old one.
    A commit of 30 that the member sent earlier and that arrives only now (a request retried, or
    held on a link that healed) is answered but leaves 50 -- before the member's heartbeat takes it
    back and after.  Seen in a nemesis run: a restored group's offsets went from 21610 to 20820."""
    h, a = await _restored_member(LIBRDKAFKA_MEMBER_ID)
    h.store.groups["g"].offsets = {("t", 0): 50, ("t", 1): 50}
    await h.coord.activate(h.coord.epoch + 1)  # restore again, with the offsets
    door = ClassicGroups(h.coord, a.door)
    offsets = offsets_of(door)
    if taken_back:
        a.owned, a.epoch, a.changed = {("t", p) for p in range(4)}, 7, True
        assert (await a.heartbeat())["error_code"] == 0

    def commit(partition: int, offset: int) -> dict:
        return {"group_id": "g", "member_id": a.member_id, "generation_id_or_member_epoch": 7,
                "topics": [{"name": "t", "partitions": [{"partition_index": partition, "committed_offset": offset}]}]}

    answer = await offsets.offset_commit(commit(0, 30), 9)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0  # Kafka clients are told it is done
    assert h.group().offsets[("t", 0)] == 50 and h.store.groups["g"].offsets[("t", 0)] == 50
    assert (await offsets.offset_commit(commit(1, 60), 9))["topics"][0]["partitions"][0]["error_code"] == 0
    assert h.store.groups["g"].offsets[("t", 1)] == 60  # forward still moves
    assert h.group().offsets[("t", 0)] == 50


@async_test
async def test_a_restored_consumer_member_absent_past_its_session_loses_its_commits_and_partitions():
    """A restored KIP-848 member that commits but never heartbeats is still removed when its session
    runs out (a commit is not liveness, as in Kafka); its commits after that are refused."""
    h, a = await _restored_member(LIBRDKAFKA_MEMBER_ID)
    door = ClassicGroups(h.coord, a.door)
    offsets = offsets_of(door)
    commit = {"group_id": "g", "member_id": a.member_id, "generation_id_or_member_epoch": 7,
              "topics": [{"name": "t", "partitions": [{"partition_index": 2, "committed_offset": 4}]}]}
    assert (await offsets.offset_commit(commit, 9))["topics"][0]["partitions"][0]["error_code"] == 0
    await h.advance(SESSION * 2)
    await h.settle()
    assert registry_key(a.member_id) not in h.group().members
    commit["topics"][0]["partitions"][0]["committed_offset"] = 6
    answer = await offsets.offset_commit(commit, 9)
    assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.store.groups["g"].offsets[("t", 2)] == 4


@async_test
async def test_a_member_leaving_with_an_empty_subscription_leaves():
    """Kafka 4.2's Java consumer leaves with ``subscribed_topic_names=[]`` (it has unsubscribed):
    a leaving heartbeat's subscription is not checked, as Kafka checks only a joining one's."""
    h, door, _ = await _start()
    a, b = Modern(h, door), Modern(h, door)
    await a.join()
    await b.join()
    await _settle(h, a, b)
    body = {**a.body(-1), "subscribed_topic_names": [], "subscribed_topic_regex": None, "topic_partitions": []}
    answer = await door.heartbeat(body, 1, "java", "127.0.0.1")
    assert answer["error_code"] == 0 and answer["member_epoch"] == -1, answer
    await h.settle()
    await b.heartbeat()
    assert b.owned == {("t", p) for p in range(6)}
