"""SCRAM users in ZooKeeper, in Kafka's layout, and the broker's cache of them.

``/config/users/<user>`` (the name sanitized as Kafka does) holds Kafka's entity
config JSON, ``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,
server_key=...,iterations=4096"}}``, possibly beside other per-user settings
(quotas), which are kept.  Every change is followed by a notification
``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":"users/<user>"}``,
which is what Kafka's ``kafka-configs --alter --entity-type users`` writes too, so
users added either way are picked up by every running broker.

``/config/users`` is sensitive: with ``zookeeper.set.acl`` it is readable only by
the brokers' ZooKeeper identity (``zk.acls``).  Passwords are never stored, only the
salted keys.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_coord.security.notifications import ChangeNotificationListener, create_notification
from spark_coord.security.scram import MECHANISMS, ScramCredential, make_credential
from spark_coord.zk import acls, paths

log = logging.getLogger(__name__)

ENTITY_VERSION = 1
NOTIFICATION_VERSION = 2


def _parse_config(data: bytes | None, where: str) -> dict[str, str]:
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{where}: not JSON") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ValueError(f"{where}: no 'config' object")
    return {str(k): str(v) for k, v in config.items()}


def _encode_config(config: dict[str, str]) -> bytes:
    return json.dumps({"version": ENTITY_VERSION, "config": config}, separators=(",", ":")).encode()


def parse_credentials(data: bytes | None, user: str = "?") -> dict[str, ScramCredential]:
    """``{mechanism: credential}`` from a ``/config/users/<user>`` znode (other keys ignored;
    a malformed credential is skipped with a log line, never fatal)."""
    out = {}
    for mechanism, text in _parse_config(data, f"user {user!r}").items():
        if mechanism in MECHANISMS:
            try:
                out[mechanism] = ScramCredential.parse(text)
            except ValueError as e:
                log.warning("user %r: unusable %s credential in ZooKeeper: %s", user, mechanism, e)
    return out


class UserStore:
    """Add, remove and list SCRAM users in ZooKeeper (blocking kazoo calls)."""

    def __init__(self, zk: KazooClient):
        self.zk = zk

    def _notify(self, user: str) -> None:
        data = json.dumps({"version": NOTIFICATION_VERSION, "entity_path": f"users/{paths.sanitize(user)}"},
                          separators=(",", ":")).encode()
        create_notification(self.zk, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX, data,
                            acl=acls.for_path(self.zk, paths.CONFIG_CHANGES))

    def _update(self, user: str, change) -> None:
        path = paths.user_config(user)
        acl = acls.for_path(self.zk, path)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                config = change({})
                if config is None:
                    return
                try:
                    self.zk.create(path, _encode_config(config), acl=acl, makepath=True)
                    break
                except NodeExistsError:
                    continue
            config = change(_parse_config(data, f"user {user!r}"))
            try:
                if config is None:
                    self.zk.delete(path, version=stat.version)
                else:
                    self.zk.set(path, _encode_config(config), version=stat.version)
                break
            except (BadVersionError, NoNodeError):
                continue  # changed meanwhile: read again
        self._notify(user)

    def set_password(self, user: str, password: str, mechanisms: Iterable[str] = MECHANISMS,
                     iterations: int = 4096) -> None:
        """Create or replace ``user``'s credentials for ``mechanisms`` (other settings of the user stay)."""
        credentials = {m: make_credential(m, password, iterations).to_kafka() for m in mechanisms}

        def change(config: dict[str, str]) -> dict[str, str]:
            return {**config, **credentials}

        self._update(user, change)

    def set_credentials(self, user: str, credentials: dict[str, ScramCredential]) -> None:
        """Create or replace ``user``'s credentials (``{mechanism: credential}``, e.g. from an
        AlterUserScramCredentials upsertion); other mechanisms and settings of the user stay."""
        values = {m: c.to_kafka() for m, c in credentials.items()}

        def change(config: dict[str, str]) -> dict[str, str]:
            return {**config, **values}

        self._update(user, change)

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        """``{mechanism: credential}`` of ``user`` (empty when it has none)."""
        try:
            data, _ = self.zk.get(paths.user_config(user))
        except NoNodeError:
            return {}
        try:
            return parse_credentials(data, user)
        except ValueError:
            return {}

    def delete(self, user: str, mechanisms: Iterable[str] = MECHANISMS) -> bool:
        """Remove ``user``'s credentials for ``mechanisms``; the znode goes when nothing is left.
        Returns False when the user had none of them."""
        found = []

        def change(config: dict[str, str]) -> dict[str, str] | None:
            found[:] = [m for m in mechanisms if m in config]
            rest = {k: v for k, v in config.items() if k not in mechanisms}
            return rest or None

        try:
            self.zk.get(paths.user_config(user))
        except NoNodeError:
            return False
        self._update(user, change)
        return bool(found)

    def users(self) -> dict[str, list[str]]:
        """``{user: [SCRAM mechanisms]}`` of every user with credentials."""
        try:
            children = self.zk.get_children(paths.CONFIG_USERS)
        except NoNodeError:
            return {}
        out = {}
        for node in sorted(children):
            user = paths.desanitize(node)
            try:
                data, _ = self.zk.get(f"{paths.CONFIG_USERS}/{node}")
                mechanisms = sorted(parse_credentials(data, user))
            except (NoNodeError, ValueError):
                continue
            if mechanisms:
                out[user] = mechanisms
        return out


class CredentialCache:
    """Every user's SCRAM credentials, loaded at start and kept current by change notifications.

    ``lookup(mechanism, user)`` answers from memory (the SASL handlers call it on the
    event loop); ZooKeeper is read only by ``start()`` and on notifications (kazoo's
    threads).
    """

    def __init__(self, zk: KazooClient):
        self.zk = zk
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = threading.Lock()
        self._listener = ChangeNotificationListener(zk, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX,
                                                    self._on_notification,
                                                    acl=acls.for_path(zk, paths.CONFIG_CHANGES))

    def start(self) -> None:
        """Load every user and watch for changes (blocking)."""
        self._listener.start()
        try:
            children = self.zk.retry(self.zk.get_children, paths.CONFIG_USERS)
        except NoNodeError:
            children = []
        for node in children:
            self._reload(node)
        self._listener.watch()
        log.info("SCRAM credentials of %d user(s) loaded", len(self._users))

    def stop(self) -> None:
        self._listener.stop()

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def _reload(self, node: str) -> None:
        user = paths.desanitize(node)
        try:
            data, _ = self.zk.retry(self.zk.get, f"{paths.CONFIG_USERS}/{node}")
            credentials = parse_credentials(data, user)
        except NoNodeError:
            credentials = {}
        except ValueError as e:
            log.warning("%s", e)
            credentials = {}
        with self._lock:
            if credentials:
                self._users[user] = credentials
            else:
                self._users.pop(user, None)
        log.debug("credentials of user %r: %s", user, ", ".join(sorted(credentials)) or "none")

    def _on_notification(self, data: bytes) -> None:
        try:
            doc = json.loads(data)
            entity = doc["entity_path"] if doc.get("version") == NOTIFICATION_VERSION else doc.get("entity_name")
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring an unreadable config change notification")
            return
        kind, _, node = str(entity).partition("/")
        if kind == "users" and node and "/" not in node:  # users/<user>; users/<user>/clients/... are quotas
            self._reload(node)
