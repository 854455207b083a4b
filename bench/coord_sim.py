"""Light simulated group members for the coordinator benchmark, all in one asyncio process.

Each member is one real TCP connection to the coordinator speaking our wire codec:
RegisterConsumer, then it answers every Ping / StopFetcher / StartFetcher at once.
Ping and StopFetcher answers carry an offset for every partition the member owns,
advancing at ``rate`` records/s from the start offset its StartFetcher gave it, so
the coordinator has fresh offsets to commit after every ping.  No ClusterMetadata
discovery and no fetching: the coordinator's address is given.

Measured here (member side; ``time.monotonic`` is CLOCK_MONOTONIC, shared by every
process of the machine, so the controller can compare its own timestamps):

* ping lateness: the gap between two consecutive pings of one member minus the
  interval the coordinator schedules (session timeout / 3).  The coordinator
  re-arms the ping timer when a ping is due, so any delay in its timer, its event
  loop, its send path or the network shows up here.
* in-band probe RTT: "probe" members follow each Ping answer with a
  ClusterMetadata request on the same connection.  The broker reads one
  connection's frames in order, so the probe's answer arrives only after the
  coordinator's loop got round to reading the ping answer: the time from sending
  the answer to receiving the probe's response is the coordinator's answer-side
  latency plus one request round trip.
* service time: ping arrival to answer written, in this process; and this process's
  own event-loop lag, so a saturated simulator is not mistaken for a slow coordinator.
* per-member StopFetcher / StartFetcher arrival times and generations, for the
  rebalance timings.

Control: one JSON object per line on stdin, one JSON answer per line on stdout
(``{"id": ..., ...}``); logs go to stderr.  Operations: ``add``, ``groups``,
``mark``, ``events``, ``reset``, ``stats``, ``quit``.  Several simulators can share the
members of one run (each member's figures are kept under its coordinator's tag).  Run by
``bench_coordinator.py``; not meant to be started by hand.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.errors import ErrorCode  # noqa: E402
from spark_coord.gc_pauses import HeapFreezer  # noqa: E402
from spark_coord.wire import coordinator as api  # noqa: E402
from spark_coord.wire import protocol  # noqa: E402
from spark_coord.wire.types import ProtocolError  # noqa: E402

log = logging.getLogger("coord_sim")

MAX_FRAME = 16 << 20
_REQUEST_KEYS = (api.PING, api.STOP_FETCHER, api.START_FETCHER)
#: RegisterConsumer refusals a member answers by registering again a little later
_RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """count, p50, p99 and max of ``values`` (None when empty)."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"n": len(s), "p50": pick(0.50), "p99": pick(0.99), "max": s[-1]}


