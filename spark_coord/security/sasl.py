"""SASL for Kafka connections (KIP-152): PLAIN and SCRAM-SHA-256/512, broker and client side.

Broker side, ``SaslServer`` per connection, driven by the SaslHandshake and
SaslAuthenticate handlers:

    HANDSHAKE --SaslHandshake(mechanism)--> AUTHENTICATE --SaslAuthenticate...--> COMPLETE
                                   \\--> FAILED (unknown mechanism, bad credentials, wrong order)

A failed step answers with its error code (UNSUPPORTED_SASL_MECHANISM,
SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE) and the connection closes after
that answer, as Kafka's does.  Failure messages never say whether the user exists
and never contain a password.

- SCRAM (RFC 5802/7677) runs through ``scramp``; credentials come from the
  broker's cache of ``/config/users`` (``security.credentials``).
- PLAIN checks ``authzid\\0user\\0password`` against the listener's JAAS users
  (``listener.name.<listener>.plain.sasl.jaas.config``) when configured, else
  against the user's SCRAM credentials (PBKDF2, off the event loop).

Client side: ``authenticate(send, mechanism, user, password)`` runs the exchange
over a callable that sends one SaslAuthenticate token and returns the broker's.
"""

from __future__ import annotations

import enum
import hmac
import logging
from dataclasses import dataclass
from typing import Callable

from spark_coord.errors import ErrorCode
from spark_coord.secret import Password
from spark_coord.security.principal import KafkaPrincipal
from spark_coord.security.scram import MECHANISMS as SCRAM_MECHANISMS
from spark_coord.security.scram import ScramCredential, verify_password

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
#: What a failed login is told, whatever went wrong (unknown user, wrong password, bad proof).
FAILED_MESSAGE = "Authentication failed: invalid credentials with SASL mechanism {mechanism}"
_MAX_PLAIN_FIELD = 4096

#: ``lookup(mechanism, user) -> ScramCredential | None``
CredentialLookup = Callable[[str, str], "ScramCredential | None"]


class SaslState(enum.Enum):
    HANDSHAKE = "awaiting SaslHandshake"
    AUTHENTICATE = "awaiting SaslAuthenticate"
    COMPLETE = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True)
class SaslStep:
    """The answer to one SaslAuthenticate token."""

    error_code: int
    message: str | None = None
    token: bytes = b""
    principal: KafkaPrincipal | None = None  # set once authentication completed


