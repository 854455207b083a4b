"""A small declarative schema for Kafka messages, and the generic codec that interprets it.

API modules transcribe Kafka's JSON message definitions
(``clients/src/main/resources/common/message/*.json``) into ``Message`` and ``Field``
objects, keeping Kafka's field names, type names and version strings, so a schema
can be checked line by line against its source::

    Field("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        Field("Name", "string", "0+"),
    ])

Field names become snake_case dictionary keys (``ThrottleTimeMs`` ->
``throttle_time_ms``).  ``Message.codec(version)`` compiles the schema for one
version into a ``StructCodec`` (cached), whose ``decode(reader) -> dict`` and
``encode(writer, dict)`` do no I/O.

Encoding is forgiving by design, so that a handler can build one superset dict for
every version: a missing key takes the field's default, keys of fields not in the
version are ignored, and None for a field that is not nullable in that version is
written as the empty value.  A key that is a field of *no* version of its message (or
struct) is a typo, which would otherwise go out as the field's default: in strict mode
(``SPARK_COORD_STRICT_WIRE=1``, which the test suite sets, so the brokers it starts inherit
it) encoding raises ``UnknownKeyError`` naming the message, the version, the key and
where it is; otherwise the key is ignored, at no cost (the check is skipped).  Decoding is
strict: anything malformed raises ``ProtocolError``, and every field of the schema is
present in the result (fields absent from the version hold their defaults), so a
decoded dict encodes again in strict mode.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Callable

from spark_coord.records.region import FileRegion
from spark_coord.wire.types import EncodeError, ProtocolError, Reader, Writer

__all__ = ["Field", "Message", "StructCodec", "UnknownKeyError", "Versions", "snake_case", "STRICT_ENV"]

_MISSING: Any = object()

#: The environment variable that turns strict encoding on (``1``); read at import, so a process
#: started by one in strict mode is strict too.  ``STRICT`` may be set at run time (tests).
STRICT_ENV = "SPARK_COORD_STRICT_WIRE"
STRICT: bool = os.environ.get(STRICT_ENV, "").strip().lower() not in ("", "0", "false", "no")


class UnknownKeyError(EncodeError):
    """Strict mode: a body has a key that no version of its message (or of the struct holding it) has."""

    def __init__(self, message: str, version: int, key: str, path: str = ""):
        self.message, self.version, self.key, self.path = message, version, key, path
        where = f" in {path}" if path else ""
        super().__init__(f"{message} v{version}: unknown key {key!r}{where} (a field of no version)")

    def within(self, prefix: str) -> "UnknownKeyError":
        """The same error one struct further out (``prefix``: the key or ``[index]`` holding it)."""
        if not self.path:
            path = prefix
        else:
            path = f"{prefix}{self.path}" if self.path.startswith("[") else f"{prefix}.{self.path}"
        return UnknownKeyError(self.message, self.version, self.key, path)

# type name -> (Reader method, Writer method, encoded size, default value)
_FIXED: dict[str, tuple[str, str, int, Any]] = {
    "int8": ("int8", "int8", 1, 0),
    "int16": ("int16", "int16", 2, 0),
    "uint16": ("uint16", "uint16", 2, 0),
    "int32": ("int32", "int32", 4, 0),
    "uint32": ("uint32", "uint32", 4, 0),
    "int64": ("int64", "int64", 8, 0),
    "float64": ("float64", "float64", 8, 0.0),
    "bool": ("bool", "bool", 1, False),
    "uuid": ("uuid", "uuid", 16, bytes(16)),
}
_VARIABLE = ("string", "bytes", "records")


def snake_case(name: str) -> str:
    """Kafka's JSON field name as our dict key: ``ThrottleTimeMs`` -> ``throttle_time_ms``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@dataclass(frozen=True)
