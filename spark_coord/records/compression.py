"""Compression codecs of record batch v2 (attributes bits 0-2), backed by ``cramjam``.

Codec ids are Kafka's: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Kafka specifics handled here:

* **snappy**: Java clients write the xerial stream (magic ``b"\\x82SNAPPY\\x00"``, two
  int32 versions, then int32-length-prefixed raw snappy chunks); librdkafka writes one
  raw snappy block.  Both are decompressed.  We *compress* to one raw block: librdkafka
  and kafka-python read raw blocks natively, and the Java client's ``SnappyInputStream``
  falls back to a raw block when the xerial magic is absent.
* **lz4**: magic-2 batches use the standard LZ4 frame format.  The Java client
  decompresses every block on its own (no dictionary carried over), so we write
  independent blocks (``block_linked=False``).  Without a level, LZ4's fast mode
  (``LZ4_DEFAULT_LEVEL``), as librdkafka compresses by default; cramjam's own default
  (level 4) is LZ4 HC, eight times slower for output about a seventh smaller.
* **gzip** and **zstd**: standard single-member gzip / zstd frames.

Decompression is bounded: the output never grows beyond ``max_bytes``
(``DecompressedTooLarge``, a ``ValueError``), whatever sizes a hostile frame claims, so a
small "decompression bomb" costs at most ``max_bytes`` of memory.  Corrupt input raises
``ValueError`` naming the codec.
"""

from __future__ import annotations

import logging
import struct
from typing import Any, Sequence

import cramjam

#: numpy, imported at the first buffer (``_numpy``): a Spark query's driver-side reader process imports
#: this module (through the consumer's fetcher) but never decompresses, and numpy would add a tenth of a
#: second or more to the start of every query.
_np: Any = None

log = logging.getLogger(__name__)

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

#: Default ceiling on the decompressed size of one batch (bytes).
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version (4) + min compatible version (4)
_INT32 = struct.Struct(">i")
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MIN_GUESS = 64 * 1024


class DecompressedTooLarge(ValueError):
    """Decompressed data would exceed the ``max_bytes`` bound (a likely decompression bomb)."""


def codec_name(codec: int) -> str:
    """Kafka's name of ``codec``; ``ValueError`` naming it when unknown."""
    try:
        return CODEC_NAMES[codec]
    except (KeyError, TypeError):
        raise ValueError(f"unknown compression codec {codec!r} "
                         "(known: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)") from None


