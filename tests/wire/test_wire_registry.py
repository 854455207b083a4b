"""The registry: one entry per (api_key, version), duplicates refused, room for our own APIs, and each
API's module imported at the first lookup of its key."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_coord.wire import protocol, registry
from spark_coord.wire.protocol import RequestHeader
from spark_coord.wire.schema import Field, Message


@pytest.fixture
def scratch_registry(monkeypatch):
    """Register test APIs without leaking them into the process-wide table.  Every API module is
    imported first: one imported under the scratch table would register there, and be lost."""
    registry.load_all()
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.setattr(registry, "_names", dict(registry._names))


PING_REQUEST = Message("PingRequest", valid="0-1", flexible="none", fields=[
    Field("GroupId", "string", "0+"),
    Field("Generation", "int32", "1+", default=-1),
])
PING_RESPONSE = Message("PingResponse", valid="0-1", flexible="none", fields=[
    Field("ErrorCode", "int16", "0+"),
    Field("Offsets", "[]Offset", "0+", fields=[Field("Partition", "int32", "0+"), Field("Offset", "int64", "0+")]),
])


def test_a_key_is_registered_once(scratch_registry):
    with pytest.raises(ValueError, match="already registered"):
        registry.register(3, "Metadata", Message("X", "0+", "none", []), Message("Y", "0+", "none", []), (0, 0))
    registry.register(1900, "Ping", PING_REQUEST, PING_RESPONSE, (0, 1))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(1900, "Ping", PING_REQUEST, PING_RESPONSE, (0, 1))


def test_version_outside_the_schema_is_refused(scratch_registry):
    with pytest.raises(ValueError, match="no version 2"):
        registry.register(1901, "Ping2", PING_REQUEST, PING_RESPONSE, (0, 2))
    assert registry.served_versions(1901) is None


def test_coordinator_api_uses_classic_headers_and_joins_api_versions(scratch_registry):
    registry.register(1900, "Ping", PING_REQUEST, PING_RESPONSE, (0, 1))
    entry = registry.lookup(1900, 1)
    assert (entry.request_header_version, entry.response_header_version) == (1, 0)
    assert {"api_key": 1900, "min_version": 0, "max_version": 1} in protocol.api_versions_table()
    frame = protocol.encode_request(1900, 1, 5, "member-1", {"group_id": "g", "generation": 4})
    # header v1 + string + int32: no tagged-field bytes anywhere
    assert frame[4:] == b"\x07\x6c\x00\x01\x00\x00\x00\x05\x00\x08member-1\x00\x01g\x00\x00\x00\x04"
    header, body = protocol.decode_request(frame[4:])
    assert header == RequestHeader(1900, 1, 5, "member-1") and body == {"group_id": "g", "generation": 4}
    parts = protocol.encode_response(header, {"offsets": [{"partition": 0, "offset": 42}]})
    corr, resp = protocol.decode_response(1900, 1, b"".join(parts)[4:])
    assert corr == 5 and resp == {"error_code": 0, "offsets": [{"partition": 0, "offset": 42}]}
    assert registry.api_name(1900) == "Ping"


def test_api_names_for_logs():
    assert registry.api_name(0) == "Produce"
    assert registry.api_name(11) == "JoinGroup"  # registered: its module's name
    unserved = next(k for k in registry.ApiKey if registry.served_versions(k) is None)
    assert registry.api_name(unserved) == unserved.name  # known key, not registered: the enum's name
    assert registry.api_name(4242) == "api-4242"


def test_snake_case_keys():
    from spark_coord.wire.schema import snake_case
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("timeoutMs") == "timeout_ms"
    assert snake_case("IsrNodes") == "isr_nodes"
    assert snake_case("ZkMigrationReady") == "zk_migration_ready"


def test_each_key_is_registered_by_the_module_the_registry_names_for_it():
    """A fresh process: looking a key up imports the module ``MODULES`` names, which registers it; in the
    end every registered key is in ``MODULES`` and every key of ``MODULES`` registered."""
    code = ("import json\n"
            "from spark_coord.wire import registry\n"
            "wrong = []\n"
            "for key in sorted(registry.MODULES):\n"
            "    registry._load(key)\n"
            "    if key not in registry._names: wrong.append(key)\n"
            "registry.load_all()\n"
            "print(json.dumps([wrong, sorted(set(registry._names) ^ set(registry.MODULES))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], []]


def test_a_client_loads_the_codecs_of_the_apis_it_speaks_only():
    """A process that fetches (a Spark worker's read) imports the codecs of the APIs it uses, not all of
    them; its ApiVersions answer still lists everything served."""
    code = ("import json, sys\n"
            "from spark_coord.client.connection import BrokerConnection\n"
            "from spark_coord.client.fetcher import send_fetch\n"
            "from spark_coord.wire import protocol, registry\n"
            "before = sorted(m for m in sys.modules if m.startswith('spark_coord.wire.'))\n"
            "protocol.encode_request(1, 12, 7, 'c', {'topics': []})\n"
            "after = sorted(m for m in sys.modules if m.startswith('spark_coord.wire.'))\n"
            "print(json.dumps([before, after, len(protocol.api_versions_table())]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, served = json.loads(out.stdout.strip().splitlines()[-1])
    assert "spark_coord.wire.fetch" not in before and "spark_coord.wire.fetch" in after
    assert "spark_coord.wire.create_topics" not in after and len(after) < 12, after
    assert served == len(registry.MODULES)
