"""Share groups (KIP-932) against a consumer group, same run: records/s, poll and commit latency, ZooKeeper writes.

Run:  .venv/bin/python bench/bench_share.py [--records 200000] [--partitions 8] [--consumers 8] [--runs 3]
                                            [--commits 300] [--commit-batch 10] [--json PATH]
                                            [--queue-backoff-ms 10] [--max-poll-records N]
                                            [--thin-max-poll-records 500] [--thin-process-ms MS]
      (about 2.5 minutes with the defaults on a shared 2-core machine)

Set-up: an embedded ZooKeeper (``EmbeddedZooKeeper``) and one broker (``LocalCluster``) on loopback,
broker defaults.  One topic of ``--partitions`` partitions gets ``--records`` records of ``--size``
bytes from confluent-kafka's ``Producer`` (round robin over the partitions, linger 5 ms, librdkafka's
default batching), before anything is measured; a second topic (same partitions) gets records in
producer batches of ``--commit-batch`` records for the commit phase.  Every client is a
confluent-kafka (librdkafka) client in a process of its own (``multiprocessing``, spawn), so no two
share a GIL with each other or with this process, which only watches.

Each run, in this order, every phase with a fresh group reading the whole topic from its start:

1. **consumer group** (the baseline): one ``Consumer`` (classic group protocol,
   ``auto.offset.reset=earliest``, auto commit on), reading with ``consume(--batch)``, with
   ``fetch.queue.backoff.ms=--queue-backoff-ms`` (10): with librdkafka's own 1000 ms the Consumer
   stops fetching for a whole second whenever 100,000 records (``queued.min.messages``) wait in its
   queue, which happens in some runs and not others (a reader that is slower than the fetches), and
   the baseline jumps between ~150k and ~1M records/s; that Consumer, all defaults, is measured next
   and printed beside ("librdkafka defaults"), not used for the ratios (its groups' ZooKeeper writes are
   the consumer group's offset commits: auto commit every 5 s, and at close);
2. **1 share consumer**: one ``ShareConsumer`` (implicit acknowledgement, librdkafka's defaults unless
   ``--max-poll-records``) in a share group whose ``share.auto.offset.reset`` was set to ``earliest``
   first (``incremental_alter_configs`` on the GROUP resource), reading with ``poll()``;
3. **N share consumers**: ``--consumers`` ``ShareConsumer`` processes in one share group;
4. **our thin clients**: one thin ``Consumer`` (``spark_coord.consumer``, consumer group, ``messages()``)
   and one thin ``ShareConsumer`` (``spark_coord.consumer.share``, implicit acknowledgement,
   ``--thin-max-poll-records``, a ShareFetch sent ahead of each poll), then the same without it
   (``prefetch=False``, what the pipeline gains): both hand the application one Python object per
   record, so the thin ShareConsumer's ratio is taken against the thin Consumer; with
   ``--thin-process-ms`` each thin reader sleeps that long after every call that returned records (the
   application's work, which a fetch sent ahead overlaps);
5. **commit latency**: the commit-phase topic read by one ``Consumer`` (auto commit off) committing
   the offsets of each ``consume(--commit-batch)`` with ``commit(asynchronous=False)`` (the baseline),
   and by one ``ShareConsumer`` in explicit mode (``max.poll.records=--commit-batch``) that accepts
   each record of a poll and calls ``commit_sync()`` (one ShareAcknowledge, answered once the
   acknowledgement is in ZooKeeper); ``--commits`` commits each, after 10 not counted.

How the figures are taken:

* every client subscribes, then waits for a start signal; share consumers are released only once the
  coordinator describes the share group with every member at the group epoch and every partition
  assigned (ShareGroupDescribe), so the records/s is not a join time.  A classic consumer joins in its
  first ``consume()`` calls: its join is the "start -> first record" column, never in records/s;
* records/s: N / (from the start of the first poll that returned records, in any process, to the
  return of the poll that returned the last of the N, in any process; CLOCK_MONOTONIC is one clock
  for every process); every delivery's (partition, offset) is kept and checked: all N, none twice;
* poll latency: the wall time of each ``poll()`` / ``consume()`` call that returned records (so
  while records are available), p50 and p99 over the run's calls, beside the records each returned;
* commit latency: wall time of ``commit_sync()`` / ``commit(asynchronous=False)``;
* ZooKeeper writes: the sum of the version increments (a create counts one) of the group's znodes
  (``/share-groups/<group>/<topic>/<p>`` for share groups, ``/consumers/<group>/offsets/<topic>/<p>``
  for the consumer group), read with a kazoo client before the start signal and when the N-th record
  was counted (in window), and again after every client closed (total); writes/s divides the
  window's increments by the time from the first record to the N-th counted; ZooKeeper's write
  transactions of every kind (a multi is one, the coordinator's own writes count too) from its zxid
  (``srvr``) over the same window;
* share-state journal: the broker's appends (one per group commit of acknowledgements) and their bytes
  over the same window, from its metrics endpoint (``spark_coord_share_journal_*_total``): appends per
  1,000 records and bytes per append -- with the journal an acknowledgement is answered after its
  append, and the znode writes are the checkpoints behind it;
* CPU: the broker's and ZooKeeper's process CPU time (/proc/<pid>/stat) from the start signal to the
  N-th record over that time, and the readers' own (``time.process_time()`` over their reading time:
  librdkafka's threads and the Python loop, summed over the processes);
* the longest gap between two calls of one process that returned records: a stall shows there.

Figures are medians over ``--runs``; every ratio is taken within a run (against that run's consumer
group) and its median printed.  The machine is shared and noisy: quote ratios and medians; the load
average is printed beside.  ``--json PATH`` writes every run's figures and the medians.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_coord.client.groups import describe_share_group  # noqa: E402
from spark_coord.table import format_table  # noqa: E402

log = logging.getLogger("bench_share")

TOPIC, SMALL_TOPIC = "bench-share", "bench-share-small"
#: The reading phases of a run, the baseline first.
READ_PHASES = ("consumer", "consumer_default", "share1", "shareN", "thin_consumer", "thin_share1", "thin_share1_np")
#: The thin clients' phases: the thin ShareConsumer is measured against the thin Consumer.
THIN_PHASES = ("thin_consumer", "thin_share1", "thin_share1_np")
#: Commits of the commit phase made before the measured ones (connections, partition loads).
COMMIT_WARMUP = 10
#: A (partition, offset) pair as one int: partition << 40 | offset.
SHIFT = 40


class BenchError(RuntimeError):
    """The run could not reach a state it needs to measure (the message says which)."""


# ---------------------------------------------------------------------- client processes
def _wait_go(go, stop) -> None:
    while not go.wait(0.5):
        if stop.is_set():
            return


def reader(spec: dict, counter, ready, go, stop, out) -> None:
    """One Consumer or ShareConsumer reading until ``stop``; puts its deliveries and timings on ``out``."""
    idx = spec["idx"]
    if spec["kind"] in ("thin", "thinshare"):
        return thin_reader(spec, counter, ready, go, stop, out)
    try:
        from confluent_kafka import Consumer, ShareConsumer

        share = spec["kind"] == "share"
        client = ShareConsumer(spec["conf"]) if share else Consumer(spec["conf"])
        client.subscribe([spec["topic"]])
        with ready.get_lock():
            ready.value += 1
        _wait_go(go, stop)
        batch = spec["batch"]
        keys = array("q")
        polls: list[tuple[float, int]] = []   # (seconds, records) of each call that returned records
        errors: list[str] = []
        empty = 0
        first = last = cpu_first = cpu_last = None
        gap = 0.0   # the longest time between two calls that returned records
        while not stop.is_set():
            c0 = time.process_time()
            t0 = time.monotonic()
            msgs = client.poll(0.1) if share else client.consume(batch, 0.1)
            t1 = time.monotonic()
            n = 0
            for m in msgs:
                if m.error():
                    errors.append(str(m.error()))
                    continue
                keys.append(m.partition() << SHIFT | m.offset())
                n += 1
            if n:
                if first is None:
                    first, cpu_first = t0, c0
                else:
                    gap = max(gap, t1 - last)
                last, cpu_last = t1, time.process_time()
                polls.append((t1 - t0, n))
                with counter.get_lock():
                    counter.value += n
            else:
                empty += 1
        t_close = time.monotonic()
        client.close()
        out.put({"idx": idx, "keys": keys.tobytes(), "polls": polls, "errors": errors[:20], "n_errors": len(errors),
                 "empty_polls": empty, "first": first, "last": last, "gap": gap,
                 "cpu": (cpu_last - cpu_first) if first is not None else 0.0,
                 "close_s": time.monotonic() - t_close})
    except BaseException:  # noqa: BLE001 -- reported to the parent, which stops the phase
        out.put({"idx": idx, "error": traceback.format_exc()})


def thin_reader(spec: dict, counter, ready, go, stop, out) -> None:
    """``reader`` for our thin clients: a ``Consumer`` (its ``messages()``, one ``Record`` at a time) or a
    ``ShareConsumer`` (``poll()``, implicit acknowledgement, a fetch sent ahead unless ``prefetch`` is off);
    both hand the application one Python object per record.  A Consumer's "call" is a run of up to
    ``batch`` records from ``messages()``."""
    idx = spec["idx"]
    try:
        from spark_coord.consumer.consumer import Consumer
        from spark_coord.consumer.share import ShareConsumer

        share = spec["kind"] == "thinshare"
        conf = spec["conf"]
        if share:
            client = ShareConsumer(conf["bootstrap.servers"], conf["group.id"], [spec["topic"]],
                                   max_poll_records=spec["max_poll_records"], prefetch=spec["prefetch"])
        else:
            client = Consumer(conf["bootstrap.servers"], conf["group.id"], topics=[spec["topic"]],
                              auto_offset_reset="earliest")
        with ready.get_lock():
            ready.value += 1
        _wait_go(go, stop)
        batch = spec["batch"]
        keys = array("q")
        polls: list[tuple[float, int]] = []
        first = last = cpu_first = cpu_last = None
        gap = 0.0
        empty = 0
        stream = None if share else client.messages(timeout=0.1)
        work = spec["process_ms"] / 1000
        while not stop.is_set():
            c0 = time.process_time()
            t0 = time.monotonic()
            n = 0
            if share:
                for m in client.poll(0.1):
                    keys.append(m.partition << SHIFT | m.offset)
                    n += 1
            else:
                for m in stream:
                    keys.append(m.partition << SHIFT | m.offset)
                    n += 1
                    if n >= batch:
                        break
                else:
                    stream = client.messages(timeout=0.1)  # nothing came for 0.1 s: that iterator ended
            t1 = time.monotonic()
            if n:
                if first is None:
                    first, cpu_first = t0, c0
                else:
                    gap = max(gap, t1 - last)
                last, cpu_last = t1, time.process_time()
                polls.append((t1 - t0, n))
                with counter.get_lock():
                    counter.value += n
                if work:
                    time.sleep(work)  # the application's work on the call's records (--thin-process-ms)
            else:
                empty += 1
        t_close = time.monotonic()
        client.close()
        out.put({"idx": idx, "keys": keys.tobytes(), "polls": polls, "errors": [], "n_errors": 0,
                 "empty_polls": empty, "first": first, "last": last, "gap": gap,
                 "cpu": (cpu_last - cpu_first) if first is not None else 0.0,
                 "close_s": time.monotonic() - t_close})
    except BaseException:  # noqa: BLE001 -- reported to the parent, which stops the phase
        out.put({"idx": idx, "error": traceback.format_exc()})


def committer(spec: dict, counter, ready, go, stop, out) -> None:
    """Small batches, each committed synchronously; puts the commit latencies on ``out``, then waits for
    ``stop`` before closing (so the parent reads ZooKeeper before the close's own writes)."""
    idx = spec["idx"]
    try:
        from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer, TopicPartition

        share = spec["kind"] == "share"
        client = ShareConsumer(spec["conf"]) if share else Consumer(spec["conf"])
        topic, batch, want = spec["topic"], spec["batch"], spec["commits"] + COMMIT_WARMUP
        client.subscribe([topic])
        with ready.get_lock():
            ready.value += 1
        _wait_go(go, stop)
        lat: list[float] = []
        sizes: list[int] = []
        failures: list[str] = []
        deadline = time.monotonic() + spec["timeout"]
        while len(lat) < want and not stop.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(lat)} of {want} commits in {spec['timeout']:.0f} s")
            msgs = client.poll(1.0) if share else client.consume(batch, 1.0)
            good = [m for m in msgs if not m.error()]
            if not good:
                continue
            if share:
                for m in good:
                    client.acknowledge(m, AcknowledgeType.ACCEPT)
                t0 = time.monotonic()
                result = client.commit_sync()
                t1 = time.monotonic()
                failures += [str(e) for e in result.values() if e is not None]
            else:
                ends: dict[int, int] = {}
                for m in good:
                    ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
                tps = [TopicPartition(topic, p, o) for p, o in ends.items()]
                t0 = time.monotonic()
                result = client.commit(offsets=tps, asynchronous=False)
                t1 = time.monotonic()
                failures += [str(tp.error) for tp in result or [] if tp.error]
            lat.append(t1 - t0)
            sizes.append(len(good))
            with counter.get_lock():
                counter.value += 1
        out.put({"idx": idx, "lat": lat[COMMIT_WARMUP:], "sizes": sizes[COMMIT_WARMUP:], "failures": failures[:20],
                 "n_failures": len(failures)})
        _wait_go(stop, stop)   # until the parent has read ZooKeeper
        client.close()
    except BaseException:  # noqa: BLE001
        out.put({"idx": idx, "error": traceback.format_exc()})