class Versions:
    """A Kafka version range string: ``"3+"``, ``"0-14"``, ``"0"`` or ``"none"``."""

    low: int
    high: int  # inclusive; -1 when the range is empty

    @classmethod
    def parse(cls, spec: str | None) -> "Versions":
        if spec is None or spec == "none":
            return cls(0, -1)
        m = re.fullmatch(r"(\d+)(\+|-(\d+))?", spec.strip())
        if not m:
            raise ValueError(f"bad version range {spec!r}")
        low = int(m.group(1))
        if m.group(2) == "+":
            return cls(low, 0x7FFF)
        if m.group(3) is not None:
            return cls(low, int(m.group(3)))
        return cls(low, low)

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@dataclass
class Field:
    """One field of a Kafka message, as in the JSON definition.

    ``type`` is Kafka's: a primitive (``int32``, ``string``, ``records``, ``uuid``...),
    ``[]<primitive>``, ``[]<StructName>`` or ``<StructName>`` (the latter two with
    ``fields``).  ``default`` is the Python value of the JSON ``default``.
    """

    name: str
    type: str
    versions: str
    nullable: str | None = None
    tag: int | None = None
    tagged: str | None = None
    default: Any = _MISSING
    fields: list["Field"] | None = None
    key: str = dc_field(init=False)

    def __post_init__(self) -> None:
        self.key = snake_case(self.name)
        self._versions = Versions.parse(self.versions)
        self._nullable = Versions.parse(self.nullable)
        self._tagged = Versions.parse(self.tagged)
        if (self.tag is None) != (self.tagged is None):
            raise ValueError(f"field {self.name}: tag and tagged versions go together")
        element = self.type[2:] if self.type.startswith("[]") else self.type
        is_struct = element not in _FIXED and element not in _VARIABLE
        if is_struct and self.fields is None:
            raise ValueError(f"field {self.name}: struct type {element} needs fields")
        if not is_struct and self.fields is not None:
            raise ValueError(f"field {self.name}: primitive type {element} cannot have fields")

    def in_version(self, version: int) -> bool:
        return version in self._versions

    def nullable_in(self, version: int) -> bool:
        return version in self._nullable

    def tagged_in(self, version: int) -> bool:
        return version in self._tagged


@dataclass
class Message:
    """A request or response body: Kafka's ``validVersions``, ``flexibleVersions`` and fields."""

    name: str
    valid: str
    flexible: str
    fields: list[Field]

    def __post_init__(self) -> None:
        self.valid_versions = Versions.parse(self.valid)
        self.flexible_versions = Versions.parse(self.flexible)
        self._codecs: dict[int, StructCodec] = {}

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def codec(self, version: int) -> "StructCodec":
        """The compiled codec for ``version`` (ValueError if the schema does not define it)."""
        codec = self._codecs.get(version)
        if codec is None:
            if version not in self.valid_versions:
                raise ValueError(f"{self.name} has no version {version} (valid: {self.valid})")
            codec = StructCodec(self.name, self.fields, version, self.is_flexible(version), self.name)
            self._codecs[version] = codec
        return codec

    def decode(self, reader: Reader, version: int) -> dict:
        return self.codec(version).decode(reader)

    def encode(self, writer: Writer, body: dict, version: int) -> None:
        self.codec(version).encode(writer, body)


# --------------------------------------------------------------------- value codecs
Decoder = Callable[[Reader], Any]
Encoder = Callable[[Writer, Any], None]


@dataclass
class _ValueCodec:
    decode: Decoder
    encode: Encoder
    min_size: int
    default: Callable[[], Any]
    check: Callable[[Any], None] | None = None  # strict mode: the keys of a struct value, for fields not encoded


def _records_size(value) -> int:
    if isinstance(value, memoryview):
        return value.nbytes
    return len(value)


def _records_encoder(compact: bool, nullable: bool) -> Encoder:
    def encode(w: Writer, value) -> None:
        if value is None:
            w.length(None if nullable else 0, compact, True)
            return
        pieces = value if isinstance(value, (list, tuple)) else (value,)
        for piece in pieces:
            if not isinstance(piece, (bytes, bytearray, memoryview, FileRegion)):
                raise EncodeError(f"records piece of type {type(piece).__name__}")
        w.length(sum(_records_size(p) for p in pieces), compact, True)
        for piece in pieces:
            if isinstance(piece, FileRegion):
                w.region(piece)
            else:
                w.chunk(piece)
    return encode