class Stats:
    """Samples and counters of the current measurement window (``reset`` starts a new one)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.since = time.monotonic()
        self.lateness_ms: list[float] = []
        self.probe_ms: list[float] = []
        self.service_us: list[float] = []
        self.loop_lag_ms: list[float] = []
        self.pings = 0
        self.retried_pings = 0       # pings whose NumRetries > 0: the coordinator saw an earlier one expire
        self.stops = 0
        self.starts = 0
        self.disconnects = 0
        self.errors = 0
        self.offsets_reported = 0
        self.register_retries = 0    # registrations refused as NOT_COORDINATOR and sent again
        #: per coordinator (a member's ``tag``): ping lateness samples and pings re-sent after an expiry
        self.lateness_by: dict[str, list[float]] = {}
        self.pings_by: dict[str, int] = {}
        self.retried_by: dict[str, int] = {}

    def samples(self) -> dict:
        """The raw samples, per coordinator, for a controller merging several simulators."""
        return {"lateness_ms": {t: [round(v, 3) for v in vs] for t, vs in self.lateness_by.items()},
                "pings": self.pings_by, "retried_pings": self.retried_by,
                "probe_ms": [round(v, 3) for v in self.probe_ms],
                "loop_lag_ms": [round(v, 3) for v in self.loop_lag_ms]}

    def summary(self) -> dict:
        return {"window_s": time.monotonic() - self.since, "pings": self.pings, "retried_pings": self.retried_pings,
                "stops": self.stops, "starts": self.starts, "disconnects": self.disconnects, "errors": self.errors,
                "offsets_reported": self.offsets_reported, "register_retries": self.register_retries,
                "lateness_ms": percentiles(self.lateness_ms), "probe_ms": percentiles(self.probe_ms),
                "service_us": percentiles(self.service_us), "loop_lag_ms": percentiles(self.loop_lag_ms)}


class SimMember:
    """One member: its connection, generation, assignment and event log."""

    def __init__(self, sim: "Simulator", group: str, consumer_id: str, topic: str, session_ms: int, probe: bool,
                 version: int = api.VERSION, tag: str = ""):
        self.sim = sim
        #: which coordinator it registered with (figures are kept per tag)
        self.tag = tag
        #: RegisterConsumer version: 2 hands partitions over incrementally (StopFetcher/StartFetcher v1)
        self.version = version
        self.group = group
        self.consumer_id = consumer_id
        self.topic = topic
        self.session_ms = session_ms
        self.ping_interval = max(1, session_ms // 3) / 1000
        self.probe = probe
        self.generation = -1
        self.owned: dict[tuple[str, int], int] = {}   # tp -> start offset
        self.started_at = 0.0
        self.connected = False
        self.registered = False
        self.last_ping: float | None = None
        #: (stop|start, monotonic time, generation, partitions stopped | partitions new to it)
        self.events: list[tuple[str, float, int, int]] = []
        self.marked: set[tuple[str, int]] = set()   # what it owned at the last ``mark``
        self._corr = 0
        self._probes: dict[int, float] = {}
        self.writer: asyncio.StreamWriter | None = None

    # ------------------------------------------------------------------ connection
    async def register(self, host: str, port: int, rate: float) -> int:
        """Connect and RegisterConsumer; returns the error code (0: registered)."""
        reader, writer = await asyncio.open_connection(host, port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.writer = writer
        self.connected = True
        body = {"group_id": self.group, "consumer_id": self.consumer_id,
                "topics": [{"topic": self.topic, "streams": 1}], "pattern": None, "pattern_streams": 1,
                "auto_commit": True, "auto_offset_reset": "smallest", "session_timeout_ms": self.session_ms}
        writer.write(protocol.encode_request(api.REGISTER_CONSUMER, self.version, self._next_corr(), "bench", body))
        frame = await _read_frame(reader)
        _, resp = protocol.decode_response(api.REGISTER_CONSUMER, self.version, frame)
        code = resp["error_code"]
        if code:
            log.warning("%s/%s refused: %s %s", self.group, self.consumer_id, ErrorCode.name_of(code),
                        resp["error_message"])
            writer.close()
            self.connected = False
            return code
        self.registered = True
        self.sim.spawn(self.serve(reader, writer, rate))
        return 0

    def _next_corr(self) -> int:
        """A member's correlation ids are negative (see ``wire.coordinator``)."""
        self._corr += 1
        return api.correlation_id(self._corr)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rate: float) -> None:
        """Answer the coordinator until the connection ends."""
        stats = self.sim.stats
        try:
            while True:
                frame = await _read_frame(reader)
                now = time.monotonic()
                corr = int.from_bytes(frame[:4], "big", signed=True)
                sent = self._probes.pop(corr, None)
                if sent is not None:     # our probe's ClusterMetadata answer
                    protocol.decode_response(api.CLUSTER_METADATA, api.VERSION, frame)
                    stats.probe_ms.append((now - sent) * 1000)
                    continue
                header, body = protocol.decode_request(frame)
                if header.api_key not in _REQUEST_KEYS:
                    raise ProtocolError(f"unexpected request api key {header.api_key}")
                self._answer(writer, header, body, now, rate)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except ProtocolError as e:
            stats.errors += 1
            log.warning("%s/%s: protocol error: %s", self.group, self.consumer_id, e)
        finally:
            if self.connected and not self.sim.stopping:
                stats.disconnects += 1
                log.warning("%s/%s: connection closed", self.group, self.consumer_id)
            self.connected = False
            self.registered = False
            writer.close()

    def _offsets(self, now: float, rate: float) -> list[dict]:
        advanced = int((now - self.started_at) * rate)
        return [{"topic": t, "partition": p, "offset": base + advanced} for (t, p), base in self.owned.items()]

    def _answer(self, writer: asyncio.StreamWriter, header, body: dict, now: float, rate: float) -> None:
        stats = self.sim.stats
        key = header.api_key
        answer = {"error_code": 0, "consumer_id": self.consumer_id, "generation_id": self.generation}
        if key == api.PING:
            stats.pings += 1
            stats.pings_by[self.tag] = stats.pings_by.get(self.tag, 0) + 1
            if body["num_retries"] > 0:
                stats.retried_pings += 1
                stats.retried_by[self.tag] = stats.retried_by.get(self.tag, 0) + 1
            if self.last_ping is not None:
                late = (now - self.last_ping - self.ping_interval) * 1000
                stats.lateness_ms.append(late)
                stats.lateness_by.setdefault(self.tag, []).append(late)
            self.last_ping = now
            answer["offsets"] = self._offsets(now, rate)
            stats.offsets_reported += len(answer["offsets"])
        elif key == api.STOP_FETCHER:
            stats.stops += 1
            named = body.get("partitions")
            offsets = self._offsets(now, rate)
            if named is None:  # everything
                self.events.append(("stop", now, body["generation_id"], len(self.owned)))
                answer["offsets"] = offsets
                self.owned = {}
            else:  # just these: the others go on
                gone = {(e["topic"], p) for e in named for p in e["partitions"]}
                self.events.append(("stop", now, body["generation_id"], len(gone & set(self.owned))))
                answer["offsets"] = [o for o in offsets if (o["topic"], o["partition"]) in gone]
                advanced = int((now - self.started_at) * rate)
                self.owned = {tp: base + advanced for tp, base in self.owned.items() if tp not in gone}
                self.started_at = now
                self.generation = answer["generation_id"] = body["generation_id"]
        else:
            stats.starts += 1
            given = {(p["topic"], p["partition"]): max(0, p["offset"])
                     for own in body["ownership"] for p in own["partitions"]}
            new = {tp: o for tp, o in given.items() if tp not in self.owned}
            self.events.append(("start", now, body["generation_id"], len(new)))
            self.generation = answer["generation_id"] = body["generation_id"]
            if header.api_version >= 1 and self.owned:  # incremental: what it fetches goes on
                advanced = int((now - self.started_at) * rate)
                self.owned = {**{tp: base + advanced for tp, base in self.owned.items() if tp in given}, **new}
            else:
                self.owned = given
            self.started_at = now
        writer.write(b"".join(protocol.encode_response(header, answer)))
        if key == api.PING and self.probe:
            corr = self._next_corr()
            self._probes[corr] = time.monotonic()
            writer.write(protocol.encode_request(api.CLUSTER_METADATA, api.VERSION, corr, "bench-probe", {}))
        stats.service_us.append((time.monotonic() - now) * 1e6)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
    if size < 4 or size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes refused")
    return await reader.readexactly(size)


