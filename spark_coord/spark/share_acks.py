"""Poison records of a share group read by Spark: ``foreachBatch`` helpers that release or reject rows.

A query reading a share group (``kafka.share.group.id``) accepts every record of a micro-batch
once Spark has committed it.  A ``foreachBatch`` function can say otherwise for some rows:

* ``release(rows, group)``: the records go back to the group when the batch commits, their
  delivery count kept, and are read again (by this query or another member) -- until the group's
  ``share.delivery.count.limit`` is reached, when the broker archives them for good;
* ``reject(rows, group)``: the records are set aside for good (archived) at once;
* ``foreach_record(batch, fn, group)``: calls ``fn(row)`` for every row of the batch on the driver
  and releases (or rejects) the rows whose call raised, so one bad record neither stops the query
  nor holds back the others.

The marks travel from the function's process to the reader's (both are on the driver: Spark runs
``foreachBatch`` in the query's Python process and the source in its own) through a directory,
``kafka.share.acknowledgements.path`` or by default ``<temp dir>/coordkafka-share/<group>``: each
call writes one file (written whole, then renamed into place); the reader, when it acknowledges a
committed batch, takes the marks that fall in that batch's records and leaves the others.  Marks
of records no batch of this run holds (a query restarted meanwhile) are dropped after a day.

Rows are anything with ``topic``, ``partition`` and ``offset`` fields: a DataFrame (collected),
``Row``\\ s, dicts or ``(topic, partition, offset)`` tuples.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

__all__ = ["release", "reject", "foreach_record", "marks_dir"]

KINDS = ("release", "reject")
#: Marks older than this that no batch took are removed.
STALE_AFTER_S = 24 * 3600


def marks_dir(group: str, path: str | None = None) -> Path:
    """Where the marks of share group ``group`` go (``path`` when given)."""
    if path:
        return Path(path)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", group)
    return Path(tempfile.gettempdir()) / "coordkafka-share" / safe


def release(rows: Any, group: str, path: str | None = None) -> int:
    """Release ``rows`` when their batch commits: they come back with their delivery count; returns how many."""
    return _mark(rows, "release", group, path)


def reject(rows: Any, group: str, path: str | None = None) -> int:
    """Reject ``rows`` when their batch commits: archived, never delivered again; returns how many."""
    return _mark(rows, "reject", group, path)


def foreach_record(batch: Any, fn: Callable[[Any], Any], group: str, on_error: str = "release",
                   path: str | None = None) -> tuple[int, int]:
    """Call ``fn(row)`` for every row of ``batch`` (collected to the driver); the rows whose call raised
    are released (``on_error="release"``, read again until the delivery limit) or rejected.  Returns
    ``(rows processed, rows that failed)``.  Each failure is logged with its record's coordinates."""
    if on_error not in KINDS:
        raise ValueError(f"on_error: release or reject, not {on_error!r}")
    failed = []
    rows = _rows(batch)
    for row in rows:
        try:
            fn(row)
        except Exception as e:  # noqa: BLE001 -- the point: one record's failure is that record's
            t, p, o = _coordinates(row)
            log.warning("share group %s: %s-%d@%d failed (%r); %s", group, t, p, o, e,
                        "released: it comes back, counted" if on_error == "release" else "rejected")
            failed.append((t, p, o))
    _mark(failed, on_error, group, path)
    return len(rows), len(failed)


def _rows(rows: Any) -> list:
    if hasattr(rows, "collect") and hasattr(rows, "select"):  # a DataFrame
        return rows.collect()
    return list(rows)


def _coordinates(row: Any) -> tuple[str, int, int]:
    if isinstance(row, tuple) and not hasattr(row, "asDict") and len(row) == 3:
        t, p, o = row
    elif isinstance(row, dict):
        t, p, o = row["topic"], row["partition"], row["offset"]
    else:
        t, p, o = row["topic"], row["partition"], row["offset"]
    return str(t), int(p), int(o)


def _mark(rows: Any, kind: str, group: str, path: str | None) -> int:
    if hasattr(rows, "select") and hasattr(rows, "collect"):
        rows = rows.select("topic", "partition", "offset").collect()
    entries = [[*_coordinates(r), kind] for r in rows]
    if not entries:
        return 0
    d = marks_dir(group, path)
    d.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.json"
    tmp = d / f".{name}.tmp"
    tmp.write_text(json.dumps(entries))
    os.replace(tmp, d / name)
    log.info("share group %s: %d record(s) marked %s", group, len(entries), kind)
    return len(entries)


@contextmanager
def _locked(d: Path):
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def take_marks(group: str, path: str | None, holds: Callable[[str, int, int], bool]
               ) -> dict[tuple[str, int, int], str]:
    """The marks of records ``holds(topic, partition, offset)`` says are in the batch being
    acknowledged, taken out of their files (a file left empty is removed).  The reader's side."""
    d = marks_dir(group, path)
    if not d.is_dir():
        return {}
    out: dict[tuple[str, int, int], str] = {}
    with _locked(d):
        for f in sorted(d.glob("*.json")):
            try:
                entries = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                log.warning("share acknowledgements: %s unreadable (%s); removed", f.name, e)
                f.unlink(missing_ok=True)
                continue
            keep = []
            for t, p, o, kind in entries:
                if holds(t, p, o) and kind in KINDS:
                    if out.get((t, p, o)) != "reject":  # reject wins over release
                        out[(t, p, o)] = kind
                else:
                    keep.append([t, p, o, kind])
            if not keep or time.time() - f.stat().st_mtime > STALE_AFTER_S:
                f.unlink(missing_ok=True)
            elif len(keep) != len(entries):
                tmp = f.with_name(f".{f.name}.tmp")
                tmp.write_text(json.dumps(keep))
                os.replace(tmp, f)
    return out


def split_ranges(first: int, last: int, marked: Iterable[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """``first..last`` as ``(first, last, kind)`` pieces: ``accept`` around the marked offsets,
    each marked offset its own piece of its kind."""
    out = []
    pos = first
    for off, kind in sorted(marked):
        if off < pos or off > last:
            continue
        if off > pos:
            out.append((pos, off - 1, "accept"))
        out.append((off, off, kind))
        pos = off + 1
    if pos <= last:
        out.append((pos, last, "accept"))
    return out
