"""Test support for the coordinator's core: a hand-driven clock, an in-memory store and
fake member channels that record what the coordinator sent and answer when told to
(or by themselves, like a well-behaved member)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable

from spark_coord.coordinator.core.api import CoordinatorApi
from spark_coord.coordinator.core.channel import ChannelClosed
from spark_coord.coordinator.core.clock import ManualTimer
from spark_coord.coordinator.core.config import CoordinatorConfig
from spark_coord.coordinator.core.coordinator import Coordinator
from spark_coord.coordinator.doors.group_admin import GroupAdmin
from spark_coord.coordinator.doors.group_offsets import GroupOffsets
from spark_coord.coordinator.storage.store import MemoryGroupStore

PING, STOP, START = CoordinatorApi.PING, CoordinatorApi.STOP_FETCHER, CoordinatorApi.START_FETCHER
EPOCH = 7


def offsets_of(classic: Any) -> GroupOffsets:
    """The offset APIs beside a classic door (``ClassicGroups``), as a broker's shard composes them."""
    return GroupOffsets(classic.c, classic, classic.consumer)


def admin_of(classic: Any) -> GroupAdmin:
    """The group admin APIs beside a classic door, as a broker's shard composes them."""
    return GroupAdmin(classic.c, classic.initial)


def async_test(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run an ``async def`` test in a fresh event loop."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))
    return wrapper


class FakeChannel:
    """A ``MemberChannel`` that records requests with their answer callbacks; ``on_send`` lets a
    member react."""

    def __init__(self, peer: str):
        self.peer = peer
        self.sent: list[tuple[int, dict, Callable[[Any], None]]] = []
        self.versions: list[tuple[int, int]] = []
        self.closed = False
        self.on_send: Callable[[int, dict], None] | None = None

    def send(self, api_key: int, body: dict, on_answer: Callable[[Any], None], version: int = 0) -> None:
        if self.closed:
            raise ChannelClosed(self.peer)
        self.versions.append((api_key, version))
        self.sent.append((api_key, body, on_answer))
        if self.on_send:
            self.on_send(api_key, body)

    def close(self) -> None:
        self.closed = True

    def describe(self) -> None:
        return None

    def requests(self, api: int) -> list[dict]:
        return [b for a, b, _ in self.sent if a == api]

    def last(self, api: int) -> dict | None:
        found = self.requests(api)
        return found[-1] if found else None

    def reply(self, api: int, answer: Any, index: int = -1) -> None:
        """Deliver ``answer`` to the callback of the ``index``-th request of ``api`` (default: the last)."""
        callbacks = [cb for a, _, cb in self.sent if a == api]
        assert callbacks, f"{self.peer} got no {api!r}"
        callbacks[index](answer)


class Member:
    """A member on a ``FakeChannel``: answers automatically unless ``auto`` is off or it is ``muted``.
    ``incremental``: it registered with RegisterConsumer v2 and hands partitions over one by one
    (StopFetcher v1 stops only what it names, StartFetcher v1 keeps what it already fetches)."""

    def __init__(self, h: "Harness", group: str, consumer_id: str, auto: bool = True, incremental: bool = False):
        self.h = h
        self.incremental = incremental
        self.group = group
        self.consumer_id = consumer_id
        self.channel = FakeChannel(f"{consumer_id}@test")
        self.channel.on_send = self._on_send
        self.auto = auto
        self.muted = False
        self.generation: int | None = None
        self.positions: dict[tuple[str, int], int] = {}
        self.stop_error = 0
        self.history: list[tuple[int, dict[tuple[str, int], int]]] = []  # (generation, assignment)

    def _on_send(self, api: int, body: dict) -> None:
        if self.auto and not self.muted:
            index = len(self.channel.requests(api)) - 1
            asyncio.get_running_loop().call_soon(lambda: self.answer(api, index=index))

    def offsets(self) -> list[dict]:
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.positions.items())]

    def answer(self, api: int, index: int = -1, **override: Any) -> None:
        """Answer the ``index``-th request of ``api`` (default: the last) as a member would."""
        requests = self.channel.requests(api)
        assert requests, f"{self.consumer_id} got no {api!r}"
        body = requests[index]
        if self.channel.closed:
            return
        resp: dict[str, Any] = {"error_code": 0, "consumer_id": self.consumer_id, "generation_id": self.generation}
        if api in (PING, STOP):
            resp["offsets"] = self.offsets()
            if api == STOP:
                resp["error_code"] = self.stop_error
                if not self.stop_error:
                    if self.incremental and body.get("partitions") is not None:
                        gone = {(e["topic"], p) for e in body["partitions"] for p in e["partitions"]}
                        resp["offsets"] = [o for o in resp["offsets"] if (o["topic"], o["partition"]) in gone]
                        self.positions = {tp: o for tp, o in self.positions.items() if tp not in gone}
                        self.generation = body["generation_id"]
                        resp["generation_id"] = self.generation
                    else:
                        self.positions = {}
        else:
            self.generation = body["generation_id"]
            resp["generation_id"] = self.generation
            kept = self.positions if self.incremental else {}
            self.positions = {(p["topic"], p["partition"]): kept.get((p["topic"], p["partition"]), max(0, p["offset"]))
                              for o in body["ownership"] for p in o["partitions"]}
            self.history.append((self.generation, dict(self.positions)))
        resp.update(override)
        self.channel.reply(api, resp, index)

    def consume(self, n: int) -> None:
        self.positions = {tp: o + n for tp, o in self.positions.items()}

    async def commit(self, offsets: dict[tuple[str, int], int] | None = None, leave: bool = False,
                     generation: int | None = None, **override: Any) -> dict:
        """A CommitOffsets request of this member (default: its positions), answered by the coordinator."""
        offsets = self.positions if offsets is None else offsets
        body = {"group_id": self.group, "consumer_id": self.consumer_id,
                "generation_id": self.generation if generation is None else generation, "leave": leave,
                "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]}
        body.update(override)
        return await self.h.coord.handle_commit(self.channel, body)

    def claim(self, generation: int | None = None, offsets: dict[tuple[str, int], int] | None = None) -> dict:
        """RegisterConsumer v1 fields claiming what this member holds."""
        positions = self.positions if offsets is None else offsets
        return {"generation_id": self.generation if generation is None else generation,
                "owned": [{"consumer_thread_id": f"{self.consumer_id}-0", "partitions": [
                    {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(positions.items())]}]}


class Harness:
    def __init__(self, topics: dict[str, int] | None = None, **cfg: Any):
        self.timer = ManualTimer()
        self.store = MemoryGroupStore(topics if topics is not None else {"t": 12})
        self.fenced_calls = 0
        self.coord = Coordinator(CoordinatorConfig(**cfg), self.store, self.timer, self.timer.clock,
                                 lambda: [(0, "127.0.0.1", 9092)], on_fenced=self._on_fenced,
                                 first_ping_jitter=0)  # pings exactly every interval: tests count on it

    def _on_fenced(self) -> None:
        self.fenced_calls += 1

    async def start(self, epoch: int = EPOCH) -> "Harness":
        await self.coord.activate(epoch)
        return self

    async def settle(self, rounds: int = 60) -> None:
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def advance(self, ms: int) -> None:
        """Move time forward ``ms``, letting posted work run after each timer that fires."""
        target = self.timer.clock.now_ms() + ms
        await self.settle()
        while True:
            due = self.timer.next_due()
            if due is None or due > target:
                break
            self.timer.advance(due - self.timer.clock.now_ms())
            await self.settle()
        self.timer.advance(target - self.timer.clock.now_ms())
        await self.settle()

    def register(self, consumer_id: str, group: str = "g", topics: dict[str, int] | None = None,
                 pattern: str | None = None, streams: int = 1, session: int = 3000, auto: bool = True,
                 like: Member | None = None, version: int = 1, **extra: Any) -> tuple[Member, dict]:
        """A member on a new channel, registering with RegisterConsumer ``version`` (2: it hands
        partitions over incrementally); ``like``: the same member process on a new connection (it
        keeps its generation and positions)."""
        m = Member(self, group, consumer_id, auto=auto, incremental=version >= 2)
        if like is not None:
            m.generation, m.positions, m.history = like.generation, dict(like.positions), like.history
        body: dict[str, Any] = {
            "group_id": group, "consumer_id": consumer_id,
            "topics": [] if pattern else [{"topic": t, "streams": n} for t, n in (topics or {"t": 1}).items()],
            "pattern": pattern, "pattern_streams": streams, "auto_commit": True,
            "auto_offset_reset": "smallest", "session_timeout_ms": session}
        body.update(extra)
        return m, self.coord.register(m.channel, body, version)

    def group(self, g: str = "g"):
        return self.coord.groups[g]
