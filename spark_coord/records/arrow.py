"""Decode a fetched record set straight into a ``pyarrow.RecordBatch`` with the
columns of Spark's Kafka source.

Two decoders share the batch-level work here (``_plan``: split the record set into
batches, skip control batches and batches outside the offset range, check CRCs,
decompress):

* the **compiled** one (``records.arrow_jit``, numba; the default where numba is
  installed) walks every record once and writes the columns' buffers itself; once it is
  loaded it walks the batch headers too (``_decode_scanned``: no Python step per batch but
  the CRC call and, for a compressed batch, the codec's), decoding uncompressed batches in
  place in the fetched buffer and small compressed ones side by side in one arena; large
  compressed batches (64 KiB and more on average) are decoded batch by batch
  (``_decode_compressed``): each batch is decompressed into one reused buffer of about a
  batch's size and decoded at once, while it is still in the processor's cache
  (decompressing a fetch of tens of MB into one arena first and reading it back cost 10%
  more for lz4 and zstd); anything unusual falls back to the walk in Python (``_plan``);
* the **Python** one (``_decode_python``) is the fallback without numba and the
  oracle: the compiled kernel refuses anything it does not like and the Python
  decoder then explains it (the same error) or, for the odd shape it tolerates,
  decodes it, so both give the same Arrow or the same error.

How the Python decoder avoids per-record objects: the only per-record Python work
is reading the varints of each record and appending a few ints to lists.  All
batches' records sections (decompressed where needed) are joined into one *arena*;
the record boundaries ``[keyStart, keyEnd, valueStart, valueEnd]`` of consecutive
records are ranges of the arena: a column's bytes are the join of its ranges (one slice per
record, the copy in C) and its offsets the running sum of their lengths.  Headers use the
same gather on their own boundary vector.  Constant columns come from ``pa.repeat``; offsets and
timestamps are rebased and scaled with numpy (which pyarrow has loaded already).  No
``pyarrow.compute``: importing it takes a fresh Spark Python worker a tenth of a second, on
the first micro-batch of a query, and nothing else a read does imports it.

Spark's Arrow path (``pyspark.sql.worker.plan_data_source_read``) compares the batch
schema to ``to_arrow_schema(schema, timezone="UTC")`` with ``Schema.equals``, so the
schema here is exactly that: all fields nullable, ``timestamp[us, tz=UTC]``, and the
headers list's item field named ``element``.
"""

from __future__ import annotations

import logging
from array import array
from itertools import accumulate
from operator import sub

import pyarrow as pa

from spark_coord.records import compression
from spark_coord.records.header import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    MIN_RECORD_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    InvalidBatch,
    crc32c,
)
from spark_coord.records.pa_arrays import constant, int_array  # built without pandas (see there)
from spark_coord.records.reader import (
    AbortedTransactions,
    batch_records,
    check_crc,
    drop_aborted,
    iter_batches,
    read_uvarint,
)

log = logging.getLogger(__name__)

#: False makes every decode take the Python path (the differential tests and benchmarks compare both).
_USE_JIT = True
#: False makes the compiled decode of compressed batches decompress them all into one arena first (as the
#: Python path does) rather than batch by batch (the tests and benchmarks compare both).
_BATCHWISE = True
#: A record set of fewer records than this is decoded in Python as long as the compiled kernel is not
#: loaded in this process (``_kernel``): loading it -- numba and the kernel's cached machine code -- takes
#: half a second or more, which a fresh Spark Python worker would add to the first micro-batch of a
#: streaming query that reads a few records, for a decode that takes a millisecond in Python.  The first
#: larger record set loads it; from then on every record set takes the compiled path.
SMALL_SET_RECORDS = 1024
#: ``records.arrow_jit`` once this module loaded it (``_kernel``), else None.  Never taken from
#: ``sys.modules``: another thread may be importing it there, half initialized; an import statement
#: waits for that import to finish.
arrow_jit = None

_HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", _HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
_SCHEMAS = {False: pa.schema(_BASE_FIELDS), True: pa.schema(_BASE_FIELDS + [pa.field("headers", HEADERS_TYPE)])}


def kafka_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of Spark's Kafka source rows (``headers`` only if asked)."""
    return _SCHEMAS[bool(include_headers)]


class _Columns:
    """Per-record lists filled by ``_decode_batch`` for one ``decode_to_arrow`` call.

    Timestamp and offset deltas are kept as the raw (zigzag) varint values and decoded
    and rebased per batch with numpy afterwards (``_build``)."""

    __slots__ = ("bounds", "offset_deltas", "ts_deltas", "key_nulls", "value_nulls",
                 "hbounds", "hvalue_nulls", "hoffsets", "batches")

    def __init__(self, include_headers: bool) -> None:
        self.bounds: list[int] = []         # keyStart, keyEnd, valueStart, valueEnd per record
        self.offset_deltas: list[int] = []  # raw zigzag offsetDelta per record
        self.ts_deltas: list[int] = []      # raw zigzag timestampDelta per record
        self.key_nulls: list[int] = []      # row numbers
        self.value_nulls: list[int] = []
        self.hbounds: list[int] | None = [] if include_headers else None
        self.hvalue_nulls: list[int] = []   # header numbers
        self.hoffsets: list[int] = [0]      # headers list offsets (cumulative header count)
        self.batches: list[tuple[int, int, int, int]] = []  # (rows, baseOffset, baseTimestamp, timestampType)


def _decode_batch(d, p: int, end: int, count: int, cols: _Columns) -> int:
    """Decode ``count`` records in ``d[p:end]`` into ``cols``; returns the end position.

    The hot loop.  Varints of one or two bytes (nearly all of them) are read inline;
    zigzag lengths are decoded by hand (odd raw value = negative, raw 1 = -1 = null).
    Field lengths are not compared one by one with the bytes left: every position
    only grows, an index beyond the buffer raises ``IndexError``, each record must end
    exactly where its length says and the batch exactly at ``end``, so a bad length
    is always caught before the batch is accepted (``InvalidBatch``).
    """
    bext = cols.bounds.extend
    offs = cols.offset_deltas
    oapp = offs.append
    tapp = cols.ts_deltas.append
    knull = cols.key_nulls
    vnull = cols.value_nulls
    hoapp = cols.hoffsets.append if cols.hbounds is not None else None
    ruv = read_uvarint
    for _ in range(count):
        x = d[p]
        if x < 0x80:
            p += 1
        elif d[p + 1] < 0x80:
            x = (x & 0x7F) | (d[p + 1] << 7)
            p += 2
        else:
            x, p = ruv(d, p)
        rend = p + (x >> 1)
        x = d[p + 1]  # d[p] is the record's attributes (unused)
        if x < 0x80:
            p += 2
        elif d[p + 2] < 0x80:
            x = (x & 0x7F) | (d[p + 2] << 7)
            p += 3
        else:
            x, p = ruv(d, p + 1)
        tapp(x)
        x = d[p]
        if x < 0x80:
            p += 1
        elif d[p + 1] < 0x80:
            x = (x & 0x7F) | (d[p + 1] << 7)
            p += 2
        else:
            x, p = ruv(d, p)
        oapp(x)
        x = d[p]
        if x < 0x80:
            p += 1
        elif d[p + 1] < 0x80:
            x = (x & 0x7F) | (d[p + 1] << 7)
            p += 2
        else:
            x, p = ruv(d, p)
        ks = p
        if x & 1:
            if x != 1:
                raise InvalidBatch(f"negative key length {-(x >> 1) - 1} at byte {p}")
            knull.append(len(offs) - 1)
        else:
            p += x >> 1
        ke = p
        x = d[p]
        if x < 0x80:
            p += 1
        elif d[p + 1] < 0x80:
            x = (x & 0x7F) | (d[p + 1] << 7)
            p += 2
        else:
            x, p = ruv(d, p)
        vs = p
        if x & 1:
            if x != 1:
                raise InvalidBatch(f"negative value length {-(x >> 1) - 1} at byte {p}")
            vnull.append(len(offs) - 1)
        else:
            p += x >> 1
        bext((ks, ke, vs, p))
        if d[p]:
            p = _headers(d, p, rend, cols)
        else:
            p += 1
            if hoapp is not None:
                hoapp(cols.hoffsets[-1])
        if p != rend:
            raise InvalidBatch(f"record ends at byte {p} but its length says {rend}")
    if p != end:
        raise InvalidBatch(f"{count} records end at byte {p}, the batch at {end}")
    return p


