"""The primitive reader and writer, against hand-assembled bytes."""

from __future__ import annotations

import struct

import pytest

from spark_coord.wire.types import EncodeError, ProtocolError, Reader, Writer


@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_zigzag_varint(value, encoded):
    w = Writer()
    w.varint(value)
    assert w.getvalue() == encoded
    r = Reader(encoded)
    assert r.varint() == value and r.remaining == 0


@pytest.mark.parametrize("value", [0, 1, -1, 2**40, -(2**63), 2**63 - 1])
def test_varlong_round_trip(value):
    w = Writer()
    w.varlong(value)
    assert Reader(w.getvalue()).varlong() == value


def test_unsigned_varint_and_compact_lengths():
    w = Writer()
    w.uvarint(300)
    w.string("ab", compact=True)
    w.string(None, compact=True)
    w.bytes_(b"xyz", compact=False)
    w.bytes_(None, compact=False)
    data = w.getvalue()
    assert data == b"\xac\x02" + b"\x03ab" + b"\x00" + b"\x00\x00\x00\x03xyz" + b"\xff\xff\xff\xff"
    r = Reader(data)
    assert r.uvarint() == 300
    assert r.compact_string() == "ab"
    assert r.compact_nullable_string() is None
    assert bytes(r.bytes_()) == b"xyz"
    assert r.nullable_bytes() is None
    r.expect_end()


def test_null_where_not_allowed_is_an_error():
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff").string()
    with pytest.raises(ProtocolError):
        Reader(b"\x00").compact_string()
    with pytest.raises(ProtocolError):
        Reader(struct.pack(">i", -1)).array_length(4, compact=False, nullable=False)


def test_fixed_width_reads_are_bounded():
    r = Reader(b"\x00\x01\x02")
    with pytest.raises(ProtocolError, match="truncated"):
        r.int32()
    assert Reader(b"\x80\x00\x00\x00\x00\x00\x00\x00").int64() == -(2**63)
    assert Reader(b"\xff\xff\xff\xff").uint32() == 2**32 - 1
    assert Reader(bytes(range(16))).uuid() == bytes(range(16))


def test_sub_reader_cannot_escape_its_window():
    r = Reader(b"\x00\x00\x00\x01\x00\x00\x00\x02")
    sub = r.sub(4)
    assert sub.int32() == 1
    with pytest.raises(ProtocolError):
        sub.int8()
    assert r.int32() == 2


def test_writer_range_checks():
    with pytest.raises(EncodeError):
        Writer().uvarint(-1)
    with pytest.raises(EncodeError):
        Writer().string("x" * 40000, compact=False)
    with pytest.raises(EncodeError):
        Writer().uuid(b"short")
