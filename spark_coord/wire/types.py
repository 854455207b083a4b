"""Kafka's primitive wire types: a bounded ``Reader`` and a part-collecting ``Writer``.

The reader treats its input as hostile.  Every length or element count is checked
against the bytes that remain *before* anything is allocated, so a 20-byte frame
that claims a two-billion-element array fails at once instead of building a huge
list (the class of Kafka's CVE-2022-34917).  Every failure -- truncation, an
impossible length, bad UTF-8, an over-long varint -- is a ``ProtocolError``, the one
exception a server has to catch to drop a bad connection.

The writer keeps bytes in a growing buffer and keeps ``FileRegion`` slices of
segment files as separate parts, so a Fetch response can be sent with sendfile
without ever reading the log into memory.
"""

from __future__ import annotations

import builtins
import struct
from typing import Literal, Union, overload

from spark_coord.records.region import FileRegion
from spark_coord.records.varint import VarintError, encode_uvarint, read_uvarint

__all__ = ["ProtocolError", "EncodeError", "Reader", "Writer", "Part"]

Part = Union[bytes, memoryview, FileRegion]  # memoryviews only read-only ones (Writer.chunk)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

_UUID_SIZE = 16


class ProtocolError(Exception):
    """Malformed or truncated input.  A server closes the connection that sent it."""


class EncodeError(ValueError):
    """A value cannot be encoded (wrong type, out of range).  Always a bug in the caller."""


