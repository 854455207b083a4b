"""Fixtures for the record batch tests: kafka-python as an independent peer.

kafka-python frames batches itself (header, varints, xerial snappy chunks) but calls
out to python-snappy, lz4 and zstandard for the codec primitives.  When those packages
are not installed, ``kafka_python`` points kafka-python at cramjam for the primitives
only, so every codec can still be exercised through kafka-python's own framing code.
"""

from __future__ import annotations

import io

import cramjam
import pytest


class _SnappyShim:
    """python-snappy's block API: raw snappy blocks."""

    @staticmethod
    def compress(data):
        return bytes(cramjam.snappy.compress_raw(bytes(data)))

    @staticmethod
    def decompress(data):
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))


class _Lz4FrameShim:
    """lz4.frame's one-shot API (LZ4 frame with cramjam's default flags)."""

    @staticmethod
    def compress(data, **_):
        return bytes(cramjam.lz4.compress(bytes(data)))

    @staticmethod
    def decompress(data):
        return bytes(cramjam.lz4.decompress(bytes(data)))


class _ZstdShim:
    """The parts of zstandard that kafka-python uses."""

    class ZstdCompressor:
        def compress(self, data):
            return bytes(cramjam.zstd.compress(bytes(data)))

    class ZstdDecompressor:
        def stream_reader(self, fileobj, read_across_frames=True):
            return io.BytesIO(bytes(cramjam.zstd.decompress(fileobj.read())))


@pytest.fixture(scope="session")
def kafka_python():
    """kafka-python's record module, with every codec available."""
    import kafka.codec as kc
    import kafka.record.default_records as dr

    with pytest.MonkeyPatch.context() as mp:
        if not kc.has_snappy():
            mp.setattr(kc, "snappy", _SnappyShim)
        if not kc.has_lz4():
            mp.setattr(kc, "lz4", _Lz4FrameShim)
            mp.setattr(dr, "lz4_encode", _Lz4FrameShim.compress)
            mp.setattr(dr, "lz4_decode", _Lz4FrameShim.decompress)
        if not kc.has_zstd():
            mp.setattr(kc, "zstd", _ZstdShim)
        yield dr
