"""The client side: Kafka's client security keys, and opening an authenticated socket.

``ClientSecurity`` holds what a client needs to reach a TLS and/or SASL listener,
read from Kafka's client keys (librdkafka's names, as confluent-kafka and kcat
take them): ``security.protocol``, ``sasl.mechanism``, ``sasl.username`` /
``sasl.password`` or a JAAS line in ``sasl.jaas.config``, ``ssl.ca.location``,
``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``.  It pickles (Spark sends it to
executors inside the input partitions) and its ``repr`` hides the password.

``open_socket(host, port, timeout, security)`` is the one way our clients connect
(the producer/admin/fetch ``BrokerConnection`` and the consumer's coordinator
channel): TCP, then the TLS handshake (verifying the broker's certificate and, by
default, its host name), then SaslHandshake v1 and SaslAuthenticate rounds.  A
refused login raises ``SaslAuthenticationFailed`` (a ``KafkaError`` carrying
SASL_AUTHENTICATION_FAILED and the broker's message), which is not retried on
another broker: the same credentials would fail there too.
"""

from __future__ import annotations

import dataclasses
import functools
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Mapping

from spark_coord.config import ConfigError
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.security import jaas
from spark_coord.security.listeners import SASL_PROTOCOLS, SECURITY_PROTOCOLS, TLS_PROTOCOLS
from spark_coord.security.sasl import SUPPORTED_MECHANISMS, SaslClientError, client_tokens
from spark_coord.security.secret import Password, reveal

#: Client keys ``ClientSecurity.from_settings`` reads.
KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config",
        "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
        "ssl.endpoint.identification.algorithm")
#: Of those, the ones that hold secrets.
SECRET_KEYS = frozenset({"sasl.password", "sasl.jaas.config", "ssl.key.password"})

_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
_MAX_SASL_FRAME = 1 << 20


class SaslAuthenticationFailed(KafkaError):
    """The broker refused our credentials (or the exchange broke off)."""


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a broker: security protocol, SASL credentials, TLS files."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-512"
    username: str | None = None
    password: Password | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: Password | None = None
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"security.protocol: expected one of {', '.join(SECURITY_PROTOCOLS)}, "
                              f"got {self.protocol!r}")
        if self.sasl:
            if self.mechanism not in SUPPORTED_MECHANISMS:
                raise ConfigError(f"sasl.mechanism: expected one of {', '.join(SUPPORTED_MECHANISMS)}, "
                                  f"got {self.mechanism!r}")
            if not self.username or self.password is None:
                raise ConfigError(f"sasl.username: security.protocol={self.protocol} needs sasl.username and "
                                  "sasl.password (or sasl.jaas.config)")

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], prefix: str = "") -> "ClientSecurity":
        """From Kafka client keys (``prefix`` + key, e.g. ``kafka.`` for Spark options); values are
        strings, ``Password``s or parsed config values.  ``ConfigError`` names a bad key."""
        def get(key: str) -> Any:
            value = settings.get(prefix + key)
            return None if value is None or (isinstance(value, str) and not value.strip()) else value

        protocol = str(get("security.protocol") or "PLAINTEXT").strip().upper()
        mechanism = str(get("sasl.mechanism") or "SCRAM-SHA-512").strip().upper()
        username, password = get("sasl.username"), get("sasl.password")
        jaas_line = get("sasl.jaas.config")
        if jaas_line is not None:
            if username is not None or password is not None:
                raise ConfigError(f"{prefix}sasl.jaas.config: give either it or {prefix}sasl.username/"
                                  f"{prefix}sasl.password, not both")
            try:
                username, password = jaas.client_credentials(jaas_line)
            except jaas.JaasError as e:
                raise ConfigError(f"{prefix}{e}") from None
        algorithm = str(get("ssl.endpoint.identification.algorithm") or "https").strip().lower()
        if algorithm not in ("https", "none"):
            raise ConfigError(f"{prefix}ssl.endpoint.identification.algorithm: expected https or none, "
                              f"got {algorithm!r}")
        key_password = get("ssl.key.password")
        try:
            return cls(protocol=protocol, mechanism=mechanism,
                       username=None if username is None else str(username),
                       password=None if password is None else Password(reveal(password)),
                       ca_location=_opt(get("ssl.ca.location")),
                       certificate_location=_opt(get("ssl.certificate.location")),
                       key_location=_opt(get("ssl.key.location")),
                       key_password=None if key_password is None else Password(reveal(key_password)),
                       check_hostname=algorithm == "https")
        except ConfigError as e:
            raise ConfigError(f"{prefix}{e}") from None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (made once per distinct settings), None without TLS."""
        if not self.tls:
            return None
        return _context(self.ca_location, self.certificate_location, self.key_location,
                        reveal(self.key_password), self.check_hostname)

    def librdkafka_config(self) -> dict[str, str]:
        """The same settings as librdkafka keys (confluent-kafka, kcat -X)."""
        out = {"security.protocol": self.protocol}
        if self.sasl:
            out.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username or "",
                        "sasl.password": reveal(self.password) or ""})
        if self.tls:
            for key, value in (("ssl.ca.location", self.ca_location),
                               ("ssl.certificate.location", self.certificate_location),
                               ("ssl.key.location", self.key_location)):
                if value:
                    out[key] = value
            if self.key_password is not None:
                out["ssl.key.password"] = reveal(self.key_password)
            out["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
        return out

    def replace(self, **changes: Any) -> "ClientSecurity":
        return dataclasses.replace(self, **changes)


PLAINTEXT = ClientSecurity()


def _opt(value: Any) -> str | None:
    return None if value is None else str(value).strip()


@functools.lru_cache(maxsize=32)
def _context(ca: str | None, cert: str | None, key: str | None, key_password: str | None,
             check_hostname: bool) -> ssl.SSLContext:
    from spark_coord.security.tls import client_context

    return client_context(ca, cert, key, key_password, check_hostname)


# ---------------------------------------------------------------------- connecting

def open_socket(host: str, port: int, timeout: float, security: ClientSecurity | None = None,
                client_id: str | None = "spark-coord") -> socket.socket:
    """A connected socket to ``host:port``: TLS-wrapped and SASL-authenticated as ``security`` says.

    Raises ``OSError`` (connection refused, TLS handshake or certificate failure:
    ``ssl.SSLError`` is one), ``SaslAuthenticationFailed`` for refused credentials.
    """
    security = security or PLAINTEXT
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        context = security.ssl_context()
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
        if security.sasl:
            _sasl_login(sock, f"{host}:{port}", security, timeout, client_id)
        return sock
    except BaseException:
        sock.close()
        raise


def _sasl_login(sock: socket.socket, peer: str, security: ClientSecurity, timeout: float,
                client_id: str | None) -> None:
    """SaslHandshake v1, then SaslAuthenticate v1 rounds until the mechanism is done."""
    from spark_coord.client.sockio import recv_frame
    from spark_coord.wire import protocol

    deadline = time.monotonic() + timeout
    correlation = iter(range(1, 1 << 30))

    def call(api_key: int, version: int, body: dict) -> dict:
        cid = next(correlation)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(protocol.encode_request(api_key, version, cid, client_id, body))
        try:
            frame = recv_frame(sock, deadline, 4, _MAX_SASL_FRAME, peer)
        except ConnectionResetError:
            raise SaslAuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED,
                                           f"{peer} closed the connection during SASL authentication") from None
        got, resp = protocol.decode_response(api_key, version, frame)
        if got != cid:
            raise SaslAuthenticationFailed(ErrorCode.ILLEGAL_SASL_STATE,
                                           f"{peer} answered correlation id {got}, expected {cid}")
        return resp

    resp = call(_SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
    if resp["error_code"]:
        raise SaslAuthenticationFailed(resp["error_code"], f"{peer}: SASL mechanism {security.mechanism} refused "
                                       f"(the broker offers {', '.join(resp['mechanisms']) or 'none'})")
    exchange = client_tokens(security.mechanism, security.username or "", reveal(security.password) or "")
    token: bytes | None = exchange.first()
    while token is not None:
        resp = call(_SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if resp["error_code"]:
            raise SaslAuthenticationFailed(resp["error_code"], f"{peer}: "
                                           f"{resp.get('error_message') or 'SASL authentication failed'}")
        if exchange.done:
            break
        try:
            token = exchange.respond(bytes(resp["auth_bytes"] or b""))
        except SaslClientError as e:
            raise SaslAuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{peer}: {e}") from None
    if not exchange.done:
        raise SaslAuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{peer}: SASL exchange incomplete")
