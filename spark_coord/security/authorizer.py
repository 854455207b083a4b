"""Authorization: one function every handler calls, ``authorizer.authorize(principal, host, operation, resource)``.

``AclAuthorizer`` is Kafka's ``AclAuthorizer`` on our ZooKeeper: ACLs live in
Kafka's layout (``/kafka-acl/<ResourceType>/<name>``, prefixed patterns under
``/kafka-acl-extended/prefixed/...``), are cached in memory (``authorize`` never
waits for ZooKeeper: handlers call it on the event loop), and every change is
announced with Kafka's change notifications (``/kafka-acl-changes``,
``/kafka-acl-extended-changes``), so every broker and coordinator sees ACLs
created anywhere -- by CreateAcls on any broker, ``spark-coord acls``, or Kafka's
own ``kafka-acls --authorizer-properties zookeeper.connect=...`` -- without a restart.

The decision, as Kafka makes it:

1. a principal in ``super.users`` may do everything;
2. a DENY matching the principal (or ``User:*``), the host (or ``*``) and the
   operation (or All) refuses;
3. with no ACL at all on the resource, ``allow.everyone.if.no.acl.found`` decides
   (default false);
4. otherwise an ALLOW of the operation, of All, or of an operation implying it
   (Read/Write/Delete/Alter imply Describe; AlterConfigs implies DescribeConfigs).

ACLs apply by resource patterns: LITERAL (exact name, or ``*`` for every name) and
PREFIXED (every name starting with it).  ``NoAuthorizer`` stands in when
``authorizer.class.name`` is empty: everyone may do everything.

Helpers for the coordinator's APIs (which call the same ``authorize``) are in
``security.coordination``.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from spark_coord.config import ConfigError
from spark_coord.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    Resource,
    ResourcePattern,
    ResourceType,
    allowing,
    encode_acls,
    encode_change,
    parse_acls,
    parse_change,
)
from spark_coord.security.notifications import ChangeNotificationListener, create_notification
from spark_coord.security.principal import KafkaPrincipal
from spark_coord.zk import acls as zk_acls
from spark_coord.zk import paths

log = logging.getLogger(__name__)

#: ``authorizer.class.name`` values that mean "our AclAuthorizer" (Kafka's names included, so a Kafka
#: server.properties works unchanged).
CLASS_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                         "spark_coord.security.authorizer.AclAuthorizer"})
_STORED_PATTERNS = (PatternType.LITERAL, PatternType.PREFIXED)
_STORED_TYPES = tuple(t for t in ResourceType if t.value > 1)
#: The filter that matches every binding (``acls()``'s default; frozen, so one is shared).
_EVERY_BINDING = AclBindingFilter()


class NoAuthorizer:
    """No ``authorizer.class.name``: every request is allowed and the ACL APIs answer SECURITY_DISABLED."""

    enabled = False

    def authorize(self, principal, host: str, operation: AclOperation, resource: Resource) -> bool:
        return True

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class AclAuthorizer:
    """Kafka's ACL authorizer over ZooKeeper, with an in-memory cache kept current by change notifications."""

    enabled = True

    def __init__(self, zk: KazooClient, super_users: Iterable[str] = (), allow_if_no_acl: bool = False):
        self.zk = zk
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._lock = threading.Lock()
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        #: Called (on kazoo's thread) with each resource pattern whose ACLs changed.
        self._on_changed: list = []
        self._listeners = [
            ChangeNotificationListener(zk, paths.ACL_CHANGES, paths.ACL_CHANGE_PREFIX,
                                       lambda data: self._on_change(data, False),
                                       acl=zk_acls.for_path(zk, paths.ACL_CHANGES)),
            ChangeNotificationListener(zk, paths.ACL_EXTENDED_CHANGES, paths.ACL_CHANGE_PREFIX,
                                       lambda data: self._on_change(data, True),
                                       acl=zk_acls.for_path(zk, paths.ACL_EXTENDED_CHANGES)),
        ]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Load every ACL and watch for changes (blocking)."""
        for listener in self._listeners:
            listener.start()
        for pattern_type in _STORED_PATTERNS:
            for rtype in _STORED_TYPES:
                base = paths.acl_type(pattern_type.name, rtype.camel)
                try:
                    names = self.zk.retry(self.zk.get_children, base)
                except NoNodeError:
                    continue
                for name in names:
                    self._reload(ResourcePattern(rtype, name, pattern_type))
        for listener in self._listeners:
            listener.watch()
        log.info("ACL authorizer: %d ACL(s) on %d resource pattern(s) loaded; super users: %s",
                 sum(len(v) for v in self._acls.values()), len(self._acls),
                 ", ".join(sorted(self.super_users)) or "none")

    def stop(self) -> None:
        for listener in self._listeners:
            listener.stop()

    # ------------------------------------------------------------------ deciding
    def authorize(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                  resource: Resource) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on ``resource``."""
        who = str(principal)
        if who in self.super_users:
            return True
        entries = self.matching_entries(resource)
        for e in entries:
            if (e.permission == AclPermissionType.DENY and e.applies_to(who, host)
                    and e.operation in (operation, AclOperation.ALL)):
                log.debug("DENIED %s from %s: %s on %s (a DENY ACL)", who, host, operation.camel, resource)
                return False
        if not entries:
            if not self.allow_if_no_acl:
                log.debug("DENIED %s from %s: %s on %s (no ACL)", who, host, operation.camel, resource)
            return self.allow_if_no_acl
        ops = allowing(operation)
        for e in entries:
            if e.permission == AclPermissionType.ALLOW and e.applies_to(who, host) and e.operation in ops:
                return True
        log.debug("DENIED %s from %s: %s on %s (no matching ALLOW)", who, host, operation.camel, resource)
        return False

    def matching_entries(self, resource: Resource) -> list[AccessControlEntry]:
        """Every ACL entry whose pattern covers ``resource`` (literal, ``*`` and prefixes)."""
        acls = self._acls
        out: list[AccessControlEntry] = []
        out += acls.get(ResourcePattern(resource.type, resource.name), ())
        out += acls.get(ResourcePattern(resource.type, "*"), ())
        for prefix, entries in self._prefixed.get(resource.type, {}).items():
            if resource.name.startswith(prefix):
                out += entries
        return out

    # ------------------------------------------------------------------ listing
    def acls(self, filt: AclBindingFilter = _EVERY_BINDING) -> list[AclBinding]:
        """Bindings matching ``filt``, from the cache."""
        out = []
        for pattern, entries in list(self._acls.items()):
            for e in entries:
                b = AclBinding(pattern, e)
                if filt.matches(b):
                    out.append(b)
        return sorted(out, key=lambda b: (b.pattern.resource_type, b.pattern.pattern_type, b.pattern.name,
                                          b.entry.principal, b.entry.operation, b.entry.permission, b.entry.host))

    # ------------------------------------------------------------------ changing (blocking)
    def create(self, bindings: list[AclBinding]) -> None:
        """Add ``bindings`` (already validated) to ZooKeeper, one conditional write per pattern."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            self._update(pattern, lambda current, entries=entries: current | entries)

    def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove the bindings each filter matches; returns them per filter."""
        matched = [self.acls(f) for f in filters]
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for bindings in matched:
            for b in bindings:
                by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            self._update(pattern, lambda current, entries=entries: current - entries)
        return matched

    def _path(self, pattern: ResourcePattern) -> str:
        return paths.acl_resource(pattern.pattern_type.name, pattern.resource_type.camel, pattern.name)

    def _update(self, pattern: ResourcePattern, change) -> None:
        path = self._path(pattern)
        acl = zk_acls.for_path(self.zk, path)
        while True:
            try:
                data, stat = self.zk.get(path)
                current = parse_acls(data, path)
            except NoNodeError:
                new = change(frozenset())
                if not new:
                    break
                try:
                    self.zk.create(path, encode_acls(new), acl=acl, makepath=True)
                    break
                except NodeExistsError:
                    continue
            new = change(current)
            if new == current:
                break
            try:
                if new:
                    self.zk.set(path, encode_acls(new), version=stat.version)
                else:
                    self.zk.delete(path, version=stat.version)
                break
            except (BadVersionError, NoNodeError, NotEmptyError):
                continue  # changed meanwhile: read again
        extended = pattern.pattern_type != PatternType.LITERAL
        root = paths.ACL_EXTENDED_CHANGES if extended else paths.ACL_CHANGES
        create_notification(self.zk, root, paths.ACL_CHANGE_PREFIX, encode_change(pattern),
                            acl=zk_acls.for_path(self.zk, root))
        self._reload(pattern)  # this broker sees its own change at once

    # ------------------------------------------------------------------ cache
    def _reload(self, pattern: ResourcePattern) -> None:
        path = self._path(pattern)
        try:
            data, _ = self.zk.retry(self.zk.get, path)
            entries = parse_acls(data, path)
        except NoNodeError:
            entries = frozenset()
        except ValueError as e:
            log.warning("ignoring unreadable ACLs: %s", e)
            entries = frozenset()
        with self._lock:
            acls = dict(self._acls)
            if entries:
                acls[pattern] = entries
            else:
                acls.pop(pattern, None)
            prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
            for p, e in acls.items():
                if p.pattern_type == PatternType.PREFIXED:
                    prefixed.setdefault(p.resource_type, {})[p.name] = e
            self._acls, self._prefixed = acls, prefixed  # readers on the loop see one or the other, whole

    def _on_change(self, data: bytes, extended: bool) -> None:
        try:
            pattern = parse_change(data, extended)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            log.warning("ignoring an unreadable ACL change notification: %s", e)
            return
        self._reload(pattern)
        log.info("ACLs of %s reloaded after a change", pattern)
        for fn in list(self._on_changed):
            try:
                fn(pattern)
            except Exception:
                log.exception("ACL change callback failed")

    def add_change_callback(self, fn) -> None:
        """Call ``fn(pattern)`` (on kazoo's thread) after the ACLs of ``pattern`` changed."""
        self._on_changed.append(fn)


def from_config(cfg, zk: KazooClient):
    """The authorizer ``authorizer.class.name`` names (``NoAuthorizer`` when it is empty)."""
    name = (cfg["authorizer.class.name"] or "").strip()
    if not name:
        return NoAuthorizer()
    if name not in CLASS_NAMES:
        raise ConfigError(f"authorizer.class.name: {name!r} is not known (use one of {', '.join(sorted(CLASS_NAMES))})")
    supers = []
    for item in (cfg["super.users"] or "").split(";"):
        item = item.strip()
        if item:
            try:
                supers.append(str(KafkaPrincipal.parse(item)))
            except ValueError as e:
                raise ConfigError(f"super.users: {e}") from None
    return AclAuthorizer(zk, supers, cfg["allow.everyone.if.no.acl.found"])
