"""numpy and crc32c are imported at their first use, not when the records modules load; a Spark
worker's read imports neither pandas, nor ``pyarrow.compute``, nor asyncio.

A streaming query's driver-side reader process (a fresh Python process per query) imports
``records.header`` and ``records.compression`` through the client and the consumer, but never
checks a CRC nor decompresses; importing them there cost its start a tenth of a second.  What
must hold: that process does not import them, and every CRC and decompression works the same
on first use as before.
"""

from __future__ import annotations

import json
import subprocess
import sys

from spark_coord.records import compression, header


def test_reader_process_imports_neither_numpy_nor_crc32c():
    code = ("import json, sys; import spark_coord.spark.stream, spark_coord.spark.group, spark_coord.spark.offsets; "
            "print(json.dumps({m: m in sys.modules for m in ('numpy', 'crc32c')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"numpy": False, "crc32c": False}


def test_crc_in_a_fresh_process_is_crc32c():
    code = ("from spark_coord.records import header; import crc32c; "
            "print(header.crc32c(b'123456789'), crc32c.crc32c(b'123456789'), header.crc32c(b'6789', "
            "header.crc32c(b'12345')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    a, b, c = map(int, out.stdout.split())
    assert a == b == c == 0xE3069283


def test_crc_after_first_use_is_the_module():
    header.crc32c(b"x")
    import crc32c

    assert header._crc32c is crc32c
    assert header.crc32c(b"123456789") == 0xE3069283


def test_decompression_buffers_in_a_fresh_process():
    code = ("from spark_coord.records import compression as c; data = b'kafka ' * 5000; "
            "print(all(bytes(c.decompress(k, c.compress(k, data))) == data for k in (1, 2, 3, 4)), "
            "type(c.decompress_view(4, c.compress(4, data))).__name__, type(c._buffer(8)).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "memoryview", "ndarray"]


def test_buffer_is_uninitialised_numpy():
    buf = compression._buffer(16)
    assert len(buf) == 16 and buf.dtype.name == "uint8"


def test_decoding_never_imports_pandas():
    """A fresh Spark Python worker's first micro-batch must not pay for pandas (a fifth of a second or more),
    which nothing else a read does imports: every path of ``decode_to_arrow`` -- small sets in Python,
    the compiled kernel, compressed batches, headers, an offset range, no records -- builds its arrays
    from buffers."""
    code = ("import sys\n"
            "from spark_coord.records.arrow import decode_to_arrow\n"
            "from spark_coord.records.builder import BatchBuilder\n"
            "def record_set(n, codec):\n"
            "    b = BatchBuilder(codec=codec)\n"
            "    for i in range(n): b.append(b'v%d' % i, key=None if i % 3 else b'k', timestamp_ms=1700000000000 + i, "
            "headers=[('h', b'x'), ('n', None)] if i % 2 else ())\n"
            "    return b.build(base_offset=10)\n"
            "rows = 0\n"
            "for n in (5, 3000):\n"
            "    for codec in (0, 3):\n"
            "        buf = record_set(n, codec)\n"
            "        for headers in (False, True):\n"
            "            rows += decode_to_arrow(buf, 't', 1, include_headers=headers).num_rows\n"
            "            rows += decode_to_arrow(buf, 't', 1, 12, 14, include_headers=headers).num_rows\n"
            "            rows += decode_to_arrow(buf, 't', 1, 10**6, include_headers=headers).num_rows\n"
            "print(rows, 'pandas' in sys.modules, 'pyarrow.compute' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(2 * 2 * (5 + 2 + 3000 + 2)), "False", "False"]


def test_a_workers_read_path_imports_neither_asyncio_nor_pyarrow_compute():
    """What a Spark Python worker imports for its first read (the client's connection and fetch, the
    decoder) leaves out asyncio and ``pyarrow.compute``, which a worker's read never needs: together a
    tenth of a second of a fresh worker's first micro-batch on an idle machine.  The decode of every
    path is covered by the test above."""
    code = ("import sys, json\n"
            "from spark_coord.spark.partition import read_partition\n"
            "from spark_coord.client import pool\n"
            "from spark_coord.client.connection import BrokerConnection\n"
            "from spark_coord.client.fetcher import send_fetch\n"
            "from spark_coord.records.arrow import decode_to_arrow\n"
            "print(json.dumps({m: m in sys.modules for m in ('asyncio', 'pyarrow.compute', 'pandas')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"asyncio": False, "pyarrow.compute": False,
                                                                "pandas": False}