def _string_codec(compact: bool, nullable: bool, default: Any) -> _ValueCodec:
    if compact:
        dec = Reader.compact_nullable_string if nullable else Reader.compact_string
    else:
        dec = Reader.nullable_string if nullable else Reader.string

    def encode(w: Writer, value) -> None:
        if value is None and not nullable:
            value = ""
        elif value is not None and not isinstance(value, str):
            raise EncodeError(f"expected str, got {type(value).__name__}")
        w.string(value, compact)
    return _ValueCodec(dec, encode, 1 if compact else 2, lambda: default)


def _bytes_codec(compact: bool, nullable: bool, default: Any) -> _ValueCodec:
    if compact:
        raw = Reader.compact_nullable_bytes if nullable else Reader.compact_bytes
    else:
        raw = Reader.nullable_bytes if nullable else Reader.bytes_

    def decode(r: Reader):
        view = raw(r)
        return None if view is None else bytes(view)

    def encode(w: Writer, value) -> None:
        if value is None and not nullable:
            value = b""
        w.bytes_(value, compact)
    return _ValueCodec(decode, encode, 1 if compact else 4, lambda: default)


def _records_codec(compact: bool, nullable: bool, default: Any) -> _ValueCodec:
    if compact:
        dec = Reader.compact_nullable_bytes if nullable else Reader.compact_bytes
    else:
        dec = Reader.nullable_bytes if nullable else Reader.bytes_
    return _ValueCodec(dec, _records_encoder(compact, nullable), 1 if compact else 4, lambda: default)


def _fixed_codec(type_name: str, default: Any) -> _ValueCodec:
    read_name, write_name, size, _ = _FIXED[type_name]
    dec = getattr(Reader, read_name)
    enc = getattr(Writer, write_name)
    return _ValueCodec(dec, enc, size, lambda: default)


def _element_codec(type_name: str, fields: list[Field] | None, name: str, version: int,
                   flexible: bool, message: str) -> _ValueCodec:
    """The codec of one array element (never nullable)."""
    if type_name in _FIXED:
        return _fixed_codec(type_name, _FIXED[type_name][3])
    if type_name == "string":
        return _string_codec(flexible, False, "")
    if type_name == "bytes":
        return _bytes_codec(flexible, False, b"")
    if type_name == "records":
        return _records_codec(flexible, False, None)
    nested = StructCodec(f"{name}[]", fields or [], version, flexible, message)
    return _ValueCodec(nested.decode, nested.encode, nested.min_size, nested.default, nested.check)


def _array_codec(elem: _ValueCodec, compact: bool, nullable: bool, default: Any) -> _ValueCodec:
    elem_decode, elem_encode, elem_size, elem_check = elem.decode, elem.encode, elem.min_size, elem.check

    def decode(r: Reader):
        n = r.array_length(elem_size, compact, nullable)
        if n is None:
            return None
        return [elem_decode(r) for _ in range(n)]

    def encode(w: Writer, value) -> None:
        if value is None:
            w.length(None if nullable else 0, compact, True)
            return
        if isinstance(value, (str, bytes, dict)):
            raise EncodeError(f"expected a list, got {type(value).__name__}")
        w.length(len(value), compact, True)
        for i, item in enumerate(value):
            try:
                elem_encode(w, item)
            except EncodeError as e:
                raise _within(f"[{i}]", e) from e
    def check(value, item_check: Callable[[Any], None]) -> None:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                try:
                    item_check(item)
                except UnknownKeyError as e:
                    raise e.within(f"[{i}]") from e
    factory: Callable[[], Any] = list if default is _MISSING else (lambda: default)
    return _ValueCodec(decode, encode, 1 if compact else 4, factory,
                       None if elem_check is None else functools.partial(check, item_check=elem_check))