class Reader:
    """Sequential, bounds-checked reads over a bytes-like object (never copies the input)."""

    __slots__ = ("_buf", "_pos", "_end")

    def __init__(self, data, start: int = 0, end: int | None = None):
        buf = data if isinstance(data, memoryview) else memoryview(data)
        if buf.ndim != 1 or buf.itemsize != 1:
            buf = buf.cast("B")
        self._buf = buf
        self._pos = start
        self._end = len(buf) if end is None else end

    # ------------------------------------------------------------------ position
    @property
    def pos(self) -> int:
        return self._pos

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def _need(self, n: int) -> int:
        """Reserve ``n`` bytes and return the position where they start."""
        pos = self._pos
        if n < 0 or pos + n > self._end:
            raise ProtocolError(f"truncated input: need {n} bytes at position {pos}, {self._end - pos} remain")
        self._pos = pos + n
        return pos

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes as a zero-copy view."""
        pos = self._need(n)
        return self._buf[pos:pos + n]

    def skip(self, n: int) -> None:
        self._need(n)

    def sub(self, n: int) -> "Reader":
        """A reader over the next ``n`` bytes (which this reader skips)."""
        pos = self._need(n)
        return Reader(self._buf, pos, pos + n)

    def expect_end(self, what: str = "message") -> None:
        if self._pos != self._end:
            raise ProtocolError(f"{self._end - self._pos} unexpected trailing bytes after the {what}")

    # ---------------------------------------------------------------- fixed size
    def int8(self) -> int:
        return _I8.unpack_from(self._buf, self._need(1))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self._buf, self._need(2))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self._buf, self._need(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self._buf, self._need(4))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self._buf, self._need(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self._buf, self._need(8))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self._buf, self._need(8))[0]

    def bool(self) -> bool:
        return self._buf[self._need(1)] != 0

    def uuid(self) -> bytes:
        pos = self._need(_UUID_SIZE)
        return bytes(self._buf[pos:pos + _UUID_SIZE])

    # ------------------------------------------------------------------- varints
    def _uvar(self, max_bytes: int) -> int:
        try:
            value, self._pos = read_uvarint(self._buf, self._pos, self._end, max_bytes)
        except VarintError as e:
            raise ProtocolError(str(e)) from None
        return value

    def uvarint(self) -> int:
        """Unsigned varint (at most 32 bits), as used for compact lengths and tags."""
        value = self._uvar(5)
        if value > 0xFFFFFFFF:
            raise ProtocolError("unsigned varint does not fit in 32 bits")
        return value

    def varint(self) -> int:
        """Zigzag-encoded signed 32-bit varint."""
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def uvarlong(self) -> int:
        value = self._uvar(10)
        if value > 0xFFFFFFFFFFFFFFFF:
            raise ProtocolError("unsigned varlong does not fit in 64 bits")
        return value

    def varlong(self) -> int:
        """Zigzag-encoded signed 64-bit varint."""
        raw = self.uvarlong()
        return (raw >> 1) ^ -(raw & 1)

    # ------------------------------------------------------------------- lengths
    @overload
    def _length(self, compact: builtins.bool, nullable: Literal[False], wide: builtins.bool, what: str) -> int: ...

    @overload
    def _length(self, compact: builtins.bool, nullable: builtins.bool, wide: builtins.bool,
                what: str) -> int | None: ...

    def _length(self, compact: builtins.bool, nullable: builtins.bool, wide: builtins.bool, what: str) -> int | None:
        """A length prefix: int16/int32 (-1 = null) or compact uvarint (0 = null, else N+1).

        The length is checked against the bytes remaining; None means null.
        """
        if compact:
            n = self.uvarint() - 1
        else:
            n = self.int32() if wide else self.int16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise ProtocolError(f"invalid {what} length {n}")
        if n > self._end - self._pos:
            raise ProtocolError(f"{what} length {n} exceeds the {self._end - self._pos} bytes remaining")
        return n

    def _decode_str(self, n: int) -> str:
        pos = self._need(n)
        try:
            return str(self._buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"invalid UTF-8 in string at position {pos}") from e

    def string(self) -> str:
        return self._decode_str(self._length(False, False, False, "string"))

    def nullable_string(self) -> str | None:
        n = self._length(False, True, False, "string")
        return None if n is None else self._decode_str(n)

    def compact_string(self) -> str:
        return self._decode_str(self._length(True, False, False, "string"))

    def compact_nullable_string(self) -> str | None:
        n = self._length(True, True, False, "string")
        return None if n is None else self._decode_str(n)

    def bytes_(self) -> memoryview:
        return self.take(self._length(False, False, True, "bytes"))

    def nullable_bytes(self) -> memoryview | None:
        n = self._length(False, True, True, "bytes")
        return None if n is None else self.take(n)

    def compact_bytes(self) -> memoryview:
        return self.take(self._length(True, False, False, "bytes"))

    def compact_nullable_bytes(self) -> memoryview | None:
        n = self._length(True, True, False, "bytes")
        return None if n is None else self.take(n)

    def array_length(self, min_element_size: int, compact: builtins.bool, nullable: builtins.bool) -> int | None:
        """An array's element count, refused unless ``count * min_element_size`` bytes remain.

        ``min_element_size`` is at least 1, so even arrays of empty structs cannot make
        the decoder loop more often than there are bytes left.
        """
        if compact:
            n = self.uvarint() - 1
        else:
            n = self.int32()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise ProtocolError(f"invalid array length {n}")
        need = n * max(1, min_element_size)
        if need > self._end - self._pos:
            raise ProtocolError(
                f"array of {n} elements needs at least {need} bytes, {self._end - self._pos} remain")
        return n

    def tagged_field_count(self) -> int:
        """The number of tagged fields that follow; each needs at least 2 bytes (tag, size)."""
        n = self.uvarint()
        if 2 * n > self._end - self._pos:
            raise ProtocolError(f"{n} tagged fields cannot fit in {self._end - self._pos} bytes")
        return n

    def skip_tagged_fields(self) -> None:
        """Read and discard a tagged-field section (unknown tags are legal and ignored)."""
        for _ in range(self.tagged_field_count()):
            self.uvarint()
            self.skip(self._tag_size())

    def _tag_size(self) -> int:
        size = self.uvarint()
        if size > self._end - self._pos:
            raise ProtocolError(f"tagged field of {size} bytes exceeds the {self._end - self._pos} remaining")
        return size

    def tagged_field(self) -> tuple[int, "Reader"]:
        """One (tag, reader over its data) pair of a tagged-field section."""
        tag = self.uvarint()
        return tag, self.sub(self._tag_size())


def _uvarint_bytes(value: int) -> bytes:
    try:
        return encode_uvarint(value)
    except ValueError as e:
        raise EncodeError(str(e)) from None


#: Bytes from which ``Writer.chunk`` keeps a bytes object as a part of its own instead of copying it.
CHUNK_BYTES = 32768


class Writer:
    """Collects an encoding as bytes plus ``FileRegion`` parts (regions are never read)."""

    __slots__ = ("_buf", "_parts", "_size")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._parts: list[Part] = []
        self._size = 0  # bytes in _parts (regions by their length)

    def __len__(self) -> int:
        return self._size + len(self._buf)

    @property
    def has_regions(self) -> bool:
        return any(isinstance(p, FileRegion) for p in self._parts)

    def parts(self) -> list[Part]:
        """The encoding so far as a list of bytes and FileRegion parts."""
        out = list(self._parts)
        if self._buf:
            out.append(bytes(self._buf))
        return out

    def getvalue(self) -> bytes:
        """The whole encoding as bytes; regions are read (for tests and client requests)."""
        return b"".join(p.read() if isinstance(p, FileRegion) else p for p in self.parts())

    # ------------------------------------------------------------------ raw data
    def raw(self, data) -> None:
        self._buf += data

    def chunk(self, data) -> None:
        """Append ``data``; a large ``bytes`` object or read-only memoryview becomes a part of its
        own rather than being copied (neither can be changed through what the encoding holds)."""
        if type(data) is bytes:
            size = len(data)
        elif type(data) is memoryview and data.readonly and data.contiguous:
            size = data.nbytes
        else:
            size = 0
        if size < CHUNK_BYTES:
            self._buf += data
            return
        self._part(data, size)

    def region(self, region: FileRegion) -> None:
        if region.length < 0 or region.offset < 0:
            raise EncodeError(f"invalid file region {region!r}")
        if region.length == 0:
            return
        self._part(region, region.length)

    def _part(self, part: Part, size: int) -> None:
        """Append ``part`` (``size`` bytes) as a part of its own, after the bytes collected so far."""
        if self._buf:
            self._parts.append(bytes(self._buf))
            self._size += len(self._buf)
            self._buf = bytearray()
        self._parts.append(part)
        self._size += size

    def patch_int32(self, position: int, value: int) -> None:
        """Overwrite 4 bytes at ``position`` of the *first* buffer (used for size prefixes)."""
        if self._parts:
            first = self._parts[0]
            if isinstance(first, FileRegion) or len(first) < position + 4:
                raise EncodeError("cannot patch a position that is not in the first bytes part")
            self._parts[0] = b"".join((first[:position], _I32.pack(value), first[position + 4:]))
        else:
            _I32.pack_into(self._buf, position, value)

    # ---------------------------------------------------------------- fixed size
    def int8(self, v: int) -> None:
        self._buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self._buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self._buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self._buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self._buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self._buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self._buf += _F64.pack(v)

    def bool(self, v: bool) -> None:
        self._buf.append(1 if v else 0)

    def uuid(self, v) -> None:
        raw = v.bytes if hasattr(v, "bytes") and not isinstance(v, (bytes, bytearray, memoryview)) else bytes(v)
        if len(raw) != _UUID_SIZE:
            raise EncodeError(f"uuid must be 16 bytes, got {len(raw)}")
        self._buf += raw

    # ------------------------------------------------------------------- varints
    def uvarint(self, v: int) -> None:
        if not 0 <= v <= 0xFFFFFFFF:
            raise EncodeError(f"unsigned varint out of range: {v}")
        self._buf += _uvarint_bytes(v)

    def varint(self, v: int) -> None:
        if not -(1 << 31) <= v < (1 << 31):
            raise EncodeError(f"varint out of range: {v}")
        self._buf += _uvarint_bytes(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> None:
        if not -(1 << 63) <= v < (1 << 63):
            raise EncodeError(f"varlong out of range: {v}")
        self._buf += _uvarint_bytes(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    # ------------------------------------------------------------------- lengths
    def length(self, n: int | None, compact: builtins.bool, wide: builtins.bool) -> None:
        """A length prefix for a string, bytes or array; None writes the null marker."""
        if compact:
            self.uvarint(0 if n is None else n + 1)
        elif wide:
            self.int32(-1 if n is None else n)
        else:
            if n is not None and n > 0x7FFF:
                raise EncodeError(f"string of {n} bytes is too long for an int16 length")
            self.int16(-1 if n is None else n)

    def string(self, s: str | None, compact: builtins.bool) -> None:
        if s is None:
            self.length(None, compact, False)
            return
        data = s.encode("utf-8")
        self.length(len(data), compact, False)
        self._buf += data

    def bytes_(self, b, compact: builtins.bool) -> None:
        if b is None:
            self.length(None, compact, True)
            return
        self.length(len(b), compact, True)
        self._buf += b
