"""Kafka's classic group protocol on the coordinator core (``coordinator.doors.classic``), with a
hand-driven clock: JoinGroup/SyncGroup/Heartbeat mapped onto StopFetcher/StartFetcher/Ping,
eager and cooperative members, mixed groups, offsets, failure, leave, delete, and members
taken back after a failover."""

from __future__ import annotations

import asyncio

from coord_harness import PING, START, STOP, Harness, admin_of, async_test, offsets_of

from spark_coord.coordinator.core.group import GroupState
from spark_coord.coordinator.core.subscription import TopicCount
from spark_coord.coordinator.doors.classic import LEADER
from spark_coord.coordinator.doors.classic import ClassicGroups as KafkaGroups
from spark_coord.coordinator.storage.store import StoredGroup, StoredMember
from spark_coord.errors import ErrorCode
from spark_coord.wire.consumer_protocol import (
    decode_assignment,
    encode_subscription,
    partitions_by_topic,
    topic_partitions,
)

JOIN_VERSION = 7


class KafkaClient:
    """What a Kafka consumer sends, step by step (the test drives it).  An eager client revokes
    everything before it joins again; a cooperative one (``cooperative-sticky`` chosen) says what
    it owns in its subscription, revokes only what its new assignment lacks, and then joins again
    (KIP-429).  ``revoked`` and ``assigned`` log what its callbacks would have received."""

    def __init__(self, h: Harness, kg: KafkaGroups, topics=("t",), group: str = "g", session: int = 3000,
                 protocols=("range", "roundrobin"), instance: str | None = None):
        self.h, self.kg, self.group, self.session = h, kg, group, session
        self.instance = instance
        self.topics, self.protocols = list(topics), list(protocols)
        self.member_id = ""
        self.generation = -1
        self.partitions: dict[str, list[int]] = {}
        self.protocol: str | None = None
        self.revoked: list[set[tuple[str, int]]] = []
        self.assigned: list[set[tuple[str, int]]] = []

    @property
    def cooperative(self) -> bool:
        return self.protocol == "cooperative-sticky" or (self.protocol is None
                                                          and "cooperative-sticky" in self.protocols)

    def join_body(self) -> dict:
        if self.cooperative:
            meta = encode_subscription({"topics": self.topics, "owned_partitions": topic_partitions(self.partitions),
                                        "generation_id": self.generation}, 2)
        else:
            meta = encode_subscription({"topics": self.topics}, 0)
        return {"group_id": self.group, "session_timeout_ms": self.session, "rebalance_timeout_ms": self.session,
                "member_id": self.member_id, "group_instance_id": self.instance, "protocol_type": "consumer",
                "protocols": [{"name": n, "metadata": meta} for n in self.protocols]}

    async def join(self) -> asyncio.Task:
        """JoinGroup (with KIP-394's second round); returns the task waiting for the answer.  An eager
        client revokes everything first."""
        if not self.cooperative and self.partitions:
            self.revoked.append(self.owned())
            self.partitions = {}
        if not self.member_id and not self.instance:  # a static member gets its id at once (KIP-345)
            first = await self.kg.join_group(self.join_body(), JOIN_VERSION, "client", "127.0.0.1")
            assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"]
            self.member_id = first["member_id"]
        task = asyncio.get_running_loop().create_task(
            self.kg.join_group(self.join_body(), JOIN_VERSION, "client", "127.0.0.1"))
        await self.h.settle()
        return task

    def sync(self) -> dict:
        answer = self.kg.sync_group({"group_id": self.group, "generation_id": self.generation,
                                     "member_id": self.member_id, "assignments": []})
        if answer["error_code"] == 0:
            old = self.owned()
            self.partitions = partitions_by_topic(decode_assignment(answer["assignment"])["assigned_partitions"])
            new = self.owned()
            if old - new:
                self.revoked.append(old - new)
            if new - old:
                self.assigned.append(new - old)
        return answer

    async def joined(self, task: asyncio.Task) -> dict:
        """Its JoinGroup answered: sync; a cooperative client that lost partitions joins again at once."""
        answer = await asyncio.wait_for(task, 5)
        assert answer["error_code"] == 0, answer
        assert answer["leader"] == LEADER and answer["members"] == []  # the coordinator assigns
        self.generation, self.protocol = answer["generation_id"], answer["protocol_name"]
        self.member_id = answer["member_id"]
        before = self.owned()
        assert self.sync()["error_code"] == 0
        await self.h.settle()
        if self.cooperative and before - self.owned():
            return await self.joined(await self.join())
        return answer

    async def rebalance(self) -> dict:
        """What a client does on REBALANCE_IN_PROGRESS."""
        return await self.joined(await self.join())

    def heartbeat(self) -> int:
        return self.kg.heartbeat({"group_id": self.group, "generation_id": self.generation,
                                  "member_id": self.member_id})["error_code"]

    async def commit(self, offsets: dict, generation: int | None = None, member_id: str | None = None) -> dict:
        body = {"group_id": self.group, "generation_id_or_member_epoch":
                self.generation if generation is None else generation,
                "member_id": self.member_id if member_id is None else member_id,
                "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o}]}
                           for (t, p), o in offsets.items()]}
        answer = await offsets_of(self.kg).offset_commit(body, 8)
        return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}

    def owned(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.partitions.items() for p in ps}


