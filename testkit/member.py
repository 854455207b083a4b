"""A group member as its own process, journaling what it consumes and what it is assigned.

Run as ``python -m testkit.member --bootstrap H:P --group G --topics a,b
--journal FILE`` (or ``--pattern REGEX``).  It consumes until SIGTERM (or SIGINT),
then closes cleanly -- the final offsets reach the coordinator -- and exits 0.

The journal is JSON lines, each with ``ts`` (epoch seconds) and ``ev``:

- ``start``: ``id`` (consumer id), ``pid``;
- ``assign``: a StartFetcher is being adopted (written before the fetchers start):
  ``gen``, ``epoch`` (coordinator epoch), ``parts`` = ``[[topic, partition, start_offset], ...]``,
  the complete assignment (partitions it already had go on from where they were);
- ``stop``: a StopFetcher stopped the fetchers (written after they stopped): of
  everything, or (``parts`` = ``[[topic, partition], ...]``) of just those partitions;
- ``lost``: no coordinator confirms the assignment any more -- the lease ran out or a
  claim was refused -- and the fetchers stopped (written after); ``lease_end``: when
  the lease ran out (earlier than the line when the member was paused meanwhile:
  nothing is delivered after the lease ends);
- ``resume``: a coordinator took the member back into its generation after ``lost``
  (written before the fetchers start again); ``gen``, ``parts`` as for ``assign``;
- ``recs``: records the application took: ``t``, ``p``, ``offs`` (their offsets), ``gen``;
- ``commit``: an active commit was confirmed (``t``, ``p``, ``off``), or ``commit_failed``;
- ``closed``: ``close()`` returned (clean shutdown), ``left``: whether the coordinator
  confirmed the final commit;
- ``commit_error``: beside each ``commit_failed`` of a raised ``CommitFailed``: ``code``,
  ``msg`` and ``registered`` (did the connector count itself registered);
- ``state`` (with ``--state-every``): the connector's state -- ``registered``, ``gen``,
  ``coordinator``, ``epoch``, ``suspended``, ``lease_left`` (seconds), ``alive``,
  ``registrations``.

So a member owns a partition from an ``assign``/``resume`` until the next ``stop``,
``lost`` or ``closed`` (or its death): ``invariants.ownership_intervals``.

By default every line is flushed to the kernel before the member reports the
records as consumed (``auto_commit=False`` plus ``commit()`` after the write, which
commits actively), so a SIGKILL can lose a record's journal line only together
with its offset: the journal is proof of at-least-once delivery.  ``--auto-commit``
reports what the application took instead (exact hand-offs on clean rebalances).
``MemberProcess`` starts, signals and reads such a member from a test.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from spark_coord.consumer.consumer import CommitFailed, Consumer
from testkit import child_env

log = logging.getLogger(__name__)

__all__ = ["Journal", "JournalingConsumer", "MemberProcess", "read_journal", "main"]


class Journal:
    """An append-only JSON-lines file shared by the application and connector threads."""

    def __init__(self, path: str | os.PathLike):
        self._file = open(path, "a", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ts": time.time(), "ev": ev, **fields}, separators=(",", ":"))
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class JournalingConsumer(Consumer):
    """A ``Consumer`` that journals the coordinator's StopFetcher/StartFetcher and lost connections."""

    journal: Journal

    def start_fetchers(self, generation_id: int, assignment: dict[tuple[str, int], int],
                       threads: dict[tuple[str, int], str], brokers: dict[int, tuple[str, int]]) -> None:
        self.journal.write("assign", gen=generation_id, epoch=self.connector.coordinator_epoch,
                           parts=[[t, p, o] for (t, p), o in sorted(assignment.items())])
        super().start_fetchers(generation_id, assignment, threads, brokers)

    def stop_fetchers(self, partitions=None):
        offsets = super().stop_fetchers(partitions)
        if partitions is None:
            self.journal.write("stop", gen=self.generation)
        else:
            self.journal.write("stop", gen=self.generation, parts=[[t, p] for t, p in sorted(partitions)])
        return offsets

    def close(self, timeout: float | None = None) -> None:
        """Journal the end of delivery (``stop``) before the final commit leaves the group: from the
        leave on, the coordinator may hand the partitions to others at once."""
        if not self._closed:
            self._buffer.close()
            self._fetchers.stop()
            self.journal.write("stop", gen=self.generation)
        super().close(timeout)

    def connection_lost(self) -> None:
        super().connection_lost()
        self.journal.write("lost", gen=self.generation, lease_end=self.lease_end())

    def resume_fetchers(self) -> None:
        positions = self.positions()
        self.journal.write("resume", gen=self.generation, epoch=self.connector.coordinator_epoch,
                           parts=[[t, p, positions.get((t, p), -1)] for t, p in self.assignment()])
        super().resume_fetchers()

    def commit(self, offsets, timeout: float | None = None) -> dict[tuple[str, int], int]:
        """``Consumer.commit``; a failure is also journaled as ``commit_error`` with its message and
        whether the connector counted itself registered (diagnostics: which kind of failure)."""
        try:
            return super().commit(offsets, timeout)
        except CommitFailed as e:
            self.journal.write("commit_error", code=e.code, msg=str(e), registered=self.connector.registered.is_set())
            raise


