"""Helpers of the security tests: broker settings for TLS and SASL listeners, raw SASL frames."""

from __future__ import annotations

from spark_coord.security.client import ClientSecurity

PASSWORDS = {"alice": "alice-s3cret-pw", "bob": "bob-s3cret-pw", "admin": "admin-s3cret-pw"}


def tls_overrides(server_cert, listeners: str = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **extra) -> dict:
    """Broker settings for ``listeners`` with the test broker certificate."""
    return {"listeners": listeners, "ssl.keystore.location": str(server_cert.keystore), **extra}


def sasl_overrides(server_cert, **extra) -> dict:
    """A broker with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners and every mechanism enabled."""
    return tls_overrides(server_cert, "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                         **{"sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN", **extra})


def add_users(zk, *names: str) -> None:
    from spark_coord.security.credentials import UserStore

    store = UserStore(zk)
    for name in names:
        store.set_password(name, PASSWORDS[name])


def sasl_ssl(pki, user: str = "alice", mechanism: str = "SCRAM-SHA-512", password: str | None = None,
             protocol: str = "SASL_SSL") -> ClientSecurity:
    from spark_coord.secret import Password

    return ClientSecurity(protocol=protocol, mechanism=mechanism, username=user,
                          password=Password(password if password is not None else PASSWORDS[user]),
                          ca_location=str(pki.ca_path) if protocol == "SASL_SSL" else None)
