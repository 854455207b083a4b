"""Group configs in ZooKeeper, in ZooKeeper-mode Kafka's layout, and every broker's cache of them.

``/config/groups/<group>`` holds Kafka's entity config JSON,
``{"version":1,"config":{"share.auto.offset.reset":"earliest"}}``; every change is
followed by a notification ``/config/changes/config_change_<seq>`` =
``{"version":2,"entity_path":"groups/<group>"}`` (``security.notifications``: the
same root and format as SCRAM users and Kafka's own entity configs).

``GroupConfigStore`` does the blocking ZooKeeper work (read, a version-checked
read-modify-write that validates the resulting set before writing it, delete).
``GroupConfigs`` is the broker's cache: ``start()`` loads every group's configs
and then follows the notifications (one ``ChildrenWatch`` on ``/config/changes``,
re-reading only the group a notification names; no watch per group), so a change
made through any broker applies on every broker without a restart.  ``get()``
answers from memory (the event loop calls it); listeners run on the event loop
with the id of a group whose configs changed.  Writes run on worker threads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_coord.configs.group import GroupConfig, GroupConfigModel
from spark_coord.configs.model import ConfigEntry
from spark_coord.security.notifications import ChangeNotificationListener, create_notification
from spark_coord.zk import acls, paths

log = logging.getLogger(__name__)

ENTITY_VERSION = 1
NOTIFICATION_VERSION = 2

#: ``change(current settings) -> new settings`` (may raise ``InvalidConfig``).
Change = Callable[[dict[str, str]], dict[str, str]]


def parse_entity_config(data: bytes | None, where: str = "config") -> dict[str, str]:
    """The ``config`` object of Kafka's entity config JSON (empty for an empty znode); ValueError naming
    ``where`` when it is not that JSON."""
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{where}: not JSON") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ValueError(f"{where}: no 'config' object")
    return {str(k): str(v) for k, v in config.items() if v is not None}


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": ENTITY_VERSION, "config": dict(sorted(config.items()))},
                      separators=(",", ":")).encode()


def encode_notification(group: str, kind: str = paths.CONFIG_GROUPS_ENTITY) -> bytes:
    """A change notification naming an entity (a group unless ``kind`` says otherwise)."""
    return json.dumps({"version": NOTIFICATION_VERSION, "entity_path": f"{kind}/{group}"},
                      separators=(",", ":")).encode()


def notified_group(data: bytes) -> str | None:
    """The group a config change notification names, None when it names something else."""
    try:
        doc = json.loads(data)
        entity = doc["entity_path"] if doc.get("version") == NOTIFICATION_VERSION else doc.get("entity_name")
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        log.warning("ignoring an unreadable config change notification")
        return None
    kind, _, name = str(entity).partition("/")
    return name if kind == paths.CONFIG_GROUPS_ENTITY and name and "/" not in name else None


#: Entity kinds: the znode that holds the configs of ``(kind, name)``, and their parent.
_KINDS = {
    paths.CONFIG_GROUPS_ENTITY: (paths.group_config, paths.CONFIG_GROUPS),
    paths.CONFIG_TOPICS_ENTITY: (paths.topic_config, paths.CONFIG_TOPICS),
    paths.CONFIG_BROKERS_ENTITY: (paths.broker_config, paths.CONFIG_BROKERS),
}


def entity_znode(kind: str, name: str) -> str:
    """The znode of an entity's configs (ValueError for a name that cannot be one)."""
    return _KINDS[kind][0](name)


