"""A broker's security, put together from its configuration.

``BrokerSecurity`` reads the listeners, builds each TLS listener's ``SSLContext``
(a bad key, certificate or trust store fails the broker at start with the key
named), and gives every new connection its starting ``ConnectionAuth``: the
principal of its client certificate on TLS listeners (else ``User:ANONYMOUS``) and,
on SASL listeners, a ``SaslServer`` for the exchange to come, checking SCRAM
credentials against the cache of ``/config/users`` that ``start()`` loads (only
when some listener speaks SASL).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from spark_coord.broker.server import ServedListener
from spark_coord.config import ConfigError
from spark_coord.security import jaas, tls
from spark_coord.security import listeners as listeners_mod
from spark_coord.security.principal import ANONYMOUS, ConnectionAuth, KafkaPrincipal
from spark_coord.security.sasl import PLAIN, SUPPORTED_MECHANISMS, SaslServer

log = logging.getLogger(__name__)


class BrokerSecurity:
    """Listeners, TLS contexts and per-connection authentication state of one broker."""

    def __init__(self, config: Any):
        self.config = config
        self.listener_config = listeners_mod.from_config(config)
        self.served = [ServedListener(li, self._tls_context(li) if li.tls else None)
                       for li in self.listener_config.listeners]
        self.mechanisms: dict[str, list[str]] = {}
        self.plain_users: dict[str, dict | None] = {}
        for li in self.listener_config.listeners:
            if li.sasl:
                self.mechanisms[li.name], self.plain_users[li.name] = self._sasl_settings(li)
        self.credentials = None  # CredentialCache, from start() when a listener speaks SASL
        from spark_coord.security.authorizer import NoAuthorizer

        self.authorizer = NoAuthorizer()  # the configured one from start(): it reads ZooKeeper

    def _sasl_settings(self, li: listeners_mod.Listener) -> tuple[list[str], dict | None]:
        mechanisms = [m.strip().upper() for m in self.setting(li, "sasl.enabled.mechanisms") or []]
        unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown or not mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms (listener {li.name}): expected some of "
                              f"{', '.join(SUPPORTED_MECHANISMS)}, got {', '.join(mechanisms) or 'none'}")
        users = None
        line = self.config.get(li.config_prefix + "plain.sasl.jaas.config")
        if line:
            if PLAIN not in mechanisms:
                raise ConfigError(f"{li.config_prefix}plain.sasl.jaas.config: PLAIN is not in the listener's "
                                  "sasl.enabled.mechanisms")
            try:
                users = jaas.plain_users(line)
            except jaas.JaasError as e:
                raise ConfigError(f"{li.config_prefix}{e}") from None
        return mechanisms, users

    @property
    def sasl(self) -> bool:
        """Whether some listener speaks SASL."""
        return bool(self.mechanisms)

    def start(self, zk) -> None:
        """Load the SCRAM credentials (when a listener speaks SASL) and the ACLs (with an authorizer),
        and watch both for changes (blocking)."""
        from spark_coord.security import authorizer

        if self.sasl:
            from spark_coord.security.credentials import CredentialCache

            self.credentials = CredentialCache(zk)
            self.credentials.start()
        self.authorizer = authorizer.from_config(self.config, zk)
        self.authorizer.start()

    def stop(self) -> None:
        if self.credentials is not None:
            self.credentials.stop()
        self.authorizer.stop()

    def _lookup(self, mechanism: str, user: str):
        return self.credentials.lookup(mechanism, user) if self.credentials is not None else None

    def _tls_context(self, li: listeners_mod.Listener):
        return tls.server_context(tls.listener_getter(self.config, li.config_prefix))

    def setting(self, listener: listeners_mod.Listener, key: str) -> Any:
        """A setting for one listener: its ``listener.name.<listener>.`` override, else the broker's."""
        return tls.listener_getter(self.config, listener.config_prefix)(key)

    def connection_auth(self, listener: listeners_mod.Listener, writer: asyncio.StreamWriter) -> ConnectionAuth:
        """The starting authentication state of a connection accepted on ``listener``."""
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        principal = ANONYMOUS
        if listener.tls:
            dn = tls.peer_principal_name(writer.get_extra_info("ssl_object"))
            if dn:
                principal = KafkaPrincipal.user(dn)
        sasl = None
        if listener.sasl:
            sasl = SaslServer(self.mechanisms[listener.name], self._lookup, self.plain_users[listener.name],
                              peer=f"{host} on {listener.name}")
        return ConnectionAuth(listener, host, principal, sasl=sasl,
                              max_unauthenticated_bytes=self.config["sasl.server.max.receive.size"])
