"""How the log cleaner replaces segments so that a crash at any moment leaves a whole log (Kafka's scheme).

A cleaning pass rewrites a group of adjacent closed segments ``[B1, B2, ... Bn]`` into one
segment based at ``B1``:

1. ``B1.log.cleaned`` and ``B1.index.cleaned`` are written and fsynced (a crash here: the
   ``.cleaned`` files are deleted at start, the old segments are untouched);
2. ``B1.index.cleaned`` -> ``B1.index.swap``, then ``B1.log.cleaned`` -> ``B1.log.swap``, and the
   directory is fsynced: the ``.log.swap`` file is the commit point;
3. the other segments of the group (``B2`` .. ``Bn``) are unlinked, ``B1.log.swap`` replaces
   ``B1.log`` and ``B1.index.swap`` replaces ``B1.index`` (``rename`` is atomic), the directory is
   fsynced.

At start (``recover_cleaner_files``, before the segments are opened) every ``.cleaned`` and
``.deleted`` file is removed, and a committed swap is finished: the segments whose base offset
lies inside the swap segment's offsets are removed and the ``.swap`` files take their names.
So a SIGKILL mid-pass never lets the broker serve a half-written segment, and never loses a record
(old segments go only after the cleaned one is durable and committed).  A group whose every record
was superseded becomes an empty segment at ``B1``, and stays: retention does not take it for one below
the log start (the next segment's base says where its offsets end), so compaction never moves the log
start, whether or not a pass was cut short.

``cleaner-offset-checkpoint`` in the partition directory holds the first offset not yet cleaned
(Kafka keeps one such file per log directory); it moves once every group of a pass is swapped in.

Testing hook: when the environment variable ``SPARK_COORD_CLEANER_CRASH_AT`` names one of
``CRASH_STEPS`` (``<step>`` or ``<step>:<n>``), the process SIGKILLs itself the first (or
``n``-th) time the cleaner reaches that step, so a test can cut a pass at each step of the
swap deterministically.  The steps, in the order a group passes them: ``cleaned`` (step 1
done), ``index-swap`` (the index renamed to ``.swap``, the log still ``.cleaned``),
``committed`` (the commit point), ``unlinked`` (the group's other segments gone),
``index-renamed`` (``B1.index`` replaced, ``B1.log.swap`` not yet), ``renamed`` (step 3 done,
before the log's segment list changes); and once a pass, ``checkpoint`` (every group swapped,
the checkpoint not yet moved).  The variable is read only at those steps; unset, nothing happens.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from .checkpoint import fsync_dir
from .config import INT32_MAX
from .names import parse_segment_name, segment_index_name, segment_log_name
from .scan import scan_batches

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"

#: The testing hook's environment variable and the steps it may name (see the module docstring).
CRASH_AT_ENV = "SPARK_COORD_CLEANER_CRASH_AT"
CRASH_STEPS = ("cleaned", "index-swap", "committed", "unlinked", "index-renamed", "renamed", "checkpoint")
_steps_reached: dict[str, int] = {}


def cleaned_name(name: str) -> str:
    return name + CLEANED_SUFFIX


def swap_name(name: str) -> str:
    return name + SWAP_SUFFIX


def crash_point(step: str) -> None:
    """The testing hook: SIGKILL this process at the ``n``-th arrival at ``step`` if ``CRASH_AT_ENV`` asks."""
    wanted = os.environ.get(CRASH_AT_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != step:
        return
    _steps_reached[step] = reached = _steps_reached.get(step, 0) + 1
    if reached == int(nth or 1):
        log.warning("%s=%s: the log cleaner kills its process at step %r", CRASH_AT_ENV, wanted, step)
        os.kill(os.getpid(), signal.SIGKILL)


def recover_cleaner_files(directory: Path) -> None:
    """Discard unfinished cleaner output and finish committed swaps in one partition directory."""
    swaps = []
    for entry in os.scandir(directory):
        if entry.name.endswith(CLEANED_SUFFIX) or entry.name.endswith(DELETED_SUFFIX):
            log.info("%s: removing unfinished log cleaner file %s", directory, entry.name)
            os.unlink(entry.path)
        elif entry.name.endswith(SWAP_SUFFIX):
            parsed = parse_segment_name(entry.name[:-len(SWAP_SUFFIX)])
            if parsed is not None and parsed[1] == "log":
                swaps.append(parsed[0])
    changed = False
    for base in sorted(swaps):
        _finish_swap(directory, base)
        changed = True
    for entry in os.scandir(directory):  # an index swap whose log swap never got committed
        if entry.name.endswith(SWAP_SUFFIX):
            parsed = parse_segment_name(entry.name[:-len(SWAP_SUFFIX)])
            if parsed is not None and parsed[1] == "index" and parsed[0] not in swaps:
                log.info("%s: removing uncommitted log cleaner file %s", directory, entry.name)
                os.unlink(entry.path)
                changed = True
    if changed:
        fsync_dir(directory)


def _finish_swap(directory: Path, base: int) -> None:
    swap = directory / swap_name(segment_log_name(base))
    with open(swap, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        scanned = scan_batches(f, base, 0, size, min_offset=base, index_interval_bytes=INT32_MAX)
    end = scanned.next_offset if scanned.batches else base
    for entry in os.scandir(directory):
        parsed = parse_segment_name(entry.name)
        if parsed is not None and base < parsed[0] < end:
            log.info("%s: removing %s, replaced by the cleaned segment %d", directory, entry.name, base)
            os.unlink(entry.path)
    index_swap = directory / swap_name(segment_index_name(base))
    if index_swap.exists():
        os.replace(index_swap, directory / segment_index_name(base))
    else:
        (directory / segment_index_name(base)).unlink(missing_ok=True)  # rebuilt when the segment opens
    os.replace(swap, directory / segment_log_name(base))
    log.info("%s: finished the log cleaner's swap of segment %d (offsets up to %d)", directory, base, end)