async def _start(topics=None, **cfg) -> tuple[Harness, KafkaGroups]:
    h = await Harness(topics or {"t": 4}, **cfg).start()
    return h, KafkaGroups(h.coord)


async def _two_members(h: Harness, kg: KafkaGroups, **client) -> tuple["KafkaClient", "KafkaClient"]:
    """Two Kafka members of group g, both synced in the generation b's join started (a joined
    first and rejoined for b's rebalance)."""
    a, b = KafkaClient(h, kg, **client), KafkaClient(h, kg, **client)
    await a.joined(await a.join())
    b_join = await b.join()
    await a.joined(await a.join())
    await b.joined(b_join)
    return a, b


@async_test
async def test_a_kafka_consumer_joins_syncs_and_heartbeats():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    answer = await a.joined(await a.join())
    assert answer["protocol_name"] == "range"
    assert a.generation == h.group().generation_id == 1 and h.group().state == GroupState.STABLE
    assert a.owned() == {("t", p) for p in range(4)}
    assert set(h.group().owners.values()) == {f"{a.member_id}-0"}
    assert a.heartbeat() == ErrorCode.NONE
    assert kg.heartbeat({"group_id": "g", "generation_id": 0, "member_id": a.member_id})["error_code"] == \
        ErrorCode.ILLEGAL_GENERATION
    assert kg.heartbeat({"group_id": "g", "generation_id": 1, "member_id": "nobody"})["error_code"] == \
        ErrorCode.UNKNOWN_MEMBER_ID


@async_test
async def test_a_second_member_rebalances_the_first_through_its_heartbeat():
    h, kg = await _start()
    a, b = KafkaClient(h, kg), KafkaClient(h, kg)
    await a.joined(await a.join())
    b_join = await b.join()
    assert not b_join.done()  # waits until the first member stopped
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    a_join = await a.join()  # the JoinGroup answers a's StopFetcher
    await a.joined(a_join)
    await b.joined(b_join)
    assert a.generation == b.generation == h.group().generation_id == 3  # 2 was a's stop
    assert a.owned() | b.owned() == {("t", p) for p in range(4)} and not a.owned() & b.owned()
    assert len(a.owned()) == len(b.owned()) == 2
    assert a.heartbeat() == b.heartbeat() == ErrorCode.NONE
    assert h.group().state == GroupState.STABLE


@async_test
async def test_mixed_group_with_our_own_members_shares_partitions_disjointly():
    h, kg = await _start({"t": 6})
    native, _ = h.register("native")
    await h.settle()
    k = KafkaClient(h, kg)
    join = await k.join()
    await k.joined(join)
    g = h.group()
    assert g.state == GroupState.STABLE
    theirs = set(native.positions)
    assert len(theirs) == 3 and len(k.owned()) == 3 and not theirs & k.owned()
    described = admin_of(kg).describe_groups({"groups": ["g"]})["groups"][0]
    assert described["group_state"] == "Stable" and {m["member_id"] for m in described["members"]} == \
        {"native", k.member_id}
    listed = admin_of(kg).list_groups({})["groups"]
    assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}]


