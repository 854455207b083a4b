"""Sample bodies for every served (api_key, version), built from the schemas themselves.

``sample_body`` fills every field present in a version with a non-default value
(alternating nulls where the version allows them, tagged fields set, records as
bytes), so a round trip exercises every branch of the codec.
"""

from __future__ import annotations

import itertools

from spark_coord.wire import registry
from spark_coord.wire.schema import Field, Message

_RANGES = {"int8": 127, "int16": 32767, "uint16": 65535, "int32": 2**31 - 1, "uint32": 2**32 - 1,
           "int64": 2**63 - 1}


def served() -> list[tuple[int, int]]:
    """Every served (api_key, version) pair."""
    out = []
    for row in registry.api_versions_table():
        out += [(row["api_key"], v) for v in range(row["min_version"], row["max_version"] + 1)]
    return out


def message_of(api_key: int, kind: str) -> Message:
    """The request or response schema the registry serves ``api_key`` with (one per key, every
    version: a module that registers several APIs, e.g. the SCRAM pair, needs no table here)."""
    low, _ = registry.served_versions(api_key)
    entry = registry.lookup(api_key, low)
    return entry.request_message if kind == "request" else entry.response_message


class _Gen:
    def __init__(self, seed: int, with_nulls: bool):
        self.counter = itertools.count(seed)
        self.with_nulls = with_nulls

    def value(self, f: Field, version: int, element_type: str | None = None):
        t = element_type or f.type
        n = next(self.counter)
        if element_type is None and f.nullable_in(version) and self.with_nulls and n % 2 == 0:
            return None
        if t.startswith("[]"):
            inner = t[2:]
            if f.fields is not None:
                return [self.struct(f.fields, version) for _ in range(2)]
            return [self.value(f, version, inner) for _ in range(3)]
        if t in _RANGES:
            limit = _RANGES[t]
            return (n * 7919 + 1) % limit * (-1 if n % 3 == 0 and not t.startswith("u") else 1)
        if t == "float64":
            return n + 0.5
        if t == "bool":
            return True
        if t == "uuid":
            return bytes((n + i) % 256 for i in range(16))
        if t == "string":
            return f"s{n}-é"
        if t == "bytes":
            return bytes([n % 256]) * 3
        if t == "records":
            return b"RECORDS" + bytes([n % 256]) * 20
        return self.struct(f.fields or [], version)

    def struct(self, fields: list[Field], version: int) -> dict:
        return {f.key: self.value(f, version) for f in fields if f.in_version(version)}


def sample_body(api_key: int, version: int, kind: str, seed: int = 1, with_nulls: bool = True) -> dict:
    return _Gen(seed, with_nulls).struct(message_of(api_key, kind).fields, version)


def normalize(value):
    """Memoryviews to bytes, so decoded bodies compare equal to what was encoded."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


def restrict(decoded, fields: list[Field], version: int):
    """The decoded body limited to the fields present in ``version`` (recursively)."""
    out = {}
    for f in fields:
        if not f.in_version(version):
            continue
        v = decoded[f.key]
        if f.fields is not None and v is not None:
            if f.type.startswith("[]"):
                v = [restrict(x, f.fields, version) for x in v]
            else:
                v = restrict(v, f.fields, version)
        out[f.key] = v
    return out