def _headers(d, p: int, rend: int, cols: _Columns) -> int:
    """The headers of one record, from its header count at ``p``; returns the position
    after them.  Recorded only when ``cols`` collects headers."""
    hb = cols.hbounds
    x, p = read_uvarint(d, p)
    if x & 1 or (x >> 1) > rend - p:
        raise InvalidBatch(f"header count {(x >> 1) ^ -(x & 1)} impossible with {rend - p} bytes left at byte {p}")
    for _ in range(x >> 1):
        x, p = read_uvarint(d, p)
        if x & 1 or (x >> 1) > rend - p:
            raise InvalidBatch(f"header key length {(x >> 1) ^ -(x & 1)} impossible with {rend - p} bytes left "
                               f"at byte {p}")
        ks = p
        p += x >> 1
        ke = p
        x, p = read_uvarint(d, p)
        vs = p
        if x == 1:
            if hb is not None:
                cols.hvalue_nulls.append(len(hb) >> 2)
        elif x & 1 or (x >> 1) > rend - p:
            raise InvalidBatch(f"header value length {(x >> 1) ^ -(x & 1)} impossible with {rend - p} bytes left "
                               f"at byte {p}")
        else:
            p += x >> 1
        if hb is not None:
            hb.extend((ks, ke, vs, p))
    if hb is not None:
        cols.hoffsets.append(len(hb) >> 2)
    return p


def decode_to_arrow(buf, topic: str, partition: int, start_offset: int = 0, end_offset: int | None = None,
                    include_headers: bool = False, *, verify_crc: bool = True,
                    max_decompressed_bytes: int = compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
                    scratch: "compression.Scratch | None" = None,
                    aborted_transactions: AbortedTransactions | None = None) -> pa.RecordBatch:
    """Decode every record of ``buf`` (a fetched record set: batches back to back,
    compressed or not, possibly ending with a partial batch) whose offset lies in
    ``[start_offset, end_offset)`` into one RecordBatch of ``kafka_schema``.

    Control batches are skipped, and with ``aborted_transactions`` (a read_committed Fetch answer's
    ``(producer_id, first_offset)`` pairs) the batches of aborted transactions too (``reader.drop_aborted``,
    Kafka's Java consumer's rule).  Raises ``InvalidBatch`` (a ``ValueError``) on
    malformed input and ``DecompressedTooLarge`` beyond ``max_decompressed_bytes``
    per batch.  The records are decoded by the compiled kernel (``records.arrow_jit``)
    where numba is installed (a small record set before the kernel is loaded: see ``SMALL_SET_RECORDS``),
    else (and to explain a rejected input) in Python.  ``scratch``:
    where compressed batches are decompressed, reused from one call to the next (the batch
    returned does not refer to it).
    """
    if aborted_transactions:
        buf = drop_aborted(buf, aborted_transactions)
    if arrow_jit is not None and _USE_JIT and arrow_jit.AVAILABLE:
        rb = _decode_scanned(buf, topic, partition, start_offset, end_offset, include_headers, verify_crc,
                             max_decompressed_bytes, scratch)
        if rb is not None:
            return rb
    chosen, filter_, compressed = _choose(buf, start_offset, end_offset, verify_crc)
    compiled = _kernel(chosen)
    if compressed and compiled and _BATCHWISE:
        rb = _decode_compressed(chosen, filter_, topic, partition, include_headers, max_decompressed_bytes, scratch)
        if rb is not None:
            return rb
    plan = _plan(buf, chosen, filter_, compressed, max_decompressed_bytes, scratch)
    if compiled:
        rb = _decode_compiled(plan, topic, partition, include_headers)
        if rb is not None:
            return rb
    return _decode_python(plan, topic, partition, include_headers)