@async_test
async def test_offset_commit_checks_generation_and_ownership_and_lands_in_the_store():
    h, kg = await _start()
    a, b = await _two_members(h, kg)
    mine, other = sorted(a.owned())[0], sorted(b.owned())[0]
    assert await a.commit({mine: 11}) == {mine: ErrorCode.NONE}
    assert h.store.groups["g"].offsets[mine] == 11
    assert await a.commit({mine: 5}) == {mine: ErrorCode.NONE}  # backwards: answered, not taken
    assert h.store.groups["g"].offsets[mine] == 11
    assert await a.commit({other: 3}) == {other: ErrorCode.ILLEGAL_GENERATION}
    assert await a.commit({mine: 12}, generation=1) == {mine: ErrorCode.ILLEGAL_GENERATION}
    assert await a.commit({mine: 12}, member_id="nobody") == {mine: ErrorCode.UNKNOWN_MEMBER_ID}
    assert await a.commit({mine: 1}, generation=-1, member_id="") == {mine: ErrorCode.UNKNOWN_MEMBER_ID}
    fetched = offsets_of(kg).offset_fetch({"group_id": "g", "topics": None}, 7)
    assert fetched["error_code"] == 0
    assert {(t["name"], p["partition_index"]): p["committed_offset"] for t in fetched["topics"]
            for p in t["partitions"]} == {mine: 11}
    multi = offsets_of(kg).offset_fetch({"groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [
        mine[1], other[1]]}]}, {"group_id": "unknown", "topics": None}]}, 8)["groups"]
    assert [(p["partition_index"], p["committed_offset"]) for p in multi[0]["topics"][0]["partitions"]] == \
        [(mine[1], 11), (other[1], -1)]
    assert multi[1] == {"group_id": "unknown", "topics": [], "error_code": 0}


