"""What scraping the metrics endpoint of a coordinator with thousands of members costs.

Run:  .venv/bin/python bench/bench_metrics.py [--big 1000] [--small-groups 400] [--rounds 3]
      (about 5 minutes on 2 cores; ``--quick`` runs 300 + 20 x 10 members in about a minute)

Set-up: one broker (its coordinator is the elected one) with its metrics endpoint on, and an
embedded ZooKeeper, in a ``LocalCluster``; light simulated members in another process
(``bench/coord_sim.py``: one real TCP connection per member, our wire codec, every coordinator
request answered at once, Ping answers carrying advancing offsets).  The groups are the
coordinator benchmark's: one big group (``--big`` members over ``--big-partitions``
partitions) and ``--small-groups`` groups of ``--small-size`` members over a topic of
``--small-partitions``: 1,000 + 400 x 10 = 5,000 members and 5,000 partitions with committed
offsets by default.  Every member's session timeout is 30 s (a ping every 10 s).

Once every group is Stable, ``--rounds`` rounds each measure two ``--window``-second windows,
one after the other on the same broker:

* quiet: nobody scrapes (the endpoint still samples every group's lag every 5 s for its
  status page, as it always does);
* scraped: ``GET /metrics`` every ``--scrape-every`` seconds, sent as Prometheus sends it
  (OpenMetrics accepted, gzip), the whole answer read.

Figures: scrape latency (request sent to last byte read) p50/p99/max over every scrape; the
broker process's CPU (/proc/<pid>/stat) per window; the extra CPU of one scrape = (scraped
window's CPU - quiet window's CPU) / scrapes in the window, the median of the rounds; its cost
at a 15 s scrape interval = that / 15 s, in % of one core; and what members see meanwhile:
ping lateness and in-band probe RTT p99 (``coord_sim``: a ClusterMetadata request right after
a ping answer on the same connection, answered once the broker's loop read that answer), quiet
against scraped, so a scrape that held the event loop up would show.  ``/status.json`` is
timed too.  The limits the endpoint is held to (answer within 1 s, under 5% of a core at a
15 s interval) are printed beside the figures; nothing here asserts.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import logging
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import cpu_seconds, rss_mb  # noqa: E402
from bench_coordinator import BIG_GROUP, BIG_TOPIC, SMALL_TOPIC, Bench, BenchError, Simulator, admin_request  # noqa: E402

from spark_coord.client.admin import AdminClient  # noqa: E402
from spark_coord.client.metadata import ClusterClient  # noqa: E402
from spark_coord.cluster import LocalCluster  # noqa: E402
from spark_coord.wire import coordinator as api  # noqa: E402

log = logging.getLogger("bench_metrics")

#: What Prometheus 2.x sends with every scrape.
PROMETHEUS_HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                                "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                      "Accept-Encoding": "gzip", "User-Agent": "Prometheus/2.42.0"}
SCRAPE_LIMIT_S = 1.0
COST_LIMIT = 0.05
PROMETHEUS_INTERVAL_S = 15.0


def timed_get(port: int, path: str, headers: dict) -> tuple[float, int, bytes]:
    """(seconds from request to last byte, status, body as sent)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        return time.perf_counter() - t0, resp.status, body
    finally:
        conn.close()