def codec_id(codec: int | str) -> int:
    """Accept a codec id or a Kafka ``compression.type`` name; return the id."""
    if isinstance(codec, str):
        try:
            return CODEC_IDS[codec.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown compression type {codec!r} (known: {', '.join(CODEC_IDS)})") from None
    codec_name(codec)
    return codec


#: LZ4 frame compression level when none is given: 0, LZ4's fast mode (librdkafka's default;
#: levels from 3 on are LZ4 HC).
LZ4_DEFAULT_LEVEL = 0


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress ``data`` (any bytes-like) as Kafka's ``codec`` expects it inside a batch."""
    name = codec_name(codec)
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        out = cramjam.gzip.compress(data, level=level)
    elif codec == SNAPPY:
        out = cramjam.snappy.compress_raw(data)
    elif codec == LZ4:
        level = LZ4_DEFAULT_LEVEL if level is None else level
        c = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        c.compress(data)
        out = c.finish()
    else:
        out = cramjam.zstd.compress(data, level=level)
    log.debug("compressed %d bytes to %d with %s", len(data), len(out), name)
    return bytes(out)


def decompress(codec: int, data, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress ``data`` written with ``codec``; at most ``max_bytes`` of output."""
    return bytes(decompress_view(codec, data, max_bytes))


def decompress_view(codec: int, data, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
    """Like ``decompress`` but without the final copy: returns a bytes-like object
    (``bytearray`` or ``memoryview``) that the caller owns."""
    name = codec_name(codec)
    if codec == NONE:
        if len(data) > max_bytes:
            raise DecompressedTooLarge(f"{len(data)} bytes exceed the limit of {max_bytes}")
        return memoryview(data)
    try:
        if codec == SNAPPY:
            return _snappy_decompress(data, max_bytes)
        module = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec]
        return _bounded_into(module, name, data, size_hint(codec, data), max_bytes)
    except cramjam.DecompressionError as e:
        raise ValueError(f"corrupt {name} data ({len(data)} bytes): {e}") from None


class Scratch:
    """A buffer reused from one ``decompress_all`` to the next (grown when too small): a reader that
    decompresses fetch after fetch does not map and zero fresh pages for each."""

    def __init__(self) -> None:
        self._buf = None
        #: decompressed / compressed bytes of the batches last decompressed with it: the guess for
        #: frames that do not declare their size (LZ4 frames as most producers write them)
        self.ratio = 4.0

    def take(self, size: int):
        if self._buf is None or len(self._buf) < size:
            self._buf = _buffer(size)
        return self._buf

    def keep(self, buf) -> None:
        """Remember ``buf`` (a larger buffer that replaced the one taken) for next time."""
        if self._buf is None or len(buf) > len(self._buf):
            self._buf = buf


def decompress_all(items: Sequence[tuple[int, bytes | bytearray | memoryview]],
                   max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES, scratch: Scratch | None = None):
    """Every ``(codec, data)`` of ``items`` decompressed one after the other into one buffer:
    ``(buffer, [(start, end), ...])`` (``data`` of codec NONE is copied in).  The records of a
    fetched record set's batches end up side by side without joining separately decompressed
    pieces (one copy of everything less).  Each item still stops at ``max_bytes`` of output.
    With ``scratch`` the buffer is the scratch's (valid until its next use)."""
    # A frame may declare any size (a damaged or hostile zstd header: up to 2**64 bytes); none may
    # produce more than ``max_bytes``, and the buffer grows as needed, so the first guess stays
    # within that too: an allocation of what a header claims would fail before the data is read.
    hints = [len(d) if c == NONE else size_hint(c, d) for c, d in items]
    hints = [None if h is None else min(h, max_bytes) for h in hints]
    guess = min(max_bytes, sum(h if h is not None else max(_MIN_GUESS, 4 * len(d))
                               for h, (_, d) in zip(hints, items, strict=True)))
    out = scratch.take(max(1, guess)) if scratch is not None else _buffer(max(1, guess))
    spans: list[tuple[int, int]] = []
    pos = 0
    for (codec, data), hint in zip(items, hints, strict=True):
        while True:
            room = min(len(out) - pos, max_bytes)
            try:
                n = _decompress_into(codec, data, memoryview(out)[pos:pos + room], max_bytes)
                break
            except _OutOfRoom:
                if room >= max_bytes:
                    raise DecompressedTooLarge(f"{codec_name(codec)} data of {len(data)} bytes decompresses to more "
                                               f"than the limit of {max_bytes} bytes") from None
                bigger = _buffer(max(2 * len(out), pos + min(max_bytes, 2 * max(room, hint or 0, 4 * len(data)))))
                bigger[:pos] = out[:pos]
                out = bigger
                if scratch is not None:
                    scratch.keep(out)
        spans.append((pos, pos + n))
        pos += n
    return out, spans


def decompress_one(codec: int, data, max_bytes: int, scratch: Scratch):
    """``data`` of ``codec`` (not NONE) decompressed into ``scratch``'s buffer: ``(buffer, bytes)``, valid until
    the scratch's next use.  The common case in one call of the codec (into a buffer of the size the
    frame declares, else of ``scratch.ratio`` times its size); anything else -- too little room, corrupt
    data, beyond ``max_bytes`` -- as ``decompress_all`` handles it."""
    module = _INTO.get(codec)
    if module is not None:
        hint = size_hint(codec, data)
        want = hint if hint is not None else int(scratch.ratio * len(data)) + 64
        if 0 < want <= max_bytes:
            buf = scratch.take(want)
            try:
                n = module.decompress_into(data, buf)
            except cramjam.DecompressionError:
                pass  # out of room or corrupt: the careful way below says which
            else:
                if n <= max_bytes:
                    return buf, n
    out, ((_, n),) = decompress_all([(codec, data)], max_bytes, scratch)
    return out, n


#: Codecs cramjam decompresses straight into a buffer.
_INTO = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}


class _OutOfRoom(Exception):
    """The output buffer filled up before the data was decompressed."""


def _decompress_into(codec: int, data, out: memoryview, max_bytes: int) -> int:
    """Decompress ``data`` into the start of ``out``; bytes written, or ``_OutOfRoom``."""
    name = codec_name(codec)
    try:
        if codec in (NONE, SNAPPY):
            piece = data if codec == NONE else _snappy_decompress(data, max_bytes)
            if len(piece) > len(out):
                raise _OutOfRoom
            out[:len(piece)] = piece
            return len(piece)
        module = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec]
        return module.decompress_into(data, out)
    except cramjam.DecompressionError as e:
        if "write whole buffer" in str(e):
            raise _OutOfRoom from None
        raise ValueError(f"corrupt {name} data ({len(data)} bytes): {e}") from None