def _struct_field_codec(nested: "StructCodec", nullable: bool, default: Any) -> _ValueCodec:
    """A nested (non-array) struct; nullable structs carry an int8 marker (-1 null, 1 present)."""
    if not nullable:
        def encode(w: Writer, value) -> None:
            nested.encode(w, {} if value is None else value)
        return _ValueCodec(nested.decode, encode, nested.min_size, nested.default, nested.check)

    def decode_nullable(r: Reader):
        marker = r.int8()
        if marker == -1:
            return None
        if marker != 1:
            raise ProtocolError(f"invalid struct presence marker {marker}")
        return nested.decode(r)

    def encode_nullable(w: Writer, value) -> None:
        if value is None:
            w.int8(-1)
        else:
            w.int8(1)
            nested.encode(w, value)
    factory = (lambda: None) if default is _MISSING else (lambda: default)
    return _ValueCodec(decode_nullable, encode_nullable, 1, factory, nested.check)


def _field_codec(f: Field, version: int, flexible: bool, message: str) -> _ValueCodec:
    nullable = f.nullable_in(version)
    has_nullable = f.nullable is not None and f.nullable != "none"
    default = f.default
    if f.type.startswith("[]"):
        elem = _element_codec(f.type[2:], f.fields, f.name, version, flexible, message)
        if default is _MISSING and has_nullable:
            default = None
        return _array_codec(elem, flexible, nullable, default)
    if f.type in _FIXED:
        return _fixed_codec(f.type, _FIXED[f.type][3] if default is _MISSING else default)
    if f.type in _VARIABLE:
        if default is _MISSING:
            if has_nullable or f.type == "records":
                default = None
            else:
                default = "" if f.type == "string" else b""
        maker = {"string": _string_codec, "bytes": _bytes_codec, "records": _records_codec}[f.type]
        return maker(flexible, nullable, default)
    nested = StructCodec(f.name, f.fields or [], version, flexible, message)
    return _struct_field_codec(nested, nullable, default)


def _join(prefix: str, error: EncodeError) -> str:
    """Build the path of a failing field: ``topics[0].partitions[2].records: ...``."""
    text = str(error)
    return f"{prefix}{text}" if text.startswith("[") else f"{prefix}.{text}"


def _within(prefix: str, error: EncodeError) -> EncodeError:
    """``error`` raised inside the field or element ``prefix``, with the path grown by it."""
    if isinstance(error, UnknownKeyError):
        return error.within(prefix)
    return EncodeError(_join(prefix, error))