class Simulator:
    """All members plus the control loop."""

    def __init__(self) -> None:
        self.members: dict[tuple[str, str], SimMember] = {}
        self.stats = Stats()
        self._tasks: set[asyncio.Task] = set()
        self.stopping = False   # quitting: closed connections are expected

    def spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _lag_monitor(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.1)
            self.stats.loop_lag_ms.append((time.monotonic() - t - 0.1) * 1000)

    # ------------------------------------------------------------------ operations
    async def op_add(self, cmd: dict) -> dict:
        """Register members ``[{group, consumer, topic, probe}]``, ``concurrency`` at a time; a member's own
        ``host``, ``port`` and ``tag`` (its group's coordinator) go before the command's."""
        sem = asyncio.Semaphore(int(cmd.get("concurrency", 64)))
        host, port, session, rate = cmd["host"], int(cmd["port"]), int(cmd["session_ms"]), float(cmd["rate"])
        retry_s = float(cmd.get("retry_s", 120.0))
        failures: list[str] = []
        t0 = time.monotonic()
        retries0 = self.stats.register_retries

        async def one(spec: dict) -> None:
            m = SimMember(self, spec["group"], spec["consumer"], spec["topic"], session, bool(spec.get("probe")),
                          int(spec.get("version", api.VERSION)), str(spec.get("tag", "")))
            self.members[(m.group, m.consumer_id)] = m
            deadline = None
            while True:
                async with sem:
                    deadline = deadline or time.monotonic() + retry_s
                    try:
                        code = await m.register(spec.get("host", host), int(spec.get("port", port)), rate)
                    except (OSError, ConnectionError, asyncio.IncompleteReadError, ProtocolError) as e:
                        code = f"{e.__class__.__name__}: {e}"
                        m.connected = False
                # a coordinator not sure of its election (or not elected yet) is asked again, as members do
                if code in _RETRIABLE and time.monotonic() < deadline:
                    self.stats.register_retries += 1
                    await asyncio.sleep(1.0)
                    continue
                if code:
                    failures.append(f"{m.group}/{m.consumer_id}: {code}")
                return

        await asyncio.gather(*(one(s) for s in cmd["members"]))
        return {"registered": len(cmd["members"]) - len(failures), "failures": failures[:20],
                "retries": self.stats.register_retries - retries0, "t0": t0, "t1": time.monotonic()}

    def op_groups(self, cmd: dict) -> dict:
        """Per group: members, registered, the newest epoch a member runs, and whether every member
        was started (members whose partitions did not move keep older epochs)."""
        out: dict[str, dict] = {}
        for (g, _), m in self.members.items():
            d = out.setdefault(g, {"members": 0, "registered": 0, "generation": -1, "started": 0})
            d["members"] += 1
            d["registered"] += m.registered
            d["generation"] = max(d["generation"], m.generation)
            d["started"] += m.generation >= 1
        for d in out.values():
            d["settled"] = d["registered"] == d["members"] == d["started"]
        return {"groups": out}

    def op_mark(self, cmd: dict) -> dict:
        """Forget the rebalance events of ``group``'s members (start of a join measurement)."""
        for (g, _), m in self.members.items():
            if g == cmd["group"]:
                m.events = []
                m.marked = set(m.owned)
        return {"t": time.monotonic()}

    def op_events(self, cmd: dict) -> dict:
        """``group``'s members' rebalance events since ``mark``: {consumer: [[kind, t, gen, n], ...]}, and how
        many partitions each no longer owns of those it owned at the ``mark``."""
        return {"events": {m.consumer_id: m.events for (g, _), m in self.members.items() if g == cmd["group"]},
                "registered": {m.consumer_id: m.registered for (g, _), m in self.members.items()
                               if g == cmd["group"]},
                "lost": {m.consumer_id: len(m.marked - set(m.owned)) for (g, _), m in self.members.items()
                         if g == cmd["group"]}}

    def op_reset(self, cmd: dict) -> dict:
        self.stats.reset()
        return {"t": self.stats.since}

    def op_stats(self, cmd: dict) -> dict:
        """The window's figures; with ``raw``, also its samples per coordinator (``samples``)."""
        out = self.stats.summary()
        if cmd.get("raw"):
            out["samples"] = self.stats.samples()
        return out

    async def control(self) -> None:
        loop = asyncio.get_running_loop()
        HeapFreezer().start()   # the simulator's own full collections would delay its answers
        reader = asyncio.StreamReader(limit=64 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        self.spawn(self._lag_monitor())
        while True:
            line = await reader.readline()
            if not line:
                return
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "quit":
                self.stopping = True
                _reply({"id": cmd.get("id"), "ok": True})
                return
            try:
                handler = getattr(self, f"op_{op}")
                result = handler(cmd)
                if asyncio.iscoroutine(result):
                    result = await result
                _reply({"id": cmd.get("id"), "ok": True, **result})
            except Exception as e:  # a bad command must not kill the members
                log.exception("command %r failed", op)
                _reply({"id": cmd.get("id"), "ok": False, "error": f"{e.__class__.__name__}: {e}"})


def _reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s sim %(levelname)s %(message)s")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(Simulator().control())
    return 0


if __name__ == "__main__":
    sys.exit(main())
