"""Security test fixtures: a throw-away CA made at run time, and brokers with TLS/SASL listeners."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A CA with a broker certificate (127.0.0.1, ::1, localhost) and client certificates, as PEM files."""
    from spark_coord.testing.tls import TestPki

    return TestPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def server_cert(pki):
    return pki.server()
