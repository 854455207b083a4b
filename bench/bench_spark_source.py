"""Throughput of the coordkafka Spark source against two ceilings of any Python data source (one
that decompresses nothing, one that inflates the same compressed batches), and against a
confluent-kafka consumer, on the same data, in one run.

For each record shape (``--shapes``, default all four):

* ``a``: 100-byte values, no keys, uncompressed (``--records``, default 5,000,000);
* ``b``: 16-byte keys, JSON-like values of 300-600 bytes that all differ, lz4
  (``--records-json``, default 1,000,000);
* ``c``: as ``b``, zstd;
* ``d``: as ``b`` with 3 headers per record, read with ``includeHeaders=true``;

it produces the records with kcat into a fresh topic of a local one-broker cluster,
then in one SparkSession, ``--runs`` times each and interleaved:

1. **coordkafka**: ``readStream.format("coordkafka")`` from earliest into the ``noop``
   sink with ``Trigger.AvailableNow``: rows per second of the whole query;
2. **ceiling**: a Python streaming data source with exactly coordkafka's schema and
   the same partitions (each with as many rows as the topic's partition holds: kcat's
   sticky partitioner fills them unevenly), value/key/header sizes and rows per Arrow batch, whose
   ``read()`` yields prebuilt Arrow batches (no fetch, no decode) into the same sink:
   how fast Spark takes Arrow batches from any Python data source;
3. **inflating ceiling**: the same source, which before yielding each prebuilt batch first
   decompresses the compressed payloads of the record batches that batch's rows came in (the
   frames of the topic's first fetch of partition 0, as fetched: the same codec, sizes and
   ratio) with the codec library and into the kind of reused buffer the product decodes from
   (``spark_coord.records.compression.decompress_one``): what any reader of compressed Kafka
   batches pays before it has a row (for the uncompressed shape a it inflates nothing and is
   the raw ceiling again);

With ``--batch`` each shape is also read as a batch (``spark.read`` into the ``noop``
sink) beside the same two ceilings read as a batch, interleaved.

And then the **baseline**: a confluent-kafka ``Consumer`` assigned the same
partitions, building pyarrow tables (key, value, partition, offset, timestamp and,
for ``d``, headers) until every record is in.

Prints per shape the first (cold) query and the median of the later (warm) ones,
the ratios coordkafka / ceiling and coordkafka / inflating ceiling (the headline), the
ratio to the baseline, CPU seconds of the JVM and of Spark's Python workers, and the peak
resident memory (VmHWM) of the Python workers (one task at a time each) during the first
coordkafka query of the shape (Linux; later shapes' workers also hold the ceiling's
batches of earlier shapes).  Run it with the project's environment:

    ./spark-submit.sh bench/bench_spark_source.py
    ./spark-submit.sh bench/bench_spark_source.py --shapes a --records 2000000 --runs 5
    ./spark-submit.sh bench/bench_spark_source.py --shapes a --option max.partition.fetch.bytes=67108864
    ./spark-submit.sh bench/bench_spark_source.py --shapes a --records 2000000 --batch --runs 5
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
import time
import uuid
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "jobs"))

log = logging.getLogger("bench.spark_source")

BASE_TS = 1_700_000_000_000
HEADERS = [("trace-id", b"4bf92f3577b34da6"), ("source", b"bench"), ("schema", b"clicks-v1")]
_WORDS = [b"click", b"view", b"scroll", b"search", b"cart", b"checkout", b"home", b"sports", b"news", b"video",
          b"profile", b"settings", b"mobile", b"desktop", b"tablet", b"chrome", b"firefox", b"safari", b"berlin",
          b"paris", b"tokyo", b"lima", b"oslo", b"cairo", b"delhi", b"quito", b"red", b"green", b"blue", b"amber",
          b"coral", b"olive", b"teal", b"ivory", b"login", b"logout", b"share", b"like", b"follow", b"comment",
          b"upload", b"download", b"play", b"pause", b"stop", b"seek", b"buffer", b"error", b"retry", b"ok"]


@dataclass(frozen=True)
class Shape:
    name: str
    title: str
    key_size: int          # 0: no keys (null)
    json: bool             # values of 300-600 bytes that differ, else ``value_size`` bytes
    codec: str             # kcat / librdkafka compression.codec
    headers: bool          # 3 headers per record, read with includeHeaders=true


SHAPES = {
    "a": Shape("a", "100-byte values, no keys, uncompressed", 0, False, "none", False),
    "b": Shape("b", "16-byte keys, 300-600 byte JSON values, lz4", 16, True, "lz4", False),
    "c": Shape("c", "16-byte keys, 300-600 byte JSON values, zstd", 16, True, "zstd", False),
    "d": Shape("d", "as b with 3 headers per record, includeHeaders=true", 16, True, "lz4", True),
}


def json_value(i: int) -> bytes:
    """A JSON-like value of 300-600 bytes, different for every ``i``; lz4 makes about a third of it,
    as with real event streams."""
    n = 300 + (i * 7919) % 301
    x = (i * 2654435761 + 12345) & 0xFFFFFFFF
    head = (b'{"id":%d,"user":"u%07d","ts":%d,"event":"%s","session":"%08x%08x","path":"/p/%d/%d","note":"'
            % (i, (i * 31) % 1000003, BASE_TS + i, _WORDS[i % len(_WORDS)], x, (x * 69069 + 1) & 0xFFFFFFFF,
               i % 97, x % 100003))
    words = []
    size = len(head) + 2
    while size < n:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        r = x >> 12
        w = _WORDS[r % len(_WORDS)] + (b"%d" % (r % 10000) if r & 0x30 == 0x30 else b"")
        words.append(w)
        size += len(w) + 1
    return (head + b" ".join(words))[:n - 2] + b'"}'


def key_of(i: int) -> bytes:
    return b"user-%011d" % (i % 1_000_000_007)


def produce(bootstrap: str, topic: str, shape: Shape, records: int, value_size: int) -> float:
    """Fill ``topic`` (kcat; our Producer for lz4, see below); returns seconds taken."""
    t0 = time.perf_counter()
    if shape.codec == "lz4":
        # librdkafka 2.0 (kcat) compresses with lz4 only when the broker lists FindCoordinator
        _produce_ours(bootstrap, topic, shape, records, value_size)
        return time.perf_counter() - t0
    kcat = shutil.which("kcat")
    if not kcat:
        raise SystemExit("kcat is needed to produce the benchmark data (apt-get install kcat)")
    cmd = [kcat, "-P", "-b", bootstrap, "-t", topic, "-z", shape.codec, "-X", "linger.ms=50",
           "-X", "batch.size=1000000", "-X", "queue.buffering.max.kbytes=1048576"]
    if shape.key_size:
        cmd += ["-K", "\t"]
    if shape.headers:
        for k, v in HEADERS:
            cmd += ["-H", f"{k}={v.decode()}"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    if not shape.key_size and not shape.json:
        line = b"x" * value_size + b"\n"
        for _ in range(records // 10000):
            proc.stdin.write(line * 10000)
        proc.stdin.write(line * (records % 10000))
    else:
        for start in range(0, records, 10000):
            lines = []
            for i in range(start, min(records, start + 10000)):
                value = json_value(i) if shape.json else b"x" * value_size
                lines.append(key_of(i)[:shape.key_size] + b"\t" + value if shape.key_size else value)
            proc.stdin.write(b"\n".join(lines) + b"\n")
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("kcat failed")
    return time.perf_counter() - t0


def _produce_ours(bootstrap: str, topic: str, shape: Shape, records: int, value_size: int) -> None:
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer

    with ClusterClient(bootstrap) as cc:
        producer = Producer(cc, acks=1, compression=shape.codec, batch_size=1_000_000)
        headers = HEADERS if shape.headers else ()
        for i in range(records):
            producer.send(topic, json_value(i) if shape.json else b"x" * value_size,
                          key=key_of(i)[:shape.key_size] if shape.key_size else None, headers=headers)
        producer.flush()


# ------------------------------------------------------------------------ the ceiling
def ceiling_source(ddl: str, layout: dict, name: str = "ceiling", frames_path: str | None = None):
    """A Python streaming DataSource named ``name`` whose ``read()`` yields prebuilt Arrow batches.

    ``layout``: partitions, rows per partition, rows per batch, key size, value sizes
    (a list cycled over the rows), headers (or None) and the topic name; the batches are
    built once per Python worker and yielded again for every batch of every task.  With
    ``frames_path`` (a file written by ``write_frames``: the compressed payloads of the record
    batches one prebuilt batch's rows came in) every batch is preceded by inflating those
    frames (a slice, by the share of its rows) with the product's codec library into a reused
    buffer: the inflating ceiling.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

    class CeilingPartition(InputPartition):
        def __init__(self, index: int, rows: int) -> None:
            self.index, self.rows = index, rows

    class CeilingReader(DataSourceStreamReader):
        def initialOffset(self):
            return {str(i): 0 for i in range(layout["partitions"])}

        def latestOffset(self):
            return {str(i): n for i, n in enumerate(layout["rows"])}

        def partitions(self, start, end):
            return [CeilingPartition(i, end[str(i)] - start[str(i)]) for i in range(layout["partitions"])]

        def commit(self, end):
            pass

        def read(self, partition):
            batch = prebuilt(ddl, layout, partition.index)
            inflate = inflater(frames_path, batch.num_rows) if frames_path else None
            left = partition.rows
            while left > 0:
                n = min(left, batch.num_rows)
                if inflate is not None:
                    inflate(n)
                yield batch if n == batch.num_rows else batch.slice(0, n)
                left -= n

    class CeilingBatchReader(DataSourceReader):
        def partitions(self):
            return [CeilingPartition(i, n) for i, n in enumerate(layout["rows"])]

        def read(self, partition):
            return CeilingReader.read(None, partition)

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return name

        def schema(self):
            return ddl

        def streamReader(self, schema):
            return CeilingReader()

        def reader(self, schema):
            return CeilingBatchReader()

    return Ceiling


def write_frames(records, path: str) -> int:
    """The compressed payloads (codec, bytes) of every record batch of ``records`` (a fetched record
    set), pickled into ``path`` for the inflating ceiling; how many of them are compressed."""
    import pickle

    from spark_coord.records.header import HEADER_SIZE
    from spark_coord.records.reader import iter_batches

    frames = [(h.codec, bytes(b[HEADER_SIZE:])) for h, b in iter_batches(records)]
    with open(path, "wb") as f:
        pickle.dump(frames, f)
    return sum(1 for codec, _ in frames if codec)


def inflater(path: str, batch_rows: int):
    """``inflate(rows)``: decompresses the share ``rows / batch_rows`` of the frames in ``path`` as the
    product decompresses a fetch's batches (``compression.decompress_one``: one call of the codec into a
    reused buffer); the frames are loaded once per Python worker."""
    import pickle
    import types

    from spark_coord.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, Scratch, decompress_one

    cache = sys.modules.setdefault("_bench_ceiling_cache", types.ModuleType("_bench_ceiling_cache"))
    frames = cache.__dict__.get("frames " + path)
    if frames is None:
        with open(path, "rb") as f:
            frames = [(codec, data) for codec, data in pickle.load(f) if codec]
        cache.__dict__["frames " + path] = frames
    scratch = Scratch()

    def inflate(rows: int) -> None:
        for codec, data in frames[:len(frames) if rows >= batch_rows else -(-len(frames) * rows // batch_rows)]:
            decompress_one(codec, data, DEFAULT_MAX_DECOMPRESSED_BYTES, scratch)
    return inflate


def prebuilt(ddl: str, layout: dict, partition: int):
    """The Arrow batch of the ceiling source for ``partition``, built once per Python worker."""
    import types

    cache = sys.modules.setdefault("_bench_ceiling_cache", types.ModuleType("_bench_ceiling_cache"))
    key = (ddl, repr(sorted(layout.items(), key=lambda kv: kv[0])), partition)
    batch = cache.__dict__.get(repr(key))
    if batch is None:
        import pyarrow as pa

        from spark_coord.records.arrow import kafka_schema

        n = layout["batch_rows"]
        sizes = layout["value_sizes"]
        values = pa.array([b"v" * sizes[i % len(sizes)] for i in range(n)], pa.binary())
        keys = (pa.array([b"k" * layout["key_size"]] * n, pa.binary()) if layout["key_size"]
                else pa.nulls(n, pa.binary()))
        cols = [keys, values, pa.array([layout["topic"]] * n, pa.string()), pa.array([partition] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([(BASE_TS + i) * 1000 for i in range(n)], pa.int64()).view(pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32())]
        include_headers = layout["headers"] is not None
        if include_headers:
            one = [{"key": k, "value": v} for k, v in layout["headers"]]
            cols.append(pa.array([one] * n, kafka_schema(True).field("headers").type))
        batch = pa.RecordBatch.from_arrays(cols, schema=kafka_schema(include_headers))
        cache.__dict__[repr(key)] = batch
    return batch


def batch_rows_of(bootstrap: str, topic: str, include_headers: bool, fetch_bytes: int,
                  frames_path: str | None = None) -> tuple[int, list[int]]:
    """Rows in the first fetch of partition 0 with the source's fetch size (the rows per batch the
    source yields), and the value sizes of those rows; with ``frames_path``, that fetch's compressed
    payloads written there (``write_frames``)."""
    from spark_coord.client.connection import BrokerConnection
    from spark_coord.client.fetcher import fetch
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.records.arrow import decode_to_arrow

    with ClusterClient(bootstrap) as cc:
        cc.topic(topic, refresh=True, wait=10)
        host, port = cc.brokers[cc.leader(topic, 0)]
    with BrokerConnection(host, port) as conn:
        data = fetch(conn, {(topic, 0): 0}, partition_max_bytes=fetch_bytes, max_bytes=max(fetch_bytes, 52428800))[0]
    rb = decode_to_arrow(data.records, topic, 0, include_headers=include_headers)
    if frames_path is not None:
        write_frames(data.records, frames_path)
    sizes = [len(v) for v in rb.column("value").to_pylist()[:5000]]
    return rb.num_rows, sizes


def rows_per_partition(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Records in each partition of ``topic``: the ceiling's partitions hold as many rows."""
    from spark_coord.client.admin import LATEST, AdminClient
    from spark_coord.client.metadata import ClusterClient

    with ClusterClient(bootstrap) as cc:
        ends = AdminClient(cc).list_offsets(topic, list(range(partitions)), LATEST)
    return [ends[p] for p in range(partitions)]


# ------------------------------------------------------------------------- measuring
def timed_query(spark, df, label: str, records: int) -> tuple[float, dict[str, float]]:
    ckpt = tempfile.mkdtemp(prefix="bench-ckpt-")
    try:
        cpu0 = tree_cpu()
        t0 = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        cpu1 = tree_cpu()
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if rows != records:
            raise RuntimeError(f"{label} read {rows} rows, expected {records}")
        cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
        log.info("%s: %d rows in %.2f s; CPU s %s", label, rows, elapsed, {k: round(v, 1) for k, v in cpu.items()})
        log.info("%s: %s", label, progress_split(query.recentProgress, elapsed))
        return rows / elapsed, cpu
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def progress_split(progress, elapsed: float) -> str:
    """Where a query's wall time went: its micro-batches (Spark's ``durationMs`` summed over
    them) and the time outside every batch (the query's start and stop)."""
    keys = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")
    ms = {k: sum(p["durationMs"].get(k, 0) for p in progress) for k in keys}
    outside = elapsed * 1000 - ms["triggerExecution"]
    return (f"{len(progress)} batches, ms " + ", ".join(f"{k} {v}" for k, v in ms.items())
            + f", outside the batches {outside:.0f}")


def timed_batch(spark, df, label: str, records: int) -> tuple[float, dict[str, float]]:
    """A batch read of ``df`` into the noop sink: rows per second and CPU seconds by process kind."""
    cpu0 = tree_cpu()
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - t0
    cpu1 = tree_cpu()
    cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
    log.info("%s: %d rows in %.2f s; CPU s %s", label, records, elapsed, {k: round(v, 1) for k, v in cpu.items()})
    return records / elapsed, cpu


def tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system) so far of the processes under this one's parent, by kind: the
    JVM that spark-submit started (this driver's parent), Spark's Python workers, the rest; and
    "reaped": the processes of the tree that have ended and been waited for (their CPU time moves
    to their parent's children times), chiefly the driver-side reader process Spark starts for
    each streaming query on a Python data source.  Empty where there is no /proc."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid, (fields, cmd) in _processes().items():
        kind = _kind(pid, cmd)
        if kind is not None:
            out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        out["reaped"] = out.get("reaped", 0.0) + (int(fields[13]) + int(fields[14])) / tick
    return out


def worker_peak_rss_mb(reset: bool = False) -> float:
    """The largest peak resident memory (VmHWM) of Spark's Python workers alive now, MiB; with
    ``reset``, their peaks are set back to their current resident memory first (Linux)."""
    peak = 0
    for pid, (_, cmd) in _processes().items():
        if _kind(pid, cmd) != "python workers":
            continue
        try:
            if reset:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            continue
    return peak / 1024


def _kind(pid: int, cmd: str) -> str | None:
    """What a process is; "exited": a child that ended but is not yet reaped (no command line
    left), in these benchmarks the driver-side reader process Spark starts for each streaming
    query on a Python data source, whose whole CPU time then shows here."""
    return ("jvm" if "java" in cmd.split(" ", 1)[0] else "python workers" if "pyspark" in cmd
            else "driver" if pid == os.getpid() else "cluster" if "spark_coord" in cmd
            else "exited" if not cmd.strip() else "other")


def _processes() -> dict[int, tuple[list[str], str]]:
    """/proc stat fields and command line of every process under this one's parent."""
    if not os.path.isdir("/proc"):
        return {}
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[list[str], str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        stats[int(name)] = (fields, cmd)
        children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = {}, [os.getppid()]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if pid in stats:
            out[pid] = stats[pid]
    return out


def confluent_rate(bootstrap: str, topic: str, records: int, partitions: int, headers: bool) -> float:
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 8388608, "queued.max.messages.kbytes": 262144})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    cols = {p: ([], [], [], [], []) for p in range(partitions)}
    tables = []
    seen = 0
    t0 = time.perf_counter()
    try:
        while seen < records:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error():
                    continue
                keys, values, offsets, stamps, hdrs = cols[msg.partition()]
                keys.append(msg.key())
                values.append(msg.value())
                offsets.append(msg.offset())
                stamps.append(msg.timestamp()[1])
                if headers:
                    hdrs.append([{"key": k, "value": v} for k, v in (msg.headers() or ())])
                seen += 1
                if len(values) >= 65536:
                    tables.append(_table(pa, msg.partition(), cols[msg.partition()], headers))
                    cols[msg.partition()] = ([], [], [], [], [])
        for p, c in cols.items():
            if c[1]:
                tables.append(_table(pa, p, c, headers))
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
    assert sum(t.num_rows for t in tables) == records
    return records / elapsed


def _table(pa, partition: int, cols, headers: bool):
    keys, values, offsets, stamps, hdrs = cols
    data = {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
            "partition": pa.repeat(pa.scalar(partition, pa.int32()), len(values)),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(stamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))}
    if headers:
        data["headers"] = pa.array(hdrs, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    return pa.table(data)


# ------------------------------------------------------------------------------ main
def run_shape(spark, bootstrap: str, shape: Shape, records: int, args, options: dict[str, str]) -> dict:
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient

    topic = f"bench-{shape.name}-{uuid.uuid4().hex[:6]}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic(topic, args.partitions)
    secs = produce(bootstrap, topic, shape, records, args.size)
    log.info("shape %s: produced %d records in %.1f s", shape.name, records, secs)
    fetch_bytes = int(options.get("max.partition.fetch.bytes", 8 * 1048576))
    frames_path = os.path.join(tempfile.gettempdir(), f"bench-frames-{topic}.pickle")
    batch_rows, sizes = batch_rows_of(bootstrap, topic, shape.headers, fetch_bytes, frames_path)
    try:
        return _run_readers(spark, bootstrap, shape, records, args, options, topic, batch_rows, sizes, frames_path)
    finally:
        os.unlink(frames_path)


def _run_readers(spark, bootstrap, shape, records, args, options, topic, batch_rows, sizes, frames_path) -> list:
    from spark_coord.spark.schema import source_ddl

    per_partition = rows_per_partition(bootstrap, topic, args.partitions)  # as produced: kcat's sticky
    layout = {"partitions": args.partitions, "rows": per_partition, "batch_rows": batch_rows,  # partitioner is uneven
              "key_size": shape.key_size, "value_sizes": sizes, "topic": topic,
              "headers": HEADERS if shape.headers else None}
    ddl = source_ddl(shape.headers)
    spark.dataSource.register(ceiling_source(ddl, layout))
    spark.dataSource.register(ceiling_source(ddl, layout, "inflating", frames_path))
    reader = (spark.readStream.format("coordkafka").option("bootstrap.brokers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("includeHeaders", str(shape.headers).lower()))
    for key, value in options.items():
        reader = reader.option(key, value)
    coord, ceiling, inflating, cpu = [], [], [], []
    peak = 0.0
    for run in range(args.runs):
        if run == 0:
            worker_peak_rss_mb(reset=True)
        rate, c = timed_query(spark, reader.load(), f"shape {shape.name} coordkafka run {run + 1}", records)
        if run == 0:  # before the ceiling's batches sit in the same workers
            peak = worker_peak_rss_mb()
        coord.append(rate)
        cpu.append(c)
        rate, ceiling_cpu = timed_query(spark, spark.readStream.format("ceiling").load(),
                                        f"shape {shape.name} ceiling run {run + 1}", sum(per_partition))
        ceiling.append(rate)
        rate, inflating_cpu = timed_query(spark, spark.readStream.format("inflating").load(),
                                          f"shape {shape.name} inflating ceiling run {run + 1}", sum(per_partition))
        inflating.append(rate)
    confluent = confluent_rate(bootstrap, topic, records, args.partitions, shape.headers)
    out = [_row(shape, shape.name, records, batch_rows, coord, ceiling, inflating, cpu[-1], ceiling_cpu,
                inflating_cpu, confluent, peak)]
    if args.batch:
        batch_reader = (spark.read.format("coordkafka").option("bootstrap.brokers", bootstrap)
                        .option("subscribe", topic).option("includeHeaders", str(shape.headers).lower()))
        for key, value in options.items():
            batch_reader = batch_reader.option(key, value)
        coord, ceiling, inflating, cpu = [], [], [], []
        for run in range(args.runs):
            rate, c = timed_batch(spark, batch_reader.load(), f"shape {shape.name} batch coordkafka run {run + 1}",
                                  records)
            coord.append(rate)
            cpu.append(c)
            rate, ceiling_cpu = timed_batch(spark, spark.read.format("ceiling").load(),
                                            f"shape {shape.name} batch ceiling run {run + 1}", records)
            ceiling.append(rate)
            rate, inflating_cpu = timed_batch(spark, spark.read.format("inflating").load(),
                                              f"shape {shape.name} batch inflating ceiling run {run + 1}", records)
            inflating.append(rate)
        out.append(_row(shape, f"{shape.name} batch", records, batch_rows, coord, ceiling, inflating, cpu[-1],
                        ceiling_cpu, inflating_cpu, confluent, peak))
    return out


def _row(shape, name, records, batch_rows, coord, ceiling, inflating, cpu, ceiling_cpu, inflating_cpu, confluent,
         peak) -> dict:
    """One line of the table: the first (cold) query, medians of the warm ones and of the paired ratios."""
    warm, warm_ceiling, warm_inflating = coord[1:] or coord, ceiling[1:] or ceiling, inflating[1:] or inflating
    return {"shape": shape, "name": name, "records": records, "batch_rows": batch_rows, "cold": coord[0],
            "warm": statistics.median(warm), "ceiling": statistics.median(warm_ceiling),
            "inflating": statistics.median(warm_inflating),
            "paired": statistics.median(c / x for c, x in zip(warm, warm_ceiling, strict=True)),
            "paired_inflating": statistics.median(c / x for c, x in zip(warm, warm_inflating, strict=True)),
            "cold_ceiling": ceiling[0], "confluent": confluent, "cpu": cpu, "ceiling_cpu": ceiling_cpu,
            "inflating_cpu": inflating_cpu, "peak_rss_mb": peak, "warm_runs": warm, "ceiling_runs": warm_ceiling,
            "inflating_runs": warm_inflating}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="abcd", help="which record shapes to run (letters of a, b, c, d)")
    p.add_argument("--records", type=int, default=5_000_000, help="records of shape a")
    p.add_argument("--records-json", type=int, default=1_000_000, help="records of shapes b, c and d")
    p.add_argument("--size", type=int, default=100, help="value bytes per record of shape a")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--bootstrap", help="a running cluster (default: start a local one)")
    p.add_argument("--runs", type=int, default=3, help="queries per reader and shape (the first one is cold)")
    p.add_argument("--batch", action="store_true",
                   help="also batch reads (spark.read into the noop sink) against a batch ceiling, per shape")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra coordkafka source option, e.g. minPartitions=8 (repeatable)")
    args = p.parse_args(argv)
    options = dict(o.split("=", 1) for o in args.option if "=" in o)
    if len(options) != len(args.option):
        p.error("--option takes KEY=VALUE")
    if set(args.shapes) - set(SHAPES):
        p.error(f"--shapes takes letters of {''.join(SHAPES)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from clicks import cluster_or
    from pyspark.sql import SparkSession

    results = []
    with cluster_or(args.bootstrap, partitions=args.partitions) as bootstrap:
        spark = SparkSession.builder.appName("bench-coordkafka").getOrCreate()
        try:
            for letter in args.shapes:
                shape = SHAPES[letter]
                records = args.records if letter == "a" else args.records_json
                results.extend(run_shape(spark, bootstrap, shape, records, args, options))
        finally:
            spark.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{args.partitions} partitions, local Spark, {args.runs} queries per reader (warm = median of all "
          f"but the first; /ceiling and /inflating = medians of the ratios of the interleaved warm runs); source "
          f"options {options}; load average {load:.2f} at the end")
    print(f"{'shape':<9}{'records':>10}{'rows/batch':>11}{'coordkafka cold':>17}{'warm':>11}{'ceiling':>11}"
          f"{'/ceiling':>10}{'inflating':>11}{'/inflating':>11}{'confluent':>11}{'/confluent':>11}"
          f"{'worker RSS':>12}")
    for r in results:
        print(f"{r['name']:<9}{r['records']:>10,}{r['batch_rows']:>11,}{r['cold']:>17,.0f}{r['warm']:>11,.0f}"
              f"{r['ceiling']:>11,.0f}{r['paired']:>10.2f}{r['inflating']:>11,.0f}{r['paired_inflating']:>11.2f}"
              f"{r['confluent']:>11,.0f}{r['warm'] / r['confluent']:>11.2f}{r['peak_rss_mb']:>9.0f} MB")
    for r in results:
        print(f"  {r['name']}: {r['shape'].title}; warm coordkafka runs "
              f"{[round(x) for x in r['warm_runs']]}, ceiling runs {[round(x) for x in r['ceiling_runs']]}, "
              f"inflating ceiling runs {[round(x) for x in r['inflating_runs']]}; "
              f"CPU s of the last coordkafka query {({k: round(v, 1) for k, v in r['cpu'].items()})}, "
              f"of the last ceiling query {({k: round(v, 1) for k, v in r['ceiling_cpu'].items()})}, "
              f"of the last inflating one {({k: round(v, 1) for k, v in r['inflating_cpu'].items()})}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import figures  # bench/figures.py: the figures as JSON for the docs' plots

    figures.write("spark_source", {"rows": [
        {"shape": r["name"], "records": r["records"], "first": r["cold"], "warm": r["warm"], "ceiling": r["ceiling"],
         "ratio": r["paired"], "inflating": r["inflating"], "ratio_inflating": r["paired_inflating"],
         "confluent": r["confluent"] or None,
         "vs_confluent": r["warm"] / r["confluent"] if r["confluent"] else None,
         "worker_peak_rss_mb": r["peak_rss_mb"]} for r in results]},
        label=f"shapes {args.shapes}, {args.runs} queries per reader")
    return 0


if __name__ == "__main__":
    sys.exit(main())
