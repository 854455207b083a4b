"""A broker's security, put together from its configuration.

``BrokerSecurity`` reads the listeners, builds each TLS listener's ``SSLContext``
(a bad key, certificate or trust store fails the broker at start with the key
named), and gives every new connection its starting ``ConnectionAuth``: the
principal of its client certificate on TLS listeners (else ``User:ANONYMOUS``) and,
on SASL listeners, a ``SaslServer`` for the exchange to come.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from spark_coord.broker.server import ServedListener
from spark_coord.security import listeners as listeners_mod
from spark_coord.security import tls
from spark_coord.security.principal import ANONYMOUS, ConnectionAuth, KafkaPrincipal

log = logging.getLogger(__name__)


class BrokerSecurity:
    """Listeners, TLS contexts and per-connection authentication state of one broker."""

    def __init__(self, config: Any):
        self.config = config
        self.listener_config = listeners_mod.from_config(config)
        self.served = [ServedListener(li, self._tls_context(li) if li.tls else None)
                       for li in self.listener_config.listeners]

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
        return ConnectionAuth(listener, host, principal, sasl=None,
                              max_unauthenticated_bytes=self.config["sasl.server.max.receive.size"])
