"""The compiled decoder (numba, ``records.arrow_jit``) against the Python decoder, its oracle.

For random record sets (codecs, null keys and values, headers with null values and
keys that are or are not UTF-8, LogAppendTime and control batches, offset ranges),
for truncated ones and for damaged ones, both paths must give the same Arrow or
raise the same error with the same message.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from records_samples import CODECS, build, restamp, sample_records, with_records_section

from spark_coord.records import arrow, arrow_jit
from spark_coord.records.header import CONTROL_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK


def test_the_compiled_decoder_is_available():
    """numba is a dependency (pyproject.toml): without it these comparisons would test nothing."""
    assert arrow_jit.AVAILABLE, f"numba unavailable: {arrow_jit.WHY_NOT}"

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode(use_jit: bool, buf, **kw):
    """(RecordBatch, None) or (None, (exception type, message)) from one path.  The compiled path with
    the kernel loaded, whatever ran before: a record set of fewer than ``SMALL_SET_RECORDS`` records
    would otherwise be decoded in Python until something loads it."""
    saved = arrow._USE_JIT, arrow.arrow_jit
    arrow._USE_JIT = use_jit
    if use_jit:
        arrow.arrow_jit = arrow_jit
    try:
        return arrow.decode_to_arrow(buf, "topic-d", 3, **kw), None
    except ValueError as e:
        return None, (type(e), str(e))
    finally:
        arrow._USE_JIT, arrow.arrow_jit = saved


def assert_same(buf, **kw):
    for include_headers in (False, True):
        compiled, cerr = decode(True, buf, include_headers=include_headers, **kw)
        python, perr = decode(False, buf, include_headers=include_headers, **kw)
        assert cerr == perr
        if python is not None:
            compiled.validate(full=True)
            assert compiled.schema.equals(python.schema)
            assert compiled.equals(python), (compiled.to_pylist()[:3], python.to_pylist()[:3])


header_key = st.one_of(st.text(max_size=8).map(lambda s: s.encode("utf-8")), st.binary(max_size=6))
record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(header_key, st.one_of(st.none(), st.binary(max_size=20))), max_size=4),
    st.integers(min_value=-2**40, max_value=2**42),
)
batch = st.tuples(st.lists(record, min_size=1, max_size=25), st.sampled_from(CODECS),
                  st.sampled_from(["create", "log_append", "control"]))


def record_set(batches) -> bytes:
    out, base = [], 7
    for records, codec, kind in batches:
        b = build(records, codec, base_offset=base)
        if kind == "log_append":
            b = restamp(b, attributes=codec | TIMESTAMP_TYPE_MASK)
        elif kind == "control":
            b = restamp(b, attributes=codec | CONTROL_MASK)
        out.append(b)
        base += len(records) + 3  # gaps, as after compaction
    return b"".join(out)


@FUZZ
@given(batches=st.lists(batch, min_size=1, max_size=4), start=st.integers(0, 120),
       length=st.one_of(st.none(), st.integers(0, 120)))
def test_random_record_sets(batches, start, length):
    assert_same(record_set(batches), start_offset=start, end_offset=None if length is None else start + length)


@FUZZ
@given(batches=st.lists(batch, min_size=1, max_size=3), cut=st.integers(0, 10**6))
def test_truncated_record_sets(batches, cut):
    buf = record_set(batches)
    assert_same(buf[:cut % (len(buf) + 1)])


@FUZZ
@given(batches=st.lists(batch, min_size=1, max_size=2),
       edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=5),
       keep_crc=st.booleans())
# found by a CI run: a zstd frame header whose damaged size field declares 2**56 bytes; the decoder
# tried to allocate that much before reading the frame (MemoryError) instead of refusing the data
@example(batches=[([(None, None, [], 0), (None, None, [(b"", None)], 0), (b"\0" * 5, b"\0" * 5, [], 0)], 4,
                   "create")], edits=[(256, 192)], keep_crc=False)
def test_damaged_record_sets(batches, edits, keep_crc):
    """Bytes changed after the header, CRC recomputed: the decoders themselves see the damage."""
    buf = bytearray(record_set(batches[:1]))
    for pos, byte in edits:
        buf[HEADER_SIZE + pos % max(1, len(buf) - HEADER_SIZE)] = byte
    buf = bytes(buf) if keep_crc or len(buf) <= HEADER_SIZE else restamp(bytes(buf))
    assert_same(buf, verify_crc=not keep_crc)


@FUZZ
@given(records=st.binary(max_size=160), count=st.integers(0, 40))
def test_arbitrary_records_sections(records, count):
    base = build(sample_records(2))
    assert_same(with_records_section(base, records, count))


@pytest.mark.parametrize("section", [
    b"\x03\x00\x00\x00\x01\x01\x00",              # record length -2 (odd raw): tolerated by the Python decoder
    b"\x0e\x00\x00\x00\x01\x01\x02\x02h\x01",      # header key 'h' with a null value
    b"\x10\x00\x00\x02\x01\x01\x02\x02\xff\x01",   # header key not UTF-8 (refused only with headers)
    b"\x0e\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00\x01\x01\x00",  # varint past 64 bits
    b"\x0e\x00\x00\x80\x80\x80\x80\x10\x01\x01\x00",  # offsetDelta beyond int32
    b"\x0c\x00\x00\x00\x01\x01\x00\x00",          # one byte after the record
])
def test_edge_sections(section):
    assert_same(with_records_section(build(sample_records(1)), section, 1))


def test_compiled_path_decodes_valid_input(monkeypatch):
    """Valid input never falls back to the Python decoder (which would hide a slow kernel)."""
    buf = b"".join(build(sample_records(30), codec, base_offset=30 * codec) for codec in CODECS)
    expected = decode(False, buf, include_headers=True)[0]

    def refuse(*a, **kw):
        raise AssertionError("the Python decoder ran")

    monkeypatch.setattr(arrow, "_decode_python", refuse)
    monkeypatch.setattr(arrow, "arrow_jit", arrow_jit)  # loaded, as after a worker's first large set
    for start, end in ((0, None), (17, 95)):
        got = arrow.decode_to_arrow(buf, "topic-d", 3, start_offset=start, end_offset=end, include_headers=True)
        assert got.equals(expected.filter(pc.and_(
            pc.greater_equal(expected.column("offset"), start),
            pc.less(expected.column("offset"), end if end is not None else 2**62))))



@pytest.mark.parametrize("codec", CODECS)
def test_small_batches_are_walked_by_the_kernel(monkeypatch, codec):
    """A record set of many small batches (a producer's small batch size) is decoded without a Python
    walk over the batches: the kernel walks the batch headers (``arrow_jit.scan``) and compressed ones
    are decompressed side by side and decoded in one call; 300 batches is more than the scan's first
    room.  Ranges that cut batches, control batches, LogAppendTime and a partial trailing batch give
    what the Python decoder gives."""
    records = sample_records(5)
    batches = [build(records, codec, base_offset=7 * i) for i in range(300)]
    batches[40] = restamp(batches[40], attributes=CONTROL_MASK)
    batches[41] = restamp(batches[41], attributes=codec | TIMESTAMP_TYPE_MASK)
    buf = b"".join(batches) + batches[0][:100]
    monkeypatch.setattr(arrow, "arrow_jit", arrow_jit)

    def refuse(*a, **kw):
        raise AssertionError("a walk in Python ran")

    for start, end in ((0, None), (9, 1500), (285, 290)):
        expected = decode(False, buf, start_offset=start, end_offset=end, include_headers=True)[0]
        with monkeypatch.context() as m:
            m.setattr(arrow, "_choose", refuse)
            got = arrow.decode_to_arrow(buf, "topic-d", 3, start_offset=start, end_offset=end, include_headers=True)
        got.validate(full=True)
        assert got.equals(expected), (start, end)
        assert got.num_rows == expected.num_rows > 0


def test_a_plain_batch_with_a_bad_crc_is_named_by_the_python_walk():
    """The kernel's walk leaves a CRC that does not match to the Python walk, which names the batch."""
    batches = [build(sample_records(5), 0, base_offset=5 * i) for i in range(10)]
    damaged = bytearray(batches[6])
    damaged[-1] ^= 0xFF
    batches[6] = bytes(damaged)
    compiled, error = decode(True, b"".join(batches))
    assert compiled is None and "CRC mismatch in batch at offset 30" in error[1]
    assert_same(b"".join(batches))

def test_many_headers_grow_the_header_buffers():
    records = [(b"k", b"v", [("h%d" % i, b"x" * (i % 3)) for i in range(40)], 1)] * 50
    assert_same(build(records))
    rb = arrow.decode_to_arrow(build(records), "t", 0, include_headers=True)
    assert [len(h) for h in rb.column("headers").to_pylist()] == [40] * 50


def test_python_decoder_without_numba():
    """Where numba cannot be imported, decode_to_arrow still works (in Python)."""
    code = ("import sys; sys.modules['numba'] = None\n"
            "from spark_coord.records import arrow, arrow_jit\n"
            "from spark_coord.records.builder import BatchBuilder\n"
            "b = BatchBuilder(); b.append(b'v', key=b'k')\n"
            "rb = arrow.decode_to_arrow(b.build(), 't', 0)\n"
            "assert not arrow_jit.AVAILABLE and rb.column('value').to_pylist() == [b'v'], rb\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
