"""Kafka's change notifications in ZooKeeper: how every broker learns of a change without a restart.

A writer changes an entity (``/config/users/<user>``, ``/kafka-acl/Topic/<name>``) and
then creates a persistent sequential znode under a notification root
(``/config/changes/config_change_``, ``/kafka-acl-changes/acl_changes_``) saying what
changed.  Every broker watches the root's children and, for each notification
newer than the last it handled, re-reads that entity (Kafka's
``ZkNodeChangeNotificationListener``).  Notifications older than 15 minutes are
deleted by whoever sees them (Kafka's ``changeExpirationMs``), so the root stays
small.  Kafka's own tools (``kafka-configs``, ``kafka-acls`` in ZooKeeper mode) write
the same notifications, so their changes reach our brokers too.

``ChangeNotificationListener.start()`` notes the newest existing notification
first, so the caller can then load the full state: a change made meanwhile is
newer and gets handled again (handlers re-read the entity, so that is harmless).
The handler runs on kazoo's watch thread, where reading ZooKeeper is allowed.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError

from spark_coord.zk.client import ChildrenWatch

log = logging.getLogger(__name__)

#: Kafka's ``ZkNodeChangeNotificationListener`` default.
EXPIRATION_S = 15 * 60


def create_notification(zk: KazooClient, root: str, prefix: str, data: bytes, acl=None) -> str:
    """Write one notification (a persistent sequential znode); returns its path."""
    return zk.create(f"{root}/{prefix}", data, acl=acl, sequence=True, makepath=True)


class ChangeNotificationListener:
    """Calls ``handler(data)`` for each new notification under ``root`` (named ``<prefix><seq>``)."""

    def __init__(self, zk: KazooClient, root: str, prefix: str, handler: Callable[[bytes], None],
                 expiration_s: float = EXPIRATION_S, acl=None):
        self.zk = zk
        self.root = root
        self.prefix = prefix
        self.handler = handler
        self.expiration_s = expiration_s
        self.acl = acl
        self.last_seq = -1
        self._pattern = re.compile(re.escape(prefix) + r"(\d+)$")
        self._lock = threading.Lock()
        self._watch: ChildrenWatch | None = None
        self._stopped = False

    def _seq(self, child: str) -> int | None:
        m = self._pattern.match(child)
        return int(m.group(1)) if m else None

    def start(self) -> None:
        """Note the newest notification (blocking); ``watch()`` afterwards, once the state is loaded."""
        self.zk.retry(self.zk.ensure_path, self.root, acl=self.acl)
        children = self.zk.retry(self.zk.get_children, self.root)
        self.last_seq = max((s for s in map(self._seq, children) if s is not None), default=-1)

    def watch(self) -> None:
        """Handle every notification newer than ``last_seq`` from now on."""
        self._watch = ChildrenWatch(self.zk, self.root, self._on_children)

    def stop(self) -> None:
        self._stopped = True

    def _on_children(self, children: list[str]) -> bool | None:
        if self._stopped:
            return False  # ends the watch
        with self._lock:
            pending = sorted((s, c) for c in children if (s := self._seq(c)) is not None)
            now = time.time()
            for seq, child in pending:
                path = f"{self.root}/{child}"
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                except KazooException as e:
                    log.info("cannot read %s (%s); it is handled at the next change", path, e.__class__.__name__)
                    return None
                if seq > self.last_seq:
                    try:
                        self.handler(data)
                    except Exception:  # a bad notification must not stop the others
                        log.exception("change notification %s could not be handled", path)
                    self.last_seq = seq
                if now - stat.ctime / 1000 > self.expiration_s:
                    try:
                        self.zk.delete(path)
                    except (NoNodeError, NoAuthError):
                        pass
                    except KazooException as e:
                        log.debug("could not purge %s: %s", path, e)
        return None
