"""Spark's Python daemon with coordkafka's read path loaded before it forks the workers.

Spark runs one daemon per executor (``python -m pyspark.daemon``) and forks a worker from it
for each task slot.  A fresh worker imports pyspark's worker, pyarrow, the source's client and
decoder, and loads the compiled decoder on its first task: half a second or more, which every
streaming query pays on its first micro-batch (stopping a query ends the workers that run its
tasks) and a batch read on its first tasks.  With

    spark.python.daemon.module  pyspark_coordkafka.daemon

(``conf/spark-defaults.conf`` sets it) the daemon loads all of that once, and every worker it
forks starts with it.  The workers are pyspark's own; only what is already imported differs.

pyspark's daemon imports nothing before it forks because a library that started a thread on
import would leave the forked workers with locks that no thread of theirs will release.  Two do
by default: numpy's OpenBLAS starts its thread pool (one thread per task is what Spark runs:
``OPENBLAS_NUM_THREADS`` is set to Spark's ``OMP_NUM_THREADS``, or 1, unless it is set) and
pyarrow's bundled jemalloc its background purging thread (off here; pyarrow allocates with
mimalloc).  After loading, this daemon checks that the process still has one thread
(``/proc/self/task``); if something started another, it logs which and becomes pyspark's own
daemon (``exec``: the same process and standard streams, nothing preloaded).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys

log = logging.getLogger("pyspark_coordkafka.daemon")

#: Records in the set decoded at load: enough for the compiled decoder (``records.arrow.SMALL_SET_RECORDS``).
_WARM_RECORDS = 1024


def preload() -> None:
    """Import what a worker's read imports and load the compiled decoder (its machine code comes from
    numba's cache on disk), by decoding a small record set of each kind the read path decodes."""
    import pyspark.sql.datasource  # noqa: F401
    import pyspark.worker  # noqa: F401

    from spark_coord.client import pool  # noqa: F401
    from spark_coord.client.fetcher import send_fetch  # noqa: F401
    from spark_coord.records import compression
    from spark_coord.records.arrow import decode_to_arrow
    from spark_coord.records.builder import BatchBuilder
    from spark_coord.spark import partition  # noqa: F401

    for codec in (compression.NONE, compression.LZ4):
        batch = BatchBuilder(codec=codec)
        for i in range(_WARM_RECORDS):
            batch.append(b"v", key=b"k", timestamp_ms=i, headers=[("h", b"v")])
        data = batch.build()
        for headers in (False, True):
            decode_to_arrow(data, "warm-up", 0, include_headers=headers)


def threads() -> list[str]:
    """The names of this process's threads, as the kernel lists them."""
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f"{tid} {f.read().strip()}")
        except OSError:
            pass
    return names


def main() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # Spark reads the daemon's port from its standard output
            preload()
    except Exception:  # noqa: BLE001 - a worker that loads on its first task is still a worker
        log.exception("preloading coordkafka's read path failed; workers load it on their first task")
    running = threads() if os.path.isdir("/proc/self/task") else []
    if len(running) > 1:
        log.error("preloading started threads %s: running pyspark's own daemon, which forks before it loads "
                  "anything", running)
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    gc.collect()
    gc.freeze()  # what was loaded lives as long as the workers: out of their collector's sight

    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
