"""Framing and header rules: which header version goes with which API version, and
helpers that turn frames into (header, body) and back. No I/O.

A frame on the wire is a 4-byte big-endian size followed by that many bytes. Request
header v2 (flexible) is used when the API version is flexible, v1 otherwise
(ControlledShutdown v0 uses v0). Response header v1 when flexible, v0 otherwise, except
ApiVersions responses, which always use header v0 so any client can read them.
"""
from __future__ import annotations

from kafkafast.protocol import _generated as gen
from kafkafast.protocol._generated.headers import RequestHeader, ResponseHeader
from kafkafast.protocol.errors import UnsupportedVersionError
from kafkafast.protocol.primitives import DecodeError, FileRegion, Reader, Writer

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


def is_flexible(api_key: int, api_version: int) -> bool:
    cls = gen.REQUESTS.get(api_key)
    if cls is None or cls.FLEXIBLE_VERSION is None:
        return False
    return api_version >= cls.FLEXIBLE_VERSION


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def peek_api(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    r = Reader(frame)
    return r.int16(), r.int16(), r.int32()


def decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Reader]:
    """Decodes the request header; the returned reader is positioned at the body."""
    api_key, api_version, _ = peek_api(frame)
    r = Reader(frame)
    header = RequestHeader.decode(r, request_header_version(api_key, api_version))
    return header, r


def decode_request(frame: bytes | bytearray | memoryview):
    """(header, request body). Raises UnsupportedVersionError for versions we cannot
    parse and DecodeError for malformed bytes. Bytes left after a complete body are
    ignored, as Kafka's parser does (librdkafka sends some after Metadata v12)."""
    header, r = decode_request_header(frame)
    cls = gen.REQUESTS.get(header.request_api_key)
    if cls is None or not cls.MIN_VERSION <= header.request_api_version <= cls.MAX_VERSION:
        raise UnsupportedVersionError(f"api {header.request_api_key} v{header.request_api_version}")
    body = cls.decode(r, header.request_api_version)
    return header, body


def encode_request(request, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A complete request frame, size prefix included."""
    w = Writer()
    w.int32(0)
    header = RequestHeader(request_api_key=request.API_KEY, request_api_version=api_version,
                           correlation_id=correlation_id, client_id=client_id)
    header.encode(w, request_header_version(request.API_KEY, api_version))
    request.encode(w, api_version)
    buf = w.buf
    buf[0:4] = (len(buf) - 4).to_bytes(4, "big")
    return bytes(buf)


def encode_response(api_key: int, api_version: int, correlation_id: int, response) -> list:
    """Response frame parts (size prefix included); FileRegion parts stay unread."""
    w = Writer()
    w.int32(0)
    ResponseHeader(correlation_id=correlation_id).encode(w, response_header_version(api_key, api_version))
    response.encode(w, api_version)
    parts = w.finish()
    total = sum(len(p) for p in parts) - 4
    first = parts[0]
    if not isinstance(first, bytearray):
        first = bytearray(first)
        parts[0] = first
    first[0:4] = total.to_bytes(4, "big")
    return parts


def decode_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview):
    """(correlation_id, response body) from a response frame without its size prefix."""
    r = Reader(frame)
    header = ResponseHeader.decode(r, response_header_version(api_key, api_version))
    body = gen.RESPONSES[api_key].decode(r, api_version)
    return header.correlation_id, body


__all__ = [
    "FileRegion", "decode_request", "decode_request_header", "decode_response", "encode_request",
    "encode_response", "peek_api", "request_header_version", "response_header_version",
]
