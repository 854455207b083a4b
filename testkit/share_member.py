"""A confluent-kafka ``ShareConsumer`` (KIP-932 share group member) as its own process, journaling.

Run as ``python -m testkit.share_member --bootstrap H:P --group G --topics a
--journal FILE --client-id ID``.  It subscribes to the share group ``G`` (explicit
acknowledgement mode), and in a loop polls, journals every record it was handed, accepts
each one (``acknowledge(m, ACCEPT)``) and commits the acknowledgements synchronously
(``commit_sync``), journaling what the broker answered per partition -- until SIGTERM
(then ``close()``: pending acknowledgements, leaving the group) and exits 0.
``KafkaMemberProcess``'s counterpart is ``ShareMemberProcess`` (start, signal, kill, stop,
read the journal), used by ``testkit.chaos`` for the member kind ``share``.

The journal has the JSON-lines format of ``testkit.member`` (``ts``, ``ev``), with the share
group's own events (``testkit.invariants``' ``share_*`` checks read them):

- ``start``: ``id`` (client id), ``pid``, ``kind`` (``share``), ``group``;
- ``recs``: records handed out by one ``poll()``, one line per partition: ``t``, ``p``, ``offs``
  (offsets), ``counts`` (each one's delivery count, same order), ``gen`` null.  Written (and
  flushed to the kernel) before any of them is acknowledged, so a SIGKILL never loses the
  line of a record the broker may have accepted: the journal proves delivery;
- ``ack``: the answer of ``commit_sync`` for one partition: ``t``, ``p``, ``offs`` (the
  offsets accepted in this commit), ``sent`` (when ``commit_sync`` was called), ``code`` 0
  (the per-partition result was None: the broker confirmed the acceptance, after writing
  it to ZooKeeper -- these records must never be delivered again), else the error code
  and ``msg``; ``code`` null when ``commit_sync`` raised or named no result for the
  partition (nothing known);
- ``ackcb``: the acknowledgement-commit callback (``set_acknowledgement_commit_callback``,
  dispatched inside ``poll``/``commit_sync``/``close``): ``t``, ``p``, ``offs``, ``code``
  (0: success) and ``msg``;
- ``ack_refused``: ``acknowledge()`` raised (the client says the record is no longer in
  flight): ``t``, ``p``, ``off``, ``msg``;
- ``poll_error``: ``poll()`` raised: ``msg``;
- ``error``: a client error (``error_cb``, or an error message from ``poll()``): ``code``,
  ``name``, ``msg``;
- ``closed``: ``close()`` returned (``ok`` false when it raised).

- ``release`` / ``reject``: as ``ack``, for the records of one commit the member released
  (``--release``) or rejected (``--reject``) instead of accepting them: ``t``, ``p``, ``offs``,
  ``sent``, ``code`` (0: the broker confirmed it; a rejected record is archived for good, a
  released one is delivered again, with a higher delivery count, or archived at the limit).

``--hold S`` holds each poll's records S seconds before acknowledging them (a slower
workload: more records in flight when a fault lands).  ``--release P`` / ``--reject P``
release / reject each record with probability P (seeded by ``--seed`` and the client id)
instead of accepting it: delivery counts rise to the brokers' limit, and records end archived.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from testkit import child_env
from testkit.kafka_member import SOCKET_TIMEOUT_MS
from testkit.member import Journal, MemberProcess

log = logging.getLogger(__name__)

__all__ = ["ShareMemberProcess", "main", "set_share_group_config"]

#: How long ``commit_sync`` waits for the leaders' answers (a leader that is down or paused
#: answers nothing: the member goes on polling after this).
COMMIT_TIMEOUT_S = 5.0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testkit.share_member",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True, help="the share group")
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--journal", required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--max-poll-records", type=int, default=0, help="max.poll.records (0: the client's default)")
    p.add_argument("--hold", type=float, default=0.0, help="seconds to hold each poll's records before accepting")
    p.add_argument("--commit-timeout", type=float, default=COMMIT_TIMEOUT_S)
    p.add_argument("--release", type=float, default=0.0, help="chance of releasing a record instead of accepting it")
    p.add_argument("--reject", type=float, default=0.0, help="chance of rejecting a record instead of accepting it")
    p.add_argument("--seed", type=int, default=0, help="seeds the release/reject draws (with the client id)")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _code(exc) -> tuple[int, str]:
    """(error code, message) of a KafkaException / KafkaError / anything."""
    err = exc.args[0] if getattr(exc, "args", None) else exc
    code = err.code() if hasattr(err, "code") else -1
    msg = err.str() if hasattr(err, "str") else str(exc)
    return int(code), msg


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka import AcknowledgeType, KafkaError, ShareConsumer

    args = _parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness may ask for every thread's stack
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    journal = Journal(args.journal)
    rng = random.Random(f"{args.seed}:{args.client_id}:{os.getpid()}")

    def on_error(err) -> None:
        log.warning("client error: %s", err)
        journal.write("error", code=err.code(), name=err.name(), msg=err.str())

    def on_ack(offsets, exc) -> None:
        code, msg = (0, None) if exc is None else _code(exc)
        for tp, offs in sorted((offsets or {}).items(), key=lambda x: (x[0].topic, x[0].partition)):
            journal.write("ackcb", t=tp.topic, p=tp.partition, offs=sorted(offs), code=code, msg=msg)

    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.client_id,
            "share.acknowledgement.mode": "explicit", "error_cb": on_error, "logger": logging.getLogger("librdkafka"),
            "socket.timeout.ms": SOCKET_TIMEOUT_MS}   # as the group members (testkit.kafka_member)
    if args.max_poll_records > 0:
        conf["max.poll.records"] = args.max_poll_records
    sc = ShareConsumer(conf)
    sc.set_acknowledgement_commit_callback(on_ack)
    sc.subscribe([t for t in args.topics.split(",") if t])
    journal.write("start", id=args.client_id, pid=os.getpid(), kind="share", group=args.group)
    ok = True
    try:
        while not stop.is_set():
            try:
                msgs = sc.poll(0.2)
            except Exception as e:  # noqa: BLE001 -- journaled; the loop goes on
                journal.write("poll_error", msg=str(e))
                stop.wait(0.2)
                continue
            taken: dict[tuple[str, int], list] = defaultdict(list)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        on_error(err)
                    continue
                taken[(m.topic(), m.partition())].append(m)
            if not taken:
                continue
            # journal first (flushed), acknowledge after: no accepted record without its line
            for (t, p), ms in sorted(taken.items()):
                journal.write("recs", t=t, p=p, offs=[m.offset() for m in ms],
                              counts=[m.delivery_count() for m in ms], gen=None)
            if args.hold > 0:
                stop.wait(args.hold)
            accepted: dict[tuple[str, int], list[int]] = defaultdict(list)
            others: dict[str, dict[tuple[str, int], list[int]]] = {"release": defaultdict(list),
                                                                   "reject": defaultdict(list)}
            for (t, p), ms in sorted(taken.items()):
                for m in ms:
                    draw = rng.random() if args.release > 0 or args.reject > 0 else 1.0
                    how, into = ((AcknowledgeType.RELEASE, others["release"]) if draw < args.release else
                                 (AcknowledgeType.REJECT, others["reject"]) if draw < args.release + args.reject
                                 else (AcknowledgeType.ACCEPT, accepted))
                    try:
                        sc.acknowledge(m, how)
                        into[(t, p)].append(m.offset())
                    except Exception as e:  # noqa: BLE001 -- the client no longer holds it
                        journal.write("ack_refused", t=t, p=p, off=m.offset(), msg=str(e))
            if accepted or any(others.values()):
                _commit(sc, journal, accepted, args.commit_timeout, others)
    finally:
        try:
            sc.close()
        except Exception as e:  # noqa: BLE001 -- journaled; the member ends all the same
            ok = False
            journal.write("error", code=_code(e)[0], name="close", msg=str(e))
        journal.write("closed", ok=ok)
        journal.close()
    return 0


def _commit(sc, journal: Journal, accepted: dict[tuple[str, int], list[int]], timeout: float,
            others: dict[str, dict[tuple[str, int], list[int]]] | None = None) -> None:
    """commit_sync; journal each partition's answer (``code`` 0: confirmed): ``ack`` lines for the
    accepted records, ``release`` / ``reject`` lines for ``others``' (event -> partition -> offsets)."""
    sent = time.time()
    groups = [("ack", accepted)] + sorted((others or {}).items())
    try:
        results = sc.commit_sync(timeout)
    except Exception as e:  # noqa: BLE001 -- nothing is known of these acknowledgements
        code, msg = _code(e)
        for ev, parts in groups:
            for (t, p), offs in sorted(parts.items()):
                journal.write(ev, t=t, p=p, offs=offs, sent=sent, code=None, msg=f"commit_sync raised {code}: {msg}")
        return
    answered = {(tp.topic, tp.partition): err for tp, err in (results or {}).items()}
    for ev, parts in groups:
        for (t, p), offs in sorted(parts.items()):
            if not offs:
                continue
            if (t, p) not in answered:
                journal.write(ev, t=t, p=p, offs=offs, sent=sent, code=None, msg="no result for the partition")
                continue
            err = answered[(t, p)]
            if err is None:
                journal.write(ev, t=t, p=p, offs=offs, sent=sent, code=0)
            else:
                code, msg = _code(err)
                journal.write(ev, t=t, p=p, offs=offs, sent=sent, code=code, msg=msg)