# ---------------------------------------------------------------------- helpers of the parent
def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def med(values) -> float:
    vs = [v for v in values if v is not None and v == v]
    return statistics.median(vs) if vs else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def znode_versions(zk, znodes: list[str]) -> dict[str, int]:
    """znode -> data version (-1: absent), with pipelined async calls."""
    pending = [(p, zk.exists_async(p)) for p in znodes]
    out = {}
    for p, res in pending:
        stat = res.get(timeout=30)
        out[p] = -1 if stat is None else stat.version
    return out


def znode_writes(before: dict[str, int], after: dict[str, int]) -> int:
    """Writes between two snapshots: version increments, a create counting one."""
    return sum(v - before.get(p, -1) for p, v in after.items() if v >= 0)


def journal_counters(port: int | None) -> tuple[int, int]:
    """(appends, bytes) of the broker's share-state journal so far, from its metrics endpoint
    (``spark_coord_share_journal_appends_total``, ``_bytes_total``); (0, 0) without one."""
    if port is None:
        return 0, 0
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        found[name] = value
    return tuple(int(float(found.get(f"spark_coord_share_journal_{what}_total", 0))) for what in ("appends", "bytes"))


def zxid(host: str, port: int) -> int:
    """ZooKeeper's last zxid (its counter part): one per write transaction (a multi counts once)."""
    from spark_coord.zk.embedded import four_letter_word

    for line in four_letter_word(host, port, "srvr").splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16) & 0xFFFFFFFF
    raise BenchError("ZooKeeper's srvr answer carries no Zxid")


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int, **conf) -> float:
    """``n`` records of ``size`` bytes, round robin over the partitions; returns the seconds it took."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000, **conf})
    value = os.urandom(size)
    failed: list[str] = []

    def cb(err, _msg):
        if err is not None:
            failed.append(str(err))

    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.monotonic() - t0
    if left or failed:
        raise BenchError(f"producing to {topic}: {left} not delivered, {len(failed)} failed, e.g. {failed[:3]}")
    return elapsed


class Fig(float):
    """A number printed with a format spec (right-aligned by ``format_table``); NaN prints as '-'."""

    def __new__(cls, value, spec: str = ",.0f"):
        obj = super().__new__(cls, float("nan") if value is None else value)
        obj.spec = spec
        return obj

    def __str__(self) -> str:
        return "-" if self != self else format(float(self), self.spec)


# ---------------------------------------------------------------------- the benchmark
class Bench:
    def __init__(self, args: argparse.Namespace, cluster, zk_server):
        from confluent_kafka.admin import AdminClient as KafkaAdmin

        from spark_coord.zk import client as zk_client

        self.args = args
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self.broker_pid = cluster.procs[0].pid
        self.metrics_port = cluster.metrics_ports.get(0)
        self.zk_pid = zk_server.pid
        host, port = zk_server.connect_string.rsplit(":", 1)
        self.zk_addr = (host, int(port))
        self.zk = zk_client.connect(zk_server.connect_string)
        self.admin = KafkaAdmin({"bootstrap.servers": self.bootstrap})
        self.mp = mp.get_context("spawn")

    def close(self) -> None:
        from spark_coord.zk import client as zk_client

        zk_client.close(self.zk)

    def set_earliest(self, group: str) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        futures = self.admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])])
        for f in futures.values():
            f.result(timeout=30)

    def wait_share_stable(self, group: str, members: int, deadline: float) -> float:
        """Until the coordinator describes ``members`` members, each told the group epoch's assignment,
        covering every partition; returns the seconds waited."""
        t0 = time.monotonic()
        last = None
        while True:
            g = describe_share_group(self.bootstrap, group)
            if g.error == 0:
                ms = g.members
                covered = {p for m in ms for ps in m.assignment.values() for p in ps}
                last = (g.epoch, [(m.epoch, sum(map(len, m.assignment.values()))) for m in ms])
                if len(ms) == members and all(m.epoch == g.epoch for m in ms) \
                        and len(covered) == self.args.partitions and all(m.assignment for m in ms):
                    return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise BenchError(f"share group {group}: not {members} stable members in time; last described "
                                 f"{last or g.error}")
            time.sleep(0.2)

    def _spawn(self, target, specs: list[dict]):
        counter, ready = self.mp.Value("q", 0), self.mp.Value("i", 0)
        go, stop, out = self.mp.Event(), self.mp.Event(), self.mp.Queue()
        procs = [self.mp.Process(target=target, args=(s, counter, ready, go, stop, out), daemon=True) for s in specs]
        for p in procs:
            p.start()
        return procs, counter, ready, go, stop, out

    @staticmethod
    def _check_alive(procs, out, what: str) -> None:
        dead = [p for p in procs if p.exitcode is not None]
        if dead:
            detail = ""
            while not out.empty():
                r = out.get()
                if "error" in r:
                    detail = r["error"]
                    break
            raise BenchError(f"{what}: a client process exited (code {dead[0].exitcode}) {detail}")

    @staticmethod
    def _reap(procs, stop) -> None:
        stop.set()
        for p in procs:
            p.join(20)
            if p.is_alive():
                p.terminate()
                p.join(5)

    def _collect(self, procs, out, count: int, what: str, timeout: float = 60) -> list[dict]:
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            try:
                r = out.get(timeout=1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise BenchError(f"{what}: {count - len(got)} client(s) gave no result") from None
                self._check_alive(procs, out, what)
                continue
            if "error" in r:
                raise BenchError(f"{what}: client {r['idx']} failed:\n{r['error']}")
            got.append(r)
        return sorted(got, key=lambda r: r["idx"])

    # ------------------------------------------------------------------ reading phases
    def read_phase(self, label: str, kind: str, group: str, consumers: int, extra: dict | None = None, *,
                   prefetch: bool = True) -> dict:
        """``consumers`` clients of ``kind`` in ``group`` (their config plus ``extra``; a thin ShareConsumer
        sends its next fetch ahead when ``prefetch``) read the whole topic; the phase's figures."""
        from spark_coord.zk import paths

        a = self.args
        n = a.records
        base = {"bootstrap.servers": self.bootstrap, "group.id": group, **(extra or {})}
        share_like = kind in ("share", "thinshare")
        if share_like:
            self.set_earliest(group)
            znodes = [paths.share_partition(group, TOPIC, p) for p in range(a.partitions)]
        else:
            base["auto.offset.reset"] = "earliest"
            znodes = [paths.offset(group, TOPIC, p) for p in range(a.partitions)]
        specs = [{"idx": i, "kind": kind, "topic": TOPIC, "batch": a.batch, "max_poll_records": a.thin_max_poll_records,
                  "prefetch": prefetch, "process_ms": a.thin_process_ms, "conf": {**base, "client.id": f"{label}-{i}"}}
                 for i in range(consumers)]
        deadline = time.monotonic() + a.timeout
        procs, counter, ready, go, stop, out = self._spawn(reader, specs)
        try:
            while ready.value < consumers:
                self._check_alive(procs, out, label)
                if time.monotonic() > deadline:
                    raise BenchError(f"{label}: {consumers - ready.value} client(s) never subscribed")
                time.sleep(0.05)
            settle = self.wait_share_stable(group, consumers, deadline) if share_like else None
            v0 = znode_versions(self.zk, znodes)
            j0 = journal_counters(self.metrics_port)
            z0 = zxid(*self.zk_addr)
            cpu0 = (cpu_seconds(self.broker_pid), cpu_seconds(self.zk_pid))
            load0 = os.getloadavg()[0]
            t_go = time.monotonic()
            go.set()
            while counter.value < n:
                if time.monotonic() > deadline:
                    raise BenchError(f"{label}: {counter.value:,} of {n:,} records read in {a.timeout:.0f} s")
                self._check_alive(procs, out, label)
                time.sleep(0.002)
            t_end = time.monotonic()
            cpu1 = (cpu_seconds(self.broker_pid), cpu_seconds(self.zk_pid))
            z1 = zxid(*self.zk_addr)
            v1 = znode_versions(self.zk, znodes)
            j1 = journal_counters(self.metrics_port)
            stop.set()
            results = self._collect(procs, out, consumers, label)
        finally:
            self._reap(procs, stop)
        time.sleep(0.3)   # the state writer's flush interval (100 ms) after the last close
        v2 = znode_versions(self.zk, znodes)

        seen: set[int] = set()
        deliveries = 0
        per_consumer = []
        for r in results:
            ks = array("q")
            ks.frombytes(r["keys"])
            deliveries += len(ks)
            per_consumer.append(len(ks))
            seen.update(ks)
        per_partition = [n // a.partitions + (p < n % a.partitions) for p in range(a.partitions)]
        expected = {p << SHIFT | o for p in range(a.partitions) for o in range(per_partition[p])}
        firsts = [r["first"] for r in results if r["first"] is not None]
        t_first, t_last = min(firsts), max(r["last"] for r in results if r["last"] is not None)
        read_s = t_last - t_first
        window = t_end - t_first            # what the in-window snapshots and CPU readings span
        polls = [p for r in results for p in r["polls"]]
        lat = [s for s, _ in polls]
        writes = znode_writes(v0, v1)
        fig = {"label": label, "kind": kind, "consumers": consumers, "group": group, "config": extra or {},
               "records_s": n / read_s, "read_s": read_s, "first_record_s": t_first - t_go,
               "settle_s": settle, "deliveries": deliveries, "unique": len(seen & expected),
               "duplicates": deliveries - len(seen), "missing": len(expected - seen),
               "per_consumer": per_consumer,
               "poll_p50_ms": 1000 * pct(lat, 0.5), "poll_p99_ms": 1000 * pct(lat, 0.99),
               "poll_max_ms": 1000 * max(lat), "polls": len(polls),
               "gap_max_ms": 1000 * max(r["gap"] for r in results),
               "records_per_poll_p50": pct([k for _, k in polls], 0.5),
               "empty_polls": sum(r["empty_polls"] for r in results),
               "errors": sum(r["n_errors"] for r in results),
               "error_sample": [e for r in results for e in r["errors"]][:5],
               "znode_writes": writes, "znode_writes_s": writes / window,
               "znode_writes_per_1k": 1000 * writes / n, "znode_writes_total": znode_writes(v0, v2),
               "journal_appends_per_1k": 1000 * (j1[0] - j0[0]) / n,
               "journal_bytes_per_append": (j1[1] - j0[1]) / (j1[0] - j0[0]) if j1[0] > j0[0] else 0.0,
               "zk_txn_s": (z1 - z0) / window,
               "broker_cpu": (cpu1[0] - cpu0[0]) / (t_end - t_go), "zk_cpu": (cpu1[1] - cpu0[1]) / (t_end - t_go),
               "client_cpu": sum(r["cpu"] for r in results) / read_s,
               "close_s": max(r["close_s"] for r in results), "load": load0}
        log.info("%s: %s records/s over %.2f s (first record %.2f s after start), %d znode writes, broker cpu %.0f%%",
                 label, f"{fig['records_s']:,.0f}", read_s, fig["first_record_s"], writes, 100 * fig["broker_cpu"])
        if fig["missing"] or fig["duplicates"] or fig["errors"]:
            log.warning("%s: %d missing, %d delivered twice, %d errors %s", label, fig["missing"], fig["duplicates"],
                        fig["errors"], fig["error_sample"])
        return fig

    # ------------------------------------------------------------------ commit phase
    def commit_phase(self, label: str, kind: str, group: str) -> dict:
        from spark_coord.zk import paths

        a = self.args
        conf = {"bootstrap.servers": self.bootstrap, "group.id": group, "client.id": label}
        if kind == "share":
            self.set_earliest(group)
            conf.update({"share.acknowledgement.mode": "explicit", "max.poll.records": a.commit_batch})
            znodes = [paths.share_partition(group, SMALL_TOPIC, p) for p in range(a.partitions)]
        else:
            conf.update({"auto.offset.reset": "earliest", "enable.auto.commit": False})
            znodes = [paths.offset(group, SMALL_TOPIC, p) for p in range(a.partitions)]
        spec = {"idx": 0, "kind": kind, "topic": SMALL_TOPIC, "batch": a.commit_batch, "commits": a.commits,
                "timeout": a.timeout, "conf": conf}
        deadline = time.monotonic() + a.timeout
        procs, counter, ready, go, stop, out = self._spawn(committer, [spec])
        try:
            while ready.value < 1:
                self._check_alive(procs, out, label)
                if time.monotonic() > deadline:
                    raise BenchError(f"{label}: the client never subscribed")
                time.sleep(0.05)
            if kind == "share":
                self.wait_share_stable(group, 1, deadline)
            v0 = znode_versions(self.zk, znodes)
            go.set()
            # the warm-up commits are not counted; neither are their writes
            while counter.value < COMMIT_WARMUP:
                if time.monotonic() > deadline:
                    raise BenchError(f"{label}: {counter.value} of {COMMIT_WARMUP} warm-up commits in time")
                self._check_alive(procs, out, label)
                time.sleep(0.002)
            v0 = znode_versions(self.zk, znodes)
            (r,) = self._collect(procs, out, 1, label, timeout=a.timeout)
            v1 = znode_versions(self.zk, znodes)
        finally:
            self._reap(procs, stop)
        lat = r["lat"]
        writes = znode_writes(v0, v1)
        fig = {"label": label, "kind": kind, "group": group, "commits": len(lat),
               "records_per_commit_p50": pct(r["sizes"], 0.5),
               "p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99), "max_ms": 1000 * max(lat),
               "mean_ms": 1000 * statistics.fmean(lat), "znode_writes": writes,
               "znode_writes_per_commit": writes / len(lat), "failures": r["n_failures"],
               "failure_sample": r["failures"][:5]}
        log.info("%s: %d commits, p50 %.2f ms, p99 %.2f ms, %d znode writes", label, len(lat), fig["p50_ms"],
                 fig["p99_ms"], writes)
        if fig["failures"]:
            log.warning("%s: %d commit failures, e.g. %s", label, fig["failures"], fig["failure_sample"])
        return fig

    def run(self, i: int) -> dict:
        a = self.args
        run = {"run": i + 1, "load_before": os.getloadavg()[0]}
        share = {"max.poll.records": a.max_poll_records} if a.max_poll_records else {}
        run["consumer"] = self.read_phase(f"r{i}-consumer", "consumer", f"bench-cg-{i}", 1,
                                          {"fetch.queue.backoff.ms": a.queue_backoff_ms})
        run["consumer_default"] = self.read_phase(f"r{i}-consumer-default", "consumer", f"bench-cg-default-{i}", 1)
        run["share1"] = self.read_phase(f"r{i}-share1", "share", f"bench-share1-{i}", 1, share)
        run["shareN"] = self.read_phase(f"r{i}-share{a.consumers}", "share", f"bench-share{a.consumers}-{i}",
                                        a.consumers, share)
        run["thin_consumer"] = self.read_phase(f"r{i}-thin-consumer", "thin", f"bench-thin-cg-{i}", 1)
        run["thin_share1"] = self.read_phase(f"r{i}-thin-share1", "thinshare", f"bench-thin-share1-{i}", 1)
        run["thin_share1_np"] = self.read_phase(f"r{i}-thin-share1-np", "thinshare", f"bench-thin-share1-np-{i}", 1,
                                                prefetch=False)
        run["commit_consumer"] = self.commit_phase(f"r{i}-commit-consumer", "consumer", f"bench-cg-commit-{i}")
        run["commit_share"] = self.commit_phase(f"r{i}-commit-share", "share", f"bench-share-commit-{i}")
        run["load_after"] = os.getloadavg()[0]
        return run


def fragmented_window(locks: int = 10_000, repeat: int = 20) -> dict:
    """The state write of a share partition whose window of ``locks`` records (Kafka's largest
    ``group.share.partition.max.record.locks``) is as fragmented as it gets: the first offset released
    (so the start cannot move) and then every other offset accepted, the rest released, one range per
    offset in its snapshot.  Bytes per write (what one znode write carries, and a journal SNAPSHOT record,
    ``store.encode``) and the broker's CPU to snapshot and encode it; then what the share-state journal
    appends for one acknowledgement on that window (one more offset accepted): the UPDATE record's bytes
    (``journal.encode_update``) and the CPU to take the update and encode it.  Medians of ``repeat``."""
    from spark_coord.share.journal import encode_update
    from spark_coord.share.partition import SharePartition
    from spark_coord.share.store import encode

    sp = SharePartition(0, max_in_flight=locks)
    deadline = time.monotonic() * 1000 + 600_000
    sp.acquire("m", [(0, locks - 1)], max_records=locks, lock_deadline=deadline)
    types = [2] + [1 if o % 2 else 2 for o in range(1, locks)]
    sp.acknowledge("m", 0, locks - 1, types)
    times, utimes, ubytes = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        data = encode(sp.snapshot(), b"\x01" * 16, "0-0123456789ab", 1, seq=sp.version)
        times.append(time.perf_counter() - t0)
    ranges = len(sp.snapshot()["ranges"])
    for k in range(repeat):
        offset = locks - 2 - 2 * k  # a released offset, fetched again and accepted
        sp.acquire("m", [(offset, offset)], max_records=1, lock_deadline=deadline)
        sp.take_update()  # the acquisition journaled before (its own turn)
        sp.acknowledge("m", offset, offset, [1])
        t0 = time.perf_counter()
        update = encode_update(sp.take_update(), b"\x01" * 16, "0-0123456789ab", 1, sp.version, sp.version - 1)
        utimes.append(time.perf_counter() - t0)
        ubytes.append(len(update))
    return {"locks": locks, "ranges": ranges, "bytes": len(data), "encode_ms": 1000 * statistics.median(times),
            "update_bytes": statistics.median(ubytes), "update_ms": 1000 * statistics.median(utimes)}


# ---------------------------------------------------------------------- report
def summarize(runs: list[dict]) -> dict:
    """Medians of every figure and of the per-run ratios to the consumer group."""
    out: dict = {}
    for phase in READ_PHASES + ("commit_consumer", "commit_share"):
        keys = [k for k, v in runs[0][phase].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        out[phase] = {k: med([r[phase][k] for r in runs]) for k in keys}
    ratios = {}
    for phase in READ_PHASES[1:]:
        ratios[f"{phase}_records_s"] = med([r[phase]["records_s"] / r["consumer"]["records_s"] for r in runs])
        for k in ("poll_p50_ms", "poll_p99_ms"):
            ratios[f"{phase}_{k}"] = med([r[phase][k] / r["consumer"][k] for r in runs])
    for ph in ("thin_share1", "thin_share1_np"):
        ratios[f"{ph}_vs_thin_records_s"] = med([r[ph]["records_s"] / r["thin_consumer"]["records_s"] for r in runs])
    ratios["prefetch_gain"] = med([r["thin_share1"]["records_s"] / r["thin_share1_np"]["records_s"] for r in runs])
    for k in ("p50_ms", "p99_ms", "max_ms"):
        ratios[f"commit_{k}"] = med([r["commit_share"][k] / r["commit_consumer"][k] for r in runs])
    out["ratios"] = ratios
    return out


def report(runs: list[dict], summary: dict, args: argparse.Namespace) -> str:
    s, rt = summary, summary["ratios"]
    n = args.consumers
    mpr = f"max.poll.records={args.max_poll_records}" if args.max_poll_records else "defaults"
    names = {"consumer": "consumer group, 1 Consumer (baseline)",
             "consumer_default": "consumer group, 1 Consumer, librdkafka defaults",
             "share1": "share group, 1 ShareConsumer", "shareN": f"share group, {n} ShareConsumers",
             "thin_consumer": "ours: consumer group, 1 thin Consumer (messages())",
             "thin_share1": "ours: share group, 1 thin ShareConsumer",
             "thin_share1_np": "ours: share group, 1 thin ShareConsumer, prefetch=False"}

    def ratio(ph: str, key: str) -> Fig:
        return Fig(1.0 if ph == "consumer" else rt[f"{ph}_{key}"], ".2f")

    lines = [f"\nshare groups (KIP-932) against a consumer group: one broker, {args.partitions} partitions, "
             f"{args.records:,} records of {args.size} B, confluent-kafka {_ck_version()}; median of {len(runs)} "
             f"run(s), ratios taken within each run.  Baseline Consumer: fetch.queue.backoff.ms="
             f"{args.queue_backoff_ms}, else defaults; ShareConsumers: {mpr}\n"]

    rows = []
    for ph in READ_PHASES:
        m = s[ph]
        rows.append({"reader": names[ph], "records/s": Fig(m["records_s"]), "ratio": ratio(ph, "records_s"),
                     "runs": " ".join(f"{r[ph]['records_s'] / 1000:.0f}k" for r in runs),
                     "broker": Fig(100 * m["broker_cpu"], ".0f"), "zk": Fig(100 * m["zk_cpu"], ".0f"),
                     "clients": Fig(100 * m["client_cpu"], ".0f"), "first": Fig(m["first_record_s"], ".2f")})
    lines.append(format_table(rows, ["reader", "records/s", "ratio", "runs", "broker", "zk", "clients", "first"],
                              ["reader", "records/s", "x baseline", "per run", "broker CPU %", "ZK CPU %",
                               "clients' CPU %", "start -> first record s"]))
    per_run = ", ".join(format(r["share1"]["records_s"] / r["consumer"]["records_s"], ".2f") for r in runs)
    lines.append(f"\ngoal: 1 ShareConsumer >= 0.8 x the consumer group's records/s: {rt['share1_records_s']:.2f} "
                 f"-> {'met' if rt['share1_records_s'] >= 0.8 else 'NOT met'} (per run: {per_run}); against the "
                 f"Consumer with librdkafka's defaults: "
                 f"{med([r['share1']['records_s'] / r['consumer_default']['records_s'] for r in runs]):.2f}")
    thin = rt["thin_share1_vs_thin_records_s"]
    per_run = ", ".join(format(r["thin_share1"]["records_s"] / r["thin_consumer"]["records_s"], ".2f") for r in runs)
    lines.append(f"goal: 1 thin ShareConsumer >= 0.8 x 1 thin Consumer's records/s: {thin:.2f} -> "
                 f"{'met' if thin >= 0.8 else 'NOT met'} (per run: {per_run}); x the librdkafka consumer group: "
                 f"{rt['thin_share1_records_s']:.2f}; prefetch=False: {rt['thin_share1_np_vs_thin_records_s']:.2f} of "
                 f"the thin Consumer, the pipeline's gain x{rt['prefetch_gain']:.2f}")

    rows = []
    for ph in READ_PHASES:
        m = s[ph]
        rows.append({"reader": names[ph], "calls": Fig(m["polls"]), "per": Fig(m["records_per_poll_p50"]),
                     "p50": Fig(m["poll_p50_ms"], ".2f"), "p99": Fig(m["poll_p99_ms"], ".2f"),
                     "max": Fig(m["poll_max_ms"], ".1f"), "r50": ratio(ph, "poll_p50_ms"),
                     "r99": ratio(ph, "poll_p99_ms"), "gap": Fig(m["gap_max_ms"], ",.0f")})
    lines.append(f"\nper call that returned records: Consumer.consume({args.batch}) / ShareConsumer.poll() (which "
                 f"sends one ShareFetch carrying the previous poll's acknowledgements and waits for its answer)\n")
    lines.append(format_table(rows, ["reader", "calls", "per", "p50", "p99", "max", "r50", "r99", "gap"],
                              ["reader", "calls with records", "records/call p50", "p50 ms", "p99 ms", "max ms",
                               "p50 x baseline", "p99 x baseline", "longest gap between them ms"]))

    rows = []
    for ph in READ_PHASES:
        m = s[ph]
        rows.append({"reader": names[ph], "records/s": Fig(m["records_s"]), "w": Fig(m["znode_writes"]),
                     "ws": Fig(m["znode_writes_s"], ",.1f"), "wk": Fig(m["znode_writes_per_1k"], ".2f"),
                     "tot": Fig(m["znode_writes_total"]), "txn": Fig(m["zk_txn_s"], ",.1f"),
                     "jk": Fig(m.get("journal_appends_per_1k", 0.0), ".2f"),
                     "jb": Fig(m.get("journal_bytes_per_append", 0.0), ",.0f")})
    lines.append("\nZooKeeper writes while reading (the group's znodes: version increments from the start signal to "
                 "the N-th record; total: until every client closed), and the broker's share-state journal appends "
                 "(one per group commit of acknowledgements) over the same span\n")
    lines.append(format_table(rows, ["reader", "records/s", "w", "ws", "wk", "tot", "txn", "jk", "jb"],
                              ["reader", "records/s", "znode writes", "znode writes/s", "per 1,000 records",
                               "total incl. close", "ZK write txns/s (all)", "journal appends per 1,000 records",
                               "bytes per append"]))

    rows = []
    for ph, name in (("commit_consumer", "Consumer.commit(asynchronous=False) (baseline)"),
                     ("commit_share", "ShareConsumer.commit_sync(), explicit mode")):
        m = s[ph]
        base = ph == "commit_consumer"
        rows.append({"what": name, "commits": Fig(m["commits"]), "per": Fig(m["records_per_commit_p50"]),
                     "p50": Fig(m["p50_ms"], ".2f"), "p99": Fig(m["p99_ms"], ".2f"), "max": Fig(m["max_ms"], ".1f"),
                     "r50": Fig(1.0 if base else rt["commit_p50_ms"], ".2f"),
                     "r99": Fig(1.0 if base else rt["commit_p99_ms"], ".2f"),
                     "wpc": Fig(m["znode_writes_per_commit"], ".2f")})
    lines.append(f"\ncommit latency, batches of {args.commit_batch} records (producer batches of "
                 f"{args.commit_batch}), {args.commits} commits per run after {COMMIT_WARMUP} not counted\n")
    lines.append(format_table(rows, ["what", "commits", "per", "p50", "p99", "max", "r50", "r99", "wpc"],
                              ["commit", "commits", "records/commit p50", "p50 ms", "p99 ms", "max ms",
                               "p50 x baseline", "p99 x baseline", "znode writes/commit"]))

    fw = s.get("fragmented")
    if fw:
        lines.append(f"\nstate write of a fragmented window: {fw['locks']:,} locks, every other offset accepted, "
                     f"{fw['ranges']:,} ranges: {fw['bytes']:,} bytes per write, {fw['encode_ms']:.1f} ms to "
                     f"snapshot and encode; the journal's UPDATE for one acknowledgement on it: "
                     f"{fw.get('update_bytes', 0):,.0f} bytes, {fw.get('update_ms', 0):.3f} ms to take and encode")
    lines.append(f"\n{n} share consumers, records each (one line per run; the check: every record once):")
    for r in runs:
        f = r["shareN"]
        lines.append(f"  run {r['run']}: {' '.join(f'{c:,}' for c in f['per_consumer'])}  (stable after "
                     f"{f['settle_s']:.1f} s; {f['unique']:,} of {args.records:,} read, {f['duplicates']} twice, "
                     f"{f['missing']} missing)")
    problems = [f"run {r['run']} {ph}: {r[ph]['missing']} missing, {r[ph]['duplicates']} twice, "
                f"{r[ph]['errors']} errors" for r in runs for ph in READ_PHASES
                if r[ph]["missing"] or r[ph]["duplicates"] or r[ph]["errors"]]
    problems += [f"run {r['run']} {ph}: {r[ph]['failures']} failed commits {r[ph]['failure_sample']}"
                 for r in runs for ph in ("commit_consumer", "commit_share") if r[ph]["failures"]]
    lines.append("\n" + ("\n".join(problems) if problems else "every phase read every record once; no commit failed"))
    lines.append("load average (1 min) before / after each run: "
                 + ", ".join(f"{r['load_before']:.1f} / {r['load_after']:.1f}" for r in runs)
                 + f" on {os.cpu_count()} CPUs")
    return "\n".join(lines)


def _ck_version() -> str:
    import confluent_kafka

    def first(v):  # a string, or (string, int) in some releases
        return v[0] if isinstance(v, tuple) else v

    return f"{first(confluent_kafka.version())} (librdkafka {first(confluent_kafka.libversion())})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Details: see the module docstring (how each figure is taken).")
    ap.add_argument("--records", type=int, default=200_000, help="records in the topic, all read by each reading "
                                                                  "phase (default: %(default)s)")
    ap.add_argument("--size", type=int, default=100, help="record value bytes (default: %(default)s)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions of the topic (default: %(default)s)")
    ap.add_argument("--consumers", type=int, default=8, help="share consumers (processes) of the group phase "
                                                              "(default: %(default)s)")
    ap.add_argument("--batch", type=int, default=500, help="Consumer.consume() batch of the baseline, librdkafka's "
                                                            "max.poll.records default (default: %(default)s)")
    ap.add_argument("--queue-backoff-ms", type=int, default=10,
                    help="fetch.queue.backoff.ms of the baseline Consumer (default: %(default)s; librdkafka's own, "
                         "1000, stops fetching for a second whenever 100,000 records wait in the consumer's queue: "
                         "that Consumer is measured too, as 'librdkafka defaults')")
    ap.add_argument("--max-poll-records", type=int, default=0,
                    help="max.poll.records of the ShareConsumers of the reading phases (default: librdkafka's, 500)")
    ap.add_argument("--thin-max-poll-records", type=int, default=500,
                    help="max_poll_records of the thin ShareConsumer (default: %(default)s)")
    ap.add_argument("--thin-process-ms", type=float, default=0.0,
                    help="the thin readers' application work per call that returned records, a sleep, which a "
                         "fetch sent ahead overlaps (default: %(default)s)")
    ap.add_argument("--commits", type=int, default=300, help="commits measured per client in the commit phase "
                                                              "(default: %(default)s)")
    ap.add_argument("--commit-batch", type=int, default=10, help="records per commit in the commit phase "
                                                                  "(default: %(default)s)")
    ap.add_argument("--runs", type=int, default=3, help="runs; medians are printed (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a phase may take before the run stops "
                                                                  "(default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="write every run's figures and the medians here")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (broker and ZooKeeper logs)")
    args = ap.parse_args()
    if args.records < args.partitions or args.runs < 1 or args.consumers < 1 or args.commits < 1:
        ap.error("--records must be at least --partitions; --runs, --consumers, --commits at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.cluster import LocalCluster
    from spark_coord.zk.embedded import EmbeddedZooKeeper

    tmp = tempfile.mkdtemp(prefix="spark-coord-bench-share-")
    runs: list[dict] = []
    failed: str | None = None
    zk_server = EmbeddedZooKeeper(data_dir=Path(tmp) / "zk")
    try:
        zk_server.start(timeout=60)
        with LocalCluster(1, Path(tmp) / "cluster", zk_connect=zk_server.connect_string, metrics_port=0) as cluster:
            with ClusterClient(cluster.bootstrap) as c:
                AdminClient(c).create_topic(TOPIC, args.partitions)
                AdminClient(c).create_topic(SMALL_TOPIC, args.partitions)
            secs = produce(cluster.bootstrap, TOPIC, args.records, args.size, args.partitions)
            log.info("produced %s records of %d B in %.1f s", f"{args.records:,}", args.size, secs)
            small = (args.commits + COMMIT_WARMUP) * args.commit_batch * 2
            produce(cluster.bootstrap, SMALL_TOPIC, small, args.size, args.partitions,
                    **{"batch.num.messages": args.commit_batch})
            bench = Bench(args, cluster, zk_server)
            try:
                for i in range(args.runs):
                    runs.append(bench.run(i))
            except BenchError as e:
                failed = str(e)
                log.error("benchmark stopped: %s", failed)
            finally:
                bench.close()
    finally:
        zk_server.stop()
    summary = summarize(runs) if runs else {}
    if summary:
        summary["fragmented"] = fragmented_window()
    if runs:
        print(report(runs, summary, args))
        import figures  # bench/figures.py: the figures as JSON for the docs' plots

        names = {"consumer": "1 Consumer, consumer group (baseline)", "share1": "1 ShareConsumer",
                 "shareN": f"{args.consumers} ShareConsumers"}
        figures.write("share", {"readers": [
            {"reader": name, "records_per_s": summary[ph]["records_s"],
             "ratio": 1.0 if ph == "consumer" else summary["ratios"][f"{ph}_records_s"],
             "poll_p50_ms": summary[ph].get("poll_p50_ms"), "poll_p99_ms": summary[ph].get("poll_p99_ms")}
            for ph, name in names.items() if ph in summary]},
            label=f"{len(runs)} runs, medians" + (f", max.poll.records={args.max_poll_records}"
                                                    if args.max_poll_records else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "medians": summary,
                                               "failed": failed}, indent=1, default=str))
    if failed or args.keep:
        log.info("broker and ZooKeeper logs kept in %s", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
