"""kill -9 of a process appending with log.flush.interval.messages=1 never loses an acknowledged record.

The child appends batches and prints each acknowledged (appended and fsynced) base
offset.  The test SIGKILLs it mid-stream, reopens the log and checks that every
acknowledged record is there, intact (CRC-valid) and at its offset; then a second
child continues on the recovered log and is killed as well.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kafka.record.memory_records import MemoryRecords

from spark_coord.log import LogConfig, PartitionLog
from spark_coord.records.header import validate_batches

REPO = Path(__file__).resolve().parents[2]
CONFIG = dict(segment_bytes=32 * 1024, flush_interval_messages=1)

CHILD = r"""
import sys
from pathlib import Path
from kafka.record.default_records import DefaultRecordBatchBuilder
from spark_coord.log import LogConfig, PartitionLog
from spark_coord.records.header import validate_batches

plog = PartitionLog(Path(sys.argv[1]), LogConfig(segment_bytes=32 * 1024, flush_interval_messages=1))
while True:
    next_offset = plog.log_end_offset
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for j in range(5):
        b.append(j, timestamp=1000, key=None, value=b"%d|" % (next_offset + j) + b"p" * 200, headers=[])
    data = bytes(b.build())
    offset = plog.append(data, validate_batches(data))
    sys.stdout.write("%d\n" % offset)
    sys.stdout.flush()
"""


def run_and_kill(directory: Path, acks_wanted: int, deadline_s: float = 60.0) -> list[int]:
    """Start the child, wait for ``acks_wanted`` acknowledgements, SIGKILL it; every acknowledged offset."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=REPO)
    lines: queue.Queue[bytes | None] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    acked: list[int] = []
    deadline = time.monotonic() + deadline_s
    try:
        while len(acked) < acks_wanted:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"only {len(acked)} acks before the deadline"
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"child exited early: {proc.stderr.read().decode()[-2000:]}"
            acked.append(int(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    reader.join(timeout=30)
    while True:  # acknowledgements printed before the kill landed
        line = lines.get(timeout=30)
        if line is None:
            break
        if line.endswith(b"\n"):
            acked.append(int(line))
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def check_log(directory: Path, acked: list[int]) -> int:
    """Reopen; every acknowledged batch is present and intact; the whole log is consistent."""
    plog = PartitionLog(directory, LogConfig(**CONFIG))
    try:
        end = plog.log_end_offset
        assert end >= acked[-1] + 5
        offset = 0
        while offset < end:
            data = plog.read(offset, 100_000).read()
            headers = validate_batches(data)  # whole, CRC-valid batches
            records = MemoryRecords(data)
            while records.has_next():
                for record in records.next_batch():
                    assert record.offset == offset, "offsets are contiguous"
                    assert record.value == b"%d|" % offset + b"p" * 200, f"record {offset} damaged"
                    offset += 1
            assert offset == headers[-1].next_offset
        assert set(acked) <= set(range(0, end, 5))
        return end
    finally:
        plog.close()


def test_kill_minus_nine_never_loses_acknowledged_records(tmp_path):
    directory = tmp_path / "crash-0"
    first = run_and_kill(directory, acks_wanted=150)
    assert first == list(range(0, 5 * len(first), 5))
    end = check_log(directory, first)
    second = run_and_kill(directory, acks_wanted=150)
    assert second[0] == end, "the second run continues at the recovered end"
    check_log(directory, first + second)
    assert len(list(directory.glob("*.log"))) > 2  # the runs crossed segment rolls
