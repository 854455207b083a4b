"""Throw-away TLS material for tests and benchmarks, made at run time (nothing committed).

``TestPki(directory)`` makes a CA and issues PEM files with the ``cryptography``
library (a test dependency):

- ``server(host="127.0.0.1")``: a broker keystore PEM (key + chain) whose certificate
  names ``localhost``, 127.0.0.1 and ::1, optionally with an encrypted key;
- ``client(cn)``: a client certificate and key for mutual TLS (principal
  ``User:CN=<cn>``);
- ``ca_path``: the CA certificate clients and brokers trust.

Keys are EC P-256: quick to make, and every client here speaks it.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Issued:
    """PEM files of one issued certificate."""

    cert: Path         # the certificate (leaf first, then the CA)
    key: Path          # its private key
    keystore: Path     # key + certificate chain in one file (ssl.keystore.location)


class TestPki:
    """A CA in ``directory`` that issues server and client certificates."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | Path, ca_name: str = "spark-coord test CA"):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ser, self._ec, self._oid = x509, hashes, serialization, ec, NameOID
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                         .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
                         .not_valid_before(now - datetime.timedelta(minutes=5))
                         .not_valid_after(now + datetime.timedelta(days=2))
                         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                         .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                      content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False,
                                                      encipher_only=False, decipher_only=False), critical=True)
                         .sign(self._ca_key, hashes.SHA256()))
        self.ca_path = self.dir / "ca.pem"
        self.ca_path.write_bytes(self._pem(self._ca_cert))

    def _pem(self, cert) -> bytes:
        return cert.public_bytes(self._ser.Encoding.PEM)

    def _issue(self, name: str, cn: str, *, server: bool, hosts: tuple[str, ...] = (),
               subject_extra: tuple[tuple[str, str], ...] = (), key_password: str | None = None) -> Issued:
        x509, oid = self._x509, self._oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        attrs = [x509.NameAttribute(getattr(oid, k), v) for k, v in subject_extra]
        subject = x509.Name(attrs + [x509.NameAttribute(oid.COMMON_NAME, cn)])
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self._ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                                  critical=False))
        if hosts:
            names = []
            for h in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    names.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._ca_key, self._hashes.SHA256())
        encryption = (self._ser.BestAvailableEncryption(key_password.encode()) if key_password
                      else self._ser.NoEncryption())
        key_pem = key.private_bytes(self._ser.Encoding.PEM, self._ser.PrivateFormat.PKCS8, encryption)
        chain = self._pem(cert) + self._pem(self._ca_cert)
        issued = Issued(self.dir / f"{name}.crt", self.dir / f"{name}.key", self.dir / f"{name}.keystore.pem")
        issued.cert.write_bytes(chain)
        issued.key.write_bytes(key_pem)
        issued.keystore.write_bytes(key_pem + chain)
        for p in (issued.key, issued.keystore):
            p.chmod(0o600)
        return issued

    def server(self, name: str = "broker", hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "::1"),
               key_password: str | None = None) -> Issued:
        """A broker certificate for ``hosts`` (its keystore PEM is ``ssl.keystore.location``)."""
        return self._issue(name, hosts[0], server=True, hosts=hosts, key_password=key_password)

    def client(self, cn: str, organization: str | None = None) -> Issued:
        """A client certificate whose subject is ``CN=<cn>[,O=<organization>]``."""
        extra = (("ORGANIZATION_NAME", organization),) if organization else ()
        return self._issue(f"client-{cn}", cn, server=False, subject_extra=extra)
