"""Network and clock faults on a 3-broker cluster: every process in a network namespace of its own.

    .venv/bin/python bench/nemesis.py                     # the documented run (docs/chaos-network.md; ~7 minutes)
    .venv/bin/python bench/nemesis.py --faults 10 --duration 150 --seed 3
    .venv/bin/python bench/nemesis.py --weights coordinator_zk_cut=1,flap=1 --combine 0   # only these kinds
    .venv/bin/python bench/nemesis.py --cleanup           # remove what a killed run left (namespaces, veths, bridge)
    .venv/bin/python bench/nemesis.py --runs 10 --faults 60 --duration 720 --summary nemesis-10.json
    .venv/bin/python bench/nemesis.py --aggregate nemesis-report.seed*.json   # the table of earlier runs
    .venv/bin/python bench/nemesis.py --kinds share,share,share --share-release 0.3 --share-reject 0.02 \
        --share-count-limit 3 --weights share_leader_zk_cut=1,share_leader_clock_step=1,share_leader_kill=1,\
truncated_restart=1,share_member_stop=1 --faults 32 --duration 540   # the share nemesis (docs/benchmarks/share.md)
    .venv/bin/python bench/nemesis.py --kinds thin,thin --txn-writers 3 --txn-readers 2 --faults 32 \
        --duration 420 --figures txn_nemesis   # transactions (docs/benchmarks/faults.md)

Needs root (network namespaces, veths, a bridge) and ``ip``; clock faults need libfaketime
(Debian package ``faketime``) and are skipped, with the reason printed, without it.  An
embedded ZooKeeper, 3 brokers, a 12-partition topic, the acknowledging producer and
members -- by default two thin consumers, a confluent-kafka eager and a cooperative one
-- each in a namespace of its own on one bridge (``testkit/nemesis/``).
Seeded random faults of every kind of ``nemesis.ALL_KINDS`` (cuts by blackhole routes,
a bridge, flapping cuts, clocks offset or running fast, pauses and kills), alone or two
at once (``--combine``).

With ``--txn-writers N`` a transactional workload runs beside it (``testkit.txn_member``: N
``TransactionalProducer`` writers over a 6-partition topic ``txn``, read_committed readers and one
read_uncommitted, each in a namespace of its own), the fault kind ``txn_writer_kill`` is added to
the default weights, and its checks (``testkit.txn_checks``) are printed and count as violations.

Prints the chaos report (``testkit.chaos``), the anomalies of Jepsen's Kafka workload
(``testkit.jepsen_checks``) and a table per fault kind: how often it was injected, the
longest wait of a record on the partitions it did not touch, and the anomalies in its
window; writes everything as JSON (``--report``); exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit import nemesis  # noqa: E402
from testkit.chaos import MEMBER_KINDS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faults", type=int, default=24)
    p.add_argument("--duration", type=float, default=330.0, help="seconds of faults and load")
    p.add_argument("--kinds", default="thin,thin,eager,cooperative",
                   help="member kinds, one per member: thin, eager, cooperative, kip848, spark, share")
    p.add_argument("--share-lock-ms", type=int, default=5000, help="the brokers' share record lock")
    p.add_argument("--share-release", type=float, default=0.0,
                   help="share members release each record with this chance instead of accepting it")
    p.add_argument("--share-reject", type=float, default=0.0,
                   help="share members reject each record with this chance instead of accepting it")
    p.add_argument("--share-count-limit", type=int, default=0,
                   help="the brokers' group.share.delivery.count.limit (0: their default, 5)")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--txn-writers", type=int, default=0,
                   help="transactional writers (testkit.txn_member), each with a transactional id of its own")
    p.add_argument("--txn-readers", type=int, default=2, help="read_committed readers (plus one read_uncommitted)")
    p.add_argument("--txn-partitions", type=int, default=6, help="partitions of the transactional topic")
    p.add_argument("--txn-abort", type=float, default=0.2, help="chance a writer aborts a transaction")
    p.add_argument("--session-ms", type=int, default=10000,
                   help="members' session timeout (default: outlasts a coordinator failover -- the brokers' "
                        "ZooKeeper session, an election, the members finding the new coordinator -- as Kafka's "
                        "45 s outlasts its 18 s; cuts are drawn up to 6 s longer than it)")
    p.add_argument("--kip848-heartbeat-ms", type=int, default=2500,
                   help="the brokers' group.consumer.heartbeat.interval.ms: librdkafka waits this long for a "
                        "KIP-848 heartbeat's answer, and slow_broker's round trips reach 2.4 s")
    p.add_argument("--zk-session-ms", type=int, default=4000, help="brokers' ZooKeeper session timeout")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--combine", type=float, default=0.2, help="chance that a second fault starts with one")
    p.add_argument("--weights", help="kind=weight,... (kinds named replace the defaults; others weigh 0)")
    p.add_argument("--workdir", help="keep cluster data, member journals and logs here")
    p.add_argument("--report", default="nemesis-report.json",
                   help="write the run's report (faults, checks, figures) as JSON here (default: %(default)s)")
    p.add_argument("--figures", metavar="NAME",
                   help="also record the report as the run of bench/results/NAME.json (bench/figures.py: with the "
                        "machine, date and commit), as the documented runs are kept")
    p.add_argument("--zk-nodes", type=int, default=3, help="ZooKeeper servers (3: a quorum that zk_split divides)")
    p.add_argument("--spare-brokers", type=int, default=1,
                   help="brokers that lead no partition of the topic (broker_remove may take them, coordinator or not)")
    p.add_argument("--proxied", action=argparse.BooleanOptionalAction, default=True,
                   help="every broker behind a TCP proxy in its namespace (the slow/throttle/stall link faults)")
    p.add_argument("--runs", type=int, default=1,
                   help="runs one after the other, seeds --seed, --seed+1, ...; prints the per-kind table of all")
    p.add_argument("--summary", help="write the runs' aggregate (per-kind table, per-run figures, verdict) as JSON")
    p.add_argument("--aggregate", nargs="+", metavar="REPORT",
                   help="print the aggregate of reports written by earlier runs and exit")
    p.add_argument("--cleanup", action="store_true", help="remove leftovers of dead runs and exit")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("testkit.chaos").setLevel(logging.INFO)
    logging.getLogger("testkit.diagnostics").setLevel(logging.INFO)
    logging.getLogger("testkit.nemesis").setLevel(logging.INFO)
    if args.aggregate:
        return 0 if _print_aggregate([json.loads(Path(f).read_text()) for f in args.aggregate], args.summary) else 1
    if args.cleanup:
        for item in nemesis.cleanup_stale():
            print("removed", item)
        return 0
    reason = nemesis.unavailable_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or any(k not in MEMBER_KINDS for k in kinds):
        p.error(f"--kinds: a comma-separated list of {', '.join(MEMBER_KINDS)}")
    settings = nemesis.NemesisSettings(kinds=kinds, members=len(kinds), partitions=args.partitions,
                                       member_session_ms=args.session_ms, broker_zk_session_ms=args.zk_session_ms,
                                       duration_s=args.duration, faults=args.faults, seed=args.seed,
                                       combine=args.combine, zk_nodes=args.zk_nodes,
                                       spare_brokers=args.spare_brokers, proxied=args.proxied,
                                       kip848_heartbeat_ms=args.kip848_heartbeat_ms,
                                       cut_s=(3.0, max(12.0, args.session_ms / 1000 + 6.0)),
                                       share_lock_ms=args.share_lock_ms, share_release=args.share_release,
                                       share_reject=args.share_reject, share_count_limit=args.share_count_limit,
                                       txn_writers=args.txn_writers, txn_readers=args.txn_readers,
                                       txn_partitions=args.txn_partitions, txn_abort=args.txn_abort)
    if args.txn_writers and not args.weights:
        settings.weights = dict(settings.weights, txn_writer_kill=2)
    if args.weights:
        weights = {}
        for item in args.weights.split(","):
            kind, _, w = item.partition("=")
            if kind.strip() not in nemesis.ALL_KINDS:
                p.error(f"--weights: unknown fault kind {kind.strip()!r} (one of {', '.join(nemesis.ALL_KINDS)})")
            try:
                weights[kind.strip()] = float(w)
            except ValueError:
                p.error(f"--weights: {item!r} is not kind=number")
        settings.weights = weights
    # SIGTERM unwinds like Ctrl-C: the run's finally blocks remove its processes, namespaces and bridge
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    docs, failed = [], False
    for i in range(args.runs):
        settings.seed = args.seed + i
        path = Path(args.report) if args.runs == 1 else Path(args.report).with_suffix(f".seed{settings.seed}.json")
        if args.runs > 1:
            print(f"== run {i + 1} of {args.runs} (seed {settings.seed})", flush=True)
        with tempfile.TemporaryDirectory(prefix="nemesis-") as tmp:
            workdir = Path(args.workdir) / f"seed{settings.seed}" if args.workdir else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            report = nemesis.NemesisRun(settings, workdir).run()
        doc = report.to_dict()
        docs.append(doc)
        path.write_text(json.dumps(doc, indent=2, default=str))
        if args.figures:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            import figures

            figures.write(args.figures, json.loads(json.dumps(doc, default=str)), label=f"seed{settings.seed}")
        print(report.summary())
        for v in report.violations[:40]:
            print("VIOLATION:", v)
        print(f"report: {path}", flush=True)
        failed = failed or bool(report.violations)
    if args.runs > 1:
        failed = not _print_aggregate(docs, args.summary) or failed
    return 1 if failed else 0


def _print_aggregate(docs: list[dict], summary: str | None) -> bool:
    agg = nemesis.aggregate(docs)
    print(nemesis.aggregate_tables(agg))
    if summary:
        Path(summary).write_text(json.dumps(agg, indent=2))
        print(f"summary: {summary}")
    return agg["verdict"]["passed"]


if __name__ == "__main__":
    sys.exit(main())
