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
the group and the topic (each a 2-byte length and UTF-8), the partition (4 bytes), and the record's
JSON.  Two kinds, as Kafka's share coordinator writes ShareSnapshot and ShareUpdate records:

* SNAPSHOT: the share partition's whole state exactly as ``store.encode`` makes it for its znode
  (snapshot, topic id, writer, state epoch and sequence number);
* UPDATE: what changed since the record before it of the share partition (``SharePartition.take_update``:
  the start offset and the current state of the offsets that changed, ``delta``), with the topic id,
  writer, state epoch, sequence number, and ``prev``, the sequence number of the record it follows.

A share partition's state is its latest SNAPSHOT with the later UPDATEs of the same lineage (writer
and state epoch) and topic id applied in order, each only when its ``prev`` is the sequence number
reached (``_Chain.follows``): an UPDATE whose predecessor is missing -- a torn or corrupt record
before it, or another lineage's records -- and every one after it are ignored, so the state
recovered is one that was journaled, never a mix.  ``entry`` picks the kind: an UPDATE while the
chain is unbroken (the share partition's last record is in the journal's files, taken from the same
``SharePartition`` object, no append of it failed since) and its UPDATEs since the SNAPSHOT, this one
included, number at most ``MAX_UPDATES`` and take fewer bytes than that SNAPSHOT; else a SNAPSHOT.  So an append
for a 10,000-lock window one acknowledgement changed is a few hundred bytes, not 160 KB, and a
share partition's records in the journal take at most about twice its state.

Disk stays bounded: the journal tracks, per share partition, its latest entry that ZooKeeper does
not hold yet (``pending``); ``covered`` drops it once a ZooKeeper write of the same lineage (writer
and state epoch) at the same or a later sequence number landed, or someone else's write did (the
partition was taken over), ``drop`` when the partition is dropped.  When the active segment passes
``segment_bytes`` (and twice what is pending) it rolls: a new segment holding the pending entries,
one materialized SNAPSHOT each (its SNAPSHOT with its UPDATEs applied), fsynced, then the old one
deleted.  So the journal holds one segment plus the pending entries; in memory it keeps the records
of each share partition since its last SNAPSHOT in the active segment (``_chains``), no more bytes
than that segment holds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_coord.log.checkpoint import fsync_dir
from spark_coord.records.header import crc32c
from spark_coord.share import delta
from spark_coord.share.partition import SharePartition
from spark_coord.share.store import decode, encode

log = logging.getLogger(__name__)

__all__ = ["ShareJournal", "JournalEntry", "DEFAULT_SEGMENT_BYTES", "JOURNAL_DIR", "MAX_UPDATES"]

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
#: UPDATE records of a share partition at most after its SNAPSHOT before the next SNAPSHOT (Kafka's
#: ``share.coordinator.snapshot.update.records.per.snapshot``, 500 by default): bounds the replay.
MAX_UPDATES = 500


@dataclass(frozen=True)
class JournalEntry:
    """A journal record of a share partition.  A SNAPSHOT (``prev`` None): ``data`` is ``store.encode``'s
    bytes, naming its writer, state epoch and sequence number (``writer``, ``epoch``, ``seq`` repeat
    them).  An UPDATE: ``data`` is ``encode_update``'s, following the record of sequence number ``prev``."""

    key: Key
    writer: str | None
    epoch: int
    seq: int
    data: bytes
    prev: int | None = None
    #: The SharePartition it was taken from (None: read back): UPDATEs continue a chain from it only.
    source: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, key: Key, data: bytes) -> JournalEntry:
        """The entry of ``data`` (its kind, identity and sequence numbers read from it; ValueError when
        it is no JSON object)."""
        try:
            doc = json.loads(data.decode())
        except (UnicodeDecodeError, ValueError):
            raise ValueError("unreadable journal record: not JSON") from None
        if not isinstance(doc, dict):
            raise ValueError("unreadable journal record: not a JSON object")
        writer, epoch, seq, prev = doc.get("writer"), doc.get("epoch"), doc.get("seq"), doc.get("prev")
        return cls(key, writer if isinstance(writer, str) else None, _int(epoch, 0), _int(seq, -1), data,
                   None if "update" not in doc else _int(prev, -1))

    def record(self) -> bytes:
        group, topic = self.key[0].encode(), self.key[1].encode()
        payload = b"".join((_NAME.pack(len(group)), group, _NAME.pack(len(topic)), topic,
                            _PARTITION.pack(self.key[2]), self.data))
        return _HEAD.pack(len(payload), crc32c(payload)) + payload


