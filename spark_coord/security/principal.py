"""Who is on a connection: Kafka's principals and a connection's authentication state.

A principal is ``User:<name>`` as Kafka writes it: ``User:ANONYMOUS`` on PLAINTEXT
listeners and on TLS listeners whose client sent no certificate, ``User:<subject DN>``
for a TLS client certificate (``User:CN=app,O=example``), ``User:<sasl user>`` once
SASL authentication succeeded (SASL wins over a client certificate).

``ConnectionAuth`` is what the broker keeps per connection: the listener, the
principal and peer host, and on SASL listeners the SASL exchange in progress.
Until a SASL listener's client has authenticated only ApiVersions, SaslHandshake
and SaslAuthenticate are served; any other request closes the connection (Kafka's
rule), and frames are bounded by ``sasl.server.max.receive.size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from spark_coord.wire.registry import ApiKey

if TYPE_CHECKING:  # pragma: no cover
    from spark_coord.security.listeners import Listener


class SaslExchange(Protocol):
    """What a connection needs of its SASL exchange (``security.sasl.SaslServer``, which imports this
    module): whether its tokens come raw, outside SaslAuthenticate (a SaslHandshake v0)."""

    raw_tokens: bool


USER_TYPE = "User"
ANONYMOUS_NAME = "ANONYMOUS"

#: API keys served before a SASL listener's client has authenticated (ApiVersions, SaslHandshake, SaslAuthenticate).
PRE_AUTH_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True)
class KafkaPrincipal:
    """``User:alice``: a principal type and name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """``User:alice`` (the name may itself hold ``:``, e.g. a DN); ValueError naming the text otherwise."""
        kind, sep, name = str(text).partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {text!r} is not <Type>:<name> (e.g. User:alice)")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> "KafkaPrincipal":
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, ANONYMOUS_NAME)


class ConnectionAuth:
    """The authentication state of one broker connection."""

    def __init__(self, listener: "Listener | None", host: str, principal: KafkaPrincipal = ANONYMOUS,
                 sasl: "SaslExchange | None" = None, max_unauthenticated_bytes: int = 524288):
        self.listener = listener
        self.host = host
        self.principal = principal
        self.sasl = sasl
        self.authenticated = sasl is None
        self.max_unauthenticated_bytes = max_unauthenticated_bytes

    @property
    def listener_name(self) -> str:
        return self.listener.name if self.listener is not None else "PLAINTEXT"

    def allows(self, api_key: int) -> bool:
        """Whether a request with ``api_key`` may be served now."""
        return self.authenticated or api_key in PRE_AUTH_APIS

    @property
    def expects_raw_token(self) -> bool:
        """Whether the next frame is a raw SASL token (after a SaslHandshake v0), not a request."""
        return not self.authenticated and self.sasl is not None and self.sasl.raw_tokens

    def frame_limit(self, max_request_bytes: int) -> int:
        """The largest frame accepted now: ``sasl.server.max.receive.size`` until authenticated."""
        return max_request_bytes if self.authenticated else min(max_request_bytes, self.max_unauthenticated_bytes)

    def authenticated_as(self, principal: KafkaPrincipal) -> None:
        self.principal = principal
        self.authenticated = True

    def __repr__(self) -> str:
        return f"ConnectionAuth({self.listener_name}, {self.principal}@{self.host})"