class EntityConfigStore:
    """Entity configs -- of groups, topics or brokers -- in ZooKeeper (blocking kazoo calls: run
    them on a worker thread)."""

    def __init__(self, zk: KazooClient):
        self.zk = zk

    def read(self, kind: str, name: str) -> dict[str, str]:
        """The entity's stored settings (empty when it has none)."""
        try:
            data, _ = self.zk.retry(self.zk.get, entity_znode(kind, name))
        except NoNodeError:
            return {}
        return parse_entity_config(data, f"{kind}/{name}")

    def names(self, kind: str) -> list[str]:
        """Every entity of ``kind`` with a config znode."""
        try:
            return sorted(self.zk.retry(self.zk.get_children, _KINDS[kind][1]))
        except NoNodeError:
            return []

    def update(self, kind: str, name: str, change: Change, validate_only: bool = False,
               notify: bool = True) -> dict[str, str]:
        """Apply ``change`` to the entity's settings and store the result (a version-checked write,
        repeated if the znode changed meanwhile), then notify every broker.  ``change`` validates
        (raising ``InvalidConfig`` leaves everything as it was).  With ``validate_only`` nothing is
        written.  Returns the new settings."""
        path = entity_znode(kind, name)
        wrote = False
        while True:
            try:
                data, stat = self.zk.retry(self.zk.get, path)
                exists = True
            except NoNodeError:
                data, stat, exists = b"", None, False
            current = parse_entity_config(data, f"{kind}/{name}")
            new = change(dict(current))
            if validate_only:
                return new
            if new == current and (exists or not new):
                break  # nothing to change (and no empty znode for an entity that had none)
            wrote = True
            try:
                if exists:
                    self.zk.retry(self.zk.set, path, encode_entity_config(new), version=stat.version)
                else:
                    self.zk.retry(self.zk.create, path, encode_entity_config(new), acl=acls.for_path(self.zk, path),
                                  makepath=True)
                break
            except (BadVersionError, NoNodeError, NodeExistsError):
                continue  # changed meanwhile: read again
        if wrote and notify:
            self.notify(kind, name)
        return new

    def delete(self, kind: str, name: str) -> bool:
        """Remove the entity's configs (its znode) and notify; False when it had none."""
        try:
            self.zk.retry(self.zk.delete, entity_znode(kind, name))
        except NoNodeError:
            return False
        self.notify(kind, name)
        return True

    def notify(self, kind: str, name: str) -> None:
        create_notification(self.zk, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX, encode_notification(name, kind),
                            acl=acls.for_path(self.zk, paths.CONFIG_CHANGES))


class GroupConfigStore:
    """Group configs in ZooKeeper: ``EntityConfigStore`` for the ``groups`` kind."""

    def __init__(self, zk: KazooClient):
        self.zk = zk
        self._entities = EntityConfigStore(zk)

    def read(self, group: str) -> dict[str, str]:
        return self._entities.read(paths.CONFIG_GROUPS_ENTITY, group)

    def groups(self) -> list[str]:
        return self._entities.names(paths.CONFIG_GROUPS_ENTITY)

    def update(self, group: str, change: Change, validate_only: bool = False) -> dict[str, str]:
        return self._entities.update(paths.CONFIG_GROUPS_ENTITY, group, change, validate_only)

    def delete(self, group: str) -> bool:
        return self._entities.delete(paths.CONFIG_GROUPS_ENTITY, group)

    def notify(self, group: str) -> None:
        self._entities.notify(paths.CONFIG_GROUPS_ENTITY, group)