def _decode_scanned(buf, topic: str, partition: int, start_offset: int, end_offset: int | None,
                    include_headers: bool, verify_crc: bool, max_decompressed_bytes: int,
                    scratch: "compression.Scratch | None") -> pa.RecordBatch | None:
    """The compiled decode with no Python step per batch but the CRC's and the codec's: the kernel walks
    the batch headers too (``arrow_jit.scan``).  A producer's small batches (the Java client's 16 KiB:
    about 150 records of 100 bytes) cost the walk in Python as much as their records' decode, or more.
    Compressed batches are decompressed side by side into one arena and decoded in one call (when they
    are small: large ones are decoded one by one while in the processor's cache, ``_decode_compressed``).
    None for anything else (large compressed batches, anything odd, a CRC that does not match, a batch
    that does not decompress): the caller's walk decodes it or says what is wrong."""
    import numpy as np

    assert arrow_jit is not None  # loaded: the caller checked
    if not len(buf):
        return None
    d = np.frombuffer(buf, np.uint8)
    d.flags.writeable = False  # one compiled signature whatever buffer type came in
    hi = _INT64_MAX if end_offset is None else end_offset
    found = arrow_jit.scan(d, start_offset, hi)
    if not isinstance(found, tuple):
        return None
    spans, checks, restrict, compressed = found
    batches = checks.tolist()
    if compressed and _BATCHWISE and int(spans[-1, 1] - spans[0, 0]) >= BATCHWISE_MIN_BYTES * len(batches):
        return None
    view = d.data  # the buffer's bytes, as a memoryview
    if verify_crc:
        for (at, stored, _), end in zip(batches, spans[:, 1].tolist(), strict=True):
            if crc32c(view[at + ATTRIBUTES_OFFSET:end]) != stored:
                return None
    if compressed:
        items = [(codec, view[start:end]) for (_, _, codec), start, end in zip(batches, spans[:, 0].tolist(),
                                                                              spans[:, 1].tolist(), strict=True)]
        try:
            arena, places = compression.decompress_all(items, max_decompressed_bytes, scratch)
        except ValueError:
            return None
        spans = spans.copy()
        spans[:, :2] = np.array(places, np.int64).reshape(-1, 2)
        if np.any((spans[:, 2] * MIN_RECORD_SIZE > spans[:, 1] - spans[:, 0]) & (spans[:, 2] > 0)):
            return None  # more records than a batch's bytes can hold
        d = np.frombuffer(arena, np.uint8)
        d.flags.writeable = False
    lo, hi = _bounds((start_offset, end_offset) if restrict else None)
    try:
        return arrow_jit.decode(d, spans, lo, hi, include_headers, topic, partition, kafka_schema(include_headers),
                                HEADERS_TYPE)
    except (OverflowError, pa.ArrowInvalid):
        return None


#: Compressed batches of at least this many bytes on average are decompressed and decoded one by one
#: (``_decode_compressed``), smaller ones side by side into one arena, decoded in one call
#: (``_decode_scanned``): per batch, a call of the kernel costs more than the cache saves.
BATCHWISE_MIN_BYTES = 64 * 1024


_INT64_MAX = 2**63 - 1


