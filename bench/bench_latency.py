"""Produce-to-``foreachBatch`` latency of the coordkafka Spark source against the floor of
Spark's Python streaming path, in one run.

A local one-broker cluster and a ``--partitions``-partition topic (default 2).  A producer
process (``spark_coord.client.producer``, acks=1) sends records at ``--rates`` records per
second (default 1,000 and 10,000), in small batches of the records due every
millisecond or so, each record's value its send time (``time.time()``, ASCII).  For each rate,
with the producer running all along, ``--runs`` times each and alternating:

1. **coordkafka**: ``readStream.format("coordkafka")`` from ``latest``, with
   ``trigger(processingTime="0 seconds")``, into ``foreachBatch``;
2. **floor**: the same query on a Python streaming data source with coordkafka's schema and
   partitions whose ``latestOffset`` reports the records generated at the same rate since the
   query was defined and whose ``read`` makes them (value: the time the record came into being,
   t0 + offset / rate): records in memory as soon as they exist, nothing fetched -- what
   Spark's Python streaming path itself costs.  Like coordkafka from ``latest``, it starts
   (``initialOffset``) at the records that exist when the query starts.

A short unmeasured query of each source comes first (Spark's JVM, its Python workers).  Each
query runs ``--warmup`` seconds (default 10) and then ``--seconds`` (default 20);
``foreachBatch`` collects the values of its batch and takes, for each record, the time after
the collect minus the time in its value: the latency of the records that arrive after the
warm-up gives p50, p99 and max per query.  Also the time from ``start()`` to the first record
in ``foreachBatch``.  Printed: medians over the runs, and the ratios coordkafka / floor
(medians of the ratios of the paired runs), and where a micro-batch's time goes (Spark's
``durationMs`` per phase, medians over the batches with records); the log has each query's
first three micro-batches.  Both queries run with the producer sending, on the same machine, so
they share its load.  The figures go to ``bench/results/latency.json`` (``bench/figures.py``).

    ./spark-submit.sh --master 'local[2]' bench/bench_latency.py
    ./spark-submit.sh --master 'local[2]' bench/bench_latency.py --rates 1000 --runs 3 --seconds 10
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "jobs"))

log = logging.getLogger("bench.latency")


# ------------------------------------------------------------------------ the producer
def produce_forever(bootstrap: str, topic: str, rate: int) -> None:
    """Send ``rate`` records a second until killed: every ~1 ms the records due by then, each with
    its send time as its value, then a flush (one Produce request per partition with records)."""
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc, acks=1, batch_size=1 << 20)
        t0 = time.time()
        sent = 0
        while True:
            due = int((time.time() - t0) * rate)
            while sent < due:
                producer.send(topic, b"%.6f" % time.time())
                sent += 1
            producer.flush()
            time.sleep(0.001)


def start_producer(bootstrap: str, topic: str, rate: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--produce", bootstrap, topic, str(rate)],
                            env=env)


# ------------------------------------------------------------------------ the floor
# Module-level classes, registered from ``bench.bench_latency`` (not ``__main__``): pickled by reference,
# so neither the planning calls nor the tasks ship their code.
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402


class FloorPartition(InputPartition):
    def __init__(self, index: int, partitions: int, start: int, end: int, t0: float, rate: int) -> None:
        self.index, self.partitions, self.start, self.end, self.t0, self.rate = index, partitions, start, end, t0, rate


class FloorReader(DataSourceStreamReader):
    """``rate`` records a second in ``partitions`` partitions (round robin) from ``t0`` on; offset ``i`` came
    into being at ``t0 + i / rate``; ``latestOffset`` reports every record that exists."""

    def __init__(self, t0: float, rate: int, partitions: int) -> None:
        self.t0, self.rate, self.n = t0, rate, partitions

    def _now(self) -> dict:
        return {"n": max(0, int((time.time() - self.t0) * self.rate))}

    def initialOffset(self):  # as coordkafka's startingOffsets=latest: the records that exist now
        return self._now()

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        return ReadAllAvailable()

    def latestOffset(self, start, limit):  # the signature coordkafka has: the same path through Spark
        return self._now()

    def partitions(self, start, end):
        return [FloorPartition(i, self.n, start["n"], end["n"], self.t0, self.rate) for i in range(self.n)]

    def commit(self, end):
        pass

    def read(self, p):
        import numpy as np
        import pyarrow as pa

        from spark_coord.records.arrow import kafka_schema

        # the records i of [start, end) with i % partitions == index: partition ``index``'s share
        first = p.start + (p.index - p.start) % p.partitions
        offsets = np.arange(first, p.end, p.partitions, dtype=np.int64)
        n = len(offsets)
        if not n:
            return
        made = p.t0 + offsets / p.rate
        values = pa.array(np.char.mod(b"%.6f", made).astype(np.bytes_), pa.binary())
        stamps = pa.array((made * 1e6).astype(np.int64), pa.int64())
        yield pa.RecordBatch.from_arrays(
            [pa.nulls(n, pa.binary()), values, pa.array(["floor"] * n, pa.string()),
             pa.array(np.full(n, p.index, np.int32)), pa.array(offsets),
             stamps.view(pa.timestamp("us", tz="UTC")), pa.array(np.zeros(n, np.int32))],
            schema=kafka_schema(False))


class Floor(DataSource):
    """Options ``rate``, ``t0`` (seconds since the epoch) and ``partitions``."""

    @classmethod
    def name(cls):
        return "floor"

    def schema(self):
        from spark_coord.spark.schema import source_ddl

        return source_ddl(False)

    def streamReader(self, schema):
        return FloorReader(float(self.options["t0"]), int(self.options["rate"]), int(self.options["partitions"]))


def floor_df(spark, rate: int, partitions: int):
    return (spark.readStream.format("floor").option("rate", rate).option("partitions", partitions)
            .option("t0", repr(time.time())).load())


# ------------------------------------------------------------------------- measuring
def measure(spark, df, label: str, warmup: float, seconds: float, required: bool = True) -> dict | None:
    """Run ``df`` into foreachBatch for ``warmup`` + ``seconds``: p50/p99/max latency (ms) of the records
    delivered after the warm-up, the seconds from ``start()`` to the first record, micro-batches."""
    lat: list[float] = []
    first: list[float] = []
    batches = [0]
    lock = threading.Lock()
    t_start = [0.0]

    stopping = threading.Event()

    def each(batch_df, batch_id):
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            sent = pc.cast(batch_df.select("value").toArrow().column(0).cast(pa.string()), pa.float64())
        except Exception:
            if stopping.is_set():  # the collect interrupted by query.stop()
                return
            raise
        now = time.time()
        values = sent.to_numpy() if len(sent) else ()
        with lock:
            batches[0] += 1
            if len(values) and not first:
                first.append(now - t_start[0])
            if now - t_start[0] >= warmup and len(values):
                lat.extend((now - values).tolist())

    ckpt = tempfile.mkdtemp(prefix="bench-lat-ckpt-")
    t_start[0] = time.time()
    query = (df.writeStream.foreachBatch(each).option("checkpointLocation", ckpt)
             .trigger(processingTime="0 seconds").start())
    try:
        deadline = t_start[0] + warmup + seconds
        while time.time() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"{label}: {query.exception()}")
            time.sleep(0.2)
        progress = [pr for pr in query.recentProgress if pr["numInputRows"]]
        log.info("%s: started %s, the first micro-batches: %s", label,
                 time.strftime("%H:%M:%S", time.gmtime(t_start[0])) + f".{int(t_start[0] % 1 * 1000):03d}",
                 [(pr["batchId"], pr["timestamp"], pr["numInputRows"],
                                                             pr["durationMs"]) for pr in query.recentProgress[:3]])
    finally:
        stopping.set()
        query.stop()
        shutil.rmtree(ckpt, ignore_errors=True)
    # where a micro-batch's time goes: Spark's own split of the batches with records (medians, ms)
    phases = {k: statistics.median(pr["durationMs"].get(k, 0) for pr in progress)
              for k in ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
                        "triggerExecution")} if progress else {}
    with lock:
        lat_ms = sorted(x * 1000 for x in lat)
    if not lat_ms:
        if not required:
            log.info("%s: no records after %.0f s", label, warmup)
            return None
        raise RuntimeError(f"{label}: no records after the warm-up")
    out = {"p50": pct(lat_ms, 50), "p99": pct(lat_ms, 99), "max": lat_ms[-1], "records": len(lat_ms),
           "first_s": first[0] if first else float("nan"), "batches": batches[0], "phases": phases}
    log.info("%s: p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d records; first record after %.2f s; %d batches; "
             "median ms per batch %s", label, out["p50"], out["p99"], out["max"], out["records"], out["first_s"],
             out["batches"], phases)
    return out


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q / 100))]


def coord_reader(bootstrap: str, topic: str, args):
    """coordkafka from latest, as a member of a fresh group."""
    reader = (spark_session().readStream.format("coordkafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "latest")
              .option("group.id", f"bench-lat-{uuid.uuid4().hex[:6]}"))
    for key, value in args.options.items():
        reader = reader.option(key, value)
    return reader


def spark_session():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def run_rate(spark, bootstrap: str, rate: int, args) -> dict:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    topic = f"bench-lat-{rate}-{uuid.uuid4().hex[:6]}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, args.partitions)
    producer = start_producer(bootstrap, topic, rate)
    coord, floor = [], []
    try:
        time.sleep(2)  # the producer connected and sending
        if not args.warm:  # one short query of each source first: Spark's JVM, its Python workers, numba
            measure(spark, coord_reader(bootstrap, topic, args).load(), f"{rate}/s coordkafka warm-up", 10, 3,
                    required=False)
            measure(spark, floor_df(spark, rate, args.partitions), f"{rate}/s floor warm-up", 5, 3, required=False)
            args.warm = True
        for run in range(args.runs):
            order = ["coordkafka", "floor"] if run % 2 == 0 else ["floor", "coordkafka"]
            for name in order:
                if name == "coordkafka":
                    coord.append(measure(spark, coord_reader(bootstrap, topic, args).load(),
                                         f"{rate}/s coordkafka run {run + 1}",
                                         args.warmup, args.seconds))
                else:
                    floor.append(measure(spark, floor_df(spark, rate, args.partitions), f"{rate}/s floor run {run + 1}",
                                         args.warmup, args.seconds))
    finally:
        producer.kill()
        producer.wait()
    row = {"rate": rate, "runs": args.runs}
    for key in ("p50", "p99", "max", "first_s"):
        row[key] = statistics.median(r[key] for r in coord)
        row[f"floor_{key}"] = statistics.median(r[key] for r in floor)
        row[f"ratio_{key}"] = statistics.median(c[key] / f[key] for c, f in zip(coord, floor, strict=True))
    row["batches"] = statistics.median(r["batches"] for r in coord)
    row["floor_batches"] = statistics.median(r["batches"] for r in floor)
    row["phases"] = {k: statistics.median(r["phases"].get(k, 0) for r in coord) for k in coord[0]["phases"]}
    row["floor_phases"] = {k: statistics.median(r["phases"].get(k, 0) for r in floor) for k in floor[0]["phases"]}
    row["coord_runs"], row["floor_runs"] = coord, floor
    return row


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--produce":
        produce_forever(argv[1], argv[2], int(argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="1000,10000", help="records per second, comma-separated")
    p.add_argument("--runs", type=int, default=3, help="queries per source and rate (alternating)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of each query before latencies count")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of each query after the warm-up")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--bootstrap", help="a running cluster (default: start a local one)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra coordkafka source option (repeatable)")
    args = p.parse_args(argv)
    args.warm = False
    args.options = dict(o.split("=", 1) for o in args.option if "=" in o)
    if len(args.options) != len(args.option):
        p.error("--option takes KEY=VALUE")
    rates = [int(r) for r in args.rates.split(",") if r]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from clicks import cluster_or
    from pyspark.sql import SparkSession

    results = []
    with cluster_or(args.bootstrap, partitions=args.partitions) as bootstrap:
        spark = SparkSession.builder.appName("bench-latency").getOrCreate()
        master = spark.sparkContext.master
        try:
            from bench.bench_latency import Floor  # by its module's name: pickled by reference

            spark.dataSource.register(Floor)
            for rate in rates:
                results.append(run_rate(spark, bootstrap, rate, args))
        finally:
            spark.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{master}, {args.partitions} partitions, trigger processingTime 0, {args.runs} queries per source and "
          f"rate (alternating), {args.warmup:.0f} s warm-up + {args.seconds:.0f} s measured; medians over the runs, "
          f"ratios: medians of the paired runs' ratios; source options {args.options}; load average {load:.2f} "
          f"at the end")
    print(f"{'rate/s':>8}{'':>2}{'p50 ms':>8}{'floor':>8}{'ratio':>7}{'p99 ms':>9}{'floor':>8}{'ratio':>7}"
          f"{'max ms':>9}{'floor':>8}{'ratio':>7}{'first s':>9}{'floor':>8}{'ratio':>7}")
    for r in results:
        print(f"{r['rate']:>8,}{'':>2}{r['p50']:>8.0f}{r['floor_p50']:>8.0f}{r['ratio_p50']:>7.2f}"
              f"{r['p99']:>9.0f}{r['floor_p99']:>8.0f}{r['ratio_p99']:>7.2f}"
              f"{r['max']:>9.0f}{r['floor_max']:>8.0f}{r['ratio_max']:>7.2f}"
              f"{r['first_s']:>9.2f}{r['floor_first_s']:>8.2f}{r['ratio_first_s']:>7.2f}")
    for r in results:
        print(f"  {r['rate']}/s: micro-batches per query {r['batches']:.0f} (floor {r['floor_batches']:.0f}); "
              f"coordkafka p50/p99 per run {[(round(x['p50']), round(x['p99'])) for x in r['coord_runs']]}, "
              f"floor {[(round(x['p50']), round(x['p99'])) for x in r['floor_runs']]}")
        print(f"    median ms per micro-batch with records: coordkafka {r['phases']}, floor {r['floor_phases']}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import figures  # bench/figures.py: the figures as JSON for the docs

    figures.write("latency", {"master": master, "rows": [
        {k: v for k, v in r.items() if k not in ("coord_runs", "floor_runs")} for r in results]},
        label=f"rates {args.rates}, {args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
