"""ZooKeeper ACLs on what spark-coord creates, as Kafka sets them with ``zookeeper.set.acl=true``.

With ``zookeeper.set.acl`` every znode a broker (or coordinator, or the ``users``
command) creates gets:

- everything for the creating identity (``auth`` scheme: the digest credentials of
  ``zookeeper.auth.digest``, which all brokers share), and
- read for everyone, so monitoring and lag tools keep working without credentials,

except the sensitive subtrees (``paths.SENSITIVE_ROOTS``: SCRAM credentials under
``/config/users`` and the ACLs under ``/kafka-acl*``), which only the creating
identity may read.  A client without the credentials can then read, but never
create, change or delete, offsets, owners, the election node or topics.  (Kafka
leaves ``/consumers`` open for its old consumers, which wrote their own offsets;
here only brokers write there, so it is protected like the rest.)

The ACLs apply when a znode is created: znodes made before the switch keep theirs
(``secure_tree`` rewrites a whole tree, the analogue of Kafka's
``zookeeper-security-migration``).
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from spark_coord.zk import paths

log = logging.getLogger(__name__)

#: ACL of ordinary znodes: creator all, world read.
SECURE_ACL = list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
#: ACL of sensitive znodes: creator only.
SENSITIVE_ACL = list(CREATOR_ALL_ACL)


def is_secure(zk: KazooClient) -> bool:
    """Whether ``zk`` creates znodes with ACLs (it was connected with ``set_acl``)."""
    return any(isinstance(a, ACL) and a.id.scheme == "auth" for a in (zk.default_acl or ()))


def acl_for(path: str, secure: bool) -> list[ACL]:
    """The ACL a znode at ``path`` gets (chroot-relative path)."""
    if not secure:
        return list(OPEN_ACL_UNSAFE)
    return SENSITIVE_ACL if paths.is_sensitive(path) else SECURE_ACL


def for_path(zk: KazooClient, path: str) -> list[ACL] | None:
    """The ACL to create ``path`` with through ``zk`` (None: the client's default)."""
    return acl_for(path, True) if is_secure(zk) else None


def secure_tree(zk: KazooClient, root: str = "/", secure: bool = True) -> int:
    """Set every znode under ``root`` (included) to the ACL ``acl_for`` gives it; returns how many.

    ``secure=False`` opens them again (world all), as Kafka's migration tool's
    ``--zookeeper.acl unsecure`` does.  ZooKeeper's own ``/zookeeper`` subtree is left alone.
    """
    count = 0
    stack = [root]
    while stack:
        path = stack.pop()
        if path == "/zookeeper" or path.startswith("/zookeeper/"):
            continue
        try:
            if path != "/":
                zk.set_acls(path, acl_for(path, secure))
                count += 1
            children = zk.get_children(path)
        except NoNodeError:
            continue
        stack.extend(f"{path.rstrip('/')}/{c}" for c in children)
    log.info("%s ACLs on %d znode(s) under %s", "secured" if secure else "opened", count, root)
    return count