@async_test
async def test_tools_set_offsets_of_an_empty_group_only():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    await a.joined(await a.join())
    assert await a.commit({("t", 0): 40}) == {("t", 0): 0}
    left = kg.leave_group({"group_id": "g", "members": [{"member_id": a.member_id}]}, 3)
    assert left["members"][0]["error_code"] == 0
    await h.settle()
    assert h.group().state == GroupState.EMPTY
    # a reset tool: generation -1, no member, may move backwards
    assert await a.commit({("t", 0): 7, ("t", 9): 1}, generation=-1, member_id="") == \
        {("t", 0): 0, ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.store.groups["g"].offsets[("t", 0)] == 7
    assert await a.commit({("t", 1): 3}, generation=-1, member_id="") == {("t", 1): 0}
    assert h.store.groups["g"].offsets == {("t", 0): 7, ("t", 1): 3}


@async_test
async def test_a_silent_kafka_member_is_failed_and_its_partitions_move():
    h, kg = await _start(max_ping_retries=0)
    a, b = await _two_members(h, kg, session=3000)
    for _ in range(6):  # a heartbeats every second, b never again
        await h.advance(1000)
        assert a.heartbeat() in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        if a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
            break
    assert b.member_id not in h.group().members
    await a.joined(await a.join())
    assert a.owned() == {("t", p) for p in range(4)}
    assert b.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID


@async_test
async def test_leave_group_rebalances_at_once():
    h, kg = await _start()
    a, b = await _two_members(h, kg)
    assert kg.leave_group({"group_id": "g", "member_id": b.member_id}, 1)["error_code"] == 0
    await h.settle()
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    await a.joined(await a.join())
    assert a.owned() == {("t", p) for p in range(4)} and h.timer.clock.now_ms() == 0


@async_test
async def test_each_member_is_answered_in_a_protocol_it_offered():
    """The coordinator assigns, so protocol names need not agree: kafkajs' RoundRobinAssigner,
    librdkafka's range/roundrobin, a cooperative-sticky client and Java's default list share
    one group; each is answered in one of its own (a cooperative one when offered)."""
    h, kg = await _start({"t": 8})
    clients = {name: KafkaClient(h, kg, protocols=protocols) for name, protocols in [
        ("librdkafka", ("range", "roundrobin")), ("kafkajs", ("RoundRobinAssigner",)),
        ("cooperative", ("cooperative-sticky",)), ("java", ("range", "cooperative-sticky"))]}
    joins = {name: await c.join() for name, c in clients.items()}
    for _ in range(6):
        for name, c in clients.items():
            task = joins.get(name)
            if task is not None and task.done():
                await c.joined(task)
                joins[name] = None
            elif task is None and c.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
                joins[name] = await c.join()
        await h.advance(100)
    assert {name: c.protocol for name, c in clients.items()} == {
        "librdkafka": "range", "kafkajs": "RoundRobinAssigner", "cooperative": "cooperative-sticky",
        "java": "cooperative-sticky"}
    owned = [c.owned() for c in clients.values()]
    assert set().union(*owned) == {("t", p) for p in range(8)} and sum(map(len, owned)) == 8
    assert all(len(o) == 2 for o in owned) and h.group().state == GroupState.STABLE


@async_test
async def test_requests_that_cannot_work_are_refused():
    h, kg = await _start()
    body = KafkaClient(h, kg).join_body()
    assert (await kg.join_group(dict(body, protocol_type="connect"), JOIN_VERSION, "c", "h"))["error_code"] == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    garbage = dict(body, protocols=[{"name": "range", "metadata": b"\x00\x00\x7f\xff\xff\xff"}])
    assert (await kg.join_group(garbage, JOIN_VERSION, "c", "h"))["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await kg.join_group(dict(body, protocols=[]), JOIN_VERSION, "c", "h"))["error_code"] == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    short = KafkaClient(h, kg, session=1)
    assert (await kg.join_group(short.join_body(), 3, "c", "h"))["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await kg.join_group(dict(body, member_id="made-up"), JOIN_VERSION, "c", "h"))[
        "error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await kg.join_group(dict(body, group_id=""), JOIN_VERSION, "c", "h"))["error_code"] == \
        ErrorCode.INVALID_GROUP_ID


@async_test
async def test_a_cooperative_member_revokes_only_what_moves_and_keeps_the_rest():
    """KIP-429 as clients expect it: the first member keeps fetching while it joins again, its
    new assignment lacks only the partitions that move (its revocation callback gets exactly
    those), it joins once more, and only then are they started at the newcomer."""
    h, kg = await _start({"t": 6})
    a = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    await a.joined(await a.join())
    assert a.owned() == {("t", p) for p in range(6)} and a.assigned == [a.owned()]
    b = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    b_join = await b.join()
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    a_join = await a.join()  # answered at once: a still holds all six
    first = await asyncio.wait_for(a_join, 5)
    a.generation = first["generation_id"]
    assert a.sync()["error_code"] == 0
    assert len(a.revoked) == 1 and len(a.revoked[0]) == 3 and len(a.owned()) == 3
    moved = a.revoked[0]
    assert not b_join.done()  # the moved partitions start at b only after a gave them up
    await a.joined(await a.join())  # a's second JoinGroup: it gave them up
    await b.joined(b_join)
    assert b.owned() == moved and b.assigned == [moved] and not a.owned() & b.owned()
    assert a.revoked == [moved] and a.assigned == [{("t", p) for p in range(6)}]  # nothing else touched
    assert a.heartbeat() == b.heartbeat() == ErrorCode.NONE and h.group().state == GroupState.STABLE


@async_test
async def test_cooperative_member_commits_its_revoked_partitions_before_it_gives_them_up():
    h, kg = await _start({"t": 4})
    a = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    await a.joined(await a.join())
    b = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    b_join = await b.join()
    assert a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
    first = await asyncio.wait_for(await a.join(), 5)
    a.generation = first["generation_id"]
    a.sync()
    moved = sorted(a.revoked[0])
    assert await a.commit({tp: 40 for tp in moved}) == {tp: 0 for tp in moved}  # in its revocation callback
    await a.joined(await a.join())
    await b.joined(b_join)
    assert h.store.groups["g"].offsets == {tp: 40 for tp in moved}
    assert set(moved) == b.owned()


@async_test
async def test_eager_cooperative_and_our_members_share_one_group():
    """A native incremental member, an eager and a cooperative Kafka member; then a fourth
    member joins: only the members that lose a partition are stopped, the cooperative one
    revokes only what moves, and whoever loses nothing hears nothing."""
    h, kg = await _start({"t": 12})
    native, _ = h.register("native", version=2)
    await h.settle()
    eager = KafkaClient(h, kg)
    coop = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    tasks = {"eager": await eager.join(), "coop": await coop.join()}

    async def drive(clients: dict[str, KafkaClient]) -> None:
        for _ in range(8):
            for name, c in clients.items():
                task = tasks.get(name)
                if task is not None and task.done():
                    tasks[name] = None
                    await c.joined(task)
                elif task is None and c.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
                    tasks[name] = await c.join()
            await h.advance(100)

    await drive({"eager": eager, "coop": coop})
    g = h.group()
    owned = [set(native.positions), eager.owned(), coop.owned()]
    assert sorted(map(len, owned)) == [4, 4, 4] and set().union(*owned) == {("t", p) for p in range(12)}
    assert g.state == GroupState.STABLE
    native_sent = len(native.channel.sent)
    coop_revoked, eager_revoked = list(coop.revoked), list(eager.revoked)
    late, _ = h.register("late", version=2)
    await drive({"eager": eager, "coop": coop})
    owned = [set(native.positions), eager.owned(), coop.owned(), set(late.positions)]
    assert sorted(map(len, owned)) == [3, 3, 3, 3] and set().union(*owned) == {("t", p) for p in range(12)}
    new_coop_revocations = coop.revoked[len(coop_revoked):]
    assert len(new_coop_revocations) == 1 and len(new_coop_revocations[0]) == 1  # exactly the one that moved
    assert len(eager.revoked) == len(eager_revoked) + 1  # eager: it revokes all when it must give one up
    assert [a for a, _, _ in native.channel.sent[native_sent:] if a != PING] == [STOP, START]
    assert g.state == GroupState.STABLE


@async_test
async def test_delete_groups():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    await a.joined(await a.join())
    await a.commit({("t", 0): 4})
    out = await admin_of(kg).delete_groups({"groups_names": ["g", "nope"]})
    assert out["results"] == [{"group_id": "g", "error_code": ErrorCode.NON_EMPTY_GROUP},
                              {"group_id": "nope", "error_code": ErrorCode.GROUP_ID_NOT_FOUND}]
    kg.leave_group({"group_id": "g", "member_id": a.member_id}, 0)
    await h.settle()
    assert (await admin_of(kg).delete_groups({"groups_names": ["g"]}))["results"][0]["error_code"] == 0
    assert "g" not in h.coord.groups and "g" not in h.store.groups
    assert admin_of(kg).list_groups({})["groups"] == []


async def _restored_after_failover() -> tuple[Harness, KafkaGroups]:
    """A coordinator that restored group g (generation 5, Kafka member k1 holding t-0..3, t-0
    committed at 9) from the store: k1 absent until it comes back."""
    h = Harness({"t": 4})
    h.store.groups["g"] = StoredGroup("g", generation_id=5, members={
        "k1": StoredMember("k1", TopicCount.static({"t": 1}), False, "largest", 3000)},
        offsets={("t", 0): 9}, owners={("t", p): "k1-0" for p in range(4)})
    await h.start()
    return h, KafkaGroups(h.coord)


@async_test
async def test_a_kafka_member_is_taken_back_after_a_failover_without_a_rebalance():
    h, kg = await _restored_after_failover()
    assert h.group().state == GroupState.RESTORING
    assert kg.heartbeat({"group_id": "g", "generation_id": 4, "member_id": "k1"})["error_code"] == \
        ErrorCode.UNKNOWN_MEMBER_ID  # not the restored generation: it must join again
    assert kg.heartbeat({"group_id": "g", "generation_id": 5, "member_id": "k1"})["error_code"] == 0
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.generation_id == 5  # confirmed, nobody stopped
    body = {"group_id": "g", "generation_id_or_member_epoch": 5, "member_id": "k1",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 12}]}]}
    assert (await offsets_of(kg).offset_commit(body, 8))["topics"][0]["partitions"][0]["error_code"] == 0
    assert h.store.groups["g"].offsets[("t", 0)] == 12