def journal_state(consumer: "JournalingConsumer", journal: Journal, every: float, stop: threading.Event) -> None:
    """Every ``every`` seconds a ``state`` line: whether the connector counts itself registered,
    the coordinator and epoch, the generation held, whether the lease ran out, how much of it
    is left, and whether the connector thread is alive (diagnostics of a chaos run)."""
    connector = consumer.connector
    while not stop.wait(every):
        coordinator = connector.coordinator
        journal.write("state", registered=connector.registered.is_set(), gen=connector.generation_id,
                      coordinator=coordinator.coordinator_id if coordinator is not None else None,
                      epoch=connector.coordinator_epoch, suspended=connector._suspended,
                      lease_left=round(connector._lease_until - time.monotonic(), 3),
                      alive=connector.is_alive(), registrations=connector.registrations)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testkit.member", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topics", help="comma-separated topics")
    p.add_argument("--pattern", help="wildcard subscription (regex)")
    p.add_argument("--journal", required=True)
    p.add_argument("--consumer-id")
    p.add_argument("--session-timeout-ms", type=int, default=3000)
    p.add_argument("--reset", default="smallest", choices=["smallest", "largest"])
    p.add_argument("--log-file", help="log to this file instead of stderr")
    p.add_argument("--auto-commit", action="store_true",
                   help="report what the application took (no explicit commit): exact hand-offs on clean "
                        "rebalances, but a SIGKILL may lose journal lines of reported records")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--state-every", type=float, default=0.0,
                   help="journal the connector's state every this many seconds (0: never)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        **({"filename": args.log_file} if args.log_file else {"stream": sys.stderr}))
    # SIGUSR1 dumps every thread's stack to stderr (the member's log): how a chaos run sees where it is stuck
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    journal = Journal(args.journal)
    topics = [t for t in (args.topics or "").split(",") if t] or None
    JournalingConsumer.journal = journal
    consumer = JournalingConsumer(args.bootstrap, args.group, topics=topics, pattern=args.pattern,
                                  consumer_id=args.consumer_id, session_timeout_ms=args.session_timeout_ms,
                                  auto_commit=args.auto_commit, auto_offset_reset=args.reset)
    journal.write("start", id=consumer.consumer_id, pid=os.getpid())
    if args.state_every > 0:
        threading.Thread(target=journal_state, args=(consumer, journal, args.state_every, stop), name="journal-state",
                         daemon=True).start()
    try:
        while not stop.is_set():
            for batch in consumer.batches(timeout=0.2):
                cols = batch.select(["topic", "partition", "offset"]).to_pydict()
                if not cols["offset"]:
                    continue
                topic, partition = cols["topic"][0], cols["partition"][0]
                offsets = cols["offset"]
                journal.write("recs", t=topic, p=partition, offs=offsets, gen=consumer.generation)
                if not args.auto_commit:
                    _commit(consumer, journal, topic, partition, offsets[-1] + 1)
                if stop.is_set():
                    break
    finally:
        consumer.close()
        journal.write("closed", left=consumer.connector.left_cleanly)
        journal.close()
    return 0


