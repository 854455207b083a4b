"""Topic and dynamic broker configs in ZooKeeper, in ZooKeeper-mode Kafka's layout, and every broker's cache.

``/config/topics/<topic>`` holds a topic's overrides and ``/config/brokers/<id>`` /
``/config/brokers/<default>`` the dynamic broker configs, each as Kafka's entity config
JSON ``{"version":1,"config":{"retention.ms":"60000"}}``; every change is followed by a
notification ``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":
"topics/<topic>"}`` (or ``brokers/<id>``, ``brokers/<default>``) -- what ``kafka-configs
--zookeeper`` writes, so its changes reach our brokers too.

``configs.store.EntityConfigStore`` does the blocking ZooKeeper work for each entity type (read, a
version-checked read-modify-write that validates the result before writing it, delete).
``DynamicConfigs`` is the broker's cache (``ctx.dynamic_configs``): ``start()`` loads every
topic's configs and this broker's dynamic configs, then follows the notifications (one
``ChildrenWatch`` on ``/config/changes``, re-reading only the entity a notification names),
so a change made through any broker -- or any ZooKeeper-mode Kafka tool -- applies on every
broker without a restart.  Reads (``log_config``, ``broker_config``, ``describe_*``) answer
from memory; listeners run on the event loop with ``("topics", name)`` or ``("brokers", name)``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from kazoo.client import KazooClient

from spark_coord.configs.broker import (
    EffectiveBrokerConfig,
    describe_broker,
    describe_broker_defaults,
    validate_dynamic,
)
from spark_coord.configs.model import ConfigEntry
from spark_coord.configs.store import EntityConfigStore, entity_znode
from spark_coord.configs.topic import TopicConfigModel
from spark_coord.log.config import LogConfig
from spark_coord.security.notifications import ChangeNotificationListener
from spark_coord.zk import acls, paths

log = logging.getLogger(__name__)

NOTIFICATION_VERSION = 2
TOPICS, BROKERS = paths.CONFIG_TOPICS_ENTITY, paths.CONFIG_BROKERS_ENTITY

#: ``change(current settings) -> new settings`` (may raise ``InvalidConfig``).
Change = Callable[[dict[str, str]], dict[str, str]]


def entity_path(kind: str, name: str) -> str:
    return f"{kind}/{name}"


def znode(kind: str, name: str) -> str:
    return entity_znode(kind, name)


def notified_entity(data: bytes) -> tuple[str, str] | None:
    """``(kind, name)`` of a notification naming a topic or a broker, None for anything else."""
    try:
        doc = json.loads(data)
        if doc.get("version") == NOTIFICATION_VERSION:
            kind, _, name = str(doc["entity_path"]).partition("/")
        else:  # version 1: {"entity_type": "topics", "entity_name": "t"}
            kind, name = str(doc.get("entity_type")), str(doc.get("entity_name"))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return None
    if kind in (TOPICS, BROKERS) and name and "/" not in name:
        return kind, name
    return None


class DynamicConfigs:
    """One broker's view of the topic configs and its dynamic broker configs, kept current from ZooKeeper."""

    def __init__(self, zk: KazooClient, static: Mapping[str, Any], broker_id: int):
        self.zk = zk
        self.static = static
        self.broker_id = broker_id
        self.store = EntityConfigStore(zk)
        self._topics: dict[str, dict[str, str]] = {}
        self._log_configs: dict[str, LogConfig] = {}
        self.broker_config = EffectiveBrokerConfig(static)
        self.model = TopicConfigModel(self.broker_config)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str, str], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._notifications = ChangeNotificationListener(zk, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX,
                                                         self._on_notification,
                                                         acl=acls.for_path(zk, paths.CONFIG_CHANGES))

    # ------------------------------------------------------------------ lifecycle (blocking)
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._notifications.start()
        self._reload_broker()
        for topic in self.store.names(TOPICS):
            self._reload_topic(topic, quiet=True)
        self._notifications.watch()
        log.info("topic configs of %d topic(s) loaded; dynamic broker configs: %s", len(self._topics),
                 self._summary({**self.broker_config.dynamic_defaults, **self.broker_config.dynamic_own}))

    def stop(self) -> None:
        self._notifications.stop()

    # ------------------------------------------------------------------ reads (never block)
    def log_config(self, topic: str) -> LogConfig:
        """The topic's ``LogConfig``: its overrides over this broker's effective settings."""
        cfg = self._log_configs.get(topic)
        return cfg if cfg is not None else self.model.default_log_config

    def topic_overrides(self, topic: str) -> dict[str, str]:
        return dict(self._topics.get(topic, {}))

    def describe_topic(self, topic: str, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        return self.model.describe(self._topics.get(topic, {}), names)

    def describe_broker(self, default: bool, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        if default:
            return describe_broker_defaults(self.broker_config, names)
        return describe_broker(self.broker_config, names)

    def add_listener(self, fn: Callable[[str, str], None]) -> None:
        """Call ``fn(kind, name)`` (on the event loop) after a topic's or the broker's configs changed."""
        self._listeners.append(fn)

    # ------------------------------------------------------------------ validation
    def validate_topic(self, overrides: Mapping[str, str]) -> LogConfig:
        return self.model.validate(overrides)

    def validate_broker(self, name: str, values: Mapping[str, str]) -> None:
        """Check one level of dynamic broker configs (``name``: an id or ``<default>``) as it would be set."""
        validate_dynamic(self.static, values)
        defaults = values if name == paths.BROKER_DEFAULT_ENTITY else self.broker_config.dynamic_defaults
        own = values if name != paths.BROKER_DEFAULT_ENTITY else self.broker_config.dynamic_own
        TopicConfigModel(self.broker_config.with_dynamic(defaults, own))  # the combination must be a LogConfig

    # ------------------------------------------------------------------ writes (coroutines)
    async def alter(self, kind: str, name: str, change: Change, validate_only: bool = False) -> dict[str, str]:
        znode(kind, name)  # ValueError for a name that cannot be a znode, before any I/O
        new = await asyncio.get_running_loop().run_in_executor(None, self.store.update, kind, name, change,
                                                               validate_only)
        if not validate_only:
            if kind == TOPICS:
                self._apply_topic(name, new)
            elif name in (str(self.broker_id), paths.BROKER_DEFAULT_ENTITY):
                await asyncio.get_running_loop().run_in_executor(None, self._reload_broker)
        return new

    def create_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Store a new topic's configs before its znode appears (blocking; CreateTopics, Kafka's order)."""
        self.store.update(TOPICS, topic, lambda _: dict(configs), notify=bool(configs))
        self._apply_topic(topic, dict(configs))

    async def delete_topic(self, topic: str) -> None:
        """Remove a deleted topic's configs (and tell every broker)."""
        try:
            paths.topic_config(topic)
        except ValueError:
            return
        await asyncio.get_running_loop().run_in_executor(None, self.store.delete, TOPICS, topic)
        self._apply_topic(topic, {})

    # ------------------------------------------------------------------ cache upkeep
    def _reload_topic(self, topic: str, quiet: bool = False) -> None:
        try:
            config = self.store.read(TOPICS, topic)
        except ValueError as e:
            log.warning("%s; the topic gets the broker's settings", e)
            config = {}
        self._apply_topic(topic, config, quiet)

    def _apply_topic(self, topic: str, config: dict[str, str], quiet: bool = False) -> None:
        resolved = self.model.resolve(config, topic)
        with self._lock:
            before = self._topics.get(topic, {})
            if config:
                self._topics[topic] = dict(config)
                self._log_configs[topic] = resolved
            else:
                self._topics.pop(topic, None)
                self._log_configs.pop(topic, None)
        if before != config:
            if not quiet:
                log.info("topic %r configs: %s", topic, self._summary(config) or "(broker defaults)")
            self._changed(TOPICS, topic)

    def _reload_broker(self) -> None:
        own = self._read_broker(str(self.broker_id))
        defaults = self._read_broker(paths.BROKER_DEFAULT_ENTITY)
        before = self.broker_config
        if before.dynamic_own == own and before.dynamic_defaults == defaults:
            return
        effective = before.with_dynamic(defaults, own)
        try:
            model = TopicConfigModel(effective)
        except ValueError as e:
            log.warning("dynamic broker configs do not combine (%s); keeping the previous ones", e)
            return
        with self._lock:
            self.broker_config = effective
            self.model = model
            self._log_configs = {t: model.resolve(c, t) for t, c in self._topics.items()}
        log.info("dynamic broker configs: %s", self._summary({**defaults, **own}) or "(none)")
        self._changed(BROKERS, str(self.broker_id))

    def _read_broker(self, name: str) -> dict[str, str]:
        try:
            return self.store.read(BROKERS, name)
        except ValueError as e:
            log.warning("%s; ignoring those dynamic broker configs", e)
            return {}

    @staticmethod
    def _summary(config: Mapping[str, str]) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(config.items()))

    def _changed(self, kind: str, name: str) -> None:
        for fn in list(self._listeners):
            if self._loop is not None and not self._in_loop():
                try:
                    self._loop.call_soon_threadsafe(self._call, fn, kind, name)
                except RuntimeError:
                    pass
            else:
                self._call(fn, kind, name)

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    @staticmethod
    def _call(fn, kind: str, name: str) -> None:
        try:
            fn(kind, name)
        except Exception:
            log.exception("config listener %r failed for %s/%s", fn, kind, name)

    def _on_notification(self, data: bytes) -> None:  # kazoo's watch thread
        entity = notified_entity(data)
        if entity is None:
            return
        kind, name = entity
        if kind == TOPICS:
            try:
                paths.topic_config(name)
            except ValueError as e:
                log.warning("ignoring a config change notification: %s", e)
                return
            self._reload_topic(name)
        elif name in (str(self.broker_id), paths.BROKER_DEFAULT_ENTITY):
            self._reload_broker()
