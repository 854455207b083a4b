"""The compiled decode of ``decode_to_arrow``: record sections -> Arrow column buffers.

One numba kernel walks every record of the planned batches once and writes the
columns' buffers directly: int32 offsets plus copied bytes for keys and values (and
header keys and values), validity bitmaps, absolute offsets, timestamps in
microseconds, the timestamp type.  pyarrow wraps those numpy buffers without
copying (``pa.Array.from_buffers``).  Nothing is done per record in Python.

The kernel accepts exactly what the pure-Python decoder (``records.arrow``) accepts
and never explains a rejection: on anything it does not like (a truncated or
over-long varint, a length past the record, a record that does not end where its
length says, an offsetDelta outside [0, 2**31), header keys that are not UTF-8...)
it stops with ``INVALID`` and the caller runs the Python decoder over the same
input, which raises the error with its message (or, for the rare odd shape the
Python decoder tolerates, returns the rows).  So the two paths give the same Arrow
or the same error by construction, and a differential test checks it.

Compilation: the kernel is compiled on first use and cached on disk (numba's
``cache=True``: next to this file when that is writable, else the user's cache
directory, or ``NUMBA_CACHE_DIR``), so a Spark worker pays the compilation once per
machine, not once per task.  ``AVAILABLE`` is False when numba cannot be imported;
``records.arrow`` then decodes in Python.
"""

from __future__ import annotations

import logging

from spark_coord.records.header import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CODEC_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    MIN_RECORD_SIZE,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
)

log = logging.getLogger(__name__)

try:
    import numpy as np
    from numba import njit
    from numba.core import cgutils, types
    from numba.extending import intrinsic
except ImportError as e:  # pragma: no cover - exercised on machines without numba
    AVAILABLE = False
    WHY_NOT = str(e)
else:
    AVAILABLE = True
    WHY_NOT = ""

#: Kernel outcomes (``stats[0]``).
OK, INVALID, MORE_HEADERS = 0, 1, 2
#: Positions in the kernel's ``stats`` answer.
_STATUS, _ROWS, _KEY_BYTES, _VALUE_BYTES, _KEY_NULLS, _VALUE_NULLS, _HEADERS, _HKEY_BYTES, _HVALUE_BYTES, \
    _HVALUE_NULLS = range(10)
#: Span columns: records section [start, end), recordsCount, baseOffset, timestamp base, timestamp type.
SPAN_FIELDS = 6
_INT32_LIMIT = 2**31 - 1


def _jit(fn, **kw):
    """``njit`` with the on-disk cache where numba finds a place for it, without it otherwise."""
    try:
        return njit(cache=True, nogil=True, boundscheck=False, **kw)(fn)
    except RuntimeError as e:  # no writable cache location: compile per process
        log.warning("numba cannot cache %s (%s); it is compiled in every process", fn.__name__, e)
        return njit(nogil=True, boundscheck=False, **kw)(fn)


def _memcpy_intrinsic(typingctx, dst, dst_at, src, src_at, n):
    """``dst[dst_at:dst_at + n] = src[src_at:src_at + n]`` as one ``memcpy`` (a loop over
    the bytes, or a slice assignment, costs five times as much in numba)."""
    sig = types.void(dst, dst_at, src, src_at, n)

    def codegen(context, builder, signature, args):
        dst_, dst_at_, src_, src_at_, n_ = args
        dst_array = context.make_array(signature.args[0])(context, builder, dst_)
        src_array = context.make_array(signature.args[2])(context, builder, src_)
        cgutils.raw_memcpy(builder, builder.gep(dst_array.data, [dst_at_]), builder.gep(src_array.data, [src_at_]),
                           n_, 1)

    return sig, codegen


