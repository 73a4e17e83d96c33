"""The LZ4 frame header checksum of legacy (magic 0) compressed messages.

Kafka before 0.10 computed the LZ4 frame's header checksum over the frame magic as well
(KAFKA-3160), and magic-0 readers and writers keep doing so; magic 1 and v2 batches use the
correct LZ4 frame. `fix_lz4_header` rewrites that one byte in either direction; reading
(`legacy.py`) and converting (`convert.py`) both need it.
"""
from __future__ import annotations

from kafkafast.protocol.errors import CorruptMessageError

Buffer = bytes | bytearray | memoryview

LZ4_MAGIC = b"\x04\x22\x4d\x18"

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of `data` (used here only on LZ4 frame descriptors of a few bytes)."""
    n = len(data)
    p = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while p + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[p:p + 4], "little")
                v[i] = (_rotl((v[i] + lane * _P2) & _M, 13) * _P1) & _M
                p += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[p:p + 4], "little") * _P3) & _M, 17) * _P4) & _M
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M, 11) * _P1) & _M
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h


def fix_lz4_header(frame: Buffer, *, broken: bool) -> bytes:
    """`frame` with its header checksum computed the broken pre-0.10 Kafka way (over the
    frame magic too, `broken=True`) or the LZ4-frame way (`broken=False`)."""
    data = bytearray(frame)
    if len(data) < 7 or data[:4] != LZ4_MAGIC:
        raise CorruptMessageError("lz4 data without an LZ4 frame header")
    flg = data[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if hc_pos >= len(data):
        raise CorruptMessageError("truncated LZ4 frame header")
    start = 0 if broken else 4
    data[hc_pos] = (xxh32(bytes(data[start:hc_pos])) >> 8) & 0xFF
    return bytes(data)
