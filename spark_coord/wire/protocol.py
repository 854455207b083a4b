"""Whole frames: request/response headers around the registered bodies.

Header versions (Kafka's RequestHeader/ResponseHeader):
- request header v1: int16 api_key, int16 api_version, int32 correlation_id,
  nullable int16-length client_id; v2 (flexible versions) adds tagged fields.  The
  client id keeps the int16 length even in v2, so any broker can read the header
  of any ApiVersions request.
- response header v0: int32 correlation_id; v1 (flexible versions) adds tagged
  fields -- except ApiVersions, whose response header is always v0 (KIP-511).

Frames handed to the decoders start *after* the 4-byte size prefix; the encoders
return whole frames *including* it.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from spark_coord.errors import ErrorCode
from spark_coord.records.region import FileRegion
from spark_coord.wire import registry
from spark_coord.wire.registry import ApiEntry, ApiKey, api_versions_table, lookup, served_versions
from spark_coord.wire.types import EncodeError, Part, ProtocolError, Reader, Writer

__all__ = [
    "RequestHeader", "UnsupportedRequest", "decode_request", "decode_request_header", "encode_response",
    "encode_request", "encode_request_parts", "decode_response", "peek_correlation_id", "api_versions_table",
    "served_versions", "encode_api_versions_fallback", "frame_size", "ProtocolError", "EncodeError",
]

_I32 = struct.Struct(">i")
_SIZE_PLACEHOLDER = b"\x00\x00\x00\x00"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class UnsupportedRequest(Exception):
    """The header decoded fine, but (api_key, api_version) is not served.

    The broker answers ApiVersions with ``encode_api_versions_fallback`` and closes
    the connection for anything else (a client that ignored our ApiVersions answer).
    """

    def __init__(self, header: RequestHeader):
        self.header = header
        super().__init__(f"{registry.api_name(header.api_key)} (key {header.api_key}) "
                         f"v{header.api_version} is not served")


def _read_header(r: Reader) -> RequestHeader:
    return RequestHeader(r.int16(), r.int16(), r.int32(), r.nullable_string())


def decode_request_header(frame) -> RequestHeader:
    """Only the common part of a request header (api key, version, correlation id, client id)."""
    return _read_header(Reader(frame))


def decode_request(frame) -> tuple[RequestHeader, dict]:
    """Decode a request frame (after the size prefix) into its header and body dict.

    Raises ProtocolError for malformed input and UnsupportedRequest when the
    (api_key, api_version) is not served.  Bytes after a complete body are ignored,
    as Kafka's own broker does: librdkafka 2.x sends a few after some Metadata v12
    requests, and refusing them would lock out every librdkafka client.
    """
    r = Reader(frame)
    header = _read_header(r)
    entry = lookup(header.api_key, header.api_version)
    if entry is None:
        raise UnsupportedRequest(header)
    if entry.request_header_version >= 2:
        r.skip_tagged_fields()
    body = entry.request.decode(r)
    if r.remaining:
        log.debug("%s v%d request from %r: %d byte(s) after the body ignored",
                  entry.name, entry.version, header.client_id, r.remaining)
    return header, body


def _entry(api_key: int, api_version: int) -> ApiEntry:
    entry = lookup(api_key, api_version)
    if entry is None:
        raise ValueError(f"{registry.api_name(api_key)} (key {api_key}) v{api_version} is not registered")
    return entry


def _finish(w: Writer) -> list[Part]:
    size = len(w) - 4
    w.patch_int32(0, size)
    return w.parts()


def encode_response(header: RequestHeader, body: dict) -> list[Part]:
    """The whole response frame for ``header``'s request, including the size prefix.

    Parts are bytes or FileRegion (records fields given as regions are never read).
    Raises ValueError (EncodeError) when the body cannot be encoded.
    """
    entry = _entry(header.api_key, header.api_version)
    w = Writer()
    w.raw(_SIZE_PLACEHOLDER)
    w.int32(header.correlation_id)
    if entry.response_header_version >= 1:
        w.uvarint(0)
    entry.response.encode(w, body)
    return _finish(w)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: dict) -> bytes:
    """A whole request frame, including the size prefix (FileRegion records are read)."""
    return b"".join(encode_request_parts(api_key, api_version, correlation_id, client_id, body))


def encode_request_parts(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                         body: dict) -> "list[bytes | memoryview]":
    """A whole request frame, including the size prefix, as bytes parts to send in order: large
    records (bytes) are parts of their own, not copied (FileRegion records are read)."""
    entry = _entry(api_key, api_version)
    w = Writer()
    w.raw(_SIZE_PLACEHOLDER)
    w.int16(api_key)
    w.int16(api_version)
    w.int32(correlation_id)
    w.string(client_id, compact=False)
    if entry.request_header_version >= 2:
        w.uvarint(0)
    entry.request.encode(w, body)
    return [p.read() if isinstance(p, FileRegion) else p for p in _finish(w)]


def decode_response(api_key: int, api_version: int, frame) -> tuple[int, dict]:
    """Decode a response frame (after the size prefix) to (correlation_id, body).

    Raises ProtocolError on malformed input.  An ApiVersions answer carrying
    UNSUPPORTED_VERSION is read in the v0 format whatever version was asked
    (KIP-511: a broker that does not know our version answers with v0).
    """
    entry = _entry(api_key, api_version)
    r = Reader(frame)
    correlation_id = r.int32()
    if api_key == ApiKey.API_VERSIONS and api_version > 0 and r.remaining >= 2:
        if Reader(frame, r.pos).int16() == ErrorCode.UNSUPPORTED_VERSION:
            entry = _entry(api_key, 0)
    if entry.response_header_version >= 1:
        r.skip_tagged_fields()
    body = entry.response.decode(r)
    r.expect_end(f"{entry.name} v{entry.version} response")
    return correlation_id, body


def peek_correlation_id(frame) -> int:
    """The correlation id of a *response* frame (its first 4 bytes, after the size prefix)."""
    return Reader(frame).int32()


def encode_api_versions_fallback(correlation_id: int, api_keys: list[dict] | None = None) -> list[Part]:
    """KIP-511: the v0-format ApiVersions answer to a version we do not serve.

    Carries UNSUPPORTED_VERSION and the api list, so the client can retry at a
    version we serve: ``api_keys`` (a server passes what it advertises), by default
    the whole registry.
    """
    header = RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None)
    return encode_response(header, {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                                    "api_keys": api_versions_table() if api_keys is None else api_keys})


def frame_size(prefix) -> int:
    """The size announced by a 4-byte size prefix (may be negative: callers must check)."""
    if len(prefix) != 4:
        raise ProtocolError(f"size prefix must be 4 bytes, got {len(prefix)}")
    return _I32.unpack(bytes(prefix))[0]

