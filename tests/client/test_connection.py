"""BrokerConnection against a tiny in-test broker that speaks our codec."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from helpers import free_port, read_exactly

from spark_coord.client.connection import BrokerConnection, BrokerConnectionError
from spark_coord.errors import ErrorCode, KafkaError
from spark_coord.wire import protocol
from spark_coord.wire.protocol import ProtocolError, UnsupportedRequest
from spark_coord.wire.registry import ApiKey


class TinyBroker:
    """Accepts connections and answers with ``self.handler(header, body)``.

    The handler returns a body dict, or bytes to send raw, or None to send nothing.
    ``api_versions_max`` simulates an older broker (KIP-511 fallback above it).
    """

    def __init__(self, api_versions_max: int = 4):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.api_versions_max = api_versions_max
        self.handler = self.default_handler
        self.requests: list[tuple[protocol.RequestHeader, dict]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def table(self):
        rows = []
        for row in protocol.api_versions_table():
            if row["api_key"] == ApiKey.API_VERSIONS:
                row = dict(row, max_version=self.api_versions_max)
            rows.append(row)
        return rows

    def default_handler(self, header, body):
        if header.api_key == ApiKey.METADATA:
            return {"brokers": [{"node_id": 1, "host": "h", "port": 1}], "cluster_id": "cid", "topics": []}
        return {}

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                while True:
                    size = struct.unpack(">i", read_exactly(conn, 4))[0]
                    frame = read_exactly(conn, size)
                    try:
                        header, body = protocol.decode_request(frame)
                    except UnsupportedRequest as e:
                        conn.sendall(b"".join(protocol.encode_api_versions_fallback(e.header.correlation_id)))
                        continue
                    with self.lock:
                        self.requests.append((header, body))
                    if header.api_key == ApiKey.API_VERSIONS:
                        if header.api_version > self.api_versions_max:  # KIP-511: v0 answer, our table
                            v0 = protocol.RequestHeader(ApiKey.API_VERSIONS, 0, header.correlation_id, None)
                            answer = protocol.encode_response(v0, {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                                                                   "api_keys": self.table()})
                        else:
                            answer = protocol.encode_response(header, {"api_keys": self.table()})
                        conn.sendall(b"".join(answer))
                        continue
                    out = self.handler(header, body)
                    if out is None:
                        continue
                    if isinstance(out, bytes):
                        conn.sendall(out)
                    else:
                        conn.sendall(b"".join(protocol.encode_response(header, out)))
            except (EOFError, OSError):
                return

    def close(self):
        self.sock.close()


@pytest.fixture
def broker():
    b = TinyBroker()
    yield b
    b.close()


def test_negotiates_and_requests(broker):
    with BrokerConnection("127.0.0.1", broker.port, client_id="t", timeout=5) as conn:
        assert conn.version_for(ApiKey.METADATA) == 12
        assert conn.version_for(ApiKey.PRODUCE) == 9
        assert conn.version_for(ApiKey.FETCH) == 12
        assert conn.version_for(999) is None
        resp = conn.request(ApiKey.METADATA, {"topics": None})
        assert resp["cluster_id"] == "cid" and resp["brokers"][0]["node_id"] == 1
        resp0 = conn.request(ApiKey.METADATA, {"topics": None}, version=0)
        assert resp0["brokers"][0]["host"] == "h"
    assert conn.closed
    headers = [h for h, _ in broker.requests]
    assert headers[0].api_key == ApiKey.API_VERSIONS and headers[0].api_version == 3
    assert headers[0].client_id == "t"
    assert broker.requests[0][1]["client_software_name"] == "spark-coord"
    assert [h.api_version for h in headers[1:]] == [12, 0]
    assert len({h.correlation_id for h in headers}) == 3


@pytest.mark.parametrize("older", [0, 2])
def test_falls_back_when_broker_has_older_api_versions(older):
    old = TinyBroker(api_versions_max=older)
    try:
        with BrokerConnection("127.0.0.1", old.port, timeout=5) as conn:
            assert conn.version_for(ApiKey.API_VERSIONS) == older
            assert conn.request(ApiKey.METADATA, {"topics": []})["topics"] == []
        assert [h.api_version for h, _ in old.requests if h.api_key == ApiKey.API_VERSIONS] == [3, older]
    finally:
        old.close()


def test_threads_share_one_connection(broker):
    broker.handler = lambda h, b: {"topics": [{"name": t["name"], "error_code": 0} for t in b["topics"]]}
    errors = []
    with BrokerConnection("127.0.0.1", broker.port, timeout=5) as conn:
        def worker(i):
            try:
                for j in range(20):
                    name = f"t{i}-{j}"
                    resp = conn.request(ApiKey.METADATA, {"topics": [{"name": name}]})
                    assert [t["name"] for t in resp["topics"]] == [name]
            except Exception as e:  # noqa: BLE001 -- a thread's failure, collected and asserted below
                errors.append(e)
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []


def test_send_only_gets_no_response_and_keeps_the_stream_in_sync(broker):
    broker.handler = lambda h, b: None if h.api_key == ApiKey.PRODUCE else TinyBroker.default_handler(broker, h, b)
    with BrokerConnection("127.0.0.1", broker.port, timeout=5) as conn:
        conn.send_only(ApiKey.PRODUCE, {"acks": 0, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 70}]}]})
        assert conn.request(ApiKey.METADATA, {"topics": None})["cluster_id"] == "cid"
    produce = [b for h, b in broker.requests if h.api_key == ApiKey.PRODUCE]
    assert bytes(produce[0]["topic_data"][0]["partition_data"][0]["records"]) == b"x" * 70


def _raw(correlation_id: int, payload: bytes, size: int | None = None) -> bytes:
    body = struct.pack(">i", correlation_id) + payload
    return struct.pack(">i", len(body) if size is None else size) + body


@pytest.mark.parametrize("reply,match", [
    (lambda h: _raw(h.correlation_id + 1, b"\x00" * 20), "correlation id"),
    (lambda h: struct.pack(">i", 2**31 - 1), "announced a frame"),
    (lambda h: struct.pack(">i", -5), "announced a frame"),
    (lambda h: _raw(h.correlation_id, struct.pack(">i", 0) + struct.pack(">i", 2**30)), "bad Metadata"),
])
def test_bad_responses_raise_protocol_error_and_close(broker, reply, match):
    broker.handler = lambda h, b: reply(h)
    conn = BrokerConnection("127.0.0.1", broker.port, timeout=5, max_response_bytes=1 << 20)
    with pytest.raises(ProtocolError, match=match):
        conn.request(ApiKey.METADATA, {"topics": None}, version=1)
    assert conn.closed
    with pytest.raises(BrokerConnectionError):
        conn.request(ApiKey.METADATA, {"topics": None})


def test_broker_closing_mid_response_is_a_connection_error(broker):
    def half(h, b):
        raise EOFError  # the tiny broker drops the connection without answering
    broker.handler = half
    conn = BrokerConnection("127.0.0.1", broker.port, timeout=5)
    with pytest.raises(BrokerConnectionError, match="closed the connection"):
        conn.request(ApiKey.METADATA, {"topics": None})
    assert conn.closed
    assert isinstance(BrokerConnectionError("x"), ConnectionError)


def test_timeout_is_a_connection_error(broker):
    broker.handler = lambda h, b: None  # never answers
    conn = BrokerConnection("127.0.0.1", broker.port, timeout=5)
    with pytest.raises(BrokerConnectionError):
        conn.request(ApiKey.METADATA, {"topics": None}, timeout=0.2)
    assert conn.closed


def test_connect_refused_is_a_connection_error():
    with pytest.raises(BrokerConnectionError, match="cannot connect"):
        BrokerConnection("127.0.0.1", free_port(), timeout=2)


def test_no_common_version_raises_unsupported_version(broker):
    with BrokerConnection("127.0.0.1", broker.port, timeout=5) as conn:
        conn.broker_versions[ApiKey.FETCH] = (13, 17)
        assert conn.version_for(ApiKey.FETCH) is None
        with pytest.raises(KafkaError) as info:
            conn.request(ApiKey.FETCH, {})
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


def _named(resp) -> list[str]:
    return [t["name"] for t in resp["topics"]]


def test_pipelined_requests_answer_in_any_wait_order(broker):
    broker.handler = lambda h, b: {"topics": [{"name": t["name"], "error_code": 0} for t in b["topics"]]}
    with BrokerConnection("127.0.0.1", broker.port, timeout=5) as conn:
        pending = [conn.send(ApiKey.METADATA, {"topics": [{"name": f"t{i}"}]}) for i in range(5)]
        assert _named(pending[3].result()) == ["t3"]  # reads the answers of 0..2 on the way
        assert [_named(p.result()) for p in pending] == [[f"t{i}"] for i in range(5)]


def test_a_long_poll_does_not_keep_another_thread_from_sending(broker):
    """While a request waits for its (slow) answer, another thread still writes its own request
    at once; both answers reach their callers."""
    release = threading.Event()

    def handler(h, b):
        names = [t["name"] for t in b["topics"]]
        if names == ["slow"]:
            release.wait(10)
        return {"topics": [{"name": n, "error_code": 0} for n in names]}

    broker.handler = handler
    with BrokerConnection("127.0.0.1", broker.port, timeout=10) as conn:
        slow = conn.send(ApiKey.METADATA, {"topics": [{"name": "slow"}]})
        results = {}
        waiter = threading.Thread(target=lambda: results.setdefault("slow", _named(slow.result())))
        waiter.start()
        started = time.monotonic()
        other = conn.send(ApiKey.METADATA, {"topics": [{"name": "quick"}]})  # written while "slow" waits
        assert time.monotonic() - started < 5 and not slow.done and not release.is_set()
        release.set()
        assert _named(other.result()) == ["quick"]
        waiter.join(10)
        assert results == {"slow": ["slow"]}
    assert [b["topics"][0]["name"] for h, b in broker.requests[1:]] == ["slow", "quick"]


def test_close_fails_every_pending_request(broker):
    broker.handler = lambda h, b: None  # never answers
    conn = BrokerConnection("127.0.0.1", broker.port, timeout=10)
    first = conn.send(ApiKey.METADATA, {"topics": None})
    second = conn.send(ApiKey.METADATA, {"topics": None})
    errors = []
    waiter = threading.Thread(target=lambda: errors.append(pytest.raises(BrokerConnectionError, first.result)))
    waiter.start()
    deadline = time.monotonic() + 5
    while not conn._reading and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    conn.close()
    waiter.join(10)
    assert len(errors) == 1
    with pytest.raises(BrokerConnectionError):
        second.result()


def test_receives_into_a_reused_buffer(broker):
    broker.handler = lambda h, b: {"topics": [{"name": "x" * 50, "error_code": 0}]}
    buf = bytearray(4096)
    with BrokerConnection("127.0.0.1", broker.port, timeout=5) as conn:
        for _ in range(3):
            assert _named(conn.send(ApiKey.METADATA, {"topics": None}, into=buf).result()) == ["x" * 50]
        assert b"x" * 50 in buf
        small = bytearray(8)  # too small: a new buffer is used, the small one is left alone
        assert _named(conn.send(ApiKey.METADATA, {"topics": None}, into=small).result()) == ["x" * 50]
        assert small == bytearray(8)


def test_large_records_reach_the_broker_intact_from_parts(broker):
    """Records of a few hundred KiB go out as parts of their own (no copy into one frame),
    a read-only memoryview among them, and the broker reads exactly the frame it would from
    one buffer; the connection stays in step for the next request."""
    big = bytes(range(256)) * 1200  # 300 KiB
    view = memoryview(bytearray(b"v" * 200_000)).toreadonly()
    small = b"s" * 70
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": big}, {"index": 1, "records": view}, {"index": 2, "records": small}]}]}
    parts = protocol.encode_request_parts(ApiKey.PRODUCE, 9, 7, "c", body)
    assert any(p is big for p in parts) and any(p is view for p in parts)
    assert b"".join(parts) == protocol.encode_request(ApiKey.PRODUCE, 9, 7, "c", body)
    broker.handler = lambda h, b: (TinyBroker.default_handler(broker, h, b) if h.api_key == ApiKey.METADATA
                                   else {"responses": []})
    with BrokerConnection("127.0.0.1", broker.port, timeout=5) as conn:
        for _ in range(3):
            conn.request(ApiKey.PRODUCE, body)
        assert conn.request(ApiKey.METADATA, {"topics": None})["cluster_id"] == "cid"
    produced = [b for h, b in broker.requests if h.api_key == ApiKey.PRODUCE]
    assert len(produced) == 3
    for got in produced:
        records = [bytes(p["records"]) for p in got["topic_data"][0]["partition_data"]]
        assert records == [big, bytes(view), small]


def test_send_parts_survives_partial_writes():
    """sendmsg may take only part of what it is given: the rest follows in order."""
    from spark_coord.client.transport import send_parts

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    parts = [b"head", bytes(range(256)) * 4000, memoryview(b"m" * 300_000).toreadonly(), b"", b"tail" * 1000]
    want = b"".join(parts)
    got = bytearray()

    def read():
        while len(got) < len(want):
            chunk = b.recv(65536)
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        a.settimeout(10)
        send_parts(a, parts)
        reader.join(10)
    finally:
        a.close()
        b.close()
    assert bytes(got) == want
