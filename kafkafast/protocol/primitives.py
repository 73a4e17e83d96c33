"""Wire primitives of the Kafka protocol: a bounds-checked reader and a part-list writer.

Every length read from the wire is checked against the bytes actually left before anything
is allocated or sliced, so a lying length raises `DecodeError` instead of allocating.
The writer collects parts; a part may be a `FileRegion` (a range of an open segment file)
so that a Fetch response can be sent with `os.sendfile` without reading the records.
"""
from __future__ import annotations

import os
import struct
import uuid as _uuid
from dataclasses import dataclass

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

ZERO_UUID = b"\x00" * 16


class DecodeError(ValueError):
    """The bytes do not form a valid message (truncated, negative or oversized length)."""


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of an open file, sent with os.sendfile instead of being copied."""

    fd: int
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The region's bytes (for transports that cannot sendfile, and for tests)."""
        return os.pread(self.fd, self.length, self.offset)


class Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf) if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise DecodeError(f"need {n} bytes at {p}, have {self.end - p}")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._take(1))[0]

    def boolean(self) -> bool:
        return self.buf[self._take(1)] != 0

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._take(8))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._take(8))[0]

    def uuid(self) -> bytes:
        p = self._take(16)
        return bytes(self.buf[p : p + 16])

    def uvarint(self) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        result = shift = 0
        while True:
            if pos >= end:
                raise DecodeError("truncated varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise DecodeError("varint too long")
        self.pos = pos
        return result

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> memoryview:
        p = self._take(n)
        return self.buf[p : p + n]

    # -- strings and bytes -------------------------------------------------------------
    def _text(self, n: int) -> str:
        p = self._take(n)
        try:
            return str(self.buf[p : p + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError("invalid utf-8") from exc

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("null string where not nullable")
        return self._text(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._text(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null compact string where not nullable")
        return self._text(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    def bytes_(self) -> memoryview:
        n = self.int32()
        if n < 0:
            raise DecodeError("null bytes where not nullable")
        return self.raw(n)

    def nullable_bytes(self) -> memoryview | None:
        n = self.int32()
        return None if n < 0 else self.raw(n)

    def compact_bytes(self) -> memoryview:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null compact bytes where not nullable")
        return self.raw(n)

    def compact_nullable_bytes(self) -> memoryview | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.raw(n)

    # -- arrays: lengths are checked against the bytes left (each element takes >= 1 byte)
    def array_length(self) -> int:
        n = self.int32()
        if n > self.end - self.pos:
            raise DecodeError(f"array of {n} longer than the {self.end - self.pos} bytes left")
        return n

    def compact_array_length(self) -> int:
        n = self.uvarint() - 1
        if n > self.end - self.pos:
            raise DecodeError(f"array of {n} longer than the {self.end - self.pos} bytes left")
        return n

    def skip_tagged_fields(self) -> dict[int, bytes] | None:
        count = self.uvarint()
        if count > self.end - self.pos:
            raise DecodeError("tag count longer than the bytes left")
        tags: dict[int, bytes] | None = None
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            data = bytes(self.raw(size))
            if tags is None:
                tags = {}
            tags[tag] = data
        return tags


class Writer:
    """Collects encoded bytes; `FileRegion` parts stay separate for sendfile."""

    __slots__ = ("buf", "parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[bytes | bytearray | memoryview | FileRegion] = []

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def uuid(self, v: bytes | _uuid.UUID | None) -> None:
        if v is None:
            self.buf += ZERO_UUID
        elif isinstance(v, _uuid.UUID):
            self.buf += v.bytes
        else:
            if len(v) != 16:
                raise ValueError("uuid must be 16 bytes")
            self.buf += v

    def uvarint(self, v: int) -> None:
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        self.uvarint((v << 1) ^ (v >> 63))

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def string(self, v: str) -> None:
        b = v.encode()
        self.int16(len(b))
        self.buf += b

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        b = v.encode()
        self.uvarint(len(b) + 1)
        self.buf += b

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.uvarint(0)
        else:
            self.compact_string(v)

    def bytes_(self, v: bytes | bytearray | memoryview) -> None:
        self.int32(len(v))
        self.buf += v

    def nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self.int32(-1)
        else:
            self.bytes_(v)

    def compact_bytes(self, v: bytes | bytearray | memoryview) -> None:
        self.uvarint(len(v) + 1)
        self.buf += v

    def compact_nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self.uvarint(0)
        else:
            self.compact_bytes(v)

    def array_length(self, n: int) -> None:
        self.int32(n)

    def compact_array_length(self, n: int) -> None:
        self.uvarint(n + 1)

    def records(self, v: bytes | bytearray | memoryview | FileRegion | None, compact: bool) -> None:
        """A records field: bytes are copied in, a FileRegion becomes its own part."""
        if v is None:
            if compact:
                self.uvarint(0)
            else:
                self.int32(-1)
            return
        n = len(v)
        if compact:
            self.uvarint(n + 1)
        else:
            self.int32(n)
        if isinstance(v, FileRegion):
            if n:
                self.parts.append(bytes(self.buf))
                self.parts.append(v)
                self.buf = bytearray()
        else:
            self.buf += v

    def tagged_fields(self, tags: dict[int, bytes] | None) -> None:
        if not tags:
            self.buf.append(0)
            return
        self.uvarint(len(tags))
        for tag in sorted(tags):
            data = tags[tag]
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data

    # -- results -----------------------------------------------------------------------
    def size(self) -> int:
        return len(self.buf) + sum(len(p) for p in self.parts)

    def finish(self) -> list[bytes | bytearray | memoryview | FileRegion]:
        """All parts in order; bytes parts and FileRegion parts alternate as written."""
        out = self.parts + [self.buf] if self.buf else list(self.parts)
        self.parts = []
        self.buf = bytearray()
        return out

    def getvalue(self) -> bytes:
        """Everything as one bytes object (FileRegions are read): for clients and tests."""
        chunks = []
        for p in self.finish():
            chunks.append(p.read() if isinstance(p, FileRegion) else bytes(p))
        return b"".join(chunks)