def _bounds(filter_: tuple[int, int | None] | None) -> tuple[int, int]:
    """The kernel's ``[lo, hi)`` for rows restricted to ``filter_`` (None: every row)."""
    if filter_ is None:
        return -_INT64_MAX - 1, _INT64_MAX
    return filter_[0], _INT64_MAX if filter_[1] is None else filter_[1]


def decoder_loaded() -> bool:
    """Whether this process has loaded all a decode ever loads: the compiled kernel (on the first record set of
    ``SMALL_SET_RECORDS`` records or more), or there is none to load."""
    return arrow_jit is not None or not _USE_JIT


def _kernel(chosen: list[tuple[BatchHeader, memoryview, int]]) -> bool:
    """Whether the compiled kernel decodes ``chosen``: where numba is installed and ``_USE_JIT``, once the
    kernel is loaded, or when ``chosen`` holds ``SMALL_SET_RECORDS`` records or more (which loads it)."""
    global arrow_jit
    if not _USE_JIT:
        return False
    if arrow_jit is None:
        if sum(h.records_count for h, _, _ in chosen) < SMALL_SET_RECORDS:
            return False
        from spark_coord.records import arrow_jit as loaded

        arrow_jit = loaded
    return arrow_jit.AVAILABLE


class _Plan:
    """The batches of a record set that a decode covers, after CRC checks and decompression.

    ``pieces``: each batch's records section (a view into the fetched buffer when it
    is not compressed); ``spans``: (header, start, end) of each piece in the arena the
    pieces form when joined; ``filter``: the offset range rows must be restricted
    to, None when every batch lies inside it.
    """

    __slots__ = ("buf", "pieces", "spans", "positions", "filter", "compressed", "arena")

    def __init__(self, buf) -> None:
        self.buf = buf
        self.pieces: list = []
        self.spans: list[tuple[BatchHeader, int, int]] = []
        self.positions: list[int] = []  # where each piece starts in ``buf`` (uncompressed pieces only)
        self.filter: tuple[int, int | None] | None = None
        self.compressed = False
        self.arena = None  # compressed: every batch's records decompressed side by side


def _choose(buf, start_offset: int, end_offset: int | None, verify_crc: bool
            ) -> tuple[list[tuple[BatchHeader, memoryview, int]], tuple[int, int | None] | None, bool]:
    """The batches of ``buf`` a decode covers, CRCs checked: ``(header, batch, position)`` of each, the
    offset range rows must be restricted to (None when every batch lies inside it), and whether any
    batch is compressed."""
    chosen: list[tuple[BatchHeader, memoryview, int]] = []
    filter_ = None
    compressed = False
    pos = 0
    for header, batch in iter_batches(buf):
        at, pos = pos, pos + header.size
        if header.next_offset <= start_offset or header.is_control:
            continue
        if end_offset is not None and header.base_offset >= end_offset:
            continue
        if verify_crc:
            check_crc(header, batch)
        chosen.append((header, batch, at))
        compressed = compressed or bool(header.codec)
        if header.base_offset < start_offset or (end_offset is not None and header.last_offset >= end_offset):
            filter_ = (start_offset, end_offset)
    return chosen, filter_, compressed


def _plan(buf, chosen: list[tuple[BatchHeader, memoryview, int]], filter_: tuple[int, int | None] | None,
          compressed: bool, max_decompressed_bytes: int, scratch: "compression.Scratch | None" = None) -> _Plan:
    plan = _Plan(buf)
    plan.filter = filter_
    plan.compressed = compressed
    if plan.compressed:
        try:  # into one arena: no pieces to join afterwards
            plan.arena, spans = compression.decompress_all([(h.codec, b[HEADER_SIZE:]) for h, b, _ in chosen],
                                                           max_decompressed_bytes, scratch)
            plan.spans = [(h, start, end) for (h, _, _), (start, end) in zip(chosen, spans, strict=True)]
            return plan
        except compression.DecompressedTooLarge:
            raise
        except ValueError:
            pass  # one batch is corrupt: decompress them one by one, to say which
    arena_len = 0
    for header, batch, at in chosen:
        data = batch_records(header, batch, max_decompressed_bytes)
        plan.pieces.append(data)
        plan.positions.append(at + HEADER_SIZE)
        plan.spans.append((header, arena_len, arena_len + len(data)))
        arena_len += len(data)
    return plan


