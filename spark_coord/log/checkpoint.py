"""Small durable files: the log start offset checkpoint, and directory fsync.

A checkpoint is replaced atomically (write a temp file, fsync it, rename over the old
one, fsync the directory), so a crash leaves either the old or the new value, never
a torn one.  A checkpoint that cannot be parsed is ignored with a warning: the log
start offset then falls back to the first segment's base offset, which is always safe.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .names import TMP_SUFFIX

log = logging.getLogger(__name__)

_MAX_CHECKPOINT_BYTES = 64


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that file creations, renames and deletions in it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offset(path: Path, value: int) -> None:
    """Durably replace ``path`` with ``value`` as a decimal line."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{value}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_offset(path: Path) -> int | None:
    """The value in ``path``; None if it is missing or not a non-negative decimal integer."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    text = raw.decode("ascii", errors="replace").strip()
    if len(raw) > _MAX_CHECKPOINT_BYTES or not text.isdigit():
        log.warning("ignoring unreadable checkpoint %s (%r)", path, raw[:_MAX_CHECKPOINT_BYTES])
        return None
    return int(text)