@async_test
async def test_a_commit_from_outside_the_group_is_refused_while_restored_members_may_come_back():
    """Kafka takes a commit with generation -1 and no member id (a reset tool, or librdkafka
    retrying a commit after its session ran out) only from an Empty group.  A group just restored
    by a new coordinator still has its members, absent until they come back: refused, and the
    offsets stay where the members left them (such a commit may move them anywhere, backwards too)."""
    h, kg = await _restored_after_failover()
    assert h.group().state == GroupState.RESTORING and not h.group().live_members()
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3}]}]}
    assert (await offsets_of(kg).offset_commit(body, 8))["topics"][0]["partitions"][0]["error_code"] == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert h.store.groups["g"].offsets[("t", 0)] == 9 and h.group().offsets[("t", 0)] == 9


@async_test
async def test_not_the_coordinator():
    h, kg = await _start()
    await h.coord.deactivate()
    a = KafkaClient(h, kg)
    assert (await kg.join_group(a.join_body(), JOIN_VERSION, "c", "h"))["error_code"] == ErrorCode.NOT_COORDINATOR
    assert a.heartbeat() == ErrorCode.NOT_COORDINATOR
    assert offsets_of(kg).offset_fetch({"group_id": "g", "topics": None}, 5)["error_code"] == ErrorCode.NOT_COORDINATOR
    assert admin_of(kg).list_groups({})["error_code"] == ErrorCode.NOT_COORDINATOR


