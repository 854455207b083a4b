"""Transactional writers and isolation-level readers as processes of their own, journaling for ``testkit.txn_checks``.

``python -m testkit.txn_member writer --bootstrap H:P --topic T --partitions N --transactional-id ID
--journal FILE`` runs transactions with our ``TransactionalProducer`` until SIGTERM: each one writes
unique values to 2-4 distinct partitions of ``T`` (1 or 2 values each, value ``<txn>/<partition>/<i>``),
flushes them (so they are in the log either way), and commits, or aborts with the chance ``--abort``.
The journal (JSON lines, ``ts`` and ``ev``):

- ``init``: ``init_transactions`` returned: ``pid``, ``producer_id``, ``epoch`` (a new incarnation, or
  the same process after a fatal error or a timeout: it fences its earlier producer, whose open
  transaction the coordinator aborts, as Kafka's InitProducerId does);
- ``begin``: written *before* the first send: ``txn`` (``<writer>.<os pid>.<n>``, unique across
  incarnations), ``values`` = ``{partition: [value, ...]}``, ``intent`` (commit or abort);
- ``end``: ``txn``, ``outcome``: ``committed`` (``commit_transaction`` returned), ``aborted``
  (``abort_transaction`` returned, or the client never asked to commit: Kafka aborts such a
  transaction at its fencing or its timeout), ``unknown`` (``commit_transaction`` raised: the EndTxn may
  or may not have been written, which Jepsen calls indeterminate); ``error`` (the exception's text).

A transaction with a ``begin`` and no ``end`` (the process was SIGKILLed inside it) is indeterminate too.
After an error the writer closes its producer and makes a new one, whose ``init_transactions`` fences
the old epoch: a commit in flight either completed before the fencing or is aborted by it.

``python -m testkit.txn_member reader --bootstrap H:P --topic T --group G --isolation read_committed
--journal FILE`` is a thin ``Consumer`` of its own group (so it owns every partition) with that
``isolation_level``, journaling ``recs`` lines: ``p``, ``offs``, ``vals`` (the values, decoded), and
committing after each write of the journal (a restart reads on from there, again at most what it
journaled: the same offsets, so the same values).

``TxnProcess`` starts, signals and reads such a process from a run.
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
from pathlib import Path
from typing import Any

from testkit import child_env
from testkit.member import Journal, read_journal

log = logging.getLogger(__name__)

__all__ = ["TxnProcess", "main", "read_log", "run_reader", "run_writer", "stable"]


def run_writer(args: argparse.Namespace, stop: threading.Event) -> None:
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.transactions import TransactionalProducer, TransactionError
    from spark_coord.errors import KafkaError

    journal = Journal(args.journal)
    rng = random.Random(f"{args.seed}:{args.transactional_id}:{os.getpid()}")
    name = f"{args.writer}.{os.getpid()}"
    n = 0
    journal.write("start", pid=os.getpid(), id=args.transactional_id)
    while not stop.is_set():
        cluster = producer = None
        try:
            cluster = ClusterClient(args.bootstrap, timeout=args.request_timeout_s)
            producer = TransactionalProducer(cluster, args.transactional_id,
                                             transaction_timeout_ms=args.transaction_timeout_ms,
                                             max_block_ms=args.max_block_ms,
                                             timeout_ms=int(args.request_timeout_s * 1000))
            pid, epoch = producer.init_transactions()
            journal.write("init", producer_id=pid, epoch=epoch)
            while not stop.is_set():
                txn = f"{name}.{n}"
                n += 1
                parts = rng.sample(range(args.partitions), rng.randint(2, min(4, args.partitions)))
                values = {p: [f"{txn}/{p}/{i}" for i in range(rng.randint(1, 2))] for p in sorted(parts)}
                intent = "abort" if rng.random() < args.abort else "commit"
                journal.write("begin", txn=txn, values={str(p): v for p, v in values.items()}, intent=intent)
                outcome, error = _one_transaction(producer, args.topic, values, intent)
                journal.write("end", txn=txn, outcome=outcome, error=error)
                if error is not None:
                    break   # a new producer: init_transactions fences this one
                stop.wait(args.interval_s)
        except (KafkaError, TransactionError, OSError, ValueError) as e:
            journal.write("error", error=f"{type(e).__name__}: {e}")
            stop.wait(0.5)
        finally:
            if producer is not None:
                try:
                    producer.close()
                except Exception:  # noqa: BLE001 -- closing what failed
                    pass
            if cluster is not None:
                cluster.close()
    journal.write("closed")
    journal.close()


def _one_transaction(producer, topic: str, values: dict[int, list[str]], intent: str) -> tuple[str, str | None]:
    """Run one transaction; the outcome the client saw and the error that decided it (None: none)."""
    from spark_coord.client.transactions import TransactionError
    from spark_coord.errors import KafkaError

    try:
        producer.begin_transaction()
        for p, vals in values.items():
            for v in vals:
                producer.send(topic, v.encode(), partition=p)
        # every batch written before the decision: an aborted transaction's values are in the log (read
        # uncommitted, and the aborted-read check has something to catch), not dropped unsent by the abort
        producer.flush()
    except (KafkaError, TransactionError, OSError, ValueError) as e:
        # never asked to commit: Kafka aborts it (here, at the fencing by the next init_transactions)
        return "aborted", f"{type(e).__name__}: {e}"
    if intent == "abort":
        try:
            producer.abort_transaction()
            return "aborted", None
        except (KafkaError, TransactionError, OSError, ValueError) as e:
            return "aborted", f"{type(e).__name__}: {e}"
    try:
        producer.commit_transaction()
        return "committed", None
    except (KafkaError, TransactionError, OSError, ValueError) as e:
        return "unknown", f"{type(e).__name__}: {e}"


def run_reader(args: argparse.Namespace, stop: threading.Event) -> None:
    from spark_coord.consumer.consumer import CommitFailed, Consumer

    journal = Journal(args.journal)
    consumer = Consumer(args.bootstrap, args.group, topics=[args.topic], consumer_id=args.group,
                        session_timeout_ms=args.session_timeout_ms, auto_commit=False,
                        auto_offset_reset="smallest", isolation_level=args.isolation)
    journal.write("start", pid=os.getpid(), isolation=args.isolation)
    try:
        while not stop.is_set():
            for batch in consumer.batches(timeout=0.2):
                cols = batch.select(["partition", "offset", "value"]).to_pydict()
                if not cols["offset"]:
                    continue
                p = cols["partition"][0]
                journal.write("recs", p=p, offs=cols["offset"],
                              vals=[(v or b"").decode(errors="replace") for v in cols["value"]])
                try:
                    consumer.commit({(args.topic, p): cols["offset"][-1] + 1}, timeout=2.0)
                except CommitFailed:
                    pass   # the offset goes with the next commit; a restart reads the same offsets again
                if stop.is_set():
                    break
    finally:
        consumer.close()
        journal.write("closed")
        journal.close()


def stable(bootstrap: str, topic: str) -> bool:
    """Whether every partition's last stable offset is its log end: no transaction open."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap, timeout=5.0) as cc:
        admin = AdminClient(cc)
        return admin.list_offsets(topic, None, LATEST, isolation_level=1) == admin.list_offsets(topic, None, LATEST)


