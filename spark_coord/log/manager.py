"""All partition logs of one broker, under ``log.dirs``.

At start every ``<topic>-<partition>`` directory is opened (and recovered); leftovers
of interrupted deletions (``*-delete``) are removed; anything else is left alone
with a warning.  A partition that fails to open is logged and skipped so the broker
still serves the others.

``get``/``get_or_create`` run on the event-loop thread; ``flush_due`` and
``apply_retention`` are meant for a worker thread (they may fsync and unlink).
``run_io`` runs a blocking log call (an fsync a produce waits for, a segment scan)
on the manager's own I/O threads and awaits it, so the event loop -- which also
carries the coordinator's pings -- never waits for the disk.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from .config import LogConfig
from .names import is_deletion_dir, parse_partition_dir, partition_dir_name
from .partition import Clock, PartitionLog

log = logging.getLogger(__name__)

#: Threads for blocking log calls made on behalf of requests (fsyncs of different
#: partitions proceed in parallel; one partition's fsyncs are serialised by its log).
IO_THREADS = 4

T = TypeVar("T")
#: Directories of log.dirs that hold no partition and are skipped quietly: the share-state journal
#: (``share.journal.JOURNAL_DIR``).  Kafka keeps non-partition files beside its logs too.
OTHER_DIRS = frozenset({"__share_state"})


class LogManager:
    """Opens, creates, deletes and maintains the partition logs in one directory."""

    def __init__(self, log_dir: Path, config: LogConfig, clock: Clock = time.time):
        self.log_dir = Path(log_dir)
        self.config = config
        #: ``topic -> LogConfig`` of a topic's own settings (``set_config_source``); the broker's otherwise.
        self._config_for: Callable[[str], LogConfig] = lambda topic: self.config
        self._clock = clock
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._io = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="log-io")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for entry in sorted(os.scandir(self.log_dir), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False) or entry.name in OTHER_DIRS:
                continue
            if is_deletion_dir(entry.name):
                log.info("removing partly deleted partition directory %s", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            try:
                key = parse_partition_dir(entry.name)
            except ValueError:
                log.warning("ignoring directory %s in %s: not <topic>-<partition>", entry.name, self.log_dir)
                continue
            try:
                self._logs[key] = PartitionLog(Path(entry.path), config, clock)
            except Exception:  # noqa: BLE001 -- one unreadable partition must not stop the broker
                log.exception("cannot open partition log %s; it stays offline", entry.path)

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the log I/O threads, awaited from the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._io, functools.partial(fn, *args))

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, created empty if absent.  ``ValueError`` for an illegal topic name."""
        name = partition_dir_name(topic, partition)
        with self._lock:
            plog = self._logs.get((topic, partition))
            if plog is None:
                plog = PartitionLog(self.log_dir / name, self._config_for(topic), self._clock)
                self._logs[(topic, partition)] = plog
            return plog

    def delete_partition(self, topic: str, partition: int) -> None:
        """Forget the partition and remove its directory (nothing happens if it is unknown)."""
        with self._lock:
            plog = self._logs.pop((topic, partition), None)
        if plog is not None:
            plog.delete()

    def set_config_source(self, config_for: Callable[[str], LogConfig]) -> None:
        """Follow per-topic settings from now on (``config_for(topic)``), and apply them to every open log."""
        self._config_for = config_for
        self.refresh_configs()

    def refresh_configs(self, topic: str | None = None) -> list[PartitionLog]:
        """Give the logs of ``topic`` (None: every topic) their current settings; returns the logs whose
        settings changed."""
        changed = []
        for plog in self._all():
            if topic is None or plog.topic == topic:
                cfg = self._config_for(plog.topic)
                if cfg != plog.config:
                    plog.config = cfg
                    changed.append(plog)
        return changed

    def logs(self, topic: str | None = None) -> list[PartitionLog]:
        """Every open log (of ``topic``)."""
        return [p for p in self._all() if topic is None or p.topic == topic]

    def partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._logs)

    def _all(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._logs.values())

    def flush_due(self) -> None:
        """Apply the time-based flush policy to every partition."""
        for plog in self._all():
            try:
                plog.maybe_flush_by_time()
            except Exception:  # noqa: BLE001 -- keep flushing the others
                log.exception("flush of %s failed", plog)

    def flush_all(self) -> None:
        """fsync every partition now (clean shutdown)."""
        for plog in self._all():
            try:
                plog.flush()
            except Exception:  # noqa: BLE001 -- flush the others all the same
                log.exception("flush of %s failed", plog)

    def apply_retention(self, topic: str | None = None) -> None:
        """Apply retention to every partition (of ``topic``)."""
        for plog in self.logs(topic):
            try:
                plog.apply_retention()
            except Exception:  # noqa: BLE001 -- keep going with the others
                log.exception("retention of %s failed", plog)

    def close(self) -> None:
        """Wait for the I/O threads' work, then flush and close every partition."""
        self._io.shutdown(wait=True)
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for plog in logs:
            try:
                plog.close()
            except Exception:  # noqa: BLE001 -- close the others anyway
                log.exception("closing %s failed", plog)