@async_test
async def test_a_member_that_disconnects_while_joining_is_failed_after_its_session():
    h, kg = await _start(max_ping_retries=0)
    a, b = KafkaClient(h, kg), KafkaClient(h, kg, session=3000)
    await a.joined(await a.join())
    first = await kg.join_group(b.join_body(), JOIN_VERSION, "client", "127.0.0.1")
    b.member_id = first["member_id"]
    gone = asyncio.get_running_loop().create_future()
    b_join = asyncio.get_running_loop().create_task(
        kg.join_group(b.join_body(), JOIN_VERSION, "client", "127.0.0.1", gone))
    await h.settle()
    assert b.member_id in h.group().members and not b_join.done()
    gone.set_result(None)  # its connection closed: nobody waits for the answer any more
    await h.settle()
    assert b_join.done()
    a_join = None
    for _ in range(40):  # a keeps heartbeating every 500 ms and rejoins when told to
        await h.advance(500)
        if a_join is None and a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
            a_join = await a.join()
        elif a_join is not None and a_join.done():
            answer, a_join = a_join.result(), None
            if answer["error_code"] == 0:
                a.generation = answer["generation_id"]
                a.sync()
        if b.member_id not in h.group().members and a.owned() == {("t", p) for p in range(4)} \
                and h.group().state == GroupState.STABLE:
            break
    assert b.member_id not in h.group().members
    assert a.owned() == {("t", p) for p in range(4)} and a.heartbeat() == ErrorCode.NONE
    assert h.timer.clock.now_ms() <= 3000 + 4 * 1000 + 2000  # its session, a round, a heartbeat or two


@async_test
async def test_bad_group_requests_get_kafka_codes_and_change_nothing():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    await a.joined(await a.join())
    g = h.group()
    before = (g.generation_id, dict(g.owners), set(g.members), g.state)
    body = a.join_body()
    bad = [
        (dict(body, protocol_type="connect"), ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        (dict(body, member_id="forged"), ErrorCode.UNKNOWN_MEMBER_ID),
        (dict(body, protocols=[{"name": "range", "metadata": b"\xff" * 70_000}]),
         ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        (dict(body, group_id="other", protocol_type=""), ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ]
    for request, code in bad:
        assert (await kg.join_group(request, JOIN_VERSION, "c", "h"))["error_code"] == code
    assert kg.heartbeat({"group_id": "g", "generation_id": 99, "member_id": a.member_id})["error_code"] == \
        ErrorCode.ILLEGAL_GENERATION
    assert kg.sync_group({"group_id": "g", "generation_id": 7, "member_id": a.member_id,
                          "assignments": []})["error_code"] == ErrorCode.ILLEGAL_GENERATION
    # a leader's malformed proposal is not even read: the answer is the coordinator's assignment
    answer = kg.sync_group({"group_id": "g", "generation_id": a.generation, "member_id": a.member_id,
                            "assignments": [{"member_id": a.member_id, "assignment": b"\x00\x07garbage"}]})
    assert answer["error_code"] == 0 and answer["assignment"] == a.sync()["assignment"]
    body = {"group_id": "g", "generation_id_or_member_epoch": a.generation + 5, "member_id": a.member_id,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3}]}]}
    assert (await offsets_of(kg).offset_commit(body, 8))["topics"][0]["partitions"][0]["error_code"] == \
        ErrorCode.ILLEGAL_GENERATION
    await h.settle()
    assert (g.generation_id, dict(g.owners), set(g.members), g.state) == before
    assert "other" not in h.coord.groups and ("t", 0) not in h.store.groups["g"].offsets


@async_test
async def test_an_eager_member_that_joins_again_on_its_own_is_started_again():
    """An eager client rejoins without being asked (its poll loop stalled, say): it revoked
    everything, so it holds nothing until the coordinator starts it again -- with the same
    partitions, since nobody else wants them."""
    h, kg = await _start({"t": 4})
    a = KafkaClient(h, kg)
    await a.joined(await a.join())
    held = a.owned()
    generation = a.generation
    await a.rebalance()  # nobody asked
    assert a.owned() == held and a.generation > generation and a.heartbeat() == ErrorCode.NONE
    g = h.group()
    assert g.state == GroupState.STABLE and g.members[a.member_id].owned() == held


