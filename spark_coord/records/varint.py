"""Kafka's variable-length integers, for the wire codec and the record batches alike.

Unsigned varints carry 7 bits per byte, low group first, the high bit saying "more
follows"; signed ones (``varint``/``varlong`` in Kafka's message definitions, and
every length and delta inside a record) are zigzag-mapped first, so -1 (null) is
one byte.  Readers bound a varint's bytes (5 for 32-bit values, 10 for 64-bit ones)
and raise ``VarintError`` (a ``ValueError``) for an over-long one, or for one cut
short by ``end``; without ``end`` a varint running past the buffer raises
``IndexError`` (the record decoders catch it for the whole record).

The compiled record decoder (``records.arrow_jit``) and the Python decoder's hot
loop (``records.arrow._decode_batch``) read their varints inline for speed; they
agree with ``read_uvarint`` (the differential tests check it).
"""

from __future__ import annotations

__all__ = ["VarintError", "zigzag", "unzigzag", "encode_uvarint", "encode_varint", "read_uvarint", "read_varint"]


class VarintError(ValueError):
    """A varint longer than its type allows, or cut short by the end of its field."""


def zigzag(n: int) -> int:
    """Zigzag-map a signed 64-bit int to unsigned (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return (n << 1) ^ (n >> 63)


def unzigzag(v: int) -> int:
    """The signed value of a zigzag-mapped one."""
    return (v >> 1) ^ -(v & 1)


_SMALL = [bytes((i,)) for i in range(0x80)]


def encode_uvarint(v: int) -> bytes:
    """An unsigned varint; ``ValueError`` for a negative value."""
    if v < 0x80:
        if v < 0:
            raise ValueError(f"unsigned varint cannot hold {v}")
        return _SMALL[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Kafka's signed varint/varlong: zigzag, then an unsigned varint."""
    v = (n << 1) ^ (n >> 63)
    if v < 0x80:
        return _SMALL[v]
    return encode_uvarint(v)


def read_uvarint(d, p: int, end: int | None = None, max_bytes: int = 10) -> tuple[int, int]:
    """Unsigned varint at ``d[p]`` (at most ``max_bytes`` bytes, none at or past ``end``) ->
    (value, next position)."""
    result = shift = 0
    stop = p + max_bytes if end is None else min(p + max_bytes, end)
    for i in range(p, stop):
        b = d[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i + 1
        shift += 7
    if stop < p + max_bytes:
        raise VarintError(f"truncated varint at byte {p}")
    raise VarintError(f"varint longer than {max_bytes} bytes at byte {p}")


def read_varint(d, p: int, end: int | None = None, max_bytes: int = 10) -> tuple[int, int]:
    """Zigzag (signed) varint at ``d[p]`` -> (value, next position)."""
    v, p = read_uvarint(d, p, end, max_bytes)
    return (v >> 1) ^ -(v & 1), p
