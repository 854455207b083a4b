"""The metrics endpoint of a broker: off by default; /metrics, / and /status.json served, every
other path 404; bad requests close only their own connection, within a timeout, while the
broker keeps serving Kafka clients; HTTPS with and without client certificates."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import time

import pytest
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families

from spark_coord.client.connection import BrokerConnection
from spark_coord.config import ConfigError
from spark_coord.metrics import http as metrics_http
from spark_coord.metrics.broker import NO_BROKER_METRICS
from spark_coord.wire.registry import ApiKey

METRICS = {"metrics.port": 0, "metrics.lag.sample.ms": 100}


def get(port: int, path: str, method: str = "GET", context: ssl.SSLContext | None = None, body: bytes | None = None,
        headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = (http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context) if context is not None
            else http.client.HTTPConnection("127.0.0.1", port, timeout=10))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def kafka_answers(broker) -> bool:
    with BrokerConnection("127.0.0.1", broker.port, timeout=10) as conn:
        return conn.request(ApiKey.API_VERSIONS, {})["error_code"] == 0


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (fails if it stays open)."""
    s.settimeout(timeout)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def http_status(answer: bytes) -> int | None:
    """The status of a raw answer: its status line, or for a request read as HTTP/0.9 (no status
    line, only the error page) the code that page names."""
    if answer.startswith(b"HTTP/"):
        return int(answer.split(b" ", 2)[1])
    found = re.search(rb"Error code: (\d+)", answer)
    return int(found.group(1)) if found else None


def test_metrics_are_off_unless_a_port_is_set(broker_factory):
    b = broker_factory(0)
    assert b.broker.metrics is None
    assert b.broker.ctx.metrics is NO_BROKER_METRICS and b.broker.server.metrics is NO_BROKER_METRICS


def test_metrics_status_page_and_json_are_served_and_other_paths_are_not_found(broker_factory):
    b = broker_factory(0, **METRICS)
    port = b.broker.metrics.bound_port
    assert kafka_answers(b)
    status, headers, body = get(port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    found = samples(body.decode())
    assert found[("kafka_network_requestmetrics_requests_total", (("request", "ApiVersions"), ("version", "3")))] >= 1
    assert found[("spark_coord_zookeeper_session_state", (("state", "CONNECTED"),))] == 1
    assert found[("spark_coord_zookeeper_session_state", (("state", "LOST"),))] == 0
    assert ("process_cpu_seconds_total", ()) in found
    status, headers, page = get(port, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in headers["content-security-policy"]
    assert b"src=\"http" not in page and b"href=\"http" not in page  # nothing loaded from elsewhere
    assert b'<script id="initial" type="application/json">{' in page  # the first data comes with it
    doc = wait_until(lambda: (d := json.loads(get(port, "/status.json")[2]))["coordinating"] and d, timeout=10,
                     message="the status of the coordinator once elected")
    assert doc["process"] == "broker 0" and doc["groups"] == [] and doc["epoch"] > 0
    for path in ("/nope", "/metrics/", "/metrics/x", "/status", "/../etc/passwd", "/favicon.ico", "/METRICS"):
        assert get(port, path)[0] == 404, path
    assert get(port, "/", method="POST", body=b"x=1")[0] == 405
    assert get(port, "/status.json", method="DELETE")[0] == 405
    assert get(port, "/metrics", method="PUT", body=b"")[0] == 405
    status, headers, body = get(port, "/", method="HEAD")
    assert status == 200 and body == b""
    assert kafka_answers(b)


def test_bad_requests_close_only_their_own_connection(broker_factory, monkeypatch):
    monkeypatch.setattr(metrics_http, "TIMEOUT_S", 2.0)
    b = broker_factory(0, **METRICS)
    port = b.broker.metrics.bound_port
    address = ("127.0.0.1", port)
    silent = socket.create_connection(address)                     # says nothing
    slow = socket.create_connection(address)
    slow.sendall(b"GET /metr")                                      # half a request line, then nothing
    t0 = time.monotonic()
    assert get(port, "/metrics")[0] == 200 and kafka_answers(b)    # others are served meanwhile
    assert time.monotonic() - t0 < 2.0
    with socket.create_connection(address) as s:                    # not HTTP at all
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n")
        assert http_status(closed_by_peer(s)) == 400
    with socket.create_connection(address) as s:                    # request line over 64 KiB
        s.sendall(b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n")
        assert http_status(closed_by_peer(s)) == 414
    with socket.create_connection(address) as s:                    # a header line over 64 KiB
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"b" * 70000 + b"\r\n\r\n")
        assert http_status(closed_by_peer(s)) == 431
    with socket.create_connection(address) as s:                    # more than 100 headers
        s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) + b"\r\n")
        assert http_status(closed_by_peer(s)) == 431
    with socket.create_connection(address) as s:                    # a bad version, an absurd method
        s.sendall(b"GET / HTTP/9.9\r\n\r\n")
        assert http_status(closed_by_peer(s)) == 505
    with socket.create_connection(address) as s:
        s.sendall(b"\x00\xff\xfe GARBAGE\r\n\r\n")
        assert http_status(closed_by_peer(s)) == 400
    # the silent connections are closed by the server after the timeout
    assert closed_by_peer(silent, timeout=10) == b"" and closed_by_peer(slow, timeout=10) == b""
    silent.close()
    slow.close()
    assert time.monotonic() - t0 >= 1.5
    assert get(port, "/metrics")[0] == 200 and kafka_answers(b)