@async_test
async def test_a_cooperative_member_joining_again_unasked_keeps_everything_at_once():
    h, kg = await _start({"t": 4})
    a = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    await a.joined(await a.join())
    held, generation = a.owned(), a.generation
    answer = await a.rebalance()  # answered at once with what it holds: no round
    assert answer["generation_id"] == generation and a.owned() == held and a.revoked == []
    assert a.heartbeat() == ErrorCode.NONE


@async_test
async def test_a_cooperative_member_that_lost_partitions_on_its_own_gets_them_back():
    """Its subscription says it owns fewer partitions than the coordinator counts (librdkafka's
    lost callback after a missed session, say): those are free again, and it is given them."""
    h, kg = await _start({"t": 4})
    a = KafkaClient(h, kg, protocols=("cooperative-sticky",))
    await a.joined(await a.join())
    a.partitions = {"t": [0, 1]}  # it dropped 2 and 3
    await a.rebalance()
    assert a.owned() == {("t", p) for p in range(4)} and a.assigned[-1] == {("t", 2), ("t", 3)}
    assert h.group().state == GroupState.STABLE


@async_test
async def test_a_join_that_waits_past_its_rebalance_timeout_is_told_to_join_again():
    h, kg = await _start({"t": 4})
    native, _ = h.register("native", version=2, session=30000)
    await h.settle()
    native.auto = False  # it does not answer its StopFetcher (for 20 s): no StartFetcher for the newcomer yet
    k = KafkaClient(h, kg, session=3000)
    task = await k.join()
    await h.advance(2999)
    assert not task.done()
    await h.advance(1)  # the DelayedJoin expires on the coordinator's timer
    answer = await asyncio.wait_for(task, 5)
    assert answer["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS


@async_test
async def test_sync_and_heartbeat_of_another_generation():
    h, kg = await _start()
    a = KafkaClient(h, kg)
    await a.joined(await a.join())
    right = a.generation
    a.generation = right + 7
    assert a.sync()["error_code"] == ErrorCode.ILLEGAL_GENERATION and a.heartbeat() == ErrorCode.ILLEGAL_GENERATION
    a.generation = right
    assert a.sync()["error_code"] == 0 and a.heartbeat() == ErrorCode.NONE  # a repeated SyncGroup: same answer


@async_test
async def test_a_cooperative_member_is_taken_back_after_a_failover_in_its_epoch():
    h = Harness({"t": 4})
    h.store.groups["g"] = StoredGroup("g", generation_id=9, members={
        "k1": StoredMember("k1", TopicCount.static({"t": 1}), False, "largest", 3000, epoch=8, incremental=True)},
        owners={("t", p): "k1-0" for p in range(4)})
    await h.start()
    kg = KafkaGroups(h.coord)
    assert kg.heartbeat({"group_id": "g", "generation_id": 7, "member_id": "k1"})["error_code"] == \
        ErrorCode.UNKNOWN_MEMBER_ID  # not the epoch stored for it
    assert kg.heartbeat({"group_id": "g", "generation_id": 8, "member_id": "k1"})["error_code"] == 0
    await h.settle()
    g = h.group()
    assert g.state == GroupState.STABLE and g.members["k1"].incremental and len(g.members["k1"].owned()) == 4


@async_test
async def test_a_static_member_restarted_within_its_session_takes_its_partitions_back_without_a_rebalance():
    """KIP-345: a new incarnation of a static member (same group.instance.id, new member id) gets
    what the instance held in the same generation; the other member is told nothing; the earlier
    incarnation's member id is fenced from then on."""
    h, kg = await _start({"t": 6})
    a, b = KafkaClient(h, kg, instance="host-a"), KafkaClient(h, kg)
    await a.joined(await a.join())
    b_join = await b.join()
    await a.joined(await a.join())  # eager: a gives everything up, then gets its share
    await b.joined(b_join)
    assert len(a.owned()) == 3 and len(b.owned()) == 3 and h.group().state == GroupState.STABLE
    generation, held, b_seen = h.group().generation_id, a.owned(), (list(b.revoked), list(b.assigned))
    a2 = KafkaClient(h, kg, instance="host-a")  # the restarted process: no member id yet
    answer = await a2.joined(await a2.join())
    assert answer["generation_id"] == generation and a2.owned() == held and a2.member_id != a.member_id
    await h.settle()
    assert b.heartbeat() == ErrorCode.NONE and (b.revoked, b.assigned) == b_seen  # nothing moved for b
    assert h.group().generation_id == generation
    assert a.heartbeat() == ErrorCode.FENCED_INSTANCE_ID
    assert set((await a.commit({("t", 0): 1})).values()) == {ErrorCode.FENCED_INSTANCE_ID}
    assert kg.sync_group({"group_id": "g", "generation_id": generation, "member_id": a.member_id,
                          "assignments": []})["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    described = admin_of(kg).describe_groups({"groups": ["g"]})["groups"][0]["members"]
    assert {(m["member_id"], m["group_instance_id"]) for m in described} == {(a2.member_id, "host-a"),
                                                                              (b.member_id, None)}
    left = kg.leave_group({"group_id": "g", "members": [{"member_id": "", "group_instance_id": "host-a"}]}, 3)
    assert left["members"][0]["error_code"] == 0  # an admin removes the static member by its instance id
    await h.settle()
    assert "host-a" not in h.group().members


class _GatedStore:
    """Holds the next offset write until ``release`` and then makes it fail as told: a write in
    flight when the coordinator's ZooKeeper session expires."""

    def __init__(self, store):
        self.store, self.gate, self.outcome = store, asyncio.Event(), None
        self._commit = store.commit_offsets
        store.commit_offsets = self.commit_offsets

    async def commit_offsets(self, group_id, offsets):
        if self.outcome is None:
            return await self._commit(group_id, offsets)
        await self.gate.wait()
        raise self.outcome

    def release(self, outcome: Exception | None) -> None:
        self.outcome = outcome
        self.gate.set()


async def _commit_while_the_committer_write_ends(end) -> tuple[dict, int]:
    """Member a commits 20 while ZooKeeper is unreachable (recorded, not written), then again
    while the committer's write of it is in flight; ``end(tick, gated)`` ends that write.
    Returns the retry's codes and the offset the store holds."""
    h, kg = await _start()
    a, _b = await _two_members(h, kg)
    mine = sorted(a.owned())[0]
    assert await a.commit({mine: 11}) == {mine: ErrorCode.NONE}
    h.store.fail_writes = True  # ZooKeeper unreachable: the offset is recorded, not written
    assert await a.commit({mine: 20}) == {mine: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    h.store.fail_writes = False
    gated = _GatedStore(h.store)
    gated.outcome = Exception("not yet")  # hold the committer's write of it
    tick = asyncio.get_running_loop().create_task(h.coord.offsets.commit_groups([h.coord.groups["g"]]))
    await h.settle()
    retry = asyncio.get_running_loop().create_task(a.commit({mine: 20}))  # the client asks again
    await h.settle()
    gated.outcome = None
    end(tick, gated)
    await asyncio.gather(tick, return_exceptions=True)
    codes = await asyncio.wait_for(retry, 5)
    return codes[mine], h.store.groups["g"].offsets[mine]


@async_test
async def test_an_offset_whose_write_was_fenced_is_never_acknowledged_by_a_later_commit():
    """Seen in nemesis runs (seeds 24 and 30): a librdkafka member's commit came back successful
    although its offset never reached ZooKeeper, and the partition's next owner read it again.
    The offset had been recorded, its write failed (ZooKeeper unreachable), the committer's next
    write of it was cut by the session's expiry (Fenced), which dropped it from the unwritten set;
    the member's retry of the same offset, waiting for that write, then changed nothing, found
    nothing left to write and was answered NONE.  A commit is acknowledged only once its offset
    is in the store."""
    from spark_coord.coordinator.storage.store import Fenced

    code, stored = await _commit_while_the_committer_write_ends(
        lambda tick, gated: gated.release(Fenced("commit offsets: ZooKeeper session expired")))
    assert stored == 11
    assert code == ErrorCode.NOT_COORDINATOR, code


@async_test
async def test_an_offset_whose_write_was_cancelled_is_written_by_the_next_commit():
    """The committer's write cancelled (the coordinator stopping its timers) while a commit of
    the same offset waits: that commit writes it, and only then is answered."""
    code, stored = await _commit_while_the_committer_write_ends(lambda tick, gated: tick.cancel())
    assert (code, stored) == (ErrorCode.NONE, 20)
