"""``spark-coord topics|produce|tail``: the client commands (``topics`` creates, lists, describes -- with
each partition's log start offset as ``earliest`` -- deletes, adds partitions and deletes records)."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from typing import Callable

from spark_coord.client.admin import EARLIEST, LATEST, AdminClient
from spark_coord.client.connection import BrokerConnectionError
from spark_coord.client.fetcher import fetch
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.client.security_cli import client_security
from spark_coord.errors import KafkaError, is_retriable
from spark_coord.records.reader import iter_records
from spark_coord.table import format_table
from spark_coord.wire.types import ProtocolError

log = logging.getLogger("spark_coord.cli")


def _reports_errors(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn an unreachable or misbehaving broker into one error line and exit code 1, not a traceback."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (BrokerConnectionError, ProtocolError, KafkaError) as e:
            log.error("%s", e)
            return 1

    return run


@_reports_errors
def topics(args) -> int:
    with ClusterClient(args.bootstrap, security=client_security(args)) as cluster:
        admin = AdminClient(cluster)
        try:
            if args.action == "create":
                n = admin.create_topic(args.topic, args.partitions, if_not_exists=args.if_not_exists,
                                       configs=_pairs(getattr(args, "config", [])))
                log.info("topic %s ready with %d partition(s)", args.topic, n)
            elif args.action == "alter-config":
                if not args.set and not args.delete:
                    log.error("alter-config: give --set KEY=VALUE and/or --delete KEY")
                    return 2
                admin.alter_topic_configs(args.topic, _pairs(args.set), args.delete, args.validate_only)
                log.info("topic %s: configs %s", args.topic, "valid (nothing changed)" if args.validate_only
                         else "changed")
            elif args.action == "list":
                for name in admin.list_topics():
                    sys.stdout.write(name + "\n")
            elif args.action == "describe":
                rows = admin.describe(args.topics or None)
                columns = ["topic", "partition", "leader", "replicas", "earliest", "latest"]
                sys.stdout.write(format_table(rows, columns) + "\n")
                if getattr(args, "configs", False):
                    configs = [{"topic": t, "config": c["name"], "value": c["value"]}
                               for t in sorted({r["topic"] for r in rows})
                               for c in admin.describe_topic_configs(t) if c["config_source"] == 1]
                    sys.stdout.write("\n" + (format_table(configs, ["topic", "config", "value"]) if configs
                                             else "(no topic sets its own configs)") + "\n")
            elif args.action == "delete":
                admin.delete_topic(args.topic)
                log.info("topic %s deleted", args.topic)
            elif args.action == "add-partitions":
                n = admin.add_partitions(args.topic, args.partitions, validate_only=args.validate_only)
                log.info("topic %s %s %d partition(s)", args.topic,
                         "could grow to" if args.validate_only else "now has", n)
            elif args.action == "delete-records":
                return _delete_records(admin, cluster, args)
        except KafkaError as e:
            log.error("%s", e)
            return 1
        except ValueError as e:  # a KEY=VALUE without '='
            log.error("%s", e)
            return 2
    return 0


def _pairs(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; ``ValueError`` naming an item without ``=``."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _delete_records(admin: AdminClient, cluster: ClusterClient, args) -> int:
    before = -1 if str(args.before).lower() in ("end", "-1") else None
    if before is None:
        try:
            before = int(args.before)
        except ValueError:
            log.error("--before must be an offset or 'end', not %r", args.before)
            return 2
        if before < 0:
            log.error("--before must be an offset >= 0 or 'end', not %r", args.before)
            return 2
    parts = args.partition or sorted(cluster.topic(args.topic, wait=5.0).partitions)
    starts = admin.delete_records(args.topic, dict.fromkeys(parts, before))
    sys.stdout.write(format_table([{"topic": args.topic, "partition": p, "earliest": o}
                                   for p, o in sorted(starts.items())], ["topic", "partition", "earliest"]) + "\n")
    return 0


class Progress:
    """Logs a progress line at most every ``interval`` seconds on long CLI work."""

    def __init__(self, what: str, interval: float = 2.0):
        self.what, self.interval = what, interval
        self.start = self.last = time.monotonic()
        self.count = 0

    def tick(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            log.info("%s: %d so far (%.0f/s)", self.what, self.count, self.count / max(now - self.start, 1e-9))

    def done(self) -> None:
        elapsed = time.monotonic() - self.start
        log.info("%s: %d in %.1fs (%.0f/s)", self.what, self.count, elapsed, self.count / max(elapsed, 1e-9))


@_reports_errors
def produce(args) -> int:
    try:
        source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    except OSError as e:
        log.error("cannot read %s: %s", args.file, e.strerror or e)
        return 1
    sep = args.key_separator.encode() if args.key_separator else None
    progress = Progress(f"produced to {args.topic}")
    try:
        with ClusterClient(args.bootstrap, security=client_security(args)) as cluster:
            producer = Producer(cluster, acks=args.acks, compression=args.compression, batch_size=args.batch_size)
            for line in source:
                line = line.rstrip(b"\r\n")
                key = None
                if sep is not None and sep in line:
                    key, line = line.split(sep, 1)
                producer.send(args.topic, line, key=key, partition=args.partition)
                progress.tick()
            producer.flush()
    except KafkaError as e:
        log.error("%s", e)
        return 1
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    progress.done()
    return 0


@_reports_errors
def tail(args) -> int:
    out = sys.stdout.buffer
    sep = (args.key_separator or "").encode()
    printed = 0
    with ClusterClient(args.bootstrap, security=client_security(args)) as cluster:
        admin = AdminClient(cluster)
        try:
            info = cluster.topic(args.topic, wait=5.0)
        except KafkaError as e:
            log.error("%s", e)
            return 1
        parts = args.partition or sorted(info.partitions)
        if args.offset in ("earliest", "latest"):
            positions = admin.list_offsets(args.topic, parts, EARLIEST if args.offset == "earliest" else LATEST)
        else:
            try:
                positions = {p: int(args.offset) for p in parts}
            except ValueError:
                log.error("--offset must be earliest, latest or a number, not %r", args.offset)
                return 2
        ends = admin.list_offsets(args.topic, parts, LATEST)
        try:
            while True:
                active = {p: o for p, o in positions.items() if args.follow or o < ends[p]}
                if not active:
                    break
                by_leader: dict[int, dict] = {}
                for p, o in active.items():
                    by_leader.setdefault(cluster.leader(args.topic, p), {})[(args.topic, p)] = o
                for leader, offsets in by_leader.items():
                    for pd in fetch(cluster.connection(leader), offsets, max_wait_ms=500 if args.follow else 100):
                        if pd.error:
                            if is_retriable(pd.error):
                                cluster.refresh([args.topic])
                                continue
                            raise KafkaError(pd.error, f"{pd.topic}-{pd.partition}")
                        for rec in iter_records(pd.records or b"", min_offset=positions[pd.partition]):
                            if not args.follow and rec.offset >= ends[pd.partition]:
                                break
                            if args.key_separator is not None:
                                out.write((rec.key or b"") + sep)
                            out.write((rec.value or b"") + b"\n")
                            positions[pd.partition] = rec.offset + 1
                            printed += 1
                            if args.count is not None and printed >= args.count:
                                out.flush()
                                return 0
                out.flush()
        except KafkaError as e:
            log.error("%s", e)
            return 1
    return 0
