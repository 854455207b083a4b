"""Transactions on one partition log (KIP-98's partition side): open transactions, the last stable
offset, the aborted-transaction index.

``TxnState`` is what a partition leader knows of its producers' transactions:

* each producer's open transaction and its first offset: a transactional batch (attributes bit 4,
  not a control batch) opens one for its producer when none is open; a control batch (the marker
  WriteTxnMarkers appends) closes it;
* the last coordinator epoch of each producer's markers (a marker with an older one is refused:
  ``TRANSACTION_COORDINATOR_FENCED``) and the producer's newest epoch seen here;
* the aborted transactions, ``AbortedTxn`` (producer id, first offset, last offset -- the ABORT
  marker's --, and the last stable offset once it was written), oldest first.

The last stable offset (LSO) is the smallest first offset of the open transactions, else the high
watermark (the log end, one replica).

On disk, as Kafka keeps them:

* ``<base>.txnindex`` beside each segment: an entry of 34 bytes per aborted transaction whose ABORT
  marker is in that segment (version int16 0, producer id int64, first offset int64, last offset int64,
  last stable offset int64; big-endian, Kafka's ``AbortedTxn``);
* ``<base>.txnsnapshot``, written when a segment is rolled: the state (open transactions, epochs) at
  offset ``base``, so that recovery reads only the batch headers after the newest snapshot (and the
  markers' values there) instead of the whole log; a snapshot that does not parse or whose CRC is wrong
  is ignored (an older one, or the log start, is used).  Recovery also rewrites the aborted entries of
  the scanned range, so a marker whose index entry was lost in a crash gets it back.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, NamedTuple

from ..records.header import HEADER_SIZE, TRANSACTIONAL_MASK, BatchHeader
from ..records.reader import read_varint

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".txnsnapshot"

#: Kafka's ``AbortedTxn``: version, producer id, first offset, last offset, last stable offset.
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 34
ENTRY_VERSION = 0

#: The marker record's key: version int16, type int16 (0 ABORT, 1 COMMIT); its value: version int16,
#: coordinator epoch int32 (Kafka's ``EndTransactionMarker``).
ABORT, COMMIT = 0, 1


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def txn_index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


def snapshot_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SNAPSHOT_SUFFIX}"


def parse_txn_file(name: str) -> tuple[int, str] | None:
    """``"00000000000000000042.txnindex"`` -> ``(42, ".txnindex")``; None for other files."""
    for suffix in (TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX):
        if name.endswith(suffix):
            stem = name[:-len(suffix)]
            if len(stem) == 20 and stem.isdigit():
                return int(stem), suffix
    return None


def is_transactional(h: BatchHeader) -> bool:
    return bool(h.attributes & TRANSACTIONAL_MASK) and h.producer_id >= 0


def parse_marker(raw: bytes) -> tuple[int, int]:
    """(marker type, coordinator epoch) of a whole control batch's bytes (uncompressed, one record:
    Kafka's ``EndTransactionMarker``); ``ValueError`` when it is not one."""
    p = HEADER_SIZE
    _, p = read_varint(raw, p)  # record length
    p += 1  # attributes
    _, p = read_varint(raw, p)  # timestamp delta
    _, p = read_varint(raw, p)  # offset delta
    key_len, p = read_varint(raw, p)
    key = raw[p:p + max(key_len, 0)]
    p += max(key_len, 0)
    value_len, p = read_varint(raw, p)
    value = raw[p:p + max(value_len, 0)]
    if len(key) < 4 or len(value) < 6:
        raise ValueError(f"control record with a key of {len(key)} and a value of {len(value)} bytes")
    return int.from_bytes(key[2:4], "big"), int.from_bytes(value[2:6], "big", signed=True)


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(ENTRY_VERSION, *e) for e in entries)


def read_txn_index(path: Path) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file; a partial trailing entry is ignored."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, *rest = ENTRY.unpack_from(data, pos)
        if version != ENTRY_VERSION:
            log.warning("%s: entry at byte %d has version %d; the rest is ignored", path, pos, version)
            break
        out.append(AbortedTxn(*rest))
    return out