def _int(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default


def encode_update(update: dict, topic_id: bytes | None, writer: str | None, epoch: int, seq: int,
                  prev: int) -> bytes:
    """An UPDATE record's JSON: ``update`` (``SharePartition.take_update``), the topic's id, the lineage,
    the sequence number and ``prev``, the sequence number of the record it follows."""
    doc: dict[str, Any] = {"update": update, "prev": prev, "seq": seq}
    if topic_id is not None:
        doc["topic_id"] = topic_id.hex()
    if writer is not None:
        doc["writer"], doc["epoch"] = writer, epoch
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass
class _Chain:
    """A share partition's records since its last SNAPSHOT (``base``), all in the journal's files."""

    base: JournalEntry
    updates: list[JournalEntry]
    source: Any  # the SharePartition of the last record (None: read back, or unknown)
    size: int  # bytes of the UPDATEs

    @property
    def seq(self) -> int:
        return self.updates[-1].seq if self.updates else self.base.seq

    def follows(self, e: JournalEntry) -> bool:
        """``e`` (an UPDATE) continues this chain: same lineage, after its last record."""
        return (e.writer, e.epoch) == (self.base.writer, self.base.epoch) and e.prev == self.seq

    def materialized(self) -> JournalEntry:
        """The SNAPSHOT of the state the last record describes (``base`` when no UPDATE follows it)."""
        if not self.updates:
            return self.base
        snap, topic_id = decode(self.base.data)
        folded: dict[str, Any] = json.loads(self.updates[0].data)["update"]
        for u in self.updates[1:]:  # the updates folded into one first: one pass over the snapshot
            folded = delta.apply(folded, json.loads(u.data)["update"])
        last = self.updates[-1]
        data = encode(delta.apply(snap, folded), topic_id, last.writer, last.epoch, seq=last.seq)
        return JournalEntry(self.base.key, last.writer, last.epoch, last.seq, data, source=self.source)


def _topic_of(data: bytes) -> Any:
    doc = json.loads(data)
    return doc.get("topic_id") if isinstance(doc, dict) else None


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


class ShareJournal:
    """Append-only segments of share-partition states in ``directory`` (``open`` before ``append``)."""

    def __init__(self, directory: str | os.PathLike, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 fsync: bool = False):
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        #: fsync every append (the partition logs are fsynced at every record: log.flush.interval.messages=1).
        self.fsync = fsync
        #: The snapshot rule (``entry``): UPDATEs after a SNAPSHOT at most, and their bytes at most, as a
        #: multiple of the SNAPSHOT's.
        self.max_updates = MAX_UPDATES
        self.update_ratio = 1.0
        #: Per share partition, its latest journaled entry ZooKeeper does not hold yet.
        self.pending: dict[Key, JournalEntry] = {}
        #: Per share partition, its records since its last SNAPSHOT in the active segment.
        self._chains: dict[Key, _Chain] = {}
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
        chains: dict[Key, _Chain] = {}
        topics: dict[Key, Any] = {}  # the topic id each chain's SNAPSHOT names
        ignored = 0
        old = self.segments()
        for path in old:
            entries, good, size = _read_segment(path)
            if good < size:
                log.warning("share-state journal %s: a torn or corrupt record at byte %d of %d; cut there (%d "
                            "records before it kept)", path, good, size, len(entries))
                os.truncate(path, good)
            for e in entries:
                c = chains.get(e.key)
                if e.prev is None:
                    chains[e.key], topics[e.key] = _Chain(e, [], None, 0), _topic_of(e.data)
                elif c is not None and c.follows(e) and _topic_of(e.data) == topics[e.key]:
                    c.updates.append(e)
                else:  # its predecessor is missing: the state stays the last one whole
                    ignored += 1
        if ignored:
            log.warning("share-state journal %s: %d update record(s) whose predecessor is missing ignored",
                        self.directory, ignored)
        latest = {key: c.materialized() for key, c in chains.items()}
        self._n = max((int(_SEGMENT.match(p.name).group(1)) for p in old), default=-1) + 1  # type: ignore[union-attr]
        self.pending = dict(latest)
        self._chains = {key: _Chain(e, [], None, 0) for key, e in latest.items()}
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
                fsync_dir(self.directory)
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

    def entry(self, key: Key, writer: str | None, epoch: int, sp: SharePartition,
              topic_id: bytes | None) -> JournalEntry:
        """The record to append for ``sp``'s current state (``sp.version`` its sequence number): an
        UPDATE (``sp.take_update``) when it continues the chain of ``key`` -- the last record of ``key``
        in the journal was taken from ``sp`` itself, by this lineage -- and the chain's UPDATEs, this
        one included, are at most ``max_updates`` and smaller than its SNAPSHOT (``update_ratio`` times);
        else a SNAPSHOT.
        Either way ``sp``'s changes are taken: the record must be appended (``append``) before the next
        ``entry`` of ``key``."""
        update = sp.take_update()
        c = self._chains.get(key)
        if c is not None and c.source is sp and (c.base.writer, c.base.epoch) == (writer, epoch) \
                and len(c.updates) < self.max_updates:
            data = encode_update(update, topic_id, writer, epoch, sp.version, c.seq)
            if c.size + len(data) < self.update_ratio * len(c.base.data):
                return JournalEntry(key, writer, epoch, sp.version, data, c.seq, sp)
        data = encode(sp.snapshot(), topic_id, writer, epoch, seq=sp.version)
        return JournalEntry(key, writer, epoch, sp.version, data, None, sp)

    def append(self, entries: list[JournalEntry]) -> None:
        """Journal ``entries`` (a group commit: one ``os.write`` for them all; fsynced when ``fsync``).
        Raises ValueError, appending nothing, for an UPDATE that does not follow its share partition's
        last record (each comes from ``entry`` right before).
        Raises OSError (a full disk, an I/O error): then the active segment is cut back to where it was,
        nothing of ``entries`` counts as journaled, and their share partitions' chains end (their next
        record is a SNAPSHOT: the changes taken for these UPDATEs are in no record)."""
        if not entries:
            return
        if self._fd is None:
            raise OSError("share-state journal not open")
        for e in entries:
            c = self._chains.get(e.key)
            if e.prev is not None and (c is None or not c.follows(e)):
                raise ValueError(f"share-state journal: an UPDATE of {e.key} that follows no record of it (entry)")
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
            for entry in entries:
                c = self._chains.get(entry.key)
                if c is not None:
                    c.source = None
            raise
        self._size += len(buf)
        self.appends += 1
        self.bytes += len(buf)
        for entry in entries:
            self._set_pending(entry.key, None)
            if entry.prev is None:
                self._chains[entry.key] = _Chain(entry, [], entry.source, 0)
            else:  # it follows its chain: checked before the write
                c = self._chains[entry.key]
                c.updates.append(entry)
                c.size += len(entry.data)
                c.source = entry.source
            self._set_pending(entry.key, entry)
        if self._size > max(self.segment_bytes, 2 * self._pending_bytes):
            self._roll()

    def _set_pending(self, key: Key, entry: JournalEntry | None) -> None:
        """``entry`` is the latest record of ``key`` ZooKeeper does not hold (None: none is); the pending
        bytes count what a roll would carry over of it (about its SNAPSHOT's size)."""
        c = self._chains.get(key)
        size = 0 if c is None else len(c.base.data)
        if self.pending.pop(key, None) is not None:
            self._pending_bytes -= size
        if entry is not None:
            self.pending[key] = entry
            self._pending_bytes += size

    def _roll(self) -> None:
        """A new segment with the pending entries, one materialized SNAPSHOT each, then the old one deleted
        (fsynced first: a machine crash never finds the old segment gone and the new one empty); the
        chains of the share partitions not pending end with it."""
        for key in self.pending:
            c = self._chains[key]
            if c.updates:
                m = c.materialized()
                self._chains[key] = _Chain(m, [], c.source, 0)
                self.pending[key] = m
        self._pending_bytes = sum(len(e.data) for e in self.pending.values())
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
        self._chains = {key: self._chains[key] for key in self.pending}

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
        self._chains.pop(key, None)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
