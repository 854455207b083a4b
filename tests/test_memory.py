"""Freed memory kept for reuse (``spark_coord.memory``): a process allocating buffers of a MiB
over and over, as a broker does for every large Produce request, touches fresh pages only
until its heaps hold enough, where glibc's default thresholds gave it fresh pages again and
again (each mapped and zeroed by the kernel on first touch).  Linux with glibc, as the whole
suite (brokers' /proc, Spark's pip wheels)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from helpers import local_cluster

# A StreamReader's pattern: a buffer grown by 256 KiB socket reads, a 1 MiB frame copied out of it,
# in a thread of its own as well as the main one.  Prints the minor page faults of each.
_ALLOCATE = textwrap.dedent("""
    import resource, sys, threading
    from spark_coord.memory import keep_freed_memory
    if sys.argv[1] == "kept":
        assert keep_freed_memory()
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    def work():
        for _ in range(100):
            buf = bytearray()
            for _ in range(5):
                buf += bytes(256 << 10)
            frame = bytes(buf[:(1 << 20) + 100])
            del buf, frame
    def measured(in_thread):
        before = faults()
        if in_thread:
            t = threading.Thread(target=work)
            t.start()
            t.join()
        else:
            work()
        return faults() - before
    print(measured(False), measured(True))
""")


def _faults(mode: str, env: dict | None = None) -> list[int]:
    out = subprocess.run([sys.executable, "-c", _ALLOCATE, mode], capture_output=True, text=True, timeout=120,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         env={**os.environ, **(env or {})})
    return [int(x) for x in out.stdout.split()]


def test_freed_buffers_are_reused_instead_of_fresh_pages():
    default, kept = _faults("default"), _faults("kept")
    # 100 rounds of about 2.5 MiB allocated: 64,000 pages if every one were fresh.
    assert min(default) > 20_000, f"glibc's defaults should give fresh pages here: {default}"
    for where, n in zip(("main thread", "other thread"), kept, strict=True):
        assert n < 2_000, f"{where}: {n} page faults with freed memory kept ({default} without)"


def test_thresholds_set_in_the_environment_are_left_alone():
    """An operator's ``MALLOC_*_THRESHOLD_`` (here: give everything back at once) wins."""
    chosen = _faults("kept", {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"})
    assert min(chosen) > 20_000, f"the environment's thresholds should hold: {chosen}"


def _broker_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # minflt


def test_broker_process_reuses_memory_across_large_produce_requests(zookeeper, tmp_path):
    """The broker as ``spark-coord broker`` runs it: 1 MiB Produce requests after the first few
    touch (almost) no fresh pages."""
    from spark_coord.client.admin import AdminClient
    from spark_coord.client.metadata import ClusterClient
    from spark_coord.client.producer import Producer
    from spark_coord.records.builder import BatchBuilder

    value = b"v" * 1000
    builder = BatchBuilder()
    for _ in range(1000):
        builder.append(value)
    batch = builder.build()  # about 1 MiB: one record batch per Produce request
    with local_cluster(zookeeper, tmp_path / "cluster", 1, "memory-reuse", {"num.partitions": 1}) as cluster:
        pid = cluster.procs[0].pid
        with ClusterClient(cluster.bootstrap) as cc:
            AdminClient(cc).create_topic("big-requests", 1)
            producer = Producer(cc, acks=1)
            for _ in range(16):  # warm up: the heaps grow to what a request needs
                producer.send_batches({("big-requests", 0): (batch, 1000)})
            before = _broker_faults(pid)
            for _ in range(64):
                producer.send_batches({("big-requests", 0): (batch, 1000)})
            faults = _broker_faults(pid) - before
    # 64 MiB received (16,384 pages): about 5,000 faults with glibc's defaults, a handful when kept.
    assert faults < 1_000, f"{faults} page faults in the broker for 64 requests of 1 MiB"
