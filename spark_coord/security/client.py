"""The client side's security policy: Kafka's client security keys, read into ``ClientSecurity``.

``ClientSecurity`` holds what a client needs to reach a TLS and/or SASL listener,
read from Kafka's client keys: ``security.protocol``, ``sasl.mechanism``,
``sasl.username`` / ``sasl.password`` or a JAAS line in ``sasl.jaas.config``,
``ssl.ca.location``, ``ssl.certificate.location`` / ``ssl.key.location`` /
``ssl.key.password``, ``ssl.endpoint.identification.algorithm``; where the Java
client and librdkafka name a key differently, both names are read
(``sasl.mechanisms``, ``ssl.truststore.location``: the aliases of
``config.CLIENT_SECURITY_KEYS``).  It pickles (Spark sends it to executors inside
the input partitions) and its ``repr`` hides the password.

Connecting with it (TCP, the TLS handshake with ``ssl_context()``, the SASL exchange
of ``security.sasl``) is the client transport's: ``client.transport.open_socket``.
"""

from __future__ import annotations

import dataclasses
import functools
import ssl
from dataclasses import dataclass
from typing import Any, Mapping

from spark_coord.config import CLIENT_SECURITY_KEYS, ConfigError
from spark_coord.secret import Password, reveal
from spark_coord.security import jaas
from spark_coord.security.listeners import SASL_PROTOCOLS, SECURITY_PROTOCOLS, TLS_PROTOCOLS
from spark_coord.security.sasl import SUPPORTED_MECHANISMS

#: Client keys ``ClientSecurity.from_settings`` reads (documented in conf/client.properties).
KEYS = tuple(k.name for k in CLIENT_SECURITY_KEYS)
#: Other names of those keys (librdkafka's or the Java client's) -> the documented name.
ALIASES = {alias: k.name for k in CLIENT_SECURITY_KEYS for alias in k.aliases}
#: Of those, the ones that hold secrets.
SECRET_KEYS = frozenset(k.name for k in CLIENT_SECURITY_KEYS if k.type == "password")


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
        names = {key: [key] + [a for a, k in ALIASES.items() if k == key] for key in KEYS}
        present = set(settings)  # the names as given (a Config also answers a key's aliases)

        def get(key: str) -> Any:
            given = [(prefix + n, settings[prefix + n]) for n in names[key]
                     if prefix + n in present and settings[prefix + n] is not None]
            if len(given) > 1:
                raise ConfigError(f"{given[0][0]}: given twice, as {given[0][0]} and as {given[1][0]} (two names of "
                                  "one setting); keep one")
            value = given[0][1] if given else None
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
        store_type = str(get("ssl.truststore.type") or "PEM").strip().upper()
        if store_type != "PEM":
            raise ConfigError(f"{prefix}ssl.truststore.type: only PEM trust stores are read, got {store_type!r} "
                              "(convert it to PEM and name the file in ssl.ca.location)")
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


def inter_broker(config: Mapping[str, Any], listener: Any) -> ClientSecurity:
    """How a broker reaches the others on its inter-broker ``listener`` (a ``listeners.Listener``), as
    Kafka's brokers do: the listener's security protocol; over SASL the mechanism
    ``sasl.mechanism.inter.broker.protocol`` (unset: the listener's first of
    ``sasl.enabled.mechanisms``) with the ``username`` and ``password`` of the listener's
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config``; over TLS the listener's trust store
    (``ssl.truststore.location``, else the system's CAs) to check the other broker, its name checked
    as Kafka's default ``ssl.endpoint.identification.algorithm=https`` does, and the listener's own
    key and certificate (``ssl.keystore.location``, ``ssl.key.password``) presented for mutual TLS.
    Per-listener keys fall back to the broker-wide ones.  ``ConfigError`` names what is missing."""
    from spark_coord.security.tls import listener_getter

    get = listener_getter(config, listener.config_prefix)
    if listener.protocol not in SASL_PROTOCOLS + TLS_PROTOCOLS:
        return PLAINTEXT
    username = password = None
    mechanism = "SCRAM-SHA-512"
    if listener.protocol in SASL_PROTOCOLS:
        enabled = [str(m).strip().upper() for m in get("sasl.enabled.mechanisms") or []]
        mechanism = str(config.get("sasl.mechanism.inter.broker.protocol") or (enabled or [""])[0]).strip().upper()
        key = f"{listener.config_prefix}{mechanism.lower()}.sasl.jaas.config"
        line = config.get(key)
        if not line:
            raise ConfigError(f"{key}: the inter-broker listener {listener.name} speaks SASL ({mechanism}): the "
                              "broker needs its username=\"...\" password=\"...\" there")
        try:
            username, password = jaas.client_credentials(line)
        except jaas.JaasError as e:
            raise ConfigError(f"{listener.config_prefix}{mechanism.lower()}.{e}") from None
    keystore = get("ssl.keystore.location") if listener.protocol in TLS_PROTOCOLS else None
    key_password = get("ssl.key.password")
    return ClientSecurity(protocol=listener.protocol, mechanism=mechanism, username=username,
                          password=None if password is None else Password(reveal(password)),
                          ca_location=_opt(get("ssl.truststore.location")), certificate_location=_opt(keystore),
                          key_password=None if key_password is None else Password(reveal(key_password)))