class SaslServer:
    """The broker's half of one connection's SASL exchange."""

    def __init__(self, mechanisms: tuple[str, ...] | list[str], lookup: CredentialLookup,
                 plain_users: dict[str, Password] | None = None, peer: str = "?"):
        self.mechanisms = [m for m in mechanisms]
        self.lookup = lookup
        self.plain_users = plain_users
        self.peer = peer
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False  # after a SaslHandshake v0: tokens come as raw frames
        self._scram = None
        self._scram_user: str | None = None

    # ------------------------------------------------------------------ handshake
    def handshake(self, mechanism: str) -> int:
        """SaslHandshake: the error code to answer with (the answer always lists ``mechanisms``)."""
        if self.state is not SaslState.HANDSHAKE:
            log.info("%s: SaslHandshake while %s", self.peer, self.state.value)
            self.state = SaslState.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms:
            log.info("%s: SASL mechanism %r is not enabled (enabled: %s)", self.peer, mechanism,
                     ", ".join(self.mechanisms))
            self.state = SaslState.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.state = SaslState.AUTHENTICATE
        return ErrorCode.NONE

    # ------------------------------------------------------------------ tokens
    async def authenticate(self, token: bytes) -> SaslStep:
        """SaslAuthenticate: the next step of the exchange."""
        if self.state is not SaslState.AUTHENTICATE:
            was, self.state = self.state, SaslState.FAILED
            log.info("%s: SaslAuthenticate while %s", self.peer, was.value)
            return SaslStep(ErrorCode.ILLEGAL_SASL_STATE, f"SaslAuthenticate is not expected now ({was.value})")
        try:
            if self.mechanism == PLAIN:
                return await self._plain(bytes(token))
            return self._scram_step(bytes(token))
        except Exception as e:  # noqa: BLE001 -- any malformed token is a failed login, never a crash
            log.info("%s: SASL %s failed: %s", self.peer, self.mechanism, e.__class__.__name__)
            return self._fail()

    def _fail(self, user: str | None = None) -> SaslStep:
        self.state = SaslState.FAILED
        if user is not None:
            log.info("%s: failed authentication of user %r with %s", self.peer, user, self.mechanism)
        return SaslStep(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED_MESSAGE.format(mechanism=self.mechanism))

    def _done(self, user: str) -> SaslStep:
        self.state = SaslState.COMPLETE
        log.debug("%s: authenticated as User:%s with %s", self.peer, user, self.mechanism)
        return SaslStep(ErrorCode.NONE, principal=KafkaPrincipal.user(user))

    async def _plain(self, token: bytes) -> SaslStep:
        parts = token.split(b"\0")
        if len(parts) != 3 or len(token) > 3 * _MAX_PLAIN_FIELD:
            return self._fail()
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._fail()
        if not user or not password or (authzid and authzid != user):
            return self._fail(user or None)
        if self.plain_users is not None:
            expected = self.plain_users.get(user)
            ok = expected is not None and hmac.compare_digest(expected.value.encode(), password.encode())
        else:
            import asyncio  # here: the clients import this module, and a Spark worker's read has no loop

            ok = await asyncio.get_running_loop().run_in_executor(None, self._plain_against_scram, user, password)
        return self._done(user) if ok else self._fail(user)

    def _plain_against_scram(self, user: str, password: str) -> bool:
        for mechanism in reversed(SCRAM_MECHANISMS):  # SHA-512 first
            credential = self.lookup(mechanism, user)
            if credential is not None:
                return verify_password(mechanism, credential, password)
        return False

    def _scram_step(self, token: bytes) -> SaslStep:
        import scramp

        if self._scram is None:
            def auth_fn(user: str):
                self._scram_user = user
                c = self.lookup(self.mechanism, user)
                return None if c is None else (c.salt, c.stored_key, c.server_key, c.iterations)

            self._scram = scramp.ScramMechanism(self.mechanism).make_server(auth_fn)
            try:
                self._scram.set_client_first(token.decode("utf-8"))
                return SaslStep(ErrorCode.NONE, token=self._scram.get_server_first().encode("utf-8"))
            except scramp.ScramException as e:
                log.debug("%s: SCRAM client-first refused: %s", self.peer, e)
                return self._fail(self._scram_user)
        try:
            final_text = token.decode("utf-8")
            self._accept_kafka_nonce(final_text)
            self._scram.set_client_final(final_text)
            final = self._scram.get_server_final()
        except scramp.ScramException as e:
            log.debug("%s: SCRAM client-final refused: %s", self.peer, e)
            return self._fail(self._scram_user)
        step = self._done(self._scram_user)
        return SaslStep(step.error_code, token=final.encode("utf-8"), principal=step.principal)


    def _accept_kafka_nonce(self, client_final: str) -> None:
        """Take the client-final nonce as Kafka's broker does: it must start with the client's
        nonce and end with ours (``ScramSaslServer`` checks only the end).  librdkafka 2.0.0-2.0.1
        send the client nonce twice in front; the proof still covers exactly what was sent, so
        scramp verifies it as usual once it expects that nonce."""
        from scramp.core import Nonce

        sent = next((p[2:] for p in client_final.split(",") if p.startswith("r=")), None)
        expected = str(self._scram.nonce)
        ours = str(self._scram.s_nonce)
        client = expected[:-len(ours)]
        if sent and sent != expected and sent.endswith(ours) and sent.startswith(client):
            self._scram.nonce = Nonce(sent)


# ---------------------------------------------------------------------- client side

class SaslClientError(Exception):
    """The exchange failed on the client side (the broker's answer did not verify)."""


def client_tokens(mechanism: str, username: str, password: str) -> "ClientExchange":
    """The client half of an exchange: ``first()`` then ``respond(server_token)`` until ``done``."""
    if mechanism == PLAIN:
        return _PlainClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return _ScramClient(mechanism, username, password)
    raise ValueError(f"sasl.mechanism: {mechanism!r} is not supported (one of {', '.join(SUPPORTED_MECHANISMS)})")


class ClientExchange:
    done = False

    def first(self) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def respond(self, server_token: bytes) -> bytes | None:  # pragma: no cover - interface
        raise NotImplementedError


class _PlainClient(ClientExchange):
    def __init__(self, username: str, password: str):
        self._token = b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")

    def first(self) -> bytes:
        self.done = True
        return self._token

    def respond(self, server_token: bytes) -> bytes | None:
        return None


class _ScramClient(ClientExchange):
    def __init__(self, mechanism: str, username: str, password: str):
        import scramp

        self._client = scramp.ScramClient([mechanism], username, password)
        self._step = 0

    def first(self) -> bytes:
        return self._client.get_client_first().encode("utf-8")

    def respond(self, server_token: bytes) -> bytes | None:
        import scramp

        try:
            if self._step == 0:
                self._step = 1
                self._client.set_server_first(server_token.decode("utf-8"))
                return self._client.get_client_final().encode("utf-8")
            self._client.set_server_final(server_token.decode("utf-8"))
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslClientError(f"the broker's SCRAM answer did not verify ({e.__class__.__name__})") from None
        self.done = True
        return None
