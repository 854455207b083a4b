"""Helpers for the partition log tests: batches from kafka-python's builder, a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from spark_coord.log import LogConfig, PartitionLog
from spark_coord.records.header import validate_batches


def make_batch(values: list[bytes], timestamp: int = 1_000_000, *, step_ms: int = 0) -> bytes:
    """One uncompressed v2 batch of ``values`` (base offset 0, as a producer sends it)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp=timestamp + i * step_ms, key=None, value=v, headers=[])
    return bytes(b.build())


def decode(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in whole batches of ``data`` (a partial last batch is dropped)."""
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        out.extend((r.offset, r.value) for r in batch)
    return out


class FakeClock:
    """A clock the test moves by hand (seconds, like time.time)."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms / 1000


class Kit:
    """Opens logs in a temp dir and appends batches through the same path the broker uses."""

    batch = staticmethod(make_batch)
    decode = staticmethod(decode)

    def __init__(self, root: Path):
        self.root = root
        self.dir = root / "events-0"

    def open(self, clock=None, **config) -> PartitionLog:
        cfg = LogConfig(**config)
        return PartitionLog(self.dir, cfg, clock) if clock else PartitionLog(self.dir, cfg)

    @staticmethod
    def append(plog: PartitionLog, *batches: bytes) -> int:
        data = b"".join(batches)
        return plog.append(data, validate_batches(data))

    @staticmethod
    def read_all(plog: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
        """Every record from ``start`` to the log end, by repeated reads as a consumer would."""
        offset = plog.log_start_offset if start is None else start
        out: list[tuple[int, bytes]] = []
        while offset < plog.log_end_offset:
            region = plog.read(offset, max_bytes)
            assert region is not None
            recs = [r for r in decode(region.read()) if r[0] >= offset]
            assert recs, f"read at {offset} returned no record at or after it"
            out.extend(recs)
            offset = recs[-1][0] + 1
        return out


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