#: How long a member waits for a commit's answer.  ``Consumer.commit`` waits up to the session
#: timeout by default (as Kafka's commitSync waits); a coordinator that hangs (paused, not
#: dead) would stop this member's reading for that long, so it waits less and reads on: the
#: offset still goes with the next ping answer, claim or final commit.
COMMIT_TIMEOUT_S = 2.0


def _commit(consumer: Consumer, journal: Journal, topic: str, partition: int, offset: int) -> None:
    """Commit actively; without a coordinator right now the offset still goes with the next
    ping answer, claim or final commit."""
    try:
        code = consumer.commit({(topic, partition): offset}, timeout=COMMIT_TIMEOUT_S).get((topic, partition))
    except CommitFailed as e:
        journal.write("commit_failed", t=topic, p=partition, off=offset, code=e.code)
        return
    journal.write("commit" if code == 0 else "commit_failed", t=topic, p=partition, off=offset, code=code)


def read_journal(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The complete lines of a journal (a torn last line from a SIGKILL is skipped)."""
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


class MemberProcess:
    """One member subprocess: start, signal, read its journal."""

    def __init__(self, name: str, workdir: str | os.PathLike, bootstrap: str, group: str, *,
                 topics: list[str] | None = None, pattern: str | None = None, session_timeout_ms: int = 3000,
                 reset: str = "smallest", consumer_id: str | None = None, auto_commit: bool = False,
                 state_every: float = 0.0):
        self.name = name
        workdir = Path(workdir)
        self.journal_path = workdir / f"{name}.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.consumer_id = consumer_id or name
        cmd = [sys.executable, "-m", "testkit.member", "--bootstrap", bootstrap, "--group", group,
               "--journal", str(self.journal_path), "--consumer-id", self.consumer_id,
               "--session-timeout-ms", str(session_timeout_ms), "--reset", reset]
        if topics:
            cmd += ["--topics", ",".join(topics)]
        if pattern:
            cmd += ["--pattern", pattern]
        if auto_commit:
            cmd.append("--auto-commit")
        if state_every > 0:
            cmd += ["--state-every", str(state_every)]
        self._log = open(self.log_path, "ab")
        env = child_env(PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self, ev: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_journal(self.journal_path) if ev is None or e["ev"] == ev]

    def last_assignment(self) -> dict[str, Any] | None:
        """The last ``assign`` (or ``resume``) event, unless a ``stop``/``lost`` came after it."""
        last = None
        for e in self.events():
            if e["ev"] in ("assign", "resume"):
                last = e
            elif e["ev"] in ("stop", "lost"):
                last = None
        return last

    def owned(self) -> set[tuple[str, int]]:
        a = self.last_assignment()
        return {(t, p) for t, p, _ in a["parts"]} if a else set()

    def records(self) -> Iterator[tuple[str, int, int]]:
        for e in self.events("recs"):
            for o in e["offs"]:
                yield e["t"], e["p"], o

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(15)
        self._log.close()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (clean close) and wait; SIGKILL if it does not exit in ``timeout``."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("member %s did not stop within %.0f s; killing it", self.name, timeout)
            self.proc.kill()
            return self.proc.wait(15)
        finally:
            self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __repr__(self) -> str:
        return f"MemberProcess({self.name}, pid={self.proc.pid})"


if __name__ == "__main__":
    sys.exit(main())