def read_log(bootstrap: str, topic: str, isolation: str) -> dict[int, list[tuple[int, str]]]:
    """partition -> [(offset, value)] of every record below the end (the last stable offset for
    read_committed), read with Fetch at that isolation level (read_committed: the batches of aborted
    transactions dropped by the answer's aborted-transaction list, as Kafka's consumer drops them)."""
    from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
    from spark_coord.client.fetcher import ISOLATION_LEVELS, fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.errors import KafkaError
    from spark_coord.records.reader import iter_batches, iter_records

    level = ISOLATION_LEVELS[isolation]
    out: dict[int, list[tuple[int, str]]] = {}
    with ClusterClient(bootstrap, timeout=10.0) as cc:
        admin = AdminClient(cc)
        parts = sorted(cc.topic(topic, refresh=True, wait=10.0).partitions)
        positions = admin.list_offsets(topic, parts, EARLIEST)
        ends = admin.list_offsets(topic, parts, LATEST, isolation_level=level)
        for p in parts:
            out[p] = []
        deadline = time.monotonic() + 120
        while any(positions[p] < ends[p] for p in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: read {positions} of {ends} in 120 s")
            for p in parts:
                if positions[p] >= ends[p]:
                    continue
                for pd in fetch(cc.connection(cc.leader(topic, p)), {(topic, p): positions[p]}, max_wait_ms=100,
                                isolation_level=level):
                    if pd.error:
                        raise KafkaError(pd.error, f"{topic}-{p}")
                    buf = pd.records or b""
                    for rec in iter_records(buf, min_offset=positions[p], aborted_transactions=pd.aborted_transactions):
                        if rec.offset < ends[p]:
                            out[p].append((rec.offset, (rec.value or b"").decode(errors="replace")))
                    for header, _ in iter_batches(buf):   # past data, aborted and control batches alike
                        positions[p] = max(positions[p], header.next_offset)
    return out


class TxnProcess:
    """One writer or reader subprocess: start, signal, read its journal."""

    def __init__(self, role: str, name: str, workdir: str | os.PathLike, bootstrap: str, topic: str, *,
                 partitions: int = 0, transactional_id: str = "", abort: float = 0.2, seed: int = 1,
                 group: str = "", isolation: str = "read_committed", session_timeout_ms: int = 10000,
                 transaction_timeout_ms: int = 15000):
        self.role, self.name = role, name
        self.kind = f"txn_{role}"
        workdir = Path(workdir)
        self.journal_path = workdir / f"{name}.jsonl"
        self.log_path = workdir / f"{name}.log"
        self.isolation = isolation
        cmd = [sys.executable, "-m", "testkit.txn_member", role, "--bootstrap", bootstrap, "--topic", topic,
               "--journal", str(self.journal_path)]
        if role == "writer":
            cmd += ["--partitions", str(partitions), "--transactional-id", transactional_id, "--abort", str(abort),
                    "--seed", str(seed), "--writer", name.split(".")[0],
                    "--transaction-timeout-ms", str(transaction_timeout_ms)]
        else:
            cmd += ["--group", group, "--isolation", isolation, "--session-timeout-ms", str(session_timeout_ms)]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=child_env(PYTHONUNBUFFERED="1"), start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self, ev: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_journal(self.journal_path) if ev is None or e["ev"] == ev]

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(15)
        self._log.close()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (a writer ends its transaction, a reader closes) and wait; SIGKILL after ``timeout``."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s; killing it", self.name, timeout)
            self.proc.kill()
            return self.proc.wait(15)
        finally:
            self._log.close()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testkit.txn_member", description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=["writer", "reader"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--journal", required=True)
    p.add_argument("--partitions", type=int, default=0)
    p.add_argument("--transactional-id", default="")
    p.add_argument("--writer", default="w")
    p.add_argument("--abort", type=float, default=0.2, help="chance that a transaction is aborted by the client")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--interval-s", type=float, default=0.05, help="pause between transactions")
    p.add_argument("--transaction-timeout-ms", type=int, default=15000)
    p.add_argument("--max-block-ms", type=int, default=10000)
    p.add_argument("--request-timeout-s", type=float, default=5.0)
    p.add_argument("--group", default="")
    p.add_argument("--isolation", default="read_committed", choices=["read_committed", "read_uncommitted"])
    p.add_argument("--session-timeout-ms", type=int, default=10000)
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    (run_writer if args.role == "writer" else run_reader)(args, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
