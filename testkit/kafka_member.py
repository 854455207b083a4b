"""A confluent-kafka (librdkafka) group member as its own process, journaling like ``testkit.member``.

Run as ``python -m testkit.kafka_member --bootstrap H:P --group G --topics a
--journal FILE [--strategy eager|cooperative|kip848]``.  It subscribes through one of
Kafka's group protocols, reads with ``consume()``, journals what it took and commits
it synchronously after every batch, until SIGTERM (then ``close()``: revocation,
final commit already done, leaving the group) and exits 0.

``--strategy eager`` keeps librdkafka's default assignors (``range,roundrobin``);
``--strategy cooperative`` sets ``partition.assignment.strategy=cooperative-sticky``
(KIP-429: assignments and revocations are incremental) -- both over the classic
protocol (JoinGroup/SyncGroup/Heartbeat), with ``session.timeout.ms`` from
``--session-timeout-ms``.  ``--strategy kip848`` sets ``group.protocol=consumer``
(KIP-848: ConsumerGroupHeartbeat, the coordinator assigns; incremental too).
librdkafka refuses ``session.timeout.ms``, ``heartbeat.interval.ms`` and
``partition.assignment.strategy`` with that protocol (the session and heartbeat are
the brokers' ``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``),
so ``--session-timeout-ms`` does not apply to it.

Every kind runs with ``socket.timeout.ms`` = ``SOCKET_TIMEOUT_MS`` (10 s, librdkafka's default
is 60 s): a connection a network partition leaves open but silent (a blackhole sends no
reset) is given up after that long, as an operator expecting partitions would set it.

The journal has the JSON-lines format of ``testkit.member`` (``ts``, ``ev``), so the
checks of ``testkit.invariants`` read both kinds alike:

- ``start``: ``id`` (client id), ``pid``, ``kind`` (``eager`` / ``cooperative`` / ``kip848``);
- ``assign``: the partitions ``on_assign`` received, ``parts`` = ``[[topic, partition,
  -1], ...]`` (the start offset is the group's committed one, unknown here), ``gen``
  null (librdkafka does not tell the generation), ``incremental``: true for
  cooperative and kip848 (they add to what it holds), false for eager (they replace it);
- ``revoke``: the partitions ``on_revoke`` received, ``parts`` = ``[[topic, partition], ...]``,
  ``incremental`` as above (eager revokes everything it holds);
- ``lost``: the partitions ``on_lost`` received (the group dropped the member: session
  timed out, fenced), ``parts`` as for ``revoke``;
- ``recs``: records taken from one ``consume()`` call, one line per partition: ``t``,
  ``p``, ``offs``, ``gen`` null;
- ``commit`` / ``commit_failed``: the synchronous commit after each batch, one line per
  partition: ``t``, ``p``, ``off``, ``code`` (Kafka error code), ``msg`` on failure;
- ``error``: a client error (``error_cb`` or an error event from ``consume()``): ``code``,
  ``name``, ``msg``;
- ``closed``: ``close()`` returned; ``left`` true.

Callbacks run on the application thread inside ``consume()`` (librdkafka serves the
rebalance events there), so the journal's order is the order the application saw.
``KafkaMemberProcess`` starts, signals and reads such a member like ``MemberProcess``.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

from testkit import child_env
from testkit.member import Journal, MemberProcess

log = logging.getLogger(__name__)

__all__ = ["KafkaMemberProcess", "STRATEGIES", "main"]

#: librdkafka's ``socket.timeout.ms`` for every kind (see the module docstring).
SOCKET_TIMEOUT_MS = 10000

#: ``--strategy`` -> the group settings it adds to librdkafka's configuration (eager: its default
#: assignors, range,roundrobin).
STRATEGIES: dict[str, dict[str, str]] = {
    "eager": {}, "cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "kip848": {"group.protocol": "consumer"}}
#: Strategies whose rebalance callbacks carry increments (what is added or taken away).
INCREMENTAL = ("cooperative", "kip848")
#: Strategies of Kafka's classic protocol, the only ones given a client-side session timeout.
CLASSIC = ("eager", "cooperative")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testkit.kafka_member",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--journal", required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--strategy", default="eager", choices=sorted(STRATEGIES))
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--reset", default="smallest", choices=["smallest", "largest"])
    p.add_argument("--batch", type=int, default=500, help="most records per consume() call")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _tps(partitions) -> list[list]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    args = _parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness may ask for every thread's stack
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    journal = Journal(args.journal)
    incremental = args.strategy in INCREMENTAL

    def on_error(err) -> None:
        log.warning("client error: %s", err)
        journal.write("error", code=err.code(), name=err.name(), msg=err.str())

    session = args.session_timeout_ms
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest" if args.reset == "smallest" else "latest",
            "error_cb": on_error, "logger": logging.getLogger("librdkafka"),
            "socket.timeout.ms": SOCKET_TIMEOUT_MS, **STRATEGIES[args.strategy]}
    if args.strategy in CLASSIC:
        conf.update({"session.timeout.ms": session, "heartbeat.interval.ms": max(100, min(3000, session // 3))})
    consumer = Consumer(conf)

    def on_assign(_c, partitions) -> None:
        log.info("assigned %s", _tps(partitions))
        journal.write("assign", gen=None, incremental=incremental, parts=[[t, p, -1] for t, p in _tps(partitions)])

    def on_revoke(_c, partitions) -> None:
        log.info("revoked %s", _tps(partitions))
        journal.write("revoke", incremental=incremental, parts=_tps(partitions))

    def on_lost(_c, partitions) -> None:
        log.warning("lost %s", _tps(partitions))
        journal.write("lost", parts=_tps(partitions))

    consumer.subscribe([t for t in args.topics.split(",") if t], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_lost)
    journal.write("start", id=args.client_id, pid=os.getpid(), kind=args.strategy)
    try:
        while not stop.is_set():
            msgs = consumer.consume(num_messages=args.batch, timeout=0.2)
            taken: dict[tuple[str, int], list[int]] = defaultdict(list)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        on_error(err)
                    continue
                taken[(m.topic(), m.partition())].append(m.offset())
            if not taken:
                continue
            for (t, p), offs in taken.items():
                journal.write("recs", t=t, p=p, offs=offs, gen=None)
            _commit(consumer, journal, {tp: offs[-1] + 1 for tp, offs in taken.items()}, TopicPartition,
                    KafkaException)
    finally:
        consumer.close()
        journal.write("closed", left=True)
        journal.close()
    return 0


def _commit(consumer, journal: Journal, offsets: dict[tuple[str, int], int], TopicPartition, KafkaException) -> None:
    """Commit synchronously; journal each partition's outcome."""
    try:
        result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                                 asynchronous=False)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        code = err.code() if hasattr(err, "code") else -1
        msg = err.str() if hasattr(err, "str") else str(e)
        for (t, p), o in sorted(offsets.items()):
            journal.write("commit_failed", t=t, p=p, off=o, code=code, msg=msg)
        return
    for tp in result or []:
        if tp.error is not None:
            journal.write("commit_failed", t=tp.topic, p=tp.partition, off=tp.offset, code=tp.error.code(),
                          msg=tp.error.str())
        else:
            journal.write("commit", t=tp.topic, p=tp.partition, off=tp.offset, code=0)


