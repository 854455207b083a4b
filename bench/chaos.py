"""Chaos benchmark: about 60 faults in about 13 minutes on a 3-broker cluster, every invariant checked.

    .venv/bin/python bench/chaos.py                       # the documented run (docs/benchmarks/faults.md; ~15 minutes)
    .venv/bin/python bench/chaos.py --faults 20 --duration 240 --seed 7
    .venv/bin/python bench/chaos.py --kinds thin,thin,eager,cooperative --session-ms 30000 \
        --zk-session-ms 18000 --faults 30 --duration 600 --workdir /some/dir   # mixed members, default timeouts
    .venv/bin/python bench/chaos.py --kinds thin,eager,cooperative,share,share --faults 14 --duration 180 \
        --seed 7 --share-hold 0.2                         # a share group beside the consumer group
    .venv/bin/python bench/chaos.py --kinds thin,eager,cooperative,kip848,spark --faults 8 --duration 150
                                                      # every kind of group member, a Spark query among them

An embedded ZooKeeper, 3 broker processes, a 12-partition topic, an acknowledging
producer (acks=1) and 4 journaling thin-consumer members (6 s sessions) that commit
actively after every batch.  Faults at random moments: SIGKILL and SIGSTOP of
members, SIGKILL of the coordinator's broker and of other brokers (restarted), and
ZooKeeper session expiry of the coordinator (its broker paused past its session).
See ``testkit/chaos.py`` for the checks and the stall measure.

``--kinds`` mixes member kinds, one per member: ``thin`` (our consumer), ``eager``
(confluent-kafka, librdkafka's default assignors), ``cooperative`` (confluent-kafka
with ``partition.assignment.strategy=cooperative-sticky``) and ``kip848``
(confluent-kafka with ``group.protocol=consumer``; its session is the brokers'
``group.consumer.session.timeout.ms``, set to ``--kafka-session-ms`` or ``--session-ms``)
each commit synchronously after every batch; ``spark`` is a Spark structured-streaming
query (local[1], 512 MB driver; ``testkit/spark_member.py``) whose source
commits the group's offsets as Spark confirms batches.  A killed Spark member restarts on
its checkpoint (a cold JVM: about 15 s) and replays the batch it had not confirmed; the
run waits for every Spark member's first assignment before its warm-up.  The report
adds, per member, the records delivered to it again (and how many of those it had read
itself) and the faults that hit it; for each
member SIGKILL, the longest wait of a record on the other members' partitions over
the victim's session timeout and the rebalance after it, against quiet windows; and
every run of failed commits lasting 10 s or more (a member whose commits keep failing
has its threads dumped into its log, ``<workdir>/members/<name>.log``).

``share`` members are confluent-kafka ``ShareConsumer``s of one share group (KIP-932)
reading the same topic (not members of the consumer group; several may read one
partition): each accepts every record it is handed and commits the acknowledgements
synchronously, journaling every delivery with its delivery count and which acceptances
the broker confirmed.  The same faults hit them.  The brokers run with a short
acquisition lock (``--share-lock-ms``, 5 s) and share sessions of ``--session-ms``; the
group's ``share.auto.offset.reset`` is ``earliest``.  The report adds the share group's
checks: every record in the log delivered to it at least once, no record with two lock
holders, no record acquired again after its acceptance was confirmed, and its
redeliveries -- how many, explained by a fault of the member holding the record or of the
partition's leader, by a reassignment of the group only, or unexplained (a violation).

Prints the report and writes it as JSON (``--report``); exits 1 when an invariant
was violated.  Figures: duplicates as a share of the records consumed, and the
consumption stall after each coordinator SIGKILL, against the same measure taken
at quiet moments of the same run (the baseline).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.chaos import ChaosRun, ChaosSettings, parse_kinds, write_report  # noqa: E402


def _write_figures(report, settings) -> None:
    """Faults by kind, duplicates and stalls, as JSON for the docs' plots (bench/figures.py)."""
    import statistics

    import figures

    from testkit.chaos import KINDS

    stalls, base = report.coordinator_kill_stalls, report.baseline_stalls
    kinds = ",".join(settings.member_kinds())
    figures.write("chaos", {
        "faults": {k: n for k in KINDS if (n := sum(1 for f in report.faults if f["kind"] == k))},
        "wall_s": round(report.wall_s, 1), "records": report.acked, "lost": len(report.lost),
        "duplicates": report.duplicates["extra"], "duplicate_pct": round(report.duplicate_pct, 3),
        "coordinator_kill_stall_s": {"median": statistics.median(stalls) if stalls else None,
                                     "max": max(stalls) if stalls else None, "all": stalls},
        "baseline_stall_s": {"median": statistics.median(base) if base else None},
        "member_kill_stalls": [{"kind": k.get("kind"), "stall": k.get("stall"), "clean": k.get("clean")}
                               for k in report.member_kill_stalls],
        "violations": len(report.violations),
        **({"share": report.share} if report.share else {}),
    }, label=f"{len(report.faults)} faults, {kinds}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faults", type=int, default=60)
    p.add_argument("--duration", type=float, default=780.0, help="seconds of faults and load")
    p.add_argument("--members", type=int, default=4, help="thin-consumer members (when --kinds is not given)")
    p.add_argument("--kinds", help="member kinds, one per member: thin, eager, cooperative, kip848, spark "
                                   "(consumer group), share (share group), e.g. thin,eager,cooperative,kip848,spark; "
                                   "default: --members thin consumers")
    p.add_argument("--share-lock-ms", type=int, default=5000,
                   help="share members: the brokers' acquisition lock (group.share.record.lock.duration.ms)")
    p.add_argument("--share-hold", type=float, default=0.0,
                   help="share members: seconds each poll's records are held before they are accepted")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--session-ms", type=int, default=6000, help="members' session timeout")
    p.add_argument("--zk-session-ms", type=int, default=4000, help="brokers' ZooKeeper session timeout")
    p.add_argument("--kafka-session-ms", type=int, help="Kafka members' session.timeout.ms, and the brokers' "
                                                        "group.consumer.session.timeout.ms (default: --session-ms)")
    p.add_argument("--coordinator-defaults", action="store_true",
                   help="coordinator offset commit interval and rebalance backoff at their defaults (not 200 ms)")
    p.add_argument("--zk-tick-ms", type=int, default=500, help="ZooKeeper's tickTime")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--weights", help="relative weights of the fault kinds, e.g. "
                                     "member_kill=2,member_stop=2,coordinator_kill=3,broker_kill=1,"
                                     "coordinator_expiry=0 "
                                     "(kinds not named keep their default weight)")
    p.add_argument("--diagnose-after", type=float, default=5.0,
                   help="dump a member's threads once its commits failed for this many seconds (0: never)")
    p.add_argument("--workdir", help="keep cluster data, member journals and logs here")
    p.add_argument("--report", default="chaos-report.json")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("testkit.chaos").setLevel(logging.INFO)
    logging.getLogger("testkit.diagnostics").setLevel(logging.INFO)
    try:
        kinds = parse_kinds(args.kinds) if args.kinds else ()
    except ValueError as e:
        p.error(str(e))
    settings = ChaosSettings(partitions=args.partitions, members=len(kinds) or args.members, kinds=kinds,
                             member_session_ms=args.session_ms, broker_zk_session_ms=args.zk_session_ms,
                             duration_s=args.duration, faults=args.faults, seed=args.seed,
                             diagnose_after_s=args.diagnose_after, kafka_session_ms=args.kafka_session_ms,
                             coordinator_defaults=args.coordinator_defaults, share_lock_ms=args.share_lock_ms,
                             share_hold_s=args.share_hold)
    for item in (args.weights or "").split(","):
        if not item.strip():
            continue
        kind, _, weight = item.partition("=")
        if kind.strip() not in settings.weights:
            p.error(f"--weights: unknown fault kind {kind.strip()!r} (one of {', '.join(settings.weights)})")
        try:
            settings.weights[kind.strip()] = float(weight)
        except ValueError:
            p.error(f"--weights: {item!r} is not kind=number")
    from spark_coord.zk.embedded import EmbeddedZooKeeper

    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        zk = EmbeddedZooKeeper(port=0, data_dir=workdir / "zookeeper",
                               settings={"tickTime": args.zk_tick_ms, "minSessionTimeout": 1000,
                                         "maxSessionTimeout": max(60000, 20 * args.zk_tick_ms)})
        zk.start(timeout=60)
        try:
            report = ChaosRun(settings, workdir, zk.connect_string).run()
        finally:
            zk.stop()
    write_report(report, args.report)
    print(report.summary())
    for v in report.violations[:40]:
        print("VIOLATION:", v)
    print(f"report: {args.report}")
    _write_figures(report, settings)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
