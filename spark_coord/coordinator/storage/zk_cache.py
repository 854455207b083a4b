"""What ``ZkGroupStore`` knows about its znodes during one election term.

Within a term only this coordinator writes under ``/consumers/<group>`` (any
other coordinator's election bumps ``/consumers`` and fences our writes), so
what we last read or wrote there stays true.  Knowing it lets a write skip
the existence checks (set_data on a node known to exist, create parents only
for a node known to be missing) and skip values it already wrote, and lets
``read_owners`` / ``write_owners`` work without re-reading a thousand znodes.

The knowledge is a hint, never a licence: every write is still a fenced
multi, and a multi that finds the hint wrong (NoNode, NodeExists) makes the
store ``forget`` the path and plan again from ZooKeeper.  A new term (another
``EpochCheck``) starts from nothing; so does a write whose outcome is unknown.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterator

from spark_coord.common import TopicPartition

if TYPE_CHECKING:
    from spark_coord.coordinator.storage.fencing import EpochCheck

log = logging.getLogger(__name__)


#: Marks a znode known to exist whose content is not tracked (a parent, say).
UNTRACKED = object()


def ancestors(path: str) -> Iterator[str]:
    """Ancestors of ``path`` strictly below ``/consumers``, shallowest first (``/consumers`` always exists)."""
    parts = path.strip("/").split("/")
    for i in range(2, len(parts)):
        yield "/" + "/".join(parts[:i])


class ZnodeCache:
    """Known znodes (path -> last known data) and complete owner maps, for one ``EpochCheck``."""

    def __init__(self, check: "EpochCheck | None"):
        self.check = check
        self._nodes: dict[str, object] = {}
        #: group -> every owner znode of the group (None: content unparsable), as last read or written.
        self.owners: dict[str, dict[TopicPartition, str | None]] = {}

    def exists(self, path: str) -> bool | None:
        """True when known to exist; None when unknown (absence is never cached)."""
        return True if path in self._nodes else None

    def holds(self, path: str, data: bytes) -> bool:
        """Is ``path`` known to exist with exactly ``data``?"""
        known = self._nodes.get(path, UNTRACKED)
        return known is not UNTRACKED and known == data

    def mark(self, path: str, data: bytes | None = None) -> None:
        """``path`` exists (with ``data`` when given), hence so do its ancestors."""
        self._nodes[path] = UNTRACKED if data is None else data
        for parent in ancestors(path):
            self._nodes.setdefault(parent, UNTRACKED)

    def learn(self, path: str, data: bytes) -> None:
        """A read found ``path`` holding ``data``; a write recorded meanwhile is newer, so it wins."""
        if path not in self._nodes or self._nodes[path] is UNTRACKED:
            self.mark(path, data)

    def removed(self, path: str) -> None:
        """We deleted ``path``."""
        self._nodes.pop(path, None)

    def forget(self, path: str) -> None:
        """ZooKeeper disagreed about ``path``: forget it, its ancestors and all owner maps."""
        log.info("store hint about %s was wrong; re-reading it from ZooKeeper", path)
        self._nodes.pop(path, None)
        for parent in ancestors(path):
            self._nodes.pop(parent, None)
        prefix = path.rstrip("/") + "/"
        for known in [p for p in self._nodes if p.startswith(prefix)]:
            del self._nodes[known]
        self.owners.clear()

    def reset(self) -> None:
        """Forget everything (a write's outcome is unknown)."""
        self._nodes.clear()
        self.owners.clear()
