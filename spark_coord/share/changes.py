"""Admin changes of share-group state, and how every broker learns of them (KIP-932).

The coordinator rewrites or deletes a share group's znodes for AlterShareGroupOffsets,
DeleteShareGroupOffsets and DeleteGroups -- only while the group has no member -- and then
writes a notification ``/share-group-changes/share_change_<seq>`` naming the group and the
topics (``encode_change``).  Every broker follows the notifications (``ShareStateChanges``:
Kafka's change-notification pattern, ``security.notifications.ChangeNotificationListener``: one
ChildrenWatch on the root, notifications older than 15 minutes purged by whoever sees them) and
drops the share partitions of those topics of that group it holds, so the next ShareFetch
reads the new state from ZooKeeper.

Why a notification: a leader's conditional write finds the znode version moved and reloads, but
an idle share partition (nothing acquired, nothing left to write) has no next write, and would
go on serving its old start offset to the group's next consumers.

Dropping is safe because the group had no member when the state was changed: nothing is
acquired but what a dead member may still hold until its lock runs out, and that goes back
(available again, its delivery count kept in ZooKeeper) as a lock expiry would have done.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Iterable

from spark_coord.zk import paths

log = logging.getLogger(__name__)

__all__ = ["ShareStateChanges", "encode_change", "parse_change"]

CHANGE_VERSION = 1


def encode_change(group: str, topics: Iterable[str] | None = None) -> bytes:
    """A notification's data: ``{"version":1,"group":...,"topics":[...] or null}`` (null: every topic)."""
    doc = {"version": CHANGE_VERSION, "group": group, "topics": None if topics is None else sorted(set(topics))}
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_change(data: bytes | None) -> tuple[str, frozenset[str] | None] | None:
    """(group, topics or None for all) of a notification; None when it is not one."""
    try:
        doc = json.loads((data or b"").decode())
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != CHANGE_VERSION:
        return None
    topics = doc.get("topics")
    try:
        group = paths.validate_group(doc.get("group"))
    except ValueError:
        return None
    if topics is None:
        return group, None
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        return None
    return group, frozenset(topics)


class ShareStateChanges:
    """A broker's follower of the share-state notifications: drops what its ``SharePartitionManager``
    holds of a changed group, on the event loop.  ``start``/``stop`` block (call them off the loop)."""

    def __init__(self, zk: Any, manager: Any, loop: asyncio.AbstractEventLoop):
        from spark_coord.security.notifications import ChangeNotificationListener
        from spark_coord.zk import acls

        self.manager = manager
        self.loop = loop
        self._listener = ChangeNotificationListener(zk, paths.SHARE_CHANGES, paths.SHARE_CHANGE_PREFIX,
                                                    self._on_notification,
                                                    acl=acls.for_path(zk, paths.SHARE_CHANGES))

    def start(self) -> None:
        """Note the newest notification, then follow the later ones (blocking)."""
        self._listener.start()
        self._listener.watch()

    def stop(self) -> None:
        self._listener.stop()

    def _on_notification(self, data: bytes) -> None:  # kazoo's watch thread
        change = parse_change(data)
        if change is None:
            log.warning("ignoring a share-state notification that is not one: %r", (data or b"")[:200])
            return
        try:
            self.loop.call_soon_threadsafe(self.drop, *change)
        except RuntimeError:  # the loop is closed: the broker is stopping
            pass

    def drop(self, group: str, topics: frozenset[str] | None = None) -> int:
        """Forget the share partitions of ``group`` (of ``topics``; None: all) held here; how many.
        On the event loop."""
        held = self.manager.held
        keys = [k for k in list(held) if k[0] == group and (topics is None or k[1] in topics)]
        if not keys:
            return 0
        self.manager.forget_partitions(keys)
        log.info("share group %s: its state was changed by an admin; %d share partition(s) here are read "
                 "again at next use", group, len(keys))
        return len(keys)