def set_share_group_config(bootstrap: str, group: str, configs: dict[str, str], timeout: float = 60.0) -> None:
    """Set a share group's group configs (e.g. ``{"share.auto.offset.reset": "earliest"}``) the way
    Kafka users do, AdminClient.incremental_alter_configs on the GROUP resource; retried until
    ``timeout`` (a cluster just started may not answer yet)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    deadline = time.monotonic() + timeout
    while True:
        try:
            futures = admin.incremental_alter_configs(
                [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)])
            for f in futures.values():
                f.result(timeout=15)
            return
        except Exception as e:  # noqa: BLE001 -- tried again until the deadline, then raised
            if time.monotonic() > deadline:
                raise
            log.info("setting the configs of share group %s failed (%s); again", group, e)
            time.sleep(1.0)


class ShareMemberProcess(MemberProcess):
    """One ShareConsumer subprocess, with the interface of ``MemberProcess`` (start, signal, kill,
    stop, read its journal).  A share member owns no partition: ``owned()`` is empty."""

    def __init__(self, name: str, workdir: str | os.PathLike, bootstrap: str, group: str, *, topics: list[str],
                 consumer_id: str | None = None, max_poll_records: int = 0, hold_s: float = 0.0,
                 release: float = 0.0, reject: float = 0.0, seed: int = 0):
        self.name = name
        self.kind = "share"
        workdir = Path(workdir)
        self.journal_path = workdir / f"{name}.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.consumer_id = consumer_id or name
        cmd = [sys.executable, "-m", "testkit.share_member", "--bootstrap", bootstrap, "--group", group,
               "--topics", ",".join(topics), "--journal", str(self.journal_path), "--client-id", self.consumer_id,
               "--max-poll-records", str(max_poll_records), "--hold", str(hold_s)]
        if release > 0 or reject > 0:
            cmd += ["--release", str(release), "--reject", str(reject), "--seed", str(seed)]
        self._log = open(self.log_path, "ab")
        env = child_env(PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    def owned(self) -> set[tuple[str, int]]:
        return set()

    def last_assignment(self):
        return None

    def __repr__(self) -> str:
        return f"ShareMemberProcess({self.name}, pid={self.proc.pid})"


if __name__ == "__main__":
    sys.exit(main())
