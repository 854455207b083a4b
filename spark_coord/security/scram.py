"""SCRAM credentials as Kafka stores them, made and checked with ``scramp``.

Kafka keeps a user's SCRAM credentials in ZooKeeper, ``/config/users/<user>``::

    {"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

``ScramCredential`` is one such value (never the password: RFC 5802's salted
StoredKey and ServerKey, from which the password cannot be recovered);
``make_credential`` derives one from a password with scramp, and
``verify_password`` checks a PLAIN password against it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096          # scramp's floor, and Kafka's default
MAX_ITERATIONS = 16384         # Kafka's ScramMechanism maximum
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass(frozen=True)
class ScramCredential:
    """Salt, StoredKey, ServerKey and iteration count of one user for one mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # the keys are secrets too (ServerKey impersonates the server)
        return f"ScramCredential(iterations={self.iterations})"

    def to_kafka(self) -> str:
        """Kafka's string form: ``salt=...,stored_key=...,server_key=...,iterations=N``."""
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> "ScramCredential":
        """Kafka's string form back; ValueError (without the keys) on anything else."""
        fields: dict[str, str] = {}
        for part in str(text).split(","):
            k, sep, v = part.partition("=")
            if not sep:
                raise ValueError("SCRAM credential: expected key=value pairs")
            fields[k.strip()] = v.strip()
        missing = {"salt", "stored_key", "server_key", "iterations"} - set(fields)
        if missing:
            raise ValueError(f"SCRAM credential: missing {', '.join(sorted(missing))}")
        try:
            salt, stored, server = (base64.b64decode(fields[k], validate=True)
                                    for k in ("salt", "stored_key", "server_key"))
            iterations = int(fields["iterations"])
        except (binascii.Error, ValueError):
            raise ValueError("SCRAM credential: salt/stored_key/server_key must be base64, iterations a number") \
                from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"SCRAM credential: iterations {iterations} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        if not salt or not stored or not server:
            raise ValueError("SCRAM credential: empty salt or key")
        return cls(salt, stored, server, iterations)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A new credential for ``password`` (random salt), as ``kafka-configs --add-config SCRAM-SHA-512=[...]``."""
    import scramp

    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
    salt, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(password, iterations)
    return ScramCredential(salt, stored_key, server_key, i)


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential for a password a client already salted (AlterUserScramCredentials carries
    SaltedPassword = Hi(password, salt, iterations), never the password): StoredKey and ServerKey
    as RFC 5802 derives them.  ValueError for an unknown mechanism, iterations out of range, or an
    empty salt or salted password."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
    if not salt or not salted_password:
        raise ValueError("empty salt or salted password")
    name = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return ScramCredential(bytes(salt), hashlib.new(name, client_key).digest(), server_key, iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential``'s StoredKey (RFC 5802; for PLAIN logins)."""
    from scramp.utils import saslprep

    name = _HASH[mechanism]
    salted = hashlib.pbkdf2_hmac(name, saslprep(password).encode("utf-8"), credential.salt, credential.iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hmac.compare_digest(hashlib.new(name, client_key).digest(), credential.stored_key)