# ------------------------------------------------------------------------ structs
class StructCodec:
    """A message or nested struct compiled for one version (``message``: the message it belongs to)."""

    def __init__(self, name: str, fields: list[Field], version: int, flexible: bool, message: str | None = None):
        self.name = name
        self.message = message or name
        self.version = version
        self.flexible = flexible
        # every key of every version: a field of another version is normal in a superset dict
        self._known = frozenset(f.key for f in fields)
        self._plain: list[tuple[str, Decoder, Encoder, Callable[[], Any]]] = []
        self._absent: list[tuple[str, Callable[[], Any]]] = []
        self._tagged: dict[int, tuple[str, Decoder, Encoder, Callable[[], Any], bytes]] = {}
        self._checks: list[tuple[str, Callable[[Any], None]]] = []  # struct-valued fields, for check()
        self._unencoded_checks: list[tuple[str, Callable[[Any], None]]] = []  # those not in the version
        seen: set[str] = set()
        min_size = 1 if flexible else 0  # the tagged-field count
        for f in fields:
            if f.key in seen:
                raise ValueError(f"{name}: duplicate field {f.key}")
            seen.add(f.key)
            codec = _field_codec(f, version, flexible, self.message)
            if codec.check is not None:
                self._checks.append((f.key, codec.check))
                if not f.in_version(version):
                    self._unencoded_checks.append((f.key, codec.check))
            if not f.in_version(version):
                self._absent.append((f.key, codec.default))
            elif f.tagged_in(version):
                if not flexible:
                    raise ValueError(f"{name}.{f.name}: tagged field in a non-flexible version {version}")
                tag = f.tag
                assert tag is not None  # tagged_in: it has one
                if tag in self._tagged:
                    raise ValueError(f"{name}: tag {tag} used twice in version {version}")
                probe = Writer()
                codec.encode(probe, codec.default())
                self._tagged[tag] = (f.key, codec.decode, codec.encode, codec.default, probe.getvalue())
                self._absent.append((f.key, codec.default))
            else:
                self._plain.append((f.key, codec.decode, codec.encode, codec.default))
                min_size += codec.min_size
        self.min_size = min_size
        self._tag_order = sorted(self._tagged)

    def default(self) -> dict:
        """Every field at its default value."""
        out = {key: factory() for key, _, _, factory in self._plain}
        for key, factory in self._absent:
            out[key] = factory()
        return out

    def decode(self, r: Reader) -> dict:
        out = {}
        for key, decode, _, _ in self._plain:
            out[key] = decode(r)
        for key, factory in self._absent:
            out[key] = factory()
        if self.flexible:
            for _ in range(r.tagged_field_count()):
                tag, sub = r.tagged_field()
                known = self._tagged.get(tag)
                if known is None:
                    continue  # unknown tags are legal: a newer peer's optional data
                out[known[0]] = known[1](sub)
                sub.expect_end(f"tagged field {tag} of {self.name}")
        return out

    def encode(self, w: Writer, body: dict) -> None:
        if not isinstance(body, dict):
            raise EncodeError(f"{self.name}: expected a dict, got {type(body).__name__}")
        if STRICT:
            if not self._known.issuperset(body):
                raise self._unknown_key(body)
            self._check_fields(body, self._unencoded_checks)
        get = body.get
        for key, _, encode, factory in self._plain:
            value = get(key, _MISSING)
            if value is _MISSING:
                value = factory()
            try:
                encode(w, value)
            except EncodeError as e:
                raise _within(key, e) from e
            except (TypeError, ValueError, OverflowError, AttributeError, struct.error) as e:
                raise EncodeError(f"{key}: {e}") from e
        if self.flexible:
            self._encode_tagged(w, get)

    def check(self, body) -> None:
        """Strict mode, for a value that is not encoded (its field is not in the version): raise
        UnknownKeyError if it has a key of no version, here or in a struct below."""
        if isinstance(body, dict):
            if not self._known.issuperset(body):
                raise self._unknown_key(body)
            self._check_fields(body, self._checks)

    @staticmethod
    def _check_fields(body: dict, checks: list[tuple[str, Callable[[Any], None]]]) -> None:
        for key, check in checks:
            value = body.get(key)
            if value is not None:
                try:
                    check(value)
                except UnknownKeyError as e:
                    raise e.within(key) from e

    def _unknown_key(self, body: dict) -> UnknownKeyError:
        return UnknownKeyError(self.message, self.version, min((k for k in body if k not in self._known), key=str))

    def _encode_tagged(self, w: Writer, get) -> None:
        chunks = []
        for tag in self._tag_order:
            key, _, encode, _, default_bytes = self._tagged[tag]
            value = get(key, _MISSING)
            if value is _MISSING:
                continue
            sub = Writer()
            try:
                encode(sub, value)
            except EncodeError as e:
                raise _within(key, e) from e
            except (TypeError, ValueError, OverflowError, AttributeError, struct.error) as e:
                raise EncodeError(f"{key}: {e}") from e
            if sub.has_regions:
                raise EncodeError(f"{key}: a tagged field cannot carry a file region")
            data = sub.getvalue()
            if data != default_bytes:
                chunks.append((tag, data))
        w.uvarint(len(chunks))
        for tag, data in chunks:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)
