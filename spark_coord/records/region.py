"""A slice of a log segment file, sent to a socket without copying through Python."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class FileRegion:
    """``length`` bytes of the open file ``fileobj`` starting at byte ``offset``.

    The log hands these to the Fetch encoder; the broker's connection writes them
    with ``loop.sendfile`` (zero-copy where the OS allows).  ``fileobj`` is an open
    binary file; it stays valid after the segment is deleted (POSIX keeps the inode
    alive while a descriptor is open).
    """

    fileobj: BinaryIO
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The region's bytes (for tests and for the non-sendfile fallback)."""
        return os.pread(self.fileobj.fileno(), self.length, self.offset)
