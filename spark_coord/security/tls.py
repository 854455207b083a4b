"""TLS contexts from PEM files, for broker listeners and for clients (the standard library's ``ssl``).

Broker keys (Kafka's names; each may also be given per listener as
``listener.name.<listener>.<key>``, which wins for that listener):

``ssl.keystore.type``
    ``PEM`` (the only type served: JKS and PKCS12 stores are Java formats).
``ssl.keystore.location`` / ``ssl.key.password``
    A PEM file holding the private key and the certificate chain (leaf first), and
    the password of the key when it is encrypted.
``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``
    The same as PEM text in the setting itself (instead of a file).
``ssl.truststore.location`` / ``ssl.truststore.certificates``
    CA certificates (PEM) that client certificates must chain to.
``ssl.client.auth``
    ``none`` (default), ``requested`` or ``required`` client certificates.
``ssl.enabled.protocols``
    ``TLSv1.2,TLSv1.3`` by default; the lowest one listed is the minimum.

Client keys (librdkafka's names, as confluent-kafka and kcat take them):
``ssl.ca.location`` (CA file; default: the system's trust store),
``ssl.certificate.location`` + ``ssl.key.location`` (+ ``ssl.key.password``) for
mutual TLS, ``ssl.endpoint.identification.algorithm`` (``https``, the default, checks
that the broker's certificate names the host connected to; ``none`` does not).

Errors are ``ConfigError`` naming the key and the file, never a key's password.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from typing import Any, Callable, Iterator, Mapping

from spark_coord.config import ConfigError
from spark_coord.secret import reveal

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    """A private (0600) temporary file holding ``text`` for ``load_cert_chain``, removed at once."""
    fd, path = tempfile.mkstemp(prefix="spark-coord-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)


def _load_chain(ctx: ssl.SSLContext, certfile: str, keyfile: str | None, password: str | None, key: str) -> None:
    try:
        ctx.load_cert_chain(certfile, keyfile, password=password.encode() if password else None)
    except FileNotFoundError as e:
        raise ConfigError(f"{key}: no such file {e.filename or certfile}") from None
    except (ssl.SSLError, OSError) as e:
        reason = getattr(e, "reason", None) or e.__class__.__name__
        hint = " (wrong or missing ssl.key.password?)" if "BAD_DECRYPT" in str(e) or "PEM" in str(reason) else ""
        raise ConfigError(f"{key}: cannot load the key and certificate chain from {certfile}: {reason}{hint}") \
            from None


def _load_cas(ctx: ssl.SSLContext, cafile: str | None, cadata: str | None, key: str) -> None:
    try:
        ctx.load_verify_locations(cafile=cafile, cadata=cadata)
    except FileNotFoundError:
        raise ConfigError(f"{key}: no such file {cafile}") from None
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"{key}: cannot load CA certificates{f' from {cafile}' if cafile else ''}: "
                          f"{getattr(e, 'reason', None) or e}") from None


def _versions(ctx: ssl.SSLContext, text: Any, key: str) -> None:
    names = [p.strip() for p in (text if isinstance(text, list) else str(text or "").split(",")) if p.strip()]
    unknown = [n for n in names if n not in _PROTOCOLS]
    if unknown or not names:
        raise ConfigError(f"{key}: expected some of {', '.join(_PROTOCOLS)}, got {text!r}")
    ctx.minimum_version = min(_PROTOCOLS[n] for n in names)
    ctx.maximum_version = max(_PROTOCOLS[n] for n in names)


def server_context(get: Callable[[str], Any]) -> ssl.SSLContext:
    """A server ``SSLContext`` from broker keys; ``get(key)`` answers a key's value for one
    listener (its ``listener.name.<listener>.`` override or the broker-wide value)."""
    store_type = str(get("ssl.keystore.type") or "PEM").upper()
    if store_type != "PEM":
        raise ConfigError(f"ssl.keystore.type: only PEM is supported, got {store_type} "
                          "(convert a JKS or PKCS12 store with keytool/openssl)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, get("ssl.enabled.protocols"), "ssl.enabled.protocols")
    location = get("ssl.keystore.location")
    key_text, chain_text = reveal(get("ssl.keystore.key")), reveal(get("ssl.keystore.certificate.chain"))
    password = reveal(get("ssl.key.password"))
    if location and (key_text or chain_text):
        raise ConfigError("ssl.keystore.location and ssl.keystore.key/ssl.keystore.certificate.chain: set one way")
    if location:
        _load_chain(ctx, str(location), None, password, "ssl.keystore.location")
    elif key_text and chain_text:
        with _pem_file(chain_text) as chain, _pem_file(key_text) as keyfile:
            _load_chain(ctx, chain, keyfile, password, "ssl.keystore.key")
    else:
        raise ConfigError("ssl.keystore.location: a TLS listener needs a PEM key and certificate chain "
                          "(ssl.keystore.location, or ssl.keystore.key with ssl.keystore.certificate.chain)")
    auth = str(get("ssl.client.auth") or "none").strip().lower()
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth: expected none, requested or required, got {auth!r}")
    ctx.verify_mode = CLIENT_AUTH[auth]
    trust, trust_text = get("ssl.truststore.location"), reveal(get("ssl.truststore.certificates"))
    store_type = str(get("ssl.truststore.type") or "PEM").upper()
    if store_type != "PEM":
        raise ConfigError(f"ssl.truststore.type: only PEM is supported, got {store_type}")
    if trust or trust_text:
        _load_cas(ctx, str(trust) if trust else None, trust_text, "ssl.truststore.location")
    elif auth != "none":
        raise ConfigError(f"ssl.client.auth={auth} needs ssl.truststore.location (the CA client certificates chain to)")
    return ctx


def client_context(ca_location: str | None = None, certificate_location: str | None = None,
                   key_location: str | None = None, key_password: Any = None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A client ``SSLContext``: trust ``ca_location`` (else the system's CAs), present a client
    certificate when one is given, check the broker's host name unless told not to."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_location:
        _load_cas(ctx, ca_location, None, "ssl.ca.location")
    if certificate_location or key_location:
        if not certificate_location:
            raise ConfigError("ssl.key.location: needs ssl.certificate.location too")
        _load_chain(ctx, certificate_location, key_location, reveal(key_password), "ssl.certificate.location")
    ctx.check_hostname = check_hostname
    if not check_hostname:
        ctx.verify_mode = ssl.CERT_REQUIRED  # still verify the chain, just not the name
    return ctx


def peer_principal_name(ssl_object: Any) -> str | None:
    """The peer certificate's subject as an RFC 2253 distinguished name (most specific first,
    ``CN=client,OU=...,O=...``: what Kafka's default SSL principal builder gives), or None
    when the peer presented no certificate."""
    if ssl_object is None:
        return None
    try:
        cert = ssl_object.getpeercert()
    except (ValueError, ssl.SSLError):
        return None
    if not cert or "subject" not in cert:
        return None
    short = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
             "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
             "userId": "UID"}
    rdns = []
    for rdn in reversed(cert["subject"]):
        rdns.append("+".join(f"{short.get(k, k)}={_escape_dn(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape_dn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out[:1] in ("#", " "):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def listener_getter(cfg: Mapping[str, Any], prefix: str) -> Callable[[str], Any]:
    """``get(key)`` for one listener: ``<prefix><key>`` when set, else ``key``."""
    def get(key: str) -> Any:
        specific = cfg.get(prefix + key)
        return specific if specific not in (None, "") else cfg.get(key)
    return get
