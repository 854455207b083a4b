"""Kafka 4's consumer group protocol (KIP-848) at 1,000 members: heartbeat latency, coordinator
CPU, and the time a joining member takes to receive its partitions.

Run:  .venv/bin/python bench/bench_kip848.py [--baseline 100] [--big 1000] [--partitions 2000]
      (about 3 minutes on 2 cores; ``--quick`` runs 20 / 200 members with 10 s windows)

Set-up: one broker (so its coordinator is the elected one) and an embedded ZooKeeper in
a ``LocalCluster``; simulated members in this process (asyncio, one real TCP connection
per member, our wire codec): each joins with epoch 0, heartbeats every interval the
coordinator gives it (``group.consumer.heartbeat.interval.ms``, 5 s by default, as in
Kafka), takes the assignment an answer carries at once and says what it owns in its next
heartbeat, sent right away, as librdkafka does once its callbacks ran.

Phases, cumulative in one run (one broker process throughout): a baseline of
``--baseline`` members in group ``bench-848``, then the group grown to ``--big``.  Each
phase waits until every partition is owned by exactly one member and every member is
at the epoch it was last told, measures ``--window`` seconds of steady heartbeats, and
then one more member joins: the time from its joining heartbeat until an answer gives
it partitions.  That time is bounded below by the protocol (the old owner hears of the
move at its next heartbeat, revokes, says so at the heartbeat after; the newcomer hears
at its own next one), so the heartbeat interval is printed beside it.

* heartbeat latency: member side, from writing a heartbeat to reading its answer (the
  coordinator answers a steady heartbeat at once);
* coordinator CPU: broker process CPU time (/proc/<pid>/stat) over the window's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.wire import protocol  # noqa: E402
from spark_coord.wire.registry import ApiKey  # noqa: E402

log = logging.getLogger("bench_kip848")
HB = ApiKey.CONSUMER_GROUP_HEARTBEAT
GROUP, TOPIC = "bench-848", "bench-848"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Member:
    """One simulated KIP-848 consumer on its own connection."""

    def __init__(self, host: str, port: int, rtts: list[float], errors: list[str]):
        self.host, self.port, self.rtts, self.errors = host, port, rtts, errors
        self.member_id = base64.b64encode(uuid.uuid4().bytes).decode()[:22]  # as librdkafka makes them
        self.epoch = 0
        self.owned: list[dict] = []
        self.changed = True
        self.interval = 5.0
        self.measuring = False
        self.got_partitions = asyncio.Event()
        self._corr = 0
        self._task: asyncio.Task | None = None

    async def _call(self, reader, writer, body: dict) -> dict:
        self._corr += 1
        t0 = time.monotonic()
        writer.write(protocol.encode_request(HB, 1, self._corr, "bench-848", body))
        await writer.drain()
        size = int.from_bytes(await reader.readexactly(4), "big")
        _, resp = protocol.decode_response(HB, 1, await reader.readexactly(size))
        if self.measuring and body["member_epoch"] > 0:
            self.rtts.append(time.monotonic() - t0)
        return resp

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            first = True
            while True:
                joining = self.epoch == 0
                body = {"group_id": GROUP, "member_id": self.member_id, "member_epoch": self.epoch,
                        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 300000 if joining else -1,
                        "subscribed_topic_names": [TOPIC] if joining else None, "subscribed_topic_regex": None,
                        "server_assignor": None, "topic_partitions": self.owned if (self.changed or joining) else None}
                resp = await self._call(reader, writer, body)
                self.changed = False
                if resp["error_code"]:
                    self.errors.append(f"{self.member_id}: error {resp['error_code']} {resp.get('error_message')}")
                    self.epoch, self.owned = 0, []
                    await asyncio.sleep(1)
                    continue
                self.epoch = resp["member_epoch"]
                self.interval = resp["heartbeat_interval_ms"] / 1000
                if resp["assignment"] is not None:
                    new = [{"topic_id": e["topic_id"], "partitions": sorted(e["partitions"])}
                           for e in resp["assignment"]["topic_partitions"]]
                    self.changed = new != self.owned
                    self.owned = new
                    if any(e["partitions"] for e in new):
                        self.got_partitions.set()
                if self.changed:
                    continue  # revoked or took partitions: say so at once
                # the first wait is spread over an interval, so heartbeats do not arrive in waves
                await asyncio.sleep(self.interval * (0.2 + 0.8 * (hash(self.member_id) % 1000) / 1000)
                                    if first else self.interval)
                first = False
        finally:
            writer.close()

    def partitions(self) -> int:
        return sum(len(e["partitions"]) for e in self.owned)


async def wait_settled(members: list[Member], partitions: int, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        counts = [m.partitions() for m in members]
        if (sum(counts) == partitions and min(counts) >= partitions // len(members)
                and all(m.epoch > 0 for m in members)):
            return time.monotonic() - t0
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{len(members)} members did not settle in {timeout} s: "
                       f"{sum(m.partitions() for m in members)} of {partitions} partitions owned")


async def phase(name: str, members: list[Member], n: int, pid: int, host: str, port: int, args,
                rtts: list[float], errors: list[str]) -> dict:
    new = [Member(host, port, rtts, errors) for _ in range(n - len(members))]
    for i, m in enumerate(new):
        m.start()
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    members.extend(new)
    settle = await wait_settled(members, args.partitions, args.settle_timeout)
    log.info("%s: %d members settled in %.1f s", name, len(members), settle)
    rtts.clear()
    for m in members:
        m.measuring = True
    c0, w0 = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(args.window)
    cpu = (cpu_seconds(pid) - c0) / (time.monotonic() - w0)
    for m in members:
        m.measuring = False
    window = list(rtts)
    probe = Member(host, port, rtts, errors)
    t0 = time.monotonic()
    probe.start()
    await asyncio.wait_for(probe.got_partitions.wait(), args.settle_timeout)
    join = time.monotonic() - t0
    members.append(probe)
    return {"name": name, "members": len(members) - 1, "heartbeats": len(window), "p50": pct(window, 0.5) * 1000,
            "p99": pct(window, 0.99) * 1000, "max": max(window, default=float("nan")) * 1000, "cpu": cpu * 100,
            "join": join, "interval": probe.interval, "settle": settle}


async def run(args) -> list[dict]:
    overrides = {"group.consumer.heartbeat.interval.ms": args.interval_ms,
                 "group.consumer.session.timeout.ms": args.session_ms}
    with tempfile.TemporaryDirectory(prefix="bench-848-") as d, LocalCluster(1, d, overrides=overrides) as cluster:
        from spark_coord.client.admin import AdminClient
        from spark_coord.client.metadata import ClusterClient

        with ClusterClient(cluster.bootstrap) as cc:
            AdminClient(cc).create_topic(TOPIC, args.partitions)
        host, port = cluster.brokers[0]
        pid = cluster.procs[0].pid
        members: list[Member] = []
        rtts: list[float] = []
        errors: list[str] = []
        out = []
        try:
            out.append(await phase("baseline", members, args.baseline, pid, host, port, args, rtts, errors))
            out.append(await phase("big", members, args.big, pid, host, port, args, rtts, errors))
        finally:
            await asyncio.gather(*(m.stop() for m in members))
        if errors:
            log.warning("%d heartbeat errors, first: %s", len(errors), errors[0])
        for r in out:
            r["errors"] = len(errors)
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=int, default=100, help="members in the baseline phase")
    ap.add_argument("--big", type=int, default=1000, help="members in the second phase")
    ap.add_argument("--partitions", type=int, default=2000, help="at least twice --big: the member joining last "
                                                                       "must have partitions to get")
    ap.add_argument("--interval-ms", type=int, default=5000, help="group.consumer.heartbeat.interval.ms")
    ap.add_argument("--session-ms", type=int, default=45000, help="group.consumer.session.timeout.ms")
    ap.add_argument("--window", type=float, default=30.0, help="seconds of steady heartbeats measured per phase")
    ap.add_argument("--settle-timeout", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true", help="20 / 200 members, 10 s windows")
    args = ap.parse_args()
    if args.quick:
        args.baseline, args.big, args.partitions, args.window = 20, 200, 400, 10.0
    if args.partitions < 2 * args.big:
        ap.error(f"--partitions must be at least twice --big ({2 * args.big}): with fewer, a balanced "
                 f"assignment gives the member joining last nothing")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("spark_coord").setLevel(logging.WARNING)
    results = asyncio.run(run(args))
    print(f"\nKIP-848 members (ConsumerGroupHeartbeat v1 over TCP), one group, {args.partitions} partitions, "
          f"heartbeat interval {args.interval_ms} ms")
    print("| members | heartbeats measured | latency p50 ms | p99 ms | max ms | coordinator CPU | "
          "settle s | join -> partitions s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['members']:,} | {r['heartbeats']:,} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.1f} | "
              f"{r['cpu']:.1f}% | {r['settle']:.1f} | {r['join']:.2f} |")
    base, big = results
    print(f"\n{big['members']} / {base['members']} members: latency p50 x{big['p50'] / base['p50']:.2f}, "
          f"p99 x{big['p99'] / base['p99']:.2f}; CPU x{big['cpu'] / max(base['cpu'], 0.01):.1f}; "
          f"heartbeat errors {big['errors']}")
    print(f"join -> partitions: {statistics.mean([r['join'] for r in results]):.2f} s mean "
          f"(the protocol's floor is about one heartbeat interval, {args.interval_ms / 1000:.1f} s, per hop)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
