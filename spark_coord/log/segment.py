"""One segment of a partition log: a ``.log`` file of record batches plus its ``.index``.

A segment's bytes below ``size`` are immutable once appended (recovery may truncate
at open, nothing else rewrites).  That lets readers work outside the partition lock
on a ``(segment, size)`` snapshot taken under it.  Writes and reads use
``pwrite``/``pread``, so the shared file position is irrelevant (``loop.sendfile``
moves it).

The log file object is a :class:`SegmentFile`: when retention or topic deletion
drops a segment, its file is unlinked but not closed, so a ``FileRegion`` already
handed to a fetch stays readable; the descriptor closes when the last reference
goes (quietly -- no ResourceWarning) or when the log is closed.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Sequence

from ..records.header import HEADER_SIZE, BatchHeader, parse_header
from .index import OffsetIndex
from .names import segment_index_name, segment_log_name
from .scan import iter_headers, scan_batches

log = logging.getLogger(__name__)


class SegmentFile(io.FileIO):
    """A segment's log file; closes itself without a ResourceWarning when garbage."""

    def __del__(self) -> None:
        try:
            if not self.closed:
                self.close()
        except Exception:  # noqa: BLE001 -- never raise from a finalizer
            pass


class LogSegment:
    """Append, locate batches, fsync, delete -- for one segment.  Not locked: the partition locks."""

    def __init__(self, directory: Path, base_offset: int, file: SegmentFile, index: OffsetIndex, *,
                 size: int, next_offset: int, max_timestamp: int | None, bytes_since_index: int,
                 index_interval_bytes: int, last_modified_ms: int):
        self.directory = directory
        self.base_offset = base_offset
        self.file = file
        self.index = index
        self.size = size  # committed bytes; readers never look beyond
        self.flushed_size = size  # bytes known to be on stable storage (or present at open)
        self.next_offset = next_offset  # offset after the last batch; base_offset when empty
        self._max_timestamp = max_timestamp  # None = not computed yet (segments not scanned at open)
        self._bytes_since_index = bytes_since_index
        self._index_interval_bytes = index_interval_bytes
        self.last_modified_ms = last_modified_ms
        #: When the segment got its first batch (an opened segment: its last write), for segment.ms rolls.
        self.created_ms = last_modified_ms

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, next_offset={self.next_offset})"

    @property
    def log_path(self) -> Path:
        return self.directory / segment_log_name(self.base_offset)

    @property
    def index_path(self) -> Path:
        return self.directory / segment_index_name(self.base_offset)

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int) -> "LogSegment":
        """A new, empty segment (the active one after a roll)."""
        file = SegmentFile(directory / segment_log_name(base_offset), "x+")
        index = OffsetIndex(directory / segment_index_name(base_offset))
        index.rewrite([])  # an empty index file, so a reopen does not mistake it for a lost one
        return cls(directory, base_offset, file, index, size=0, next_offset=base_offset,
                   max_timestamp=-1, bytes_since_index=0, index_interval_bytes=index_interval_bytes,
                   last_modified_ms=now_ms)

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval_bytes: int, *, full_scan: bool) -> "LogSegment":
        """Open an existing segment, recovering it.

        ``full_scan`` (the last segment): every batch is checked and the file is cut at
        the first bad one.  Otherwise the index is checked and only the tail after its
        last entry is scanned; any doubt falls back to the full scan.
        """
        log_path = directory / segment_log_name(base_offset)
        file = SegmentFile(log_path, "r+")
        try:
            st = os.fstat(file.fileno())
            file_size = st.st_size
            mtime_ms = int(st.st_mtime * 1000)
            index, doubt = OffsetIndex.load(directory / segment_index_name(base_offset))
            if doubt is None:
                doubt = index.validate(file_size)
            if not full_scan and doubt is None:
                rel, pos = index.last_entry()
                tail = scan_batches(file, base_offset, pos, file_size, min_offset=base_offset + rel,
                                    index_interval_bytes=index_interval_bytes,
                                    expect_first_offset=base_offset + rel if pos else None)
                if tail.error is None:
                    return cls(directory, base_offset, file, index, size=file_size,
                               next_offset=tail.next_offset if tail.batches else base_offset,
                               max_timestamp=tail.max_timestamp if pos == 0 else None,
                               bytes_since_index=tail.bytes_since_index,
                               index_interval_bytes=index_interval_bytes, last_modified_ms=mtime_ms)
                doubt = f"tail check failed: {tail.error}"
            if doubt is not None and file_size:
                log.info("segment %s: scanning in full (%s)", log_path, doubt)
            return cls._recover(directory, base_offset, file, index, file_size, index_interval_bytes, mtime_ms,
                                last=full_scan)
        except BaseException:
            file.close()
            raise

    @classmethod
    def _recover(cls, directory: Path, base_offset: int, file: SegmentFile, index: OffsetIndex, file_size: int,
                 index_interval_bytes: int, mtime_ms: int, last: bool) -> "LogSegment":
        res = scan_batches(file, base_offset, 0, file_size, min_offset=base_offset,
                           index_interval_bytes=index_interval_bytes)
        if res.valid_bytes < file_size:
            log.warning("segment %s: dropping %d bytes after byte %d (%s)%s", file.name,
                        file_size - res.valid_bytes, res.valid_bytes, res.error,
                        "" if last else "; this leaves a gap before the next segment")
            os.ftruncate(file.fileno(), res.valid_bytes)
            os.fsync(file.fileno())
        index.rewrite(res.index_entries)  # small; also clears any partial trailing entry
        return cls(directory, base_offset, file, index, size=res.valid_bytes,
                   next_offset=res.next_offset if res.batches else base_offset,
                   max_timestamp=res.max_timestamp, bytes_since_index=res.bytes_since_index,
                   index_interval_bytes=index_interval_bytes, last_modified_ms=mtime_ms)

    # ------------------------------------------------------------------ writing

    def append(self, buf: bytearray, headers: Sequence[BatchHeader], first_offset: int, now_ms: int) -> None:
        """Write batches whose offsets are already assigned (``first_offset`` is the first one's base)."""
        fd = self.file.fileno()
        view = memoryview(buf)
        start = self.size
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], start + written)
        pos, offset, max_ts = start, first_offset, self._max_timestamp
        for h in headers:
            if self._bytes_since_index >= self._index_interval_bytes:
                try:
                    self.index.append(offset - self.base_offset, pos)
                except OSError as e:  # the index is a hint, rebuilt at recovery; the log bytes matter
                    log.warning("segment %s: could not write index entry: %s", self.index_path, e)
                self._bytes_since_index = 0
            self._bytes_since_index += h.size
            if max_ts is not None:
                max_ts = max(max_ts, h.max_timestamp)
            pos += h.size
            offset += h.last_offset_delta + 1
        self._max_timestamp = max_ts
        if start == 0:
            self.created_ms = now_ms
        self.size = pos
        self.next_offset = offset
        self.last_modified_ms = now_ms

    def fsync(self) -> None:
        os.fsync(self.file.fileno())

    def seal(self) -> None:
        """The segment is no longer active: release the index's append handle."""
        self.index.close()

    # ------------------------------------------------------------------ reading

    def find_batch(self, offset: int, size: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch below ``size`` whose last offset is >= ``offset``."""
        _, pos = self.index.lookup(offset - self.base_offset)
        for p, h in iter_headers(self.file, pos, size):
            if h.last_offset >= offset:
                return p, h
        return None

    def batch_boundary(self, start: int, limit: int) -> int:
        """The end of the last whole batch that starts at or after ``start`` and ends at or before ``limit``.

        Walks from the last index entry at or before ``limit``, so at most about
        ``log.index.interval.bytes`` of headers are read.
        """
        pos = max(start, self.index.lookup_position(limit))
        fd = self.file.fileno()
        while pos < limit:
            raw = os.pread(fd, HEADER_SIZE, pos)
            if len(raw) < HEADER_SIZE:
                break
            end = pos + parse_header(raw).size
            if end > limit:
                break
            pos = end
        return pos

    def max_timestamp(self, size: int) -> int:
        """Largest batch maxTimestamp in the segment (-1 if none); computed once for old segments."""
        if self._max_timestamp is None:
            ts = -1
            for _, h in iter_headers(self.file, 0, size):
                ts = max(ts, h.max_timestamp)
            self._max_timestamp = ts
        return self._max_timestamp

    def headers(self, size: int):
        """(position, header) of every batch below ``size``."""
        return iter_headers(self.file, 0, size)

    # ------------------------------------------------------------------ removal

    def unlink(self) -> None:
        """Remove the files; the log descriptor stays open for regions still being sent."""
        self.index.close()
        for path in (self.log_path, self.index_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.index.close()
        self.file.close()
