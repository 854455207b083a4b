"""Sparse offset index of one segment: relative offset -> file position.

On disk: 8-byte entries, big-endian ``int32 relative_offset, int32 position``, where
``relative_offset`` is a batch's base offset minus the segment's base offset and
``position`` the batch's first byte in the ``.log`` file.  An entry is written for a
batch when at least ``log.index.interval.bytes`` of log precede it since the last
entry (position 0 is implicit, never stored).  The same rule is used when the index
is rebuilt at recovery, so a rebuilt index equals the one built while appending.

The index is a hint: it is never fsynced on its own, it is checked at open
(``validate``) and rebuilt from the log when it looks wrong.  Entries are kept in
memory in two ``array('i')`` (8 bytes per entry), the file is only appended to.
"""

from __future__ import annotations

import bisect
import os
import sys
from array import array
from pathlib import Path

ENTRY_SIZE = 8


class OffsetIndex:
    """The in-memory index plus, while its segment is active, an open append handle."""

    def __init__(self, path: Path, offsets: array | None = None, positions: array | None = None):
        self.path = path
        self._offsets = offsets if offsets is not None else array("i")
        self._positions = positions if positions is not None else array("i")
        self._fd: int | None = None

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: Path) -> tuple["OffsetIndex", str | None]:
        """Read ``path``; returns the index and why it cannot be trusted yet (None if it parsed).

        Structural problems only (missing file, partial entry); ``validate`` checks the
        entries against the log.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path), "index file missing"
        whole = len(data) - len(data) % ENTRY_SIZE
        both = array("i")
        both.frombytes(data[:whole])
        if sys.byteorder == "little":
            both.byteswap()
        index = cls(path, both[0::2], both[1::2])
        if whole != len(data):
            return index, f"index file has a partial entry ({len(data)} bytes)"
        return index, None

    def validate(self, log_size: int) -> str | None:
        """Why the entries are inconsistent with a log of ``log_size`` bytes, or None."""
        prev_off, prev_pos = -1, 0
        for off, pos in zip(self._offsets, self._positions, strict=True):
            if off <= prev_off or pos <= prev_pos or pos >= log_size:
                return f"index entry ({off}, {pos}) out of order or beyond the log's {log_size} bytes"
            prev_off, prev_pos = off, pos
        return None

    # ------------------------------------------------------------------ lookups

    def __len__(self) -> int:
        return len(self._offsets)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def last_entry(self) -> tuple[int, int]:
        """The last (relative_offset, position); (0, 0) when empty (the implicit first entry)."""
        if not self._offsets:
            return 0, 0
        return self._offsets[-1], self._positions[-1]

    def lookup(self, relative_offset: int) -> tuple[int, int]:
        """The last entry whose relative offset is <= ``relative_offset``; (0, 0) if none."""
        i = bisect.bisect_right(self._offsets, relative_offset) - 1
        if i < 0:
            return 0, 0
        return self._offsets[i], self._positions[i]

    def lookup_position(self, position: int) -> int:
        """The last indexed batch start at or before ``position``; 0 if none."""
        i = bisect.bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    # ------------------------------------------------------------------ writing

    def append(self, relative_offset: int, position: int) -> None:
        """Add one entry (file first, then memory, so memory never runs ahead of the file)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        entry = array("i", (relative_offset, position))
        if sys.byteorder == "little":
            entry.byteswap()
        os.write(self._fd, entry.tobytes())
        self._offsets.append(relative_offset)
        self._positions.append(position)

    def rewrite(self, entries: list[tuple[int, int]]) -> None:
        """Replace the whole index (after a rebuild at recovery)."""
        self.close()
        self._offsets = array("i", (o for o, _ in entries))
        self._positions = array("i", (p for _, p in entries))
        both = array("i")
        for o, p in entries:
            both.append(o)
            both.append(p)
        if sys.byteorder == "little":
            both.byteswap()
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(both.tobytes())
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Close the append handle (the segment was rolled, or the log closes)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass
