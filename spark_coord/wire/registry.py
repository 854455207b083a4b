"""The one table of served APIs, keyed by (api_key, version).

Each API module calls ``register()`` once at import time with its request and
response schemas and the version range we serve; that call is the only place a
version range is declared.  The table drives request dispatch (decode_request
refuses what is not here), the ApiVersions answer and response lookup.  A
broker advertises only the entries it has a handler for, so codecs can be
registered (for clients, or for handlers still to come) without changing what a
broker serves.  A key
registered twice is refused, so two modules cannot silently claim the same API.

The coordinator's own APIs (keys 1000 and up, non-flexible, request header v1 and
response header v0, like Kafka 0.8) are registered by their own module with the
same ``register()`` call.

Each module is imported when one of its keys is first looked up (``MODULES``), not
when the package is: a process that speaks a few APIs (a Spark worker's fetches, a
streaming query's reader process) loads their codecs only, not the few dozen modules
of every API (20-35 ms of its start).  ``api_versions_table`` loads them all.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from enum import IntEnum

from spark_coord.wire.schema import Message, StructCodec

log = logging.getLogger(__name__)

__all__ = ["ApiKey", "ApiEntry", "MODULES", "register", "lookup", "served_versions", "api_versions_table", "api_name",
           "load_all"]


class ApiKey(IntEnum):
    """Kafka's api keys: the ones we serve, plus common ones so logs can name what a client tried."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True)
class ApiEntry:
    """One served (api_key, version): its schemas and header versions.

    The codecs are compiled the first time they are used (``Message.codec`` keeps them): a
    process that speaks a few APIs (a client, Spark's reader process that every streaming
    query starts) does not pay for compiling every version of every API at import."""

    api_key: int
    version: int
    name: str
    request_message: Message
    response_message: Message
    request_header_version: int   # 1 (classic) or 2 (flexible: + tagged fields)
    response_header_version: int  # 0 (classic) or 1 (flexible: + tagged fields)

    @property
    def request(self) -> StructCodec:
        return self.request_message.codec(self.version)

    @property
    def response(self) -> StructCodec:
        return self.response_message.codec(self.version)


_lock = threading.Lock()
_entries: dict[tuple[int, int], ApiEntry] = {}
_names: dict[int, str] = {}

#: The module of this package that registers each api key (the coordinator protocol's keys 1000-1006
#: are all in ``coordinator``); a test checks it against what the modules register.
MODULES: dict[int, str] = {
    ApiKey.PRODUCE: "produce", ApiKey.FETCH: "fetch", ApiKey.LIST_OFFSETS: "list_offsets",
    ApiKey.METADATA: "metadata", ApiKey.OFFSET_COMMIT: "offset_commit", ApiKey.OFFSET_FETCH: "offset_fetch",
    ApiKey.FIND_COORDINATOR: "find_coordinator", ApiKey.JOIN_GROUP: "join_group", ApiKey.HEARTBEAT: "heartbeat",
    ApiKey.LEAVE_GROUP: "leave_group", ApiKey.SYNC_GROUP: "sync_group", ApiKey.DESCRIBE_GROUPS: "describe_groups",
    ApiKey.LIST_GROUPS: "list_groups", ApiKey.SASL_HANDSHAKE: "sasl_handshake", ApiKey.API_VERSIONS: "api_versions",
    ApiKey.CREATE_TOPICS: "create_topics", ApiKey.DELETE_TOPICS: "delete_topics",
    ApiKey.DELETE_RECORDS: "delete_records", ApiKey.INIT_PRODUCER_ID: "init_producer_id",
    ApiKey.WRITE_TXN_MARKERS: "write_txn_markers", ApiKey.ADD_PARTITIONS_TO_TXN: "add_partitions_to_txn",
    ApiKey.ADD_OFFSETS_TO_TXN: "add_offsets_to_txn", ApiKey.END_TXN: "end_txn",
    ApiKey.TXN_OFFSET_COMMIT: "txn_offset_commit", ApiKey.DESCRIBE_TRANSACTIONS: "describe_transactions",
    ApiKey.LIST_TRANSACTIONS: "list_transactions",
    ApiKey.DESCRIBE_ACLS: "describe_acls", ApiKey.CREATE_ACLS: "create_acls", ApiKey.DELETE_ACLS: "delete_acls",
    ApiKey.DESCRIBE_CONFIGS: "describe_configs", ApiKey.ALTER_CONFIGS: "alter_configs",
    ApiKey.DESCRIBE_LOG_DIRS: "describe_log_dirs", ApiKey.SASL_AUTHENTICATE: "sasl_authenticate",
    ApiKey.CREATE_PARTITIONS: "create_partitions", ApiKey.DELETE_GROUPS: "delete_groups",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "incremental_alter_configs", ApiKey.OFFSET_DELETE: "offset_delete",
    ApiKey.DESCRIBE_CLIENT_QUOTAS: "describe_client_quotas",
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: "scram_credentials",
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: "scram_credentials", ApiKey.DESCRIBE_PRODUCERS: "describe_producers",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "consumer_group_heartbeat",
    ApiKey.CONSUMER_GROUP_DESCRIBE: "consumer_group_describe", ApiKey.SHARE_GROUP_HEARTBEAT: "share_group_heartbeat",
    ApiKey.SHARE_GROUP_DESCRIBE: "share_group_describe", ApiKey.SHARE_FETCH: "share_fetch",
    ApiKey.SHARE_ACKNOWLEDGE: "share_acknowledge", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: "describe_share_group_offsets",
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: "alter_share_group_offsets",
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: "delete_share_group_offsets",
    **{key: "coordinator" for key in range(1000, 1007)},
}


def _load(api_key: int) -> None:
    """Import the module that registers ``api_key`` (if there is one and it is not imported yet)."""
    module = MODULES.get(api_key)
    if module is not None and api_key not in _names:
        importlib.import_module(f"{__package__}.{module}")


def load_all() -> None:
    """Import every API module (what the broker serves is chosen among all of them)."""
    for module in sorted(set(MODULES.values())):
        importlib.import_module(f"{__package__}.{module}")


def register(api_key: int, name: str, request: Message, response: Message, versions: tuple[int, int], *,
             response_header_version: int | None = None) -> None:
    """Serve ``name`` (``api_key``) at versions ``versions[0]..versions[1]`` inclusive.

    Header versions follow the schemas' flexible versions unless
    ``response_header_version`` forces one (ApiVersions always answers with header v0,
    KIP-511).  One call per key: raises ValueError when ``api_key`` is already
    registered or a schema does not define one of the versions.
    """
    _load(api_key)  # the key's own module first, so nothing else can claim the key before it is imported
    low, high = versions
    if not 0 <= low <= high:
        raise ValueError(f"bad version range {versions} for {name}")
    if not -0x8000 <= api_key <= 0x7FFF:
        raise ValueError(f"api key {api_key} does not fit in an int16")
    built = []
    for v in range(low, high + 1):
        req_flex = request.is_flexible(v)
        if req_flex != response.is_flexible(v):
            raise ValueError(f"{name} v{v}: request and response disagree on flexibility")
        for message in (request, response):
            if v not in message.valid_versions:
                raise ValueError(f"{message.name} has no version {v} (valid: {message.valid})")
        built.append(ApiEntry(
            api_key=int(api_key), version=v, name=name, request_message=request, response_message=response,
            request_header_version=2 if req_flex else 1,
            response_header_version=(response_header_version if response_header_version is not None
                                     else (1 if req_flex else 0)),
        ))
    with _lock:
        if api_key in _names:
            raise ValueError(f"api key {api_key} ({name}) is already registered as {_names[api_key]}")
        for entry in built:
            _entries[(entry.api_key, entry.version)] = entry
        _names[int(api_key)] = name
    log.debug("registered %s (key %d) v%d-%d", name, api_key, low, high)


def lookup(api_key: int, version: int) -> ApiEntry | None:
    """The entry for a served (api_key, version), or None."""
    entry = _entries.get((api_key, version))
    if entry is None and api_key not in _names:
        _load(api_key)
        entry = _entries.get((api_key, version))
    return entry


def served_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) version we serve for ``api_key``, or None if we do not serve it."""
    _load(api_key)
    versions = [v for (k, v) in _entries if k == api_key]
    if not versions:
        return None
    return min(versions), max(versions)


def api_versions_table() -> list[dict]:
    """Every served API as ``{"api_key", "min_version", "max_version"}``, sorted by key (for ApiVersions)."""
    load_all()
    out = []
    for key in sorted(_names):
        low, high = served_versions(key)  # type: ignore[misc]
        out.append({"api_key": key, "min_version": low, "max_version": high})
    return out


def api_name(api_key: int) -> str:
    """A readable name for any api key (for logs)."""
    _load(api_key)
    if api_key in _names:
        return _names[api_key]
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api-{api_key}"
