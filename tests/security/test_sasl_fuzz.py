"""Hostile SASL input: random tokens, mangled SCRAM messages and random frames before authentication
never crash the broker, never authenticate anyone, and leave other clients served."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_io import connect, is_closed, roundtrip
from security_support import PASSWORDS, add_users, sasl_overrides

from spark_coord.errors import ErrorCode
from spark_coord.wire.protocol import encode_request
from spark_coord.wire.registry import ApiKey

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def target(broker_factory, server_cert, zk):
    add_users(zk, "alice")
    b = broker_factory(0, **sasl_overrides(server_cert))
    return ("127.0.0.1", b.broker.bound_ports["SASL_PLAINTEXT"]), b


def still_serves(address) -> None:
    s = connect(address)
    try:
        assert roundtrip(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        ok = roundtrip(s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0alice\0{PASSWORDS['alice']}".encode()}, 2)
        assert ok["error_code"] == 0
        assert roundtrip(s, ApiKey.METADATA, 12, {"topics": None}, correlation_id=3)["brokers"]
    finally:
        s.close()


def refused(address, mechanism: str, tokens: list[bytes]) -> None:
    """Send ``tokens`` in SaslAuthenticate requests; the broker must refuse (close) before any success."""
    s = connect(address)
    try:
        assert roundtrip(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
        for i, token in enumerate(tokens):
            resp = roundtrip(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token}, correlation_id=10 + i)
            if resp["error_code"]:
                assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
                assert is_closed(s)
                return
            assert resp["auth_bytes"], "a step that is not the last must carry the server's token"
        # every token was taken as a step: the exchange must not have completed, so a request closes it
        s.sendall(encode_request(ApiKey.METADATA, 12, 99, "fuzz", {"topics": None}))
        assert is_closed(s)
    except (ConnectionError, socket.timeout, struct.error):
        pass  # the broker closed mid-way: fine
    finally:
        s.close()


def test_random_tokens_never_authenticate(target):
    address, _ = target

    @FUZZ
    @given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
           tokens=st.lists(st.binary(max_size=300), min_size=1, max_size=3))
    def run(mechanism, tokens):
        refused(address, mechanism, tokens)

    run()
    still_serves(address)


_SCRAM_PIECE = st.sampled_from(["n,,", "y,,", "p=tls-unique,,", "n=alice", "n=al=2Cice", "n=", "r=", "r=abc",
                                ",", "=", "c=biws", "p=AAAA", "s=AAAA", "i=4096", "m=x", "a=bob", "\x00", "é"])


def test_mangled_scram_messages_are_refused(target):
    address, _ = target

    @FUZZ
    @given(first=st.lists(_SCRAM_PIECE, max_size=6).map("".join),
           final=st.lists(_SCRAM_PIECE, max_size=6).map("".join))
    def run(first, final):
        refused(address, "SCRAM-SHA-512", [first.encode("utf-8"), final.encode("utf-8")])

    run()
    still_serves(address)


def test_random_frames_before_authentication_close_only_that_connection(target):
    address, _ = target
    bystander = connect(address)  # authenticated before the fuzzing, used after it
    assert roundtrip(bystander, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    assert roundtrip(bystander, ApiKey.SASL_AUTHENTICATE, 1,
                     {"auth_bytes": f"\0alice\0{PASSWORDS['alice']}".encode()}, 2)["error_code"] == 0

    @FUZZ
    @given(frame=st.binary(min_size=1, max_size=200))
    def run(frame):
        s = connect(address)
        try:
            s.sendall(struct.pack(">i", len(frame)) + frame)
            s.settimeout(5)
            try:
                while s.recv(65536):
                    pass  # an ApiVersions-looking frame may be answered; anything else closes
            except (socket.timeout, ConnectionResetError):
                pass
        finally:
            s.close()

    run()
    assert roundtrip(bystander, ApiKey.METADATA, 12, {"topics": None}, correlation_id=5)["brokers"]
    bystander.close()
    still_serves(address)