class KafkaMemberProcess(MemberProcess):
    """One confluent-kafka member subprocess (``strategy`` eager, cooperative or kip848), with the
    interface of ``MemberProcess`` (start, signal, kill, stop, read its journal)."""

    def __init__(self, name: str, workdir: str | os.PathLike, bootstrap: str, group: str, *, topics: list[str],
                 strategy: str = "eager", session_timeout_ms: int = 6000, reset: str = "smallest",
                 consumer_id: str | None = None):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
        self.name = name
        self.kind = strategy
        workdir = Path(workdir)
        self.journal_path = workdir / f"{name}.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.consumer_id = consumer_id or name
        cmd = [sys.executable, "-m", "testkit.kafka_member", "--bootstrap", bootstrap, "--group", group,
               "--topics", ",".join(topics), "--journal", str(self.journal_path), "--client-id", self.consumer_id,
               "--strategy", strategy, "--session-timeout-ms", str(session_timeout_ms), "--reset", reset]
        self._log = open(self.log_path, "ab")
        env = child_env(PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    def owned(self) -> set[tuple[str, int]]:
        """What the callbacks say it holds now."""
        held: set[tuple[str, int]] = set()
        for e in self.events():
            if e["ev"] == "assign":
                if not e.get("incremental"):
                    held = set()
                held |= {(t, p) for t, p, _ in e["parts"]}
            elif e["ev"] in ("revoke", "lost"):
                held -= {(t, p) for t, p in e["parts"]}
            elif e["ev"] == "closed":
                held = set()
        return held

    def last_assignment(self):
        raise NotImplementedError("a Kafka member's assignment is incremental: use owned()")

    def __repr__(self) -> str:
        return f"KafkaMemberProcess({self.name}, {self.kind}, pid={self.proc.pid})"


if __name__ == "__main__":
    sys.exit(main())
