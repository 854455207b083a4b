"""Small record sets before the compiled kernel is loaded: decoded in Python, the same rows.

A fresh Spark Python worker whose first fetch holds a few records (the first micro-batch of a
streaming query, low rates) decodes them in Python rather than load numba and the kernel for
them (``records.arrow.SMALL_SET_RECORDS``); the first larger record set loads the kernel and
from then on every set takes the compiled path.  What must hold: the rows are the same whichever
path decodes them, for every codec, with and without headers and offset ranges; the kernel is
not loaded by a small set and is by a large one.  Each case runs in a fresh interpreter, where
the kernel is not loaded yet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from records_samples import CODECS, build, sample_records

from spark_coord.records import arrow, arrow_jit

FRESH = textwrap.dedent("""
    import pickle, sys
    from spark_coord.records import arrow
    sets = pickle.loads(sys.stdin.buffer.read())
    out = []
    for buf, start, end, headers in sets:
        before = "numba" in sys.modules
        rb = arrow.decode_to_arrow(buf, "topic-s", 1, start, end, headers)
        out.append((rb.to_pylist(), before, "numba" in sys.modules))
    sys.stdout.buffer.write(pickle.dumps(out))
""")


def in_fresh_process(sets):
    import pickle

    done = subprocess.run([sys.executable, "-c", FRESH], input=pickle.dumps(sets), capture_output=True, check=True)
    return pickle.loads(done.stdout)


def compiled(buf, start, end, headers):
    assert arrow_jit.AVAILABLE
    arrow.arrow_jit = arrow_jit  # loaded here: every set takes the compiled path
    return arrow.decode_to_arrow(buf, "topic-s", 1, start, end, headers).to_pylist()


@pytest.mark.parametrize("codec", CODECS)
def test_a_small_set_in_a_fresh_process_is_decoded_in_python_with_the_same_rows(codec):
    records = sample_records(30)
    buf = build(records[:12], codec, base_offset=100) + build(records[12:], codec, base_offset=112)
    cases = [(buf, 0, None, False), (buf, 0, None, True), (buf, 105, 120, True), (buf, 112, None, False)]
    results = in_fresh_process(cases)
    for (rows, numba_before, numba_after), case in zip(results, cases, strict=True):
        assert not numba_before and not numba_after  # the kernel was never loaded
        assert rows == compiled(*case)


@pytest.mark.parametrize("codec", CODECS)
def test_a_large_set_loads_the_kernel_and_later_small_sets_take_it(codec):
    many = [(b"k%d" % i, b"value-%d" % i, [], 1_700_000_000_000 + i) for i in range(arrow.SMALL_SET_RECORDS)]
    large = build(many, codec, base_offset=0)
    small = build(sample_records(5), codec, base_offset=5000)
    results = in_fresh_process([(small, 0, None, False), (large, 0, None, False), (small, 0, None, True)])
    (r1, b1, a1), (r2, b2, a2), (r3, b3, a3) = results
    assert not b1 and not a1
    assert not b2 and a2  # the large set loaded numba and the kernel
    assert b3 and a3
    assert r1 == compiled(small, 0, None, False)
    assert r2 == compiled(large, 0, None, False)
    assert r3 == compiled(small, 0, None, True)
    assert len(r2) == arrow.SMALL_SET_RECORDS


def test_without_use_jit_nothing_loads_the_kernel(monkeypatch):
    monkeypatch.setattr(arrow, "_USE_JIT", False)
    assert arrow._kernel([]) is False


RACE = textwrap.dedent("""
    import pickle, sys, threading
    from spark_coord.records import arrow
    small = pickle.loads(sys.stdin.buffer.read())
    importer = threading.Thread(target=lambda: __import__("spark_coord.records.arrow_jit"))
    importer.start()
    decoded, errors = 0, []
    while importer.is_alive() or decoded == 0:
        try:
            arrow.decode_to_arrow(small, "topic-s", 1)
            decoded += 1
        except Exception as e:
            errors.append(repr(e))
            break
    importer.join()
    sys.stdout.buffer.write(pickle.dumps((decoded, errors)))
""")


def test_small_sets_decode_while_another_thread_imports_the_kernel():
    """Found by the network nemesis run: a consumer's fetcher thread died with "partially
    initialized module 'spark_coord.records.arrow_jit' has no attribute 'AVAILABLE'" when the
    decoder took the kernel from ``sys.modules`` while another thread was still importing it."""
    import pickle

    small = build(sample_records(5), 0, base_offset=0)
    done = subprocess.run([sys.executable, "-c", RACE], input=pickle.dumps(small), capture_output=True, check=True)
    decoded, errors = pickle.loads(done.stdout)
    assert not errors and decoded >= 1