def _bounded_into(module, name: str, data, hint: int | None, max_bytes: int):
    """Decompress into a buffer that grows by doubling up to ``max_bytes``.

    cramjam stops writing (and fails) once the output buffer is full, so a bomb is
    cut off after at most ``max_bytes`` of work and memory.
    """
    size = hint if hint is not None else max(_MIN_GUESS, 4 * len(data))
    size = max(1, min(size, max_bytes))
    while True:
        buf = _buffer(size)
        try:
            n = module.decompress_into(data, buf)
        except cramjam.DecompressionError as e:
            if "write whole buffer" not in str(e):
                raise
            if size >= max_bytes:
                raise DecompressedTooLarge(f"{name} data of {len(data)} bytes decompresses to more than the limit "
                                           f"of {max_bytes} bytes") from None
            size = min(size * 2, max_bytes)
            continue
        return memoryview(buf)[:n] if n != size else memoryview(buf)


def _buffer(size: int):
    """A writable buffer of ``size`` bytes; uninitialised (numpy) where possible: zeroing it first
    would cost a pass over memory that decompression overwrites anyway."""
    np = _numpy()
    if np is False:
        return bytearray(size)
    return np.empty(size, np.uint8)


def _numpy():
    """numpy, or False without it (numpy comes with numba; without it buffers are bytearrays)."""
    global _np
    if _np is None:
        try:
            import numpy
            _np = numpy
        except ImportError:  # pragma: no cover
            _np = False
    return _np


def size_hint(codec: int, data) -> int | None:
    """The decompressed size a frame header declares, if any (only a starting guess:
    hostile headers lie, the doubling loop and ``max_bytes`` bound the real work)."""
    mv = memoryview(data)
    n = len(mv)
    if codec == GZIP and n >= 18:
        # ISIZE: size mod 2**32 of a single member; deflate cannot expand beyond 1032:1
        return min(int.from_bytes(mv[n - 4:], "little"), 1032 * n)
    if codec == LZ4 and n >= 15 and mv[:4] == _LZ4_MAGIC and mv[4] & 0x08:
        return min(int.from_bytes(mv[6:14], "little"), 256 * n)
    if codec == ZSTD and n >= 6 and mv[:4] == _ZSTD_MAGIC:
        fhd = mv[4]
        fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
        pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
        size = (1 if single else 0, 2, 4, 8)[fcs_flag]
        if size == 0 or pos + size > n:
            return None
        value = int.from_bytes(mv[pos:pos + size], "little")
        return value + 256 if size == 2 else value
    return None


def _snappy_decompress(data, max_bytes: int):
    """Raw snappy block or xerial stream; sizes are exact, so checked before allocating."""
    mv = memoryview(data)
    if mv[:len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        size = cramjam.snappy.decompress_raw_len(mv)
        _check_limit("snappy", size, len(mv), max_bytes)
        buf = bytearray(size)
        cramjam.snappy.decompress_raw_into(mv, buf)
        return buf
    if len(mv) < _XERIAL_HEADER_SIZE:
        raise ValueError(f"corrupt snappy data: truncated xerial header ({len(mv)} bytes)")
    chunks, total, pos = [], 0, _XERIAL_HEADER_SIZE
    while pos < len(mv):
        if len(mv) - pos < 4:
            raise ValueError(f"corrupt snappy data: truncated xerial chunk length at byte {pos}")
        (clen,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if clen < 0 or clen > len(mv) - pos:
            raise ValueError(f"corrupt snappy data: xerial chunk of {clen} bytes at byte {pos - 4}, "
                             f"{len(mv) - pos} remain")
        chunk = mv[pos:pos + clen]
        pos += clen
        ulen = cramjam.snappy.decompress_raw_len(chunk)
        total += ulen
        _check_limit("snappy", total, len(mv), max_bytes)
        chunks.append((chunk, ulen))
    buf = bytearray(total)
    out, at = memoryview(buf), 0
    for chunk, ulen in chunks:
        at += cramjam.snappy.decompress_raw_into(chunk, out[at:at + ulen])
    return buf


def _check_limit(name: str, size: int, compressed: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise DecompressedTooLarge(
            f"{name} data of {compressed} bytes declares {size} decompressed bytes, above the limit of {max_bytes}")