def _decode_compressed(chosen: list[tuple[BatchHeader, memoryview, int]], filter_: tuple[int, int | None] | None,
                       topic: str, partition: int, include_headers: bool, max_decompressed_bytes: int,
                       scratch: "compression.Scratch | None") -> pa.RecordBatch | None:
    """The compiled decode of a record set with compressed batches, batch by batch: each batch is
    decompressed into one reused buffer (``scratch``) and its records decoded by the kernel straight
    away, while they are still in the processor's cache, instead of decompressing every batch into
    an arena of tens of MB and reading it back from memory.  None on anything unusual (a corrupt or
    oversized batch, a batch the kernel refuses): the caller then takes the arena path, which says
    what is wrong or decodes it in Python."""
    import numpy as np

    assert arrow_jit is not None  # loaded: ``_kernel`` said yes
    if scratch is None:
        scratch = compression.Scratch()
    lo, hi = _bounds(filter_)
    rows = sum(h.records_count for h, _, _ in chosen)
    # the decompressed sizes the frames declare, else as the previous record set's batches inflated (only a
    # first guess: the outputs grow when a batch needs more; too generous a guess would have malloc map fresh pages)
    guess = 0
    for header, batch, _ in chosen:
        hint = compression.size_hint(header.codec, batch[HEADER_SIZE:]) if header.codec else header.size
        guess += min(hint if hint is not None else int(scratch.ratio * header.size) + 64, 64 * header.size,
                     max_decompressed_bytes)
    span = np.empty((1, arrow_jit.SPAN_FIELDS), np.int64)

    def piece(i: int):
        header, batch, at = chosen[i]
        data = batch[HEADER_SIZE:]
        if header.codec:
            try:
                out, size = compression.decompress_one(header.codec, data, max_decompressed_bytes, scratch)
            except ValueError:
                return None
            arena = out[:size].view()
            sizes[0] += len(data)
            sizes[1] += size
        else:
            arena = np.frombuffer(data, np.uint8)
            size = len(arena)
        if header.records_count * MIN_RECORD_SIZE > size and header.records_count:
            return None
        arena.flags.writeable = False  # one compiled signature whatever buffer type came in
        log_append = header.attributes & TIMESTAMP_TYPE_MASK
        span[0] = (0, size, header.records_count, header.base_offset,
                   header.max_timestamp if log_append else header.base_timestamp, 1 if log_append else 0)
        return arena, span, size, header.records_count

    sizes = [0, 0]  # compressed, decompressed bytes
    try:
        rb = arrow_jit.decode_pieces(piece, len(chosen), rows, guess, lo, hi, include_headers, topic,
                                     partition, kafka_schema(include_headers), HEADERS_TYPE)
    except (OverflowError, pa.ArrowInvalid):
        return None
    if sizes[0]:
        scratch.ratio = max(1.0, 1.05 * sizes[1] / sizes[0])
    return rb


def _joined(plan: _Plan):
    """The records of every batch of ``plan`` side by side (bytes-like)."""
    return plan.arena if plan.arena is not None else b"".join(plan.pieces)


