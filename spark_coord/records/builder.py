"""Build one record batch v2 (what a producer sends in Produce).

Each ``append`` encodes one record (Kafka's ``DefaultRecord``)::

    length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | (headerKeyLength varint | key utf-8 | headerValueLength varint | value)*

with zigzag varints, -1 meaning null.  ``build`` compresses the records (codec in
attributes bits 0-2), fills the 61-byte header (``records.header.HEADER``), and stamps
the CRC-32C over bytes [21, end).  Timestamps are CreateTime: ``baseTimestamp`` is the
first record's, ``maxTimestamp`` the largest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from spark_coord.records import compression
from spark_coord.records.header import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    crc32c,
)
from spark_coord.records.varint import encode_varint

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


_NULL = encode_varint(-1)


def _as_bytes(what: str, data) -> bytes | bytearray | memoryview | None:
    if data is None or isinstance(data, (bytes, bytearray, memoryview)):
        return data
    raise TypeError(f"record {what} must be bytes-like or None, not {type(data).__name__}")


def encode_record(offset_delta: int, timestamp_delta: int, key, value,
                  headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """One encoded record, its length prefix included."""
    parts: list[bytes | bytearray | memoryview] = [b"\x00", encode_varint(timestamp_delta),
                                                   encode_varint(offset_delta)]
    for data in (key, value):
        if data is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(data)))
            parts.append(data)
    parts.append(encode_varint(len(headers)))
    for hkey, hvalue in headers:
        if isinstance(hkey, str):
            raw_key: bytes | bytearray | memoryview = hkey.encode("utf-8")
        elif isinstance(hkey, (bytes, bytearray, memoryview)):
            raw_key = hkey
        else:
            raise TypeError(f"header key must be str, not {type(hkey).__name__}")
        parts.append(encode_varint(len(raw_key)))
        parts.append(raw_key)
        raw_value = _as_bytes("header value", hvalue)
        if raw_value is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(raw_value)))
            parts.append(raw_value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


class BatchBuilder:
    """Accumulates records and builds one v2 batch.

    ``codec`` is a Kafka codec id (0-4) or a ``compression.type`` name.  Producer id,
    epoch and base sequence default to -1 (not idempotent), as a plain producer sends.
    ``build`` does not consume the builder: it can be called again (for example with
    another base offset) and more records can be appended afterwards.
    """

    def __init__(self, codec: int | str = 0, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, is_transactional: bool = False,
                 partition_leader_epoch: int = -1, compression_level: int | None = None) -> None:
        self.codec = compression.codec_id(codec)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.partition_leader_epoch = partition_leader_epoch
        self.compression_level = compression_level
        self._records: list[bytes] = []
        self._size = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = -1

    def __len__(self) -> int:
        return len(self._records)

    @property
    def size_estimate(self) -> int:
        """Bytes of the batch if built now, before compression (an upper bound in practice)."""
        return HEADER_SIZE + self._size

    def append(self, value, key=None, headers: Sequence[tuple[str, bytes | None]] = (),
               timestamp_ms: int | None = None) -> int:
        """Add one record; returns its offset delta within the batch.

        ``value``/``key``: bytes-like or None.  ``headers``: (str, bytes or None) pairs.
        ``timestamp_ms``: CreateTime in ms since the epoch (now when omitted).
        """
        value = _as_bytes("value", value)
        key = _as_bytes("key", key)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        base = timestamp_ms if self._base_timestamp is None else self._base_timestamp
        delta = len(self._records)
        if delta >= _INT32_MAX:
            raise ValueError("a batch holds at most 2**31-1 records")
        rec = encode_record(delta, timestamp_ms - base, key, value, headers)
        self._base_timestamp = base
        self._records.append(rec)
        self._size += len(rec)
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return delta

    def build(self, base_offset: int = 0) -> bytes:
        """The complete batch: header, (compressed) records, CRC-32C."""
        base_timestamp = self._base_timestamp  # set by the first append
        if not self._records or base_timestamp is None:
            raise ValueError("cannot build an empty record batch")
        return assemble_batch(b"".join(self._records), len(self._records), self.codec, base_timestamp,
                              self._max_timestamp, base_offset=base_offset, producer_id=self.producer_id,
                              producer_epoch=self.producer_epoch, base_sequence=self.base_sequence,
                              is_transactional=self.is_transactional,
                              partition_leader_epoch=self.partition_leader_epoch,
                              compression_level=self.compression_level)


def assemble_batch(payload, count: int, codec: int, base_timestamp: int, max_timestamp: int, *, base_offset: int = 0,
                   producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   is_transactional: bool = False, partition_leader_epoch: int = -1,
                   compression_level: int | None = None) -> bytes:
    """A complete batch around ``count`` encoded records (``payload``): compression, header, CRC-32C."""
    if codec:
        payload = compression.compress(codec, payload if isinstance(payload, bytes) else bytes(payload),
                                       compression_level)
    header = bytearray(HEADER_SIZE)
    _pack_header(header, len(payload), count, codec | (TRANSACTIONAL_MASK if is_transactional else 0),
                 base_timestamp, max_timestamp, base_offset=base_offset, producer_id=producer_id,
                 producer_epoch=producer_epoch, base_sequence=base_sequence,
                 partition_leader_epoch=partition_leader_epoch)
    crc = crc32c(payload, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    header[CRC_OFFSET:CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(header) + payload  # the payload's one copy


def control_batch(marker: int, producer_id: int, producer_epoch: int, base_offset: int = 0, *,
                  coordinator_epoch: int = 0, timestamp_ms: int | None = None) -> bytes:
    """A transaction marker as Kafka's transaction coordinator has the partition leader write it: a
    control batch (attributes: transactional and control) of one record whose key is
    ``version int16 (0) | type int16`` (``marker``: ``reader.ABORT_MARKER`` 0 or ``reader.COMMIT_MARKER`` 1)
    and whose value is ``version int16 (0) | coordinatorEpoch int32``."""
    if marker not in (0, 1):
        raise ValueError(f"control marker type must be 0 (abort) or 1 (commit), got {marker!r}")
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    key = (0).to_bytes(2, "big") + marker.to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + coordinator_epoch.to_bytes(4, "big", signed=True)
    payload = encode_record(0, 0, key, value)
    header = bytearray(HEADER_SIZE)
    _pack_header(header, len(payload), 1, TRANSACTIONAL_MASK | CONTROL_MASK, ts, ts, base_offset=base_offset,
                 producer_id=producer_id, producer_epoch=producer_epoch)
    crc = crc32c(payload, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    header[CRC_OFFSET:CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(header) + payload


def _pack_header(buf, payload_bytes: int, count: int, attributes: int, base_timestamp: int, max_timestamp: int, *,
                 base_offset: int = 0, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1) -> None:
    """Write the header of a batch of ``count`` records in ``payload_bytes`` at the start of ``buf``,
    its CRC left 0."""
    batch_length = HEADER_SIZE - LOG_OVERHEAD + payload_bytes
    if batch_length > _INT32_MAX:
        raise ValueError(f"batch of {batch_length} bytes does not fit Kafka's int32 length")
    HEADER.pack_into(buf, 0, base_offset, batch_length, partition_leader_epoch, MAGIC_V2, 0, attributes, count - 1,
                     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count)


class ArrowColumns:
    """The Kafka columns of one Arrow record batch as flat arrays, for ``arrow_batches``.

    ``keys``/``values``: binary or string arrays (or None: all null); ``headers``:
    ``list<struct<key: string, value: binary or string>>`` (or None).  Nothing is copied
    unless a column has 64-bit offsets.  A null header entry or header key raises
    ``ValueError``.
    """

    def __init__(self, keys, values, headers=None) -> None:
        import numpy as np

        self.rows = len(values)
        self.kvalid = np.zeros(0, np.uint8)
        self.koff, self.kdata = np.zeros(1, np.int32), np.zeros(0, np.uint8)
        if keys is not None and keys.null_count < len(keys):
            self.koff, self.kdata, self.kvalid = _binary_parts(keys)
        self.voff, self.vdata, self.vvalid = _binary_parts(values)
        self.hloff = np.zeros(0, np.int32)
        self.hlvalid = self.kvalid[:0]
        self.hkoff, self.hkdata = np.zeros(1, np.int32), np.zeros(0, np.uint8)
        self.hvoff, self.hvdata, self.hvvalid = np.zeros(1, np.int32), np.zeros(0, np.uint8), np.zeros(0, np.uint8)
        if headers is not None and headers.null_count < len(headers):
            self._headers(headers)

    def _headers(self, headers) -> None:
        import numpy as np
        import pyarrow.compute as pc

        items = headers.values  # the whole child array: the list offsets index into it
        if items.null_count:
            used = items.slice(headers.offsets[0].as_py(), headers.offsets[-1].as_py() - headers.offsets[0].as_py())
            if used.null_count:
                raise ValueError("column 'headers': a header entry is null (each needs a key)")
        hkeys, hvalues = items.field(0), items.field(1)
        if hkeys.null_count:
            raise ValueError("column 'headers': a header key is null")
        self.hloff = np.frombuffer(headers.offsets.buffers()[1], np.int32, len(headers) + 1, headers.offsets.offset * 4)
        self.hlvalid = np.asarray(pc.is_valid(headers).to_numpy(zero_copy_only=False), np.uint8)
        self.hkoff, self.hkdata, _ = _binary_parts(hkeys)
        self.hvoff, self.hvdata, self.hvvalid = _binary_parts(hvalues)

    def row_bytes(self, rows):
        """Key and value bytes of each of ``rows`` (row indices), nulls counting 0."""
        import numpy as np

        rows = np.asarray(rows, np.int64)
        out = np.zeros(len(rows), np.int64)
        for off, valid in ((self.koff, self.kvalid), (self.voff, self.vvalid)):
            if len(valid):
                out += (off[rows + 1] - off[rows]) * valid[rows]
        return out

    def key_partitions(self, partitions: int):
        """Kafka's (murmur2) partition of each row's key, -1 where the key is null."""
        import numpy as np

        from spark_coord.records import arrow_jit

        out = np.full(self.rows, -1, np.int64)
        if not len(self.kvalid):
            return out
        if arrow_jit.AVAILABLE:
            arrow_jit.murmur2_partitions(_readonly(self.koff), _readonly(self.kdata), _readonly(self.kvalid),
                                          partitions, out)
            return out
        from spark_coord.records.partitioner import partition_for_key

        for r in np.flatnonzero(self.kvalid):
            out[r] = partition_for_key(bytes(self.kdata[self.koff[r]:self.koff[r + 1]]), partitions)
        return out


def _readonly(a):
    """A read-only view of ``a``: the compiled kernels then see one type per input, whichever
    buffer it came from, and are compiled (and cached) once."""
    view = a.view()
    view.flags.writeable = False
    return view


def _binary_parts(arr):
    """(offsets into data, data, validity bytes) of a binary or string array, without copying."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary())
    elif pa.types.is_string(arr.type):
        arr = arr.view(pa.binary())
    elif not pa.types.is_binary(arr.type):
        raise TypeError(f"expected a binary or string column, got {arr.type}")
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, len(arr) + 1, arr.offset * 4)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None and buffers[2].size else np.zeros(0, np.uint8)
    valid = np.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False), np.uint8)
    return offsets, data, valid