def load_average() -> float:
    """The machine's 1-minute load average (runnable threads, all processes): how shared the cores were."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class MetricsBench(Bench):
    def __init__(self, args: argparse.Namespace, cluster: LocalCluster, sim: Simulator):
        super().__init__(args, cluster, sim)
        self.metrics_port = cluster.metrics_ports[0]
        self.scrapes: list[float] = []
        self.body_bytes = 0
        self.text_bytes = 0
        self.series = 0

    def window(self, scrape_every: float | None) -> dict:
        """One window: broker CPU, member-side ping figures, and the scrapes made in it."""
        self.sim.call("reset")
        cpu0, t0 = cpu_seconds(self.broker_pid), time.monotonic()
        end = t0 + self.args.window
        scrapes = []
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if scrape_every is None:
                time.sleep(end - now)  # the quiet window itself
                continue
            seconds, status, body = timed_get(self.metrics_port, "/metrics", PROMETHEUS_HEADERS)
            if status != 200:
                raise BenchError(f"/metrics answered {status}")
            scrapes.append(seconds)
            if seconds > SCRAPE_LIMIT_S:
                log.warning("a scrape took %.3f s", seconds)
            self.body_bytes = len(body)
            text = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
            self.text_bytes = len(text)
            self.series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
            time.sleep(max(0.0, min(end, now + scrape_every) - time.monotonic()))
        wall = time.monotonic() - t0
        cpu = cpu_seconds(self.broker_pid) - cpu0
        stats = self.sim.call("stats")
        self.scrapes.extend(scrapes)
        return {"wall": wall, "cpu": cpu, "scrapes": len(scrapes), "stats": stats, "load": load_average()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", type=int, default=1000, help="members of the big group")
    ap.add_argument("--big-partitions", type=int, default=1000)
    ap.add_argument("--small-groups", type=int, default=400)
    ap.add_argument("--small-size", type=int, default=10)
    ap.add_argument("--small-partitions", type=int, default=10)
    ap.add_argument("--session-ms", type=int, default=30000)
    ap.add_argument("--rate", type=float, default=10.0, help="records/s each owned partition advances")
    ap.add_argument("--probe-every", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--settle-timeout", type=float, default=300.0)
    ap.add_argument("--window", type=float, default=30.0, help="seconds per quiet or scraped window")
    ap.add_argument("--rounds", type=int, default=3, help="quiet + scraped window pairs")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes in a scraped window")
    ap.add_argument("--sample-ms", type=int, default=5000, help="the endpoint's metrics.lag.sample.ms")
    ap.add_argument("--quick", action="store_true", help="300 + 20 x 10 members, 1 round of 15 s windows")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (broker and simulator logs)")
    args = ap.parse_args()
    if args.quick:
        args.big, args.big_partitions, args.small_groups, args.window, args.rounds = 300, 300, 20, 15.0, 1
        args.session_ms = 9000  # a ping every 3 s: several per member in a window
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    members = args.big + args.small_groups * args.small_size
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the broker inherits it: one socket per member
    need = 2 * members + args.big_partitions * 4 + 1024
    if soft < min(hard, need):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))

    tmp = tempfile.mkdtemp(prefix="spark-coord-bench-metrics-")
    overrides = {"coordinator.min.session.timeout.ms": 1000, "metrics.lag.sample.ms": args.sample_ms}
    failed = None
    rounds: list[tuple[dict, dict]] = []
    status_times: list[float] = []
    status_bytes = 0
    with LocalCluster(1, tmp, overrides=overrides, metrics_port=0) as cluster:
        with ClusterClient(cluster.bootstrap) as c:
            AdminClient(c).create_topic(BIG_TOPIC, args.big_partitions)
            if args.small_groups:
                AdminClient(c).create_topic(SMALL_TOPIC, args.small_partitions)
        sim = Simulator(Path(tmp) / "simulator.log")
        bench = MetricsBench(args, cluster, sim)
        deadline = time.monotonic() + 30
        while admin_request(bench.host, bench.port, api.CLUSTER_METADATA, {})["coordinator_id"] < 0:
            if time.monotonic() > deadline:
                raise BenchError("no coordinator elected within 30 s")
            time.sleep(0.1)
        try:
            t = time.monotonic()
            bench.add(BIG_GROUP, BIG_TOPIC, args.big_partitions, [f"m{i:05d}" for i in range(args.big)])
            for g in range(args.small_groups):
                bench.add(f"bench-s{g:04d}", SMALL_TOPIC, args.small_partitions,
                          [f"s{g:04d}-{i:02d}" for i in range(args.small_size)])
            settle = bench.wait_settled(args.settle_timeout) + (time.monotonic() - t)
            log.info("%d members in %d groups registered and stable after %.0f s", members, len(bench.sizes), settle)
            for r in range(args.rounds):
                quiet = bench.window(None)
                scraped = bench.window(args.scrape_every)
                rounds.append((quiet, scraped))
                log.info("round %d: quiet CPU %.1f%%, scraped CPU %.1f%% with %d scrapes (p50 %.3f s)", r + 1,
                         100 * quiet["cpu"] / quiet["wall"], 100 * scraped["cpu"] / scraped["wall"],
                         scraped["scrapes"], statistics.median(bench.scrapes))
            for _ in range(5):
                seconds, status, body = timed_get(bench.metrics_port, "/status.json", {})
                status_times.append(seconds)
                status_bytes = len(body)
        except BenchError as e:
            failed = str(e)
            log.error("benchmark stopped: %s", failed)
        finally:
            rss = rss_mb(bench.broker_pid)
            bench.close()
            sim.close()
    if rounds:
        print(report(args, members, len(bench.sizes), bench, rounds, status_times, status_bytes, rss))
    if failed or args.keep:
        log.info("broker, ZooKeeper and simulator logs kept in %s", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


def report(args, members: int, groups: int, bench: MetricsBench, rounds, status_times, status_bytes, rss) -> str:
    per_scrape = [(s["cpu"] / s["wall"] - q["cpu"] / q["wall"]) * s["wall"] / max(1, s["scrapes"]) for q, s in rounds]
    cpu_scrape = statistics.median(per_scrape)
    cost = cpu_scrape / PROMETHEUS_INTERVAL_S

    def member_figure(kind: str, key: str) -> tuple[float, float]:
        quiet = statistics.median(q["stats"][kind][key] or 0 for q, _ in rounds)
        scraped = statistics.median(s["stats"][kind][key] or 0 for _, s in rounds)
        return quiet, scraped

    lines = [f"\nmetrics endpoint benchmark: one broker coordinating {members:,} members in {groups:,} groups "
             f"(sessions {args.session_ms} ms), {args.rounds} rounds of {args.window:.0f} s quiet + "
             f"{args.window:.0f} s scraped every {args.scrape_every:g} s\n",
             f"{'scrapes timed':46}{len(bench.scrapes):>12,}",
             f"{'series in a scrape':46}{bench.series:>12,}",
             f"{'answer size, gzip (text) (KB)':46}{bench.body_bytes / 1024:>12,.0f} ({bench.text_bytes / 1024:,.0f})",
             f"{'scrape latency p50 / p99 / max (s)':46}{pct(bench.scrapes, 0.5):>12.3f} / "
             f"{pct(bench.scrapes, 0.99):.3f} / {max(bench.scrapes):.3f}    limit {SCRAPE_LIMIT_S:g} s",
             f"{'scrapes over the limit':46}{sum(1 for s in bench.scrapes if s > SCRAPE_LIMIT_S):>12}",
             f"{'broker CPU per scrape, median of rounds (s)':46}{cpu_scrape:>12.3f}    "
             f"(rounds: {', '.join(f'{x:.3f}' for x in per_scrape)})",
             f"{'cost at a 15 s scrape interval (% of a core)':46}{100 * cost:>12.2f}    limit {100 * COST_LIMIT:g}%",
             f"{'broker CPU quiet / scraped (% of a core)':46}"
             f"{100 * statistics.median(q['cpu'] / q['wall'] for q, _ in rounds):>12.1f} / "
             f"{100 * statistics.median(s['cpu'] / s['wall'] for _, s in rounds):.1f}"]
    for label, kind in (("ping lateness p99 quiet / scraped (ms)", "lateness_ms"),
                        ("probe RTT p99 quiet / scraped (ms)", "probe_ms")):
        quiet, scraped = member_figure(kind, "p99")
        lines.append(f"{label:46}{quiet:>12.1f} / {scraped:.1f}  ({scraped / quiet if quiet else float('nan'):.2f}x)")
    quiet_pings = sum(q["stats"]["retried_pings"] for q, _ in rounds)
    scraped_pings = sum(s["stats"]["retried_pings"] for _, s in rounds)
    lines.append(f"{'pings re-sent after expiry quiet / scraped':46}{quiet_pings:>12} / {scraped_pings}")
    lines.append(f"{'/status.json latency median (s), size (KB)':46}{statistics.median(status_times):>12.3f}, "
                 f"{status_bytes / 1024:,.0f}")
    lines.append(f"{'broker RSS at the end (MB)':46}{rss:>12.0f}")
    lines.append(f"{'machine load average quiet / scraped':46}"
                 f"{statistics.median(q['load'] for q, _ in rounds):>12.1f} / "
                 f"{statistics.median(s['load'] for _, s in rounds):.1f}    ({os.cpu_count()} cores)")
    lines.append("\nquiet windows include the endpoint's own lag sampling for the status page "
                 f"(every {args.sample_ms} ms); a scrape's CPU is the scraped window's CPU above the quiet one's, "
                 "divided by its scrapes.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