def _decode_compiled(plan: _Plan, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch | None:
    """The kernel's RecordBatch, or None when the Python decoder has to look at the input."""
    import numpy as np

    assert arrow_jit is not None  # loaded: ``_kernel`` said yes
    spans = np.empty((len(plan.spans), arrow_jit.SPAN_FIELDS), np.int64)
    if plan.compressed:
        arena = np.frombuffer(_joined(plan), np.uint8)
        starts = [p for _, p, _ in plan.spans]
    else:  # every piece is a view into the fetched buffer: decode it in place
        arena = np.frombuffer(plan.buf, np.uint8) if len(plan.buf) else np.empty(0, np.uint8)
        starts = plan.positions
    arena.flags.writeable = False  # one compiled signature whatever buffer type came in
    for i, ((header, p, end), start) in enumerate(zip(plan.spans, starts, strict=True)):
        size = end - p
        if header.records_count * MIN_RECORD_SIZE > size and header.records_count:
            return None  # cannot hold that many records: let the Python decoder say so
        log_append = header.attributes & TIMESTAMP_TYPE_MASK
        spans[i] = (start, start + size, header.records_count, header.base_offset,
                    header.max_timestamp if log_append else header.base_timestamp, 1 if log_append else 0)
    lo, hi = _bounds(plan.filter)
    try:
        return arrow_jit.decode(arena, spans, lo, hi, include_headers, topic, partition,
                                kafka_schema(include_headers), HEADERS_TYPE)
    except (OverflowError, pa.ArrowInvalid):
        return None


def _decode_python(plan: _Plan, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """The reference decoder: one Python loop over the records (``_decode_batch``)."""
    cols = _Columns(include_headers)
    arena = bytes(_joined(plan)) if plan.arena is not None else _joined(plan)
    for header, p, end in plan.spans:
        n0 = len(cols.offset_deltas)
        try:
            _decode_batch(arena, p, end, header.records_count, cols)
        except IndexError:
            raise InvalidBatch(f"batch at offset {header.base_offset}: a record runs past the batch's end") from None
        except InvalidBatch as e:
            raise InvalidBatch(f"batch at offset {header.base_offset}: {e}") from None
        n = len(cols.offset_deltas) - n0
        if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: maxTimestamp for every record
            cols.ts_deltas[n0:] = [0] * n
            cols.batches.append((n, header.base_offset, header.max_timestamp, 1))
        else:
            cols.batches.append((n, header.base_offset, header.base_timestamp, 0))
    try:
        rb = _build(arena, cols, topic, partition, include_headers)
    except (OverflowError, pa.ArrowInvalid) as e:
        raise InvalidBatch(f"record set does not fit Kafka's types: {e}") from None
    if plan.filter is not None:
        rb = _restrict(rb, *plan.filter)
    return rb


def _per_batch(batches: list[tuple[int, int, int, int]], index: int, type_: pa.DataType) -> pa.Array:
    """A column repeating field ``index`` of each batch over that batch's rows."""
    values = {b[index] for b in batches}
    total = sum(b[0] for b in batches)
    if len(values) == 1:
        return constant(values.pop(), type_, total)
    return pa.concat_arrays([constant(b[index], type_, b[0]) for b in batches])


def _numpy_array(values, type_: pa.DataType) -> pa.Array:
    """A numpy array of fixed-width values as an Arrow array of ``type_`` (no copy)."""
    import numpy as np

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _build(arena: bytes, cols: _Columns, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    import numpy as np

    n = len(cols.offset_deltas)
    schema = kafka_schema(include_headers)
    if n == 0:
        return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
    keys, values = _gather_pairs(arena, cols.bounds, n, cols.key_nulls, cols.value_nulls)
    offset_raw = np.frombuffer(array("Q", cols.offset_deltas), np.uint64)  # OverflowError past 64 bits
    if int(offset_raw.max()) >= 2**32 or bool((offset_raw & 1).any()):
        raise InvalidBatch("offsetDelta negative or beyond int32")
    rows = [b[0] for b in cols.batches]
    offsets = (offset_raw >> 1).astype(np.int64) + np.repeat(np.array([b[1] for b in cols.batches], np.int64), rows)
    ts_raw = np.frombuffer(array("Q", cols.ts_deltas), np.uint64)
    ts_delta = (ts_raw >> 1).astype(np.int64) ^ -(ts_raw & 1).astype(np.int64)  # zigzag
    with np.errstate(over="ignore"):  # wraps as Kafka's int64 arithmetic does, like the compiled kernel
        ts_us = (ts_delta + np.repeat(np.array([b[2] for b in cols.batches], np.int64), rows)) * 1000
    arrays = [
        keys,
        values,
        constant(topic, pa.string(), n),
        constant(partition, pa.int32(), n),
        _numpy_array(offsets, pa.int64()),
        _numpy_array(ts_us, TIMESTAMP_TYPE),
        _per_batch(cols.batches, 3, pa.int32()),
    ]
    if include_headers:
        arrays.append(_headers_column(arena, cols))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _gather_pairs(arena, bounds: list[int], n: int, first_nulls: list[int],
                  second_nulls: list[int]) -> tuple[pa.Array, pa.Array]:
    """From ``[aStart, aEnd, bStart, bEnd]`` per item (ranges of the bytes-like ``arena``), the binary
    arrays of the a's and b's."""
    view = memoryview(arena)
    out = []
    for column, nulls in ((0, first_nulls), (2, second_nulls)):
        if len(nulls) == n:
            out.append(pa.nulls(n, pa.binary()))
            continue
        starts, ends = bounds[column::4], bounds[column + 1::4]
        offsets = array("i", accumulate(map(sub, ends, starts), initial=0))  # OverflowError past 2 GiB
        data = b"".join([view[a:b] for a, b in zip(starts, ends, strict=True)])
        arr = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        if nulls:
            arr = _with_nulls(arr, nulls)
        out.append(arr)
    return out[0], out[1]


def _with_nulls(arr: pa.Array, nulls: list[int]) -> pa.Array:
    """``arr`` with the rows in ``nulls`` marked null (their bytes are already empty)."""
    bitmap = bytearray(b"\xff" * ((len(arr) + 7) // 8))
    for i in nulls:
        bitmap[i >> 3] &= ~(1 << (i & 7)) & 0xFF
    buffers = arr.buffers()
    return pa.Array.from_buffers(arr.type, len(arr), [pa.py_buffer(bitmap), buffers[1], buffers[2]],
                                 null_count=len(nulls), offset=arr.offset)


def _headers_column(arena, cols: _Columns) -> pa.Array:
    hbounds = cols.hbounds
    assert hbounds is not None  # columns decoded with their headers
    total = len(hbounds) >> 2
    if total == 0:
        items = pa.nulls(0, _HEADER_TYPE)
    else:
        hkeys, hvalues = _gather_pairs(arena, hbounds, total, [], cols.hvalue_nulls)
        names = pa.Array.from_buffers(pa.string(), total, hkeys.buffers(), null_count=0)
        names.validate(full=True)  # ArrowInvalid for a key that is not UTF-8
        items = pa.StructArray.from_arrays([names, hvalues], fields=list(_HEADER_TYPE))
    return pa.ListArray.from_arrays(int_array(cols.hoffsets, pa.int32()), items, type=HEADERS_TYPE)


def _restrict(rb: pa.RecordBatch, start: int, end: int | None) -> pa.RecordBatch:
    """Rows with offset in [start, end): a zero-copy slice when they are contiguous (offsets only grow
    in a record set, so they always are; anything else is filtered)."""
    import numpy as np

    column = rb.column(4)  # int64, no nulls (``Array.to_numpy`` would import pandas)
    offsets = np.frombuffer(column.buffers()[1], np.int64, len(column), column.offset * 8)
    mask = offsets >= start
    if end is not None:
        mask &= offsets < end
    keep = int(mask.sum())
    if keep == 0:
        return rb.slice(0, 0)
    first = int(mask.argmax())
    if mask[first:first + keep].all():
        return rb.slice(first, keep)
    bits = np.packbits(mask, bitorder="little")
    return rb.filter(pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)]))