def _decode(d, spans, lo, hi, want_headers, koff, kdata, kvalid, voff, vdata, vvalid, offs, ts, tstype,
            hloff, hkoff, hkdata, hvoff, hvdata, hvvalid, stats):
    """Decode the records of every span of ``d`` into the output arrays; the counts go to ``stats``.

    Rows whose offset is outside ``[lo, hi)`` are validated but not written.  Header
    outputs are written while they have room (``len(hkoff) - 1`` headers); past that
    the headers are only counted and the answer is ``MORE_HEADERS``.  The counts in
    ``stats`` on entry say where the outputs go on (all zero: from the start), so the
    spans of one RecordBatch can come in several calls, each with its own ``d``.

    The helpers are closures: numba inlines them, so no array is passed to a call
    (and reference-counted) inside the loop.
    """

    def uvarint(p, limit):
        # (value as the int64 holding its 64 bits, next position); next -1 past ``limit`` or beyond 64 bits
        if p >= limit:
            return 0, -1
        b = np.int64(d[p])
        if b < 0x80:
            return b, p + 1
        x = b & 0x7F
        shift = 7
        p += 1
        while True:
            if p >= limit:
                return 0, -1
            b = np.int64(d[p])
            p += 1
            if shift == 63 and b > 1:
                return 0, -1
            x |= (b & 0x7F) << shift
            if b < 0x80:
                return x, p
            shift += 7

    def utf8_ok(p, end):
        # well-formed UTF-8: no overlongs, surrogates or code points past U+10FFFF
        while p < end:
            b = d[p]
            if b < 0x80:
                p += 1
                continue
            if 0xC2 <= b <= 0xDF:
                k = 1
            elif 0xE0 <= b <= 0xEF:
                k = 2
            elif 0xF0 <= b <= 0xF4:
                k = 3
            else:
                return False
            if p + k >= end + 1:
                return False
            c = d[p + 1]
            if (c & 0xC0 != 0x80 or (b == 0xE0 and c < 0xA0) or (b == 0xED and c > 0x9F)
                    or (b == 0xF0 and c < 0x90) or (b == 0xF4 and c > 0x8F)):
                return False
            for i in range(2, k + 1):
                if d[p + i] & 0xC0 != 0x80:
                    return False
            p += k + 1
        return True

    # the counts so far: zero for a fresh decode, those of the previous call when it goes on from there
    n = stats[_ROWS]
    kb = stats[_KEY_BYTES]
    vb = stats[_VALUE_BYTES]
    knull = stats[_KEY_NULLS]
    vnull = stats[_VALUE_NULLS]
    nh = stats[_HEADERS]
    hkb = stats[_HKEY_BYTES]
    hvb = stats[_HVALUE_BYTES]
    hvnull = stats[_HVALUE_NULLS]
    hcap = len(hkoff) - 1
    koff[0] = 0
    voff[0] = 0
    hloff[0] = 0
    hkoff[0] = 0
    hvoff[0] = 0
    stats[_STATUS] = INVALID
    for s in range(spans.shape[0]):
        p = spans[s, 0]
        end = spans[s, 1]
        base_offset = spans[s, 3]
        base_ts = spans[s, 4]
        ts_type = np.int32(spans[s, 5])
        for _ in range(spans[s, 2]):
            # length: a zigzag varint, only non-negative lengths are accepted here
            x, p = uvarint(p, end)
            if p < 0 or x < 0 or x & 1 or (x >> 1) > end - p:
                return
            rend = p + (x >> 1)
            p += 1  # attributes
            x, p = uvarint(p, rend)  # timestampDelta
            if p < 0:
                return
            ts_delta = ((x >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(x & 1)
            x, p = uvarint(p, rend)  # offsetDelta: even (non-negative), below 2**32 raw
            if p < 0 or x < 0 or x & 1 or x >= 4294967296:
                return
            offset = base_offset + (x >> 1)
            keep = lo <= offset < hi
            x, p = uvarint(p, rend)  # key
            if p < 0 or x < 0 or (x & 1 and x != 1) or (x >> 1) > rend - p:
                return
            ks = p
            klen = -1 if x & 1 else x >> 1
            if klen > 0:
                p += klen
            x, p = uvarint(p, rend)  # value
            if p < 0 or x < 0 or (x & 1 and x != 1) or (x >> 1) > rend - p:
                return
            vs = p
            vlen = -1 if x & 1 else x >> 1
            if vlen > 0:
                p += vlen
            x, p = uvarint(p, rend)  # header count
            if p < 0 or x < 0 or x & 1 or (x >> 1) > rend - p:
                return
            for _h in range(x >> 1):
                x, p = uvarint(p, rend)  # header key: never null
                if p < 0 or x < 0 or x & 1 or (x >> 1) > rend - p:
                    return
                hks = p
                hkl = x >> 1
                p += hkl
                if want_headers and not utf8_ok(hks, p):
                    return
                x, p = uvarint(p, rend)  # header value
                if p < 0 or x < 0 or (x & 1 and x != 1) or (x >> 1) > rend - p:
                    return
                hvs = p
                hvl = -1 if x & 1 else x >> 1
                if hvl > 0:
                    p += hvl
                if want_headers and keep:
                    if nh < hcap:
                        _memcpy(hkdata, hkb, d, hks, hkl)
                        hkb += hkl
                        hkoff[nh + 1] = hkb
                        if hvl >= 0:
                            hvvalid[nh >> 3] |= np.uint8(1 << (nh & 7))
                            _memcpy(hvdata, hvb, d, hvs, hvl)
                            hvb += hvl
                        else:
                            hvnull += 1
                        hvoff[nh + 1] = hvb
                    nh += 1
            if p != rend:
                return
            if not keep:
                continue
            if klen >= 0:
                kvalid[n >> 3] |= np.uint8(1 << (n & 7))
                _memcpy(kdata, kb, d, ks, klen)
                kb += klen
            else:
                knull += 1
            koff[n + 1] = kb
            if vlen >= 0:
                vvalid[n >> 3] |= np.uint8(1 << (n & 7))
                _memcpy(vdata, vb, d, vs, vlen)
                vb += vlen
            else:
                vnull += 1
            voff[n + 1] = vb
            if kb > 2147483647 or vb > 2147483647 or hkb > 2147483647 or hvb > 2147483647:
                return
            offs[n] = offset
            ts[n] = (base_ts + (0 if ts_type else ts_delta)) * 1000
            tstype[n] = ts_type
            if want_headers:
                hloff[n + 1] = nh
            n += 1
        if p != end:
            return
    stats[_ROWS] = n
    stats[_KEY_BYTES] = kb
    stats[_VALUE_BYTES] = vb
    stats[_KEY_NULLS] = knull
    stats[_VALUE_NULLS] = vnull
    stats[_HEADERS] = nh
    stats[_HKEY_BYTES] = hkb
    stats[_HVALUE_BYTES] = hvb
    stats[_HVALUE_NULLS] = hvnull
    stats[_STATUS] = OK if nh <= hcap else MORE_HEADERS


def encode_rows(rows, parts, koff, kdata, kvalid, voff, vdata, vvalid, hloff, hlvalid, hkoff, hkdata, hvoff, hvdata,
            hvvalid, batch_bytes, gap, out, starts, chunk_parts, chunk_rows, chunk_ends):
    """Encode ``rows`` (indices into the columns) as records (Kafka's ``DefaultRecord``) into ``out``,
    in one pass over the rows whatever partition each goes to: row ``rows[i]`` goes to partition
    ``parts[i]``, whose records are written in the region of ``out`` that starts at
    ``starts[parts[i]]``, cut into chunks of at most ``batch_bytes`` (at least one record each)
    whose offset deltas start at 0, each chunk after ``gap`` bytes left free (room for a batch
    header).  Returns the number of chunks; chunk j holds ``chunk_rows[j]`` records of partition
    ``chunk_parts[j]`` and ends at ``chunk_ends[j]`` (its records start ``gap`` bytes after the end
    of the partition's previous chunk, or of ``starts[partition]`` for its first).  A partition's
    chunks are numbered in order.  Timestamp deltas are 0 (one timestamp per batch).  A column
    that is absent has length-0 arrays; ``hloff`` of length 0 means no headers."""

    def size(v):  # bytes of the unsigned varint ``v`` (v >= 0)
        n = 1
        while v >= 0x80:
            v >>= 7
            n += 1
        return n

    def put(pos, v):  # write unsigned varint ``v`` at ``pos``, return the next position
        while v >= 0x80:
            out[pos] = np.uint8((v & 0x7F) | 0x80)
            v >>= 7
            pos += 1
        out[pos] = np.uint8(v)
        return pos + 1

    has_keys = len(kvalid) > 0
    has_headers = len(hloff) > 0
    npart = len(starts)
    cursor = np.empty(npart, np.int64)  # where each partition's next record goes
    chunk_start = np.empty(npart, np.int64)
    deltas = np.zeros(npart, np.int64)  # records in each partition's open chunk
    for q in range(npart):
        cursor[q] = starts[q] + gap
        chunk_start[q] = cursor[q]
    chunks = 0
    for i in range(len(rows)):
        r = rows[i]
        q = parts[i]
        pos = cursor[q]
        delta = deltas[q]
        klen = koff[r + 1] - koff[r] if has_keys and kvalid[r] else -1
        vlen = voff[r + 1] - voff[r] if vvalid[r] else -1
        h0 = 0
        h1 = 0
        if has_headers and hlvalid[r]:
            h0 = hloff[r]
            h1 = hloff[r + 1]
        body = 2 + size(2 * klen if klen >= 0 else 1) + max(klen, 0) + size(2 * vlen if vlen >= 0 else 1) \
            + max(vlen, 0) + size(2 * (h1 - h0))
        for h in range(h0, h1):
            hk = hkoff[h + 1] - hkoff[h]
            hv = hvoff[h + 1] - hvoff[h] if hvvalid[h] else -1
            body += size(2 * hk) + hk + size(2 * hv if hv >= 0 else 1) + max(hv, 0)
        total = body + size(2 * delta) + size(2 * (body + size(2 * delta)))
        if delta > 0 and pos - chunk_start[q] + total > batch_bytes:
            chunk_parts[chunks] = q
            chunk_rows[chunks] = delta
            chunk_ends[chunks] = pos
            chunks += 1
            pos += gap
            chunk_start[q] = pos
            delta = 0
        body += size(2 * delta)
        pos = put(pos, 2 * body)
        out[pos] = 0  # attributes
        out[pos + 1] = 0  # timestampDelta
        pos = put(pos + 2, 2 * delta)
        if klen >= 0:
            pos = put(pos, 2 * klen)
            _memcpy(out, pos, kdata, koff[r], klen)
            pos += klen
        else:
            out[pos] = 1
            pos += 1
        if vlen >= 0:
            pos = put(pos, 2 * vlen)
            _memcpy(out, pos, vdata, voff[r], vlen)
            pos += vlen
        else:
            out[pos] = 1
            pos += 1
        pos = put(pos, 2 * (h1 - h0))
        for h in range(h0, h1):
            hk = hkoff[h + 1] - hkoff[h]
            pos = put(pos, 2 * hk)
            _memcpy(out, pos, hkdata, hkoff[h], hk)
            pos += hk
            if hvvalid[h]:
                hv = hvoff[h + 1] - hvoff[h]
                pos = put(pos, 2 * hv)
                _memcpy(out, pos, hvdata, hvoff[h], hv)
                pos += hv
            else:
                out[pos] = 1
                pos += 1
        cursor[q] = pos
        deltas[q] = delta + 1
    for q in range(npart):
        if deltas[q] > 0:
            chunk_parts[chunks] = q
            chunk_rows[chunks] = deltas[q]
            chunk_ends[chunks] = cursor[q]
            chunks += 1
    return chunks


def murmur2_partitions(koff, kdata, kvalid, partitions, out):
    """``out[r]`` = Kafka's partition of row ``r``'s key (murmur2, as the Java client), -1 for a null key.

    In int64 arithmetic masked to 32 bits (numba widens 32-bit products)."""
    m = 0x5BD1E995
    mask = 0xFFFFFFFF
    for r in range(len(kvalid)):
        if not kvalid[r]:
            out[r] = -1
            continue
        p = np.int64(koff[r])
        length = np.int64(koff[r + 1]) - p
        h = (0x9747B28C ^ length) & mask
        end4 = length & ~3
        for i in range(0, end4, 4):
            k = (np.int64(kdata[p + i]) | (np.int64(kdata[p + i + 1]) << 8) | (np.int64(kdata[p + i + 2]) << 16)
                 | (np.int64(kdata[p + i + 3]) << 24))
            k = (k * m) & mask
            k ^= k >> 24
            k = (k * m) & mask
            h = ((h * m) & mask) ^ k
        extra = length & 3
        if extra >= 3:
            h ^= np.int64(kdata[p + end4 + 2]) << 16
        if extra >= 2:
            h ^= np.int64(kdata[p + end4 + 1]) << 8
        if extra >= 1:
            h ^= np.int64(kdata[p + end4])
            h = (h * m) & mask
        h ^= h >> 13
        h = (h * m) & mask
        h ^= h >> 15
        out[r] = (h & 0x7FFFFFFF) % partitions


#: ``scan``'s outcome besides a count of batches: something ``records.arrow``'s own walk must look at (it
#: raises the error or decodes what is odd).
SCAN_UNUSUAL = -1
#: Columns of ``scan``'s ``checks``: where a chosen batch starts, its stored CRC, its codec.
CHECK_FIELDS = 3


def _scan(d, start, end_offset, spans, checks, out):
    """The batches of a fetched record set ``d`` that a decode of offsets ``[start, end_offset)`` covers,
    walked as ``records.arrow._choose`` walks them (``reader.iter_batches``: stop at a partial trailing
    batch; control batches and batches outside the range skipped), without a Python step per batch.

    Writes each chosen batch's span (``SPAN_FIELDS`` columns, positions in ``d``: of the compressed
    payload for a compressed batch) and its start, stored CRC and codec while there is room, and answers
    in ``out``: the number of chosen batches (more than the rows of ``spans`` when they did not fit: call
    again with room) or ``SCAN_UNUSUAL``, whether rows must be restricted to the range (a chosen batch
    reaches outside it) and whether a chosen batch is compressed."""

    def big_endian(p, width):  # the unsigned big-endian int of ``width`` bytes at ``p``
        x = np.int64(0)
        for i in range(width):
            x = (x << 8) | np.int64(d[p + i])
        return x

    n = len(d)
    pos = 0
    k = 0
    restrict = 0
    compressed = 0
    out[0] = SCAN_UNUSUAL
    out[1] = 0
    out[2] = 0
    while n - pos >= LOG_OVERHEAD:
        length = big_endian(pos + LENGTH_OFFSET, 4)
        if length >= 2147483648:
            length -= 4294967296
        if length < HEADER_SIZE - LOG_OVERHEAD:  # a partial end, or the Python walk says what is wrong
            if length >= 0 and pos + LOG_OVERHEAD + length > n:
                break
            return
        size = LOG_OVERHEAD + length
        if pos + size > n:
            break
        if d[pos + MAGIC_OFFSET] != MAGIC_V2:
            return
        base = big_endian(pos, 8)
        attributes = big_endian(pos + ATTRIBUTES_OFFSET, 2)
        last_delta = big_endian(pos + LAST_OFFSET_DELTA_OFFSET, 4)
        count = big_endian(pos + RECORDS_COUNT_OFFSET, 4)
        if last_delta >= 2147483648 or count >= 2147483648 or base < 0 or base > 4611686018427387904:
            return  # negative, or offsets near int64's end: Python's ints say what they mean
        at = pos
        pos += size
        if base + last_delta + 1 <= start or attributes & CONTROL_MASK:
            continue
        if base >= end_offset:
            continue
        codec = attributes & CODEC_MASK
        if codec:
            compressed = 1
        elif count * MIN_RECORD_SIZE > size - HEADER_SIZE:
            return  # more records than its bytes can hold
        if base < start or base + last_delta >= end_offset:
            restrict = 1
        if k < spans.shape[0]:
            log_append = 1 if attributes & TIMESTAMP_TYPE_MASK else 0
            spans[k, 0] = at + HEADER_SIZE
            spans[k, 1] = at + size
            spans[k, 2] = count
            spans[k, 3] = base
            spans[k, 4] = big_endian(at + (MAX_TIMESTAMP_OFFSET if log_append else BASE_TIMESTAMP_OFFSET), 8)
            spans[k, 5] = log_append
            checks[k, 0] = at
            checks[k, 1] = big_endian(at + CRC_OFFSET, 4)
            checks[k, 2] = codec
        k += 1
    out[0] = k
    out[1] = restrict
    out[2] = compressed


if AVAILABLE:
    _memcpy = intrinsic(_memcpy_intrinsic)
    _decode = _jit(_decode)
    encode_rows = _jit(encode_rows)
    murmur2_partitions = _jit(murmur2_partitions)
    _scan = _jit(_scan)


def decode(arena, spans, lo: int, hi: int, include_headers: bool, topic: str, partition: int, schema, header_type):
    """The RecordBatch of the records in ``spans`` of ``arena``, or None when the kernel refuses
    the input (the caller then decodes it in Python, which explains why).

    ``arena``: a uint8 numpy array holding every span; ``spans``: int64 array of
    ``SPAN_FIELDS`` columns; rows outside ``[lo, hi)`` are dropped.
    """
    import pyarrow as pa

    rows = int(spans[:, 2].sum()) if len(spans) else 0
    data_cap = int((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0
    header_cap = 4 * rows if include_headers else 0
    while True:
        out = _Outputs(rows, data_cap, header_cap, include_headers)
        _decode(arena, spans, lo, hi, include_headers, *out.arrays())
        status = out.stats[_STATUS]
        if status == OK:
            return out.record_batch(pa, topic, partition, schema, header_type)
        if status != MORE_HEADERS:
            return None
        header_cap = int(out.stats[_HEADERS])


def scan(d, start: int, end_offset: int):
    """``(spans, checks, restrict, compressed)`` of the batches a decode of ``[start, end_offset)`` covers
    in ``d`` (a read-only uint8 array of a fetched record set), or ``SCAN_UNUSUAL`` (see ``_scan``):
    ``spans`` for ``decode``, ``checks`` (start, stored CRC, codec) of each, whether the rows must be
    restricted to the range and whether any of them is compressed."""
    room = 64
    out = np.empty(3, np.int64)
    while True:
        spans = np.empty((room, SPAN_FIELDS), np.int64)
        checks = np.empty((room, CHECK_FIELDS), np.int64)
        _scan(d, start, end_offset, spans, checks, out)
        found = int(out[0])
        if found < 0:
            return found
        if found <= room:
            return spans[:found], checks[:found], bool(out[1]), bool(out[2])
        room = found


def decode_pieces(pieces, count: int, rows: int, data_guess: int, lo: int, hi: int, include_headers: bool,
                  topic: str, partition: int, schema, header_type):
    """Like ``decode``, for records that come one span at a time: ``pieces(i)`` for ``i`` in
    ``range(count)`` gives ``(arena, span, bytes, records)``, a read-only uint8 array, its one span (a
    row of ``SPAN_FIELDS``) and that span's size and recordsCount, or None to give up; the arena
    need only live until the next call (a decompressed batch in a buffer reused for the next one:
    it is decoded while it is still in the processor's cache).  ``rows``: the spans' records in
    all; ``data_guess``: their bytes as far as known (the binary outputs grow when a span needs
    more).  None when ``pieces`` or the kernel gives up (the caller then decodes another way)."""
    import pyarrow as pa

    rows = max(0, min(rows, data_guess // MIN_RECORD_SIZE + 1))  # a hostile recordsCount allocates nothing
    out = _Outputs(rows, max(data_guess, 1), 4 * rows if include_headers else 0, include_headers)
    stats = out.stats
    for i in range(count):
        piece = pieces(i)
        if piece is None:
            return None
        arena, span, size, records = piece
        if size > out.bytes_left or records > out.rows_left:
            out.make_room(size, records)
        out.bytes_left -= size
        out.rows_left -= records
        before = stats.copy() if include_headers else None
        while True:
            _decode(arena, span, lo, hi, include_headers, *out.arrays())
            status = stats[_STATUS]
            if status == OK:
                break
            if status != MORE_HEADERS:
                return None
            needed = int(stats[_HEADERS])
            assert before is not None  # MORE_HEADERS comes only while headers are decoded
            stats[:] = before  # the span again, from where it began, with room for its headers
            out.more_headers(needed)
    return out.record_batch(pa, topic, partition, schema, header_type)


class _Outputs:
    """The kernel's output arrays for at most ``rows`` rows, ``data_cap`` bytes per binary
    column and ``header_cap`` headers.  Data arrays are ``np.empty``: pages never
    written are never touched, so capacities cost address space, not memory."""

    def __init__(self, rows: int, data_cap: int, header_cap: int, include_headers: bool) -> None:
        bitmap = (rows + 7) // 8
        self.koff = np.empty(rows + 1, np.int32)
        self.kdata = np.empty(data_cap, np.uint8)
        self.kvalid = np.zeros(bitmap, np.uint8)
        self.voff = np.empty(rows + 1, np.int32)
        self.vdata = np.empty(data_cap, np.uint8)
        self.vvalid = np.zeros(bitmap, np.uint8)
        self.offs = np.empty(rows, np.int64)
        self.ts = np.empty(rows, np.int64)
        self.tstype = np.empty(rows, np.int32)
        hrows = rows if include_headers else 0
        hdata = data_cap if include_headers else 0
        self.hloff = np.empty(hrows + 1, np.int32)
        self.hkoff = np.empty(header_cap + 1, np.int32)
        self.hkdata = np.empty(hdata, np.uint8)
        self.hvoff = np.empty(header_cap + 1, np.int32)
        self.hvdata = np.empty(hdata, np.uint8)
        self.hvvalid = np.zeros((header_cap + 7) // 8, np.uint8)
        self.stats = np.zeros(10, np.int64)
        self.include_headers = include_headers
        #: rows and bytes (in every binary output) that surely fit without ``make_room``
        self.rows_left = rows
        self.bytes_left = data_cap

    def make_room(self, size: int, records: int) -> None:
        """Room for ``records`` more rows and ``size`` more bytes in every binary output (a span of
        ``size`` bytes holds no more), keeping what the kernel wrote so far."""
        st = self.stats
        n = int(st[_ROWS])
        rows = len(self.offs)
        if n + records > rows:
            cap = max(2 * rows, n + records)
            for name in ("koff", "voff", "hloff", "offs", "ts", "tstype"):
                old = getattr(self, name)
                if name == "hloff" and not self.include_headers:
                    continue
                grown = np.empty(cap + (len(old) - rows), old.dtype)  # offsets: one more than rows
                kept = min(n + 1, len(old))
                grown[:kept] = old[:kept]
                setattr(self, name, grown)
            for name in ("kvalid", "vvalid"):
                grown = np.zeros((cap + 7) // 8, np.uint8)
                grown[:len(getattr(self, name))] = getattr(self, name)
                setattr(self, name, grown)
        for name, used in (("kdata", _KEY_BYTES), ("vdata", _VALUE_BYTES), ("hkdata", _HKEY_BYTES),
                           ("hvdata", _HVALUE_BYTES)):
            data = getattr(self, name)
            if (name[0] == "h" and not self.include_headers) or int(st[used]) + size <= len(data):
                continue
            grown = np.empty(max(2 * len(data), int(st[used]) + size), np.uint8)
            grown[:st[used]] = data[:st[used]]
            setattr(self, name, grown)
        self.rows_left = len(self.offs) - n
        self.bytes_left = min(len(getattr(self, name)) - int(st[used]) for name, used in
                              (("kdata", _KEY_BYTES), ("vdata", _VALUE_BYTES)) + ((("hkdata", _HKEY_BYTES),
                              ("hvdata", _HVALUE_BYTES)) if self.include_headers else ()))

    def more_headers(self, count: int) -> None:
        """Room for at least ``count`` headers in all, keeping those written so far."""
        cap = max(count, 2 * (len(self.hkoff) - 1))
        written = min(int(self.stats[_HEADERS]), len(self.hkoff) - 1)
        for name in ("hkoff", "hvoff"):
            grown = np.empty(cap + 1, np.int32)
            grown[:written + 1] = getattr(self, name)[:written + 1]
            setattr(self, name, grown)
        valid = np.zeros((cap + 7) // 8, np.uint8)
        valid[:len(self.hvvalid)] = self.hvvalid
        self.hvvalid = valid

    def arrays(self) -> tuple:
        """The kernel's output arguments, in its order (``stats`` last)."""
        return (self.koff, self.kdata, self.kvalid, self.voff, self.vdata, self.vvalid, self.offs, self.ts,
                self.tstype, self.hloff, self.hkoff, self.hkdata, self.hvoff, self.hvdata, self.hvvalid, self.stats)

    def record_batch(self, pa, topic: str, partition: int, schema, header_type):
        from spark_coord.records.pa_arrays import constant  # built without pandas (see there)

        st = self.stats
        n = int(st[_ROWS])
        buf = pa.py_buffer
        columns = [
            _binary(pa, pa.binary(), n, self.kvalid, int(st[_KEY_NULLS]), self.koff, self.kdata, int(st[_KEY_BYTES])),
            _binary(pa, pa.binary(), n, self.vvalid, int(st[_VALUE_NULLS]), self.voff, self.vdata,
                    int(st[_VALUE_BYTES])),
            constant(topic, pa.string(), n),
            constant(partition, pa.int32(), n),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.offs[:n])]),
            pa.Array.from_buffers(schema.field("timestamp").type, n, [None, buf(self.ts[:n])]),
            pa.Array.from_buffers(pa.int32(), n, [None, buf(self.tstype[:n])]),
        ]
        if len(schema) > 7:
            nh = int(st[_HEADERS])
            hkeys = _binary(pa, pa.string(), nh, None, 0, self.hkoff, self.hkdata, int(st[_HKEY_BYTES]))
            hvalues = _binary(pa, pa.binary(), nh, self.hvvalid, int(st[_HVALUE_NULLS]), self.hvoff, self.hvdata,
                              int(st[_HVALUE_BYTES]))
            items = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(header_type.value_type))
            columns.append(pa.Array.from_buffers(header_type, n, [None, buf(self.hloff[:n + 1])], children=[items]))
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(pa, type_, n: int, validity, nulls: int, offsets, data, nbytes: int):
    if n == 0:
        return pa.nulls(0, type_)
    if nulls == n:
        return pa.nulls(n, type_)
    bitmap = pa.py_buffer(validity) if nulls else None
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets[:n + 1]), pa.py_buffer(data[:nbytes])],
                                 null_count=nulls)
