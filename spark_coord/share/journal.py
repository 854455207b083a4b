"""The share-state journal: where an acknowledgement is made durable, beside the partition logs.

An acknowledgement of a share partition is answered once an append to this journal covering it is
done; ZooKeeper gets the state behind it, as a checkpoint (``SharePartitionManager``; DESIGN.md
"Share groups (KIP-932)", "What must survive a SIGKILL").  Kafka's share coordinator makes the
same step durable with an append to its ``__share_group_state`` log.

The journal lives in ``<log.dirs>/__share_state``, on the disk of the partition logs it describes
(a partition's leader is its only replica, and always the same broker), so it is exactly as durable
as their records: an append is one ``os.write`` into the page cache (it survives a SIGKILL of the
broker), fsynced only when the partition logs are fsynced at every record too
(``log.flush.interval.messages=1``).

Files: ``journal-<n>.log``, appended to in order of ``n``; the highest is the active one.  A record
is ``length`` (4 bytes, big-endian, of the payload), the payload's CRC-32C (4 bytes) and the payload:
the group and the topic (each a 2-byte length and UTF-8), the partition (4 bytes), and the share
partition's state exactly as ``store.encode`` makes it for its znode (snapshot, topic id, writer,
state epoch and sequence number).  A later record of a share partition replaces the earlier ones.

Disk stays bounded: the journal tracks, per share partition, its latest entry that ZooKeeper does
not hold yet (``pending``); ``covered`` drops it once a ZooKeeper write of the same lineage (writer
and state epoch) at the same or a later sequence number landed, or someone else's write did (the
partition was taken over), ``drop`` when the partition is dropped.  When the active segment passes
``segment_bytes`` (and twice what is pending) it rolls: a new segment holding the pending entries,
fsynced, then the old one deleted.  So the journal holds one segment plus the pending entries.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from spark_coord.records.header import crc32c
from spark_coord.share.store import identity_of, seq_of

log = logging.getLogger(__name__)

__all__ = ["ShareJournal", "JournalEntry", "DEFAULT_SEGMENT_BYTES", "JOURNAL_DIR"]

Key = tuple[str, str, int]  # (group, topic, partition)

#: The journal's directory under log.dirs (no ``<topic>-<partition>`` name: the log manager's scan skips it).
JOURNAL_DIR = "__share_state"
#: ``group.share.state.journal.segment.bytes``' default.
DEFAULT_SEGMENT_BYTES = 8 << 20
_HEAD = struct.Struct(">II")  # payload length, CRC-32C of the payload
_NAME = struct.Struct(">H")
_PARTITION = struct.Struct(">i")
_SEGMENT = re.compile(r"^journal-(\d+)\.log$")
#: A record longer than this is corrupt (a share partition's state is at most about 200 KB).
MAX_RECORD = 16 << 20


@dataclass(frozen=True)
class JournalEntry:
    """A share partition's state as journaled: ``data`` is ``store.encode``'s bytes, naming its writer,
    state epoch and sequence number (``writer``, ``epoch``, ``seq`` repeat them)."""

    key: Key
    writer: str | None
    epoch: int
    seq: int
    data: bytes

    @classmethod
    def of(cls, key: Key, data: bytes) -> JournalEntry:
        """The entry of ``data`` (its identity and sequence number read from it)."""
        writer, epoch = identity_of(data)
        return cls(key, writer, epoch, seq_of(data), data)

    def record(self) -> bytes:
        group, topic = self.key[0].encode(), self.key[1].encode()
        payload = b"".join((_NAME.pack(len(group)), group, _NAME.pack(len(topic)), topic,
                            _PARTITION.pack(self.key[2]), self.data))
        return _HEAD.pack(len(payload), crc32c(payload)) + payload


def _parse(payload: bytes) -> JournalEntry:
    """The entry of a record's payload (ValueError when it does not parse)."""
    try:
        at = 0
        (n,) = _NAME.unpack_from(payload, at)
        group = payload[at + 2:at + 2 + n].decode()
        at += 2 + n
        (n,) = _NAME.unpack_from(payload, at)
        topic = payload[at + 2:at + 2 + n].decode()
        at += 2 + n
        (partition,) = _PARTITION.unpack_from(payload, at)
        at += 4
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"unreadable journal record: {e}") from None
    if at > len(payload):
        raise ValueError("unreadable journal record: names past its end")
    return JournalEntry.of((group, topic, partition), payload[at:])