def arrow_batches(cols: ArrowColumns, rows, codec: int, batch_bytes: int, timestamp_ms: int,
                  compression_level: int | None = None, arena: "BatchArena | None" = None
                  ) -> list[tuple[bytes | memoryview, int]]:
    """Record batches (bytes-like, record count) holding ``rows`` (row indices, in order) of ``cols``, each
    at most ``batch_bytes`` before compression (or one record), all stamped ``timestamp_ms``.

    Compiled (numba) where available: no Python runs per record.  Otherwise the records
    go through ``BatchBuilder`` one by one.  Uncompressed batches are built in place in memory
    of their own, or taken from ``arena`` when given (they are then valid until its ``reset()``).
    """
    import numpy as np

    rows = np.asarray(rows, np.int64)
    return arrow_batches_by_partition(cols, rows, np.zeros(len(rows), np.int64), 1, codec, batch_bytes, timestamp_ms,
                                      compression_level, arena).get(0, [])


def arrow_batches_by_partition(cols: ArrowColumns, rows, parts, partitions: int, codec: int, batch_bytes: int,
                               timestamp_ms: int, compression_level: int | None = None,
                               arena: "BatchArena | None" = None, producer: tuple[int, int] | None = None,
                               sequences: dict[int, int] | None = None, transactional: bool = False
                               ) -> dict[int, list[tuple[bytes | memoryview, int]]]:
    """``arrow_batches`` of the rows of each partition at once: row ``rows[i]`` goes to partition
    ``parts[i]`` (``0 <= parts[i] < partitions``); each partition's rows keep their order in ``rows``.
    Partitions without rows are absent from the answer.

    ``producer`` (producer id, epoch) makes the batches an idempotent producer's: each batch of
    partition ``q`` gets base sequence ``sequences[q]`` (0 when absent), which then moves past
    its records (wrapping at 2**31 as Kafka's sequences do), so they must be sent in order.
    ``transactional`` sets the attributes' transactional bit (bit 4) in every batch header before its
    CRC-32C is computed: a transactional producer's batches (Kafka refuses unmarked ones from it with
    INVALID_TXN_STATE), built marked instead of copied and checksummed again afterwards.

    The compiled encoder walks ``rows`` once, writing each record into its partition's region of
    one buffer: for rows of several partitions spread over a large Arrow batch, one pass in
    order reads the columns from memory once instead of once per partition, in an order the
    processor prefetches (three times faster per record than a pass per partition).
    """
    import numpy as np

    from spark_coord.records import arrow_jit

    rows = np.asarray(rows, np.int64)
    parts = np.asarray(parts, np.int64)
    if len(parts) != len(rows):
        raise ValueError(f"{len(parts)} partitions given for {len(rows)} rows")
    if not len(rows):
        return {}
    if int(parts.min()) < 0 or int(parts.max()) >= partitions:
        raise ValueError(f"partition {int(parts.min()) if parts.min() < 0 else int(parts.max())} is not one of "
                         f"0..{partitions - 1}")
    if not arrow_jit.AVAILABLE:
        return {int(q): _arrow_batches_python(cols, rows[parts == q], codec, batch_bytes, timestamp_ms,
                                              compression_level, producer, sequences, int(q), transactional)
                for q in np.unique(parts)}
    counts = np.bincount(parts, minlength=partitions)
    bounds = np.bincount(parts, weights=_encoded_bounds(cols, rows), minlength=partitions).astype(np.int64)
    # Two consecutive chunks hold more than batch_bytes, so there are at most 2 * bound / batch_bytes + 1.
    regions = bounds + HEADER_SIZE * np.minimum(counts, 2 * bounds // max(batch_bytes, 1) + 2)
    starts = np.zeros(partitions, np.int64)
    np.cumsum(regions[:-1], out=starts[1:])
    total = int(regions.sum())
    # Uncompressed: the batches are built in place, in a buffer of their own (no copy); compressed:
    # the records are compressed out of a reused buffer.
    if codec:
        out = _scratch(total)
    else:
        out = arena.take(total) if arena is not None else np.empty(total, np.uint8)
    chunk_parts = np.empty(len(rows), np.int64)
    chunk_rows = np.empty(len(rows), np.int64)
    chunk_ends = np.empty(len(rows), np.int64)
    inputs = [rows, parts, cols.koff, cols.kdata, cols.kvalid, cols.voff, cols.vdata, cols.vvalid, cols.hloff,
              cols.hlvalid, cols.hkoff, cols.hkdata, cols.hvoff, cols.hvdata, cols.hvvalid]
    args = [*map(_readonly, inputs), batch_bytes, HEADER_SIZE, out, _readonly(starts), chunk_parts, chunk_rows,
            chunk_ends]
    chunks = arrow_jit.encode_rows(*args)
    batches: dict[int, list[tuple[bytes | memoryview, int]]] = {}
    previous = starts.tolist()  # where each partition's next batch starts
    view = memoryview(out)
    pid, epoch = producer if producer is not None else (-1, -1)
    batch: bytes | memoryview  # compressed: a new bytes; otherwise the batch built in place
    for q, count, end in zip(chunk_parts[:chunks].tolist(), chunk_rows[:chunks].tolist(),
                             chunk_ends[:chunks].tolist(), strict=True):
        start, previous[q] = previous[q], end
        sequence = _take_sequence(sequences, q, count) if producer is not None else -1
        if codec:
            batch = assemble_batch(view[start + HEADER_SIZE:end], count, codec, timestamp_ms, timestamp_ms,
                                   compression_level=compression_level, producer_id=pid, producer_epoch=epoch,
                                   base_sequence=sequence, is_transactional=transactional)
        else:
            batch = _batch_in_place(view[start:end], count, timestamp_ms, pid, epoch, sequence, transactional)
        batches.setdefault(q, []).append((batch, count))
    return batches


#: Sequences wrap from 2**31 - 1 to 0 (Kafka's rule).
_SEQUENCE_SPAN = 2**31


def _take_sequence(sequences: dict | None, key, count: int) -> int:
    """The base sequence of the next batch of ``key`` (``count`` records), moving ``sequences`` past it."""
    if sequences is None:
        return 0
    first = sequences.get(key, 0)
    sequences[key] = (first + count) % _SEQUENCE_SPAN
    return first


def _batch_in_place(buf: memoryview, count: int, timestamp_ms: int, producer_id: int = -1, producer_epoch: int = -1,
                    base_sequence: int = -1, transactional: bool = False) -> memoryview:
    """The uncompressed batch whose records follow ``HEADER_SIZE`` free bytes in ``buf``: its
    header (transactional bit set with ``transactional``) and CRC-32C written there.  Returns ``buf``
    read-only."""
    _pack_header(buf, len(buf) - HEADER_SIZE, count, TRANSACTIONAL_MASK if transactional else 0, timestamp_ms,
                 timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)
    buf[CRC_OFFSET:CRC_OFFSET + 4] = crc32c(buf[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return buf.toreadonly()


class BatchArena:
    """Memory for uncompressed record batches, reused from one round of ``arrow_batches`` calls to
    the next: a producer takes the batches of a round, sends them, and calls ``reset()`` once no
    batch of the round is used any more (sent and acknowledged, no retry left).

    Fresh memory costs more than the encoding: the kernel maps and zeroes every page on first
    touch, four times the encoder's own time per record.  ``take`` carves arrays from blocks kept
    across rounds; after a round that needed more than one block, ``reset`` replaces them with
    one block of their total size.  More than ``max_block`` bytes are not kept.
    """

    def __init__(self, max_block: int = 256 * 1048576) -> None:
        self.max_block = max_block
        self._blocks: list = []
        self._used = 0  # bytes taken from the last block

    def take(self, size: int):
        """A uint8 array of ``size`` bytes, valid until ``reset()``."""
        import numpy as np

        if self._blocks and self._used + size <= len(self._blocks[-1]):
            start = self._used
        else:
            self._blocks.append(np.empty(max(size, _ARENA_BLOCK), np.uint8))
            start = 0
        self._used = start + size
        return self._blocks[-1][start:start + size]

    def reset(self) -> None:
        """Make all memory taken so far available again: nothing may use it any more."""
        import numpy as np

        total = self.nbytes
        if total > self.max_block:
            self._blocks = []
        elif len(self._blocks) > 1:
            self._blocks = [np.empty(total, np.uint8)]
        self._used = 0

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return sum(len(b) for b in self._blocks)


#: The size of a ``BatchArena``'s first block.
_ARENA_BLOCK = 8 * 1048576

_scratches = threading.local()


def _scratch(size: int):
    """A uint8 buffer of ``size`` bytes reused by this thread's calls (fresh pages for every call
    cost more than the encoding).  Its largest size is kept, 64 MiB at most, beyond which a
    call gets a buffer of its own."""
    import numpy as np

    buf = getattr(_scratches, "buf", None)
    if buf is not None and len(buf) >= size:
        return buf[:size]
    buf = np.empty(size, np.uint8)
    if size <= _SCRATCH_MAX:
        _scratches.buf = buf
    return buf


_SCRATCH_MAX = 64 * 1048576


def _encoded_bounds(cols: ArrowColumns, rows):
    """Bytes that encoding each of ``rows`` cannot exceed (int64 array; varints at most 5 bytes for
    lengths below 2**31, 30 bytes of them per record, 10 per header)."""
    import numpy as np

    size = np.full(len(rows), 30, np.int64)
    for off, valid in ((cols.koff, cols.kvalid), (cols.voff, cols.vvalid)):
        if len(valid):
            size += off[rows + 1] - off[rows]
    if len(cols.hloff):
        # Bytes of each header (key and value), summed: a row's are the difference of two sums.
        each = np.diff(cols.hkoff).astype(np.int64) + np.diff(cols.hvoff)
        upto = np.zeros(len(each) + 1, np.int64)
        np.cumsum(each, out=upto[1:])
        first, last = cols.hloff[rows], cols.hloff[rows + 1]
        size += 10 * (last - first) + upto[last] - upto[first]
    return size


def _arrow_batches_python(cols: ArrowColumns, rows, codec: int, batch_bytes: int, timestamp_ms: int,
                          compression_level: int | None, producer: tuple[int, int] | None = None,
                          sequences: dict[int, int] | None = None, partition: int = 0,
                          transactional: bool = False) -> list[tuple[bytes | memoryview, int]]:
    def field(off, data, valid, i):
        if not len(valid) or not valid[i]:
            return None
        return bytes(data[off[i]:off[i + 1]])

    def built(builder: BatchBuilder) -> tuple[bytes, int]:
        builder.is_transactional = transactional
        if producer is not None:
            builder.producer_id, builder.producer_epoch = producer
            builder.base_sequence = _take_sequence(sequences, partition, len(builder))
        return builder.build(), len(builder)

    batches: list[tuple[bytes | memoryview, int]] = []
    builder = BatchBuilder(codec, compression_level=compression_level)
    for r in rows.tolist():
        headers = []
        if len(cols.hloff) and cols.hlvalid[r]:
            for h in range(cols.hloff[r], cols.hloff[r + 1]):
                headers.append((bytes(cols.hkdata[cols.hkoff[h]:cols.hkoff[h + 1]]).decode("utf-8"),
                                field(cols.hvoff, cols.hvdata, cols.hvvalid, h)))
        if len(builder) and builder.size_estimate - HEADER_SIZE >= batch_bytes:
            batches.append(built(builder))
            builder = BatchBuilder(codec, compression_level=compression_level)
        builder.append(field(cols.voff, cols.vdata, cols.vvalid, r), key=field(cols.koff, cols.kdata, cols.kvalid, r),
                       headers=headers, timestamp_ms=timestamp_ms)
    batches.append(built(builder))
    return batches