@dataclass
class ProducerTxn:
    """One producer's transactional state on one partition."""

    epoch: int = -1
    coordinator_epoch: int = -1
    first_offset: int = -1  # of its open transaction; -1 when none is open


@dataclass
class TxnState:
    """The transactions of one partition log (guarded by the log's lock)."""

    producers: dict[int, ProducerTxn] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)  # by last offset (marker order)
    #: Producer id -> first offset of its open transaction (the few open ones, for the LSO of every fetch).
    open: dict[int, int] = field(default_factory=dict)

    def load(self, producers: dict[int, ProducerTxn]) -> None:
        """Take the producers of a snapshot."""
        self.producers = producers
        self.open = {pid: p.first_offset for pid, p in producers.items() if p.first_offset >= 0}

    # ------------------------------------------------------------------ changes

    def on_batch(self, h: BatchHeader, base_offset: int) -> None:
        """A data batch appended at ``base_offset``: a transactional one opens its producer's transaction."""
        if not is_transactional(h) or h.is_control:
            return
        p = self.producers.setdefault(h.producer_id, ProducerTxn())
        p.epoch = max(p.epoch, h.producer_epoch)
        if p.first_offset < 0:
            p.first_offset = base_offset
            self.open[h.producer_id] = base_offset

    def on_marker(self, producer_id: int, producer_epoch: int, marker: int, coordinator_epoch: int, offset: int,
                  high_watermark: int) -> AbortedTxn | None:
        """A marker appended at ``offset``: closes the producer's transaction; returns the aborted
        entry for an ABORT that closed an open transaction (None otherwise)."""
        p = self.producers.setdefault(producer_id, ProducerTxn())
        p.epoch = max(p.epoch, producer_epoch)
        p.coordinator_epoch = max(p.coordinator_epoch, coordinator_epoch)
        first, p.first_offset = p.first_offset, -1
        self.open.pop(producer_id, None)
        if marker != ABORT or first < 0:
            return None
        entry = AbortedTxn(producer_id, first, offset, self.lso(high_watermark))
        self.aborted.append(entry)
        return entry

    # ------------------------------------------------------------------ queries

    def first_unstable(self) -> int | None:
        return min(self.open.values()) if self.open else None

    def lso(self, high_watermark: int) -> int:
        first = self.first_unstable()
        return high_watermark if first is None else min(first, high_watermark)

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self.open)

    def aborted_between(self, start: int, upper: int) -> list[AbortedTxn]:
        """Kafka's ``collectAbortedTxns``: the aborted transactions whose last offset is >= ``start``
        and whose first offset is < ``upper``."""
        i = bisect.bisect_left(self.aborted, start, key=lambda e: e.last_offset)
        return [e for e in self.aborted[i:] if e.first_offset < upper]

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether a data batch of ``producer_id`` at ``offset`` belongs to an aborted transaction."""
        return any(e.producer_id == producer_id and e.first_offset <= offset <= e.last_offset for e in self.aborted)

    def drop_below(self, offset: int) -> None:
        """Forget the aborted transactions wholly below ``offset`` (retention moved the log start)."""
        self.aborted = [e for e in self.aborted if e.last_offset >= offset]

    # ------------------------------------------------------------------ snapshots

    def snapshot_bytes(self, offset: int) -> bytes:
        doc = {"version": 1, "offset": offset,
               "producers": [[pid, p.epoch, p.coordinator_epoch, p.first_offset]
                             for pid, p in sorted(self.producers.items())]}
        body = json.dumps(doc, separators=(",", ":")).encode()
        return zlib.crc32(body).to_bytes(4, "big") + body

    @staticmethod
    def parse_snapshot(data: bytes) -> tuple[int, dict[int, ProducerTxn]] | None:
        """(offset, producers) of a snapshot file's bytes; None when it is damaged."""
        if len(data) < 4 or zlib.crc32(data[4:]) != int.from_bytes(data[:4], "big"):
            return None
        try:
            doc = json.loads(data[4:])
            producers = {int(pid): ProducerTxn(int(e), int(c), int(f)) for pid, e, c, f in doc["producers"]}
            return int(doc["offset"]), producers
        except (ValueError, KeyError, TypeError):
            return None


def write_file_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (no fsync: see the module docstring)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