def _read_segment(path: Path) -> tuple[list[JournalEntry], int, int]:
    """The whole records of a segment, the length they span and the file's length: reading stops at the
    first record that is torn (cut short by a crash) or corrupt (its CRC or its payload does not check)."""
    buf = path.read_bytes()
    out, at = [], 0
    while at + _HEAD.size <= len(buf):
        length, crc = _HEAD.unpack_from(buf, at)
        end = at + _HEAD.size + length
        if length > MAX_RECORD or end > len(buf):
            break
        payload = buf[at + _HEAD.size:end]
        if crc32c(payload) != crc:
            break
        try:
            out.append(_parse(payload))
        except ValueError:
            break
        at = end
    return out, at, len(buf)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShareJournal:
    """Append-only segments of share-partition states in ``directory`` (``open`` before ``append``)."""

    def __init__(self, directory: str | os.PathLike, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 fsync: bool = False):
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        #: fsync every append (the partition logs are fsynced at every record: log.flush.interval.messages=1).
        self.fsync = fsync
        #: Per share partition, its latest journaled entry ZooKeeper does not hold yet.
        self.pending: dict[Key, JournalEntry] = {}
        self._pending_bytes = 0
        self._fd: int | None = None
        self._n = 0
        self._size = 0
        #: Counters (the benchmark's journal appends and bytes; rolls).
        self.appends = 0
        self.bytes = 0
        self.rolls = 0

    @property
    def path(self) -> Path:
        """The active segment."""
        return self.directory / f"journal-{self._n}.log"

    def segments(self) -> list[Path]:
        """The segment files in the directory, oldest first."""
        found = []
        for entry in os.scandir(self.directory):
            m = _SEGMENT.match(entry.name)
            if m:
                found.append((int(m.group(1)), Path(entry.path)))
        return [p for _, p in sorted(found)]

    def open(self) -> dict[Key, JournalEntry]:
        """Recover: read the segments in order (each up to its first torn or corrupt record, cut there),
        keep the latest entry per share partition, write them to a fresh active segment (fsynced, and
        the directory), delete the old segments.  The recovered entries, all pending (ZooKeeper may not
        hold them)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        latest: dict[Key, JournalEntry] = {}
        old = self.segments()
        for path in old:
            entries, good, size = _read_segment(path)
            if good < size:
                log.warning("share-state journal %s: a torn or corrupt record at byte %d of %d; cut there (%d "
                            "records before it kept)", path, good, size, len(entries))
                os.truncate(path, good)
            for e in entries:
                latest[e.key] = e
        self._n = max((int(_SEGMENT.match(p.name).group(1)) for p in old), default=-1) + 1  # type: ignore[union-attr]
        self.pending = dict(latest)
        self._pending_bytes = sum(len(e.data) for e in latest.values())
        self._start_segment(always_fsync=True)
        for path in old:
            path.unlink()
        if latest:
            log.info("share-state journal %s: %d share partition state(s) recovered", self.directory, len(latest))
        return dict(latest)

    def _start_segment(self, always_fsync: bool) -> None:
        """A new active segment ``journal-<n>.log`` holding the pending entries (fsynced with the directory
        when ``always_fsync`` or ``fsync``), in place of the current one."""
        path = self.path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            buf = b"".join(e.record() for e in self.pending.values())
            if buf:
                self._write_all(fd, buf)
            if always_fsync or self.fsync:
                os.fsync(fd)
                _fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            raise
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._size = fd, len(buf)

    @staticmethod
    def _write_all(fd: int, buf: bytes) -> None:
        view = memoryview(buf)
        while view:
            view = view[os.write(fd, view):]

    def append(self, entries: list[JournalEntry]) -> None:
        """Journal ``entries`` (a group commit: one ``os.write`` for them all; fsynced when ``fsync``).
        Raises OSError (a full disk, an I/O error): then the active segment is cut back to where it was,
        and nothing of ``entries`` counts as journaled."""
        if not entries:
            return
        if self._fd is None:
            raise OSError("share-state journal not open")
        buf = b"".join(e.record() for e in entries)
        try:
            written = os.write(self._fd, buf)
            if written < len(buf):  # a regular file takes it all but on a full disk
                self._write_all(self._fd, memoryview(buf)[written:].tobytes())
            if self.fsync:
                os.fsync(self._fd)
        except OSError:
            try:
                os.truncate(self.path, self._size)  # no torn record left for later appends to follow
            except OSError as e:
                log.error("share-state journal %s: cannot cut back a failed append (%s)", self.path, e)
            raise
        self._size += len(buf)
        self.appends += 1
        self.bytes += len(buf)
        for entry in entries:
            self._set_pending(entry.key, entry)
        if self._size > max(self.segment_bytes, 2 * self._pending_bytes):
            self._roll()

    def _set_pending(self, key: Key, entry: JournalEntry | None) -> None:
        old = self.pending.pop(key, None)
        if old is not None:
            self._pending_bytes -= len(old.data)
        if entry is not None:
            self.pending[key] = entry
            self._pending_bytes += len(entry.data)

    def _roll(self) -> None:
        """A new segment with the pending entries, then the old one deleted (fsynced first: a machine crash
        never finds the old segment gone and the new one empty)."""
        old = self.path
        self._n += 1
        try:
            self._start_segment(always_fsync=True)
        except OSError as e:
            self._n -= 1
            log.error("share-state journal %s: cannot roll (%s); appending to the old segment", self.directory, e)
            return
        old.unlink()
        self.rolls += 1

    def covered(self, key: Key, writer: str | None, epoch: int, seq: int) -> None:
        """A ZooKeeper write of ``key`` landed, by (``writer``, ``epoch``) at sequence number ``seq``: its
        pending entry goes when that write holds it (same lineage, ``seq`` at least the entry's) or
        supersedes it (another lineage: a takeover)."""
        e = self.pending.get(key)
        if e is not None and ((e.writer, e.epoch) != (writer, epoch) or seq >= e.seq):
            self._set_pending(key, None)

    def drop(self, key: Key) -> None:
        """``key`` was dropped (fenced, its state reset or deleted): its entry is needed no more."""
        self._set_pending(key, None)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