class GroupConfigs:
    """The broker's group configs: loaded at start, kept current by change notifications.

    ``ctx.group_configs`` of a broker.  ``get``, ``overrides``, ``describe`` and
    ``add_listener`` are for the event loop and never block; ``start``/``stop`` block
    (call them off the loop); ``alter`` and ``delete`` are coroutines that do their
    ZooKeeper work on a worker thread and update this broker's cache before they
    return (the other brokers follow through the notification).
    """

    def __init__(self, zk: KazooClient, broker_config: Mapping[str, Any]):
        self.zk = zk
        self.model = GroupConfigModel(broker_config)
        self.store = GroupConfigStore(zk)
        self._overrides: dict[str, dict[str, str]] = {}
        self._resolved: dict[str, GroupConfig] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._notifications = ChangeNotificationListener(zk, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX,
                                                         self._on_notification,
                                                         acl=acls.for_path(zk, paths.CONFIG_CHANGES))
        self.started = False

    # ------------------------------------------------------------------ lifecycle (blocking)
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Load every group's configs and follow the notifications (blocking). ``loop`` is where
        listeners run (none: they run on the thread that saw the change)."""
        self._loop = loop
        self._notifications.start()  # note the newest notification first: later ones are re-read
        for group in self.store.groups():
            self._reload(group)
        self._notifications.watch()
        self.started = True
        log.info("group configs of %d group(s) loaded", len(self._overrides))

    def stop(self) -> None:
        self._notifications.stop()

    # ------------------------------------------------------------------ reads (the event loop)
    def get(self, group_id: str) -> GroupConfig:
        """The group's effective settings (the broker's defaults where it set nothing). Never blocks."""
        return self._resolved.get(group_id, self.model.default_config)

    def overrides(self, group_id: str) -> dict[str, str]:
        """What the group set for itself (a copy)."""
        return dict(self._overrides.get(group_id, {}))

    def describe(self, group_id: str, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        return self.model.describe(self._overrides.get(group_id, {}), names)

    def add_listener(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(group_id)`` (on the event loop) after a group's configs changed."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[str], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    # ------------------------------------------------------------------ writes (coroutines)
    async def alter(self, group_id: str, change: Change, validate_only: bool = False) -> dict[str, str]:
        """Apply ``change`` (which validates) to the group's stored settings; see ``GroupConfigStore.update``."""
        paths.group_config(group_id)  # ValueError for a name that cannot be a znode, before any I/O
        new = await asyncio.get_running_loop().run_in_executor(None, self.store.update, group_id, change,
                                                               validate_only)
        if not validate_only:
            self._apply(group_id, new)
        return new

    async def delete(self, group_id: str) -> bool:
        """Remove the group's configs (DeleteGroups of the group does this), notifying every broker;
        False when it had none."""
        try:
            paths.group_config(group_id)
        except ValueError:
            return False
        removed = await asyncio.get_running_loop().run_in_executor(None, self.store.delete, group_id)
        self._apply(group_id, {})
        return removed

    # ------------------------------------------------------------------ cache upkeep
    def _reload(self, group: str) -> None:
        """Read one group's configs from ZooKeeper into the cache (blocking: start, notifications)."""
        try:
            config = self.store.read(group)
        except ValueError as e:
            log.warning("%s; the group gets the broker's defaults", e)
            config = {}
        except NoNodeError:
            config = {}
        self._apply(group, config)

    def _apply(self, group: str, config: dict[str, str]) -> None:
        resolved = self.model.resolve(config, group)
        with self._lock:
            before = self._overrides.get(group, {})
            if config:
                self._overrides[group] = dict(config)
                self._resolved[group] = resolved
            else:
                self._overrides.pop(group, None)
                self._resolved.pop(group, None)
        if before != config:
            log.info("group %r configs: %s", group,
                     ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(broker defaults)")
            self._changed(group)

    def _changed(self, group: str) -> None:
        for fn in list(self._listeners):
            if self._loop is not None and not self._in_loop():
                try:
                    self._loop.call_soon_threadsafe(self._call, fn, group)
                except RuntimeError:  # loop closed: shutting down
                    pass
            else:
                self._call(fn, group)

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    @staticmethod
    def _call(fn: Callable[[str], None], group: str) -> None:
        try:
            fn(group)
        except Exception:
            log.exception("group config listener %r failed for group %r", fn, group)

    def _on_notification(self, data: bytes) -> None:  # kazoo's watch thread: reading ZooKeeper is fine
        group = notified_group(data)
        if group is not None:
            try:
                paths.group_config(group)
            except ValueError as e:
                log.warning("ignoring a config change notification: %s", e)
                return
            self._reload(group)
