"""Codecs: round trips, Kafka's snappy and LZ4 framing, unknown codecs, bounded
decompression of bombs, corrupt input."""

from __future__ import annotations

import gzip
import struct
import time
import zlib

import cramjam
import pytest
from records_samples import CODEC_IDS, CODECS

from spark_coord.records import compression
from spark_coord.records.compression import DecompressedTooLarge, compress, decompress

DATA = b"".join(b"record %d of a compressible stream; " % i for i in range(3000))


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("data", [b"", b"x", DATA, bytes(range(256)) * 300], ids=["empty", "one", "text", "bin"])
def test_round_trip(codec, data):
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


def test_gzip_is_standard_gzip():
    assert gzip.decompress(compress(1, DATA)) == DATA
    assert decompress(1, gzip.compress(DATA, mtime=0)) == DATA


def test_snappy_compresses_to_one_raw_block():
    packed = compress(2, DATA)
    assert not packed.startswith(compression.XERIAL_MAGIC)
    assert bytes(cramjam.snappy.decompress_raw(packed)) == DATA


def xerial(data: bytes, chunk: int = 32 * 1024) -> bytes:
    """The xerial snappy-java stream (what Java clients write), built by hand."""
    out = bytearray(compression.XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), chunk):
        block = bytes(cramjam.snappy.compress_raw(data[i:i + chunk]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def test_snappy_reads_xerial_stream():
    assert decompress(2, xerial(DATA)) == DATA
    assert decompress(2, xerial(b"")) == b""
    with pytest.raises(ValueError, match="xerial chunk of"):
        decompress(2, xerial(DATA)[:-10])
    with pytest.raises(ValueError, match="truncated xerial"):
        decompress(2, compression.XERIAL_MAGIC + b"\x00")


def test_lz4_writes_independent_blocks_without_content_checksum():
    """Java's Lz4BlockInputStream decompresses each block on its own."""
    packed = compress(3, DATA)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg = packed[4]
    assert flg >> 6 == 1, "frame version 01"
    assert flg & 0x20, "block independence flag"
    assert decompress(3, bytes(cramjam.lz4.compress(DATA))) == DATA  # linked blocks, checksums: readable too


def test_lz4_without_a_level_is_lz4s_fast_mode():
    """librdkafka's default; cramjam's own default is LZ4 HC (level 4), several times slower."""
    records = b"".join(b"%016d%012d" % (i, i) + b"x" * 88 for i in range(3000))

    def frame(level):
        c = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        c.compress(records)
        return bytes(c.finish())

    assert compress(3, records) == frame(0) != frame(None)
    assert compress(3, records, level=9) == frame(9)
    assert decompress(3, compress(3, records)) == records


def test_unknown_codec_is_named():
    for bad in (5, 7, -1, "brotli", None):
        with pytest.raises(ValueError, match="unknown compression"):
            compress(bad, b"x")
        with pytest.raises(ValueError, match="unknown compression"):
            decompress(bad, b"x")
    assert compression.codec_id("LZ4") == 3


BOMB_SIZE = 64 * 1024 * 1024


@pytest.fixture(scope="module")
def bombs() -> dict[int, bytes]:
    """64 MiB of zeros, compressed by every codec (a few hundred KB at most)."""
    zeros = bytes(BOMB_SIZE)
    return {
        1: gzip.compress(zeros, compresslevel=9, mtime=0),
        2: bytes(cramjam.snappy.compress_raw(zeros)),
        3: compress(3, zeros),
        4: compress(4, zeros),
    }


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=CODEC_IDS[1:])
def test_decompression_is_bounded(bombs, codec):
    t0 = time.monotonic()
    with pytest.raises(DecompressedTooLarge, match="limit of 1048576"):
        decompress(codec, bombs[codec], max_bytes=1 << 20)
    assert time.monotonic() - t0 < 2.0
    assert len(decompress(codec, bombs[codec], max_bytes=BOMB_SIZE)) == BOMB_SIZE


def test_xerial_bomb_is_refused_before_decompressing():
    with pytest.raises(DecompressedTooLarge):
        decompress(2, xerial(bytes(4 << 20), chunk=1 << 20), max_bytes=3 << 20)


def test_lying_size_headers_are_harmless():
    """Sizes that frames declare are only a first guess: a lie is a ValueError, never
    an allocation of the claimed size."""
    gz = bytearray(compress(1, DATA))
    gz[-4:] = (0xFFFFFFFF).to_bytes(4, "little")  # ISIZE
    with pytest.raises(ValueError, match="corrupt gzip"):
        decompress(1, bytes(gz))
    zs = bytearray(cramjam.zstd.compress(DATA))
    assert zs[4] == 0xA0, "single-segment frame with a 4-byte content size"
    assert int.from_bytes(zs[5:9], "little") == len(DATA)
    assert decompress(4, bytes(zs), max_bytes=len(DATA)) == DATA
    with pytest.raises(DecompressedTooLarge):
        decompress(4, bytes(zs), max_bytes=len(DATA) - 1)
    zs[5:9] = (0xFFFFFFFF).to_bytes(4, "little")
    with pytest.raises(ValueError):
        decompress(4, bytes(zs), max_bytes=1 << 20)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=CODEC_IDS[1:])
def test_corrupt_input_is_a_value_error(codec):
    packed = compress(codec, DATA)
    for bad in (packed[: len(packed) // 2], b"\x00" * 20, b"garbage!" * 5, b""):
        with pytest.raises(ValueError):
            decompress(codec, bad)


def test_exact_fit_limit():
    for codec in CODECS:
        assert decompress(codec, compress(codec, DATA), max_bytes=len(DATA)) == DATA
    with pytest.raises(DecompressedTooLarge):
        decompress(0, DATA, max_bytes=len(DATA) - 1)


def test_zlib_stream_is_not_gzip():
    with pytest.raises(ValueError, match="corrupt gzip"):
        decompress(1, zlib.compress(DATA))


def test_decompress_all_puts_every_item_side_by_side_growing_as_needed():
    """Items of any codec, one after the other in one buffer; data that decompresses to far more
    than the first guess (a zstd frame without its size, 1000:1) makes the buffer grow."""
    pieces = [b"a" * 100_000, bytes(range(256)) * 40, b"", b"z" * 3000, b"plain bytes"]
    codecs = [compression.ZSTD, compression.GZIP, compression.LZ4, compression.SNAPPY, compression.NONE]
    items = [(c, compress(c, p) if c else p) for c, p in zip(codecs, pieces, strict=True)]
    import zstandard

    items[0] = (compression.ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(pieces[0]))
    assert compression.size_hint(compression.ZSTD, items[0][1]) is None  # as librdkafka's (kcat's) frames
    out, spans = compression.decompress_all(items)
    assert [bytes(out[a:b]) for a, b in spans] == pieces
    assert [a for a, _ in spans] == [sum(map(len, pieces[:i])) for i in range(len(pieces))]
    with pytest.raises(DecompressedTooLarge):
        compression.decompress_all(items, max_bytes=50_000)
    with pytest.raises(ValueError, match="corrupt zstd"):
        compression.decompress_all([(compression.ZSTD, b"\x28\xb5\x2f\xfd" + b"garbage" * 5)])