def test_connections_beyond_the_limit_are_closed_at_once(broker_factory, monkeypatch):
    monkeypatch.setattr(metrics_http, "MAX_CONNECTIONS", 4)
    b = broker_factory(0, **METRICS)
    port = b.broker.metrics.bound_port
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    # one thread accepts connections in the order they came: the held ones have their slots first
    with socket.create_connection(("127.0.0.1", port)) as extra:
        assert closed_by_peer(extra, timeout=5) == b""
    assert kafka_answers(b)
    for s in held:
        s.close()

    def served() -> bool:
        try:
            return get(port, "/metrics")[0] == 200
        except ConnectionError:  # closed at once: the held connections' threads are not done yet
            return False

    wait_until(served, timeout=10, message="serving again once the held connections closed")


def test_a_port_in_use_fails_the_broker_start(broker_factory):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            broker_factory(0, **{"metrics.port": taken.getsockname()[1]})


def test_https_endpoint_and_client_certificates(broker_factory, pki):
    server = pki.server()
    b = broker_factory(0, **{"metrics.port": 0, "metrics.ssl.keystore.location": str(server.keystore),
                             "metrics.ssl.client.auth": "required",
                             "metrics.ssl.truststore.location": str(pki.ca_path)})
    port = b.broker.metrics.bound_port
    assert b.broker.metrics.url.startswith("https://")
    client = pki.client("prometheus")
    ctx = ssl.create_default_context(cafile=str(pki.ca_path))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    status, _, body = get(port, "/metrics", context=ctx)
    assert status == 200 and b"kafka_network_requestmetrics_requests_total" in body
    no_cert = ssl.create_default_context(cafile=str(pki.ca_path))
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        get(port, "/metrics", context=no_cert)
    with socket.create_connection(("127.0.0.1", port)) as s:  # plain HTTP to the HTTPS endpoint
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert b"kafka_" not in closed_by_peer(s)
    assert get(port, "/status.json", context=ctx)[0] == 200 and kafka_answers(b)


def test_bad_tls_settings_name_the_metrics_key(broker_factory, pki, tmp_path):
    with pytest.raises(ConfigError, match="metrics.ssl.keystore.location: no such file"):
        broker_factory(0, **{"metrics.port": 0, "metrics.ssl.keystore.location": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError, match="metrics.ssl.client.auth"):
        broker_factory(0, **{"metrics.port": 0, "metrics.ssl.client.auth": "required"})
