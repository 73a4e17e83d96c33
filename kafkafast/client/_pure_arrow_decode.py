"""Pure-Python twin of `kafkafast._native.arrow_decode` (cython_ext/arrow_decode.pyx):
records of v2 batches appended to Arrow column buffers.

Same class, methods, buffers and errors as the compiled twin; records are parsed by the
pure record codec (`decode_consumer_records`), so both twins accept and reject the same
bytes. Buffers are `array`s and `bytearray`s, handed out by `take()` as they are.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable

from kafkafast.protocol.errors import CorruptMessageError
from kafkafast.records import _pure_codec as _codec

Buffer = bytes | bytearray | memoryview

# Order of the buffers take() hands out (the compiled twin's B_* constants).
(B_OFFSET, B_TIMESTAMP, B_TS_TYPE, B_KEY_OFFSETS, B_KEY_DATA, B_KEY_VALID, B_VALUE_OFFSETS, B_VALUE_DATA,
 B_VALUE_VALID, B_HEADERS, B_HKEY_OFFSETS, B_HKEY_DATA, B_HVALUE_OFFSETS, B_HVALUE_DATA, B_HVALUE_VALID) = range(15)
N_BUFFERS = 15

MAX_COLUMN_BYTES = 2**31 - 1
# Millisecond timestamps that fit in int64 microseconds (timestamp_unit "us").
TS_US_MAX = (2**63 - 1) // 1000


class _Binary:
    """One Arrow binary column: int32 offsets, data, validity bitmap."""

    __slots__ = ("offsets", "data", "valid", "n", "nulls")

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.valid = bytearray()
        self.n = 0
        self.nulls = 0

    def add(self, value: bytes | None) -> None:
        if self.n % 8 == 0:
            self.valid.append(0)
        if value is None:
            self.nulls += 1
        else:
            if len(value) > MAX_COLUMN_BYTES - len(self.data):
                raise OverflowError("an Arrow binary column would exceed 2 GiB; take() the columns sooner")
            self.data += value
            self.valid[self.n >> 3] |= 1 << (self.n & 7)
        self.offsets.append(len(self.data))
        self.n += 1


class ArrowColumns:
    """The Arrow buffers of the records added since the last take()."""

    def __init__(self, include_headers: bool = True, timestamp_unit: str = "ms") -> None:
        if timestamp_unit not in ("ms", "us"):
            raise ValueError(f"timestamp_unit must be 'ms' or 'us', not {timestamp_unit!r}")
        self.include_headers = include_headers
        self.timestamp_unit = timestamp_unit
        self._start()

    def _start(self) -> None:
        self._offsets = array("q")
        self._timestamps = array("q")
        self._ts_types = array("i")
        self._keys = _Binary()
        self._values = _Binary()
        self._headers = array("i", [0])
        self._hkeys = _Binary()
        self._hvalues = _Binary()

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def data_bytes(self) -> int:
        return len(self._keys.data) + len(self._values.data) + len(self._hkeys.data) + len(self._hvalues.data)

    def add_record(self, offset: int, timestamp: int, timestamp_type: int, key: Buffer | None, value: Buffer | None,
                   headers: Iterable[tuple[str | bytes, Buffer | None]]) -> None:
        """Adds one record given as Python objects (legacy v0/v1 entries)."""
        if self.timestamp_unit == "us":
            if not -TS_US_MAX <= timestamp <= TS_US_MAX:
                raise OverflowError(f"timestamp {timestamp} ms of offset {offset} does not fit in int64 microseconds")
            timestamp *= 1000
        encoded = []
        if self.include_headers:
            for k, v in headers:
                hk = k.encode("utf-8") if isinstance(k, str) else bytes(k)
                try:
                    hk.decode("utf-8")
                except UnicodeDecodeError:
                    raise CorruptMessageError("header key is not UTF-8") from None
                encoded.append((hk, None if v is None else bytes(v)))
        for hk, hv in encoded:
            self._hkeys.add(hk)
            self._hvalues.add(hv)
        if self.include_headers:
            self._headers.append(self._hkeys.n)
        self._offsets.append(offset)
        self._timestamps.append(timestamp)
        self._ts_types.append(timestamp_type)
        self._keys.add(None if key is None else bytes(key))
        self._values.add(None if value is None else bytes(value))

    def add_records(self, payload: Buffer, count: int, base_offset: int, first_timestamp: int, log_append_time: int,
                    start: int, end: int) -> int:
        """Adds the records with offsets in [start, end) (end < 0: no upper bound) of one v2
        batch's uncompressed records payload; returns how many."""
        records: list = []
        try:
            _codec.decode_consumer_records(payload, count, base_offset, first_timestamp, log_append_time, "", 0,
                                           start, end, records)
        finally:  # the records before a bad one stay added, as in the compiled twin
            for r in records:
                self.add_record(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
        return len(records)

    def take(self) -> tuple[int, int, int, int, int, tuple]:
        """(records, header entries, key nulls, value nulls, header value nulls, buffers)."""
        k, v, hk, hv = self._keys, self._values, self._hkeys, self._hvalues
        buffers = (self._offsets, self._timestamps, self._ts_types, k.offsets, k.data, k.valid, v.offsets, v.data,
                   v.valid, self._headers, hk.offsets, hk.data, hv.offsets, hv.data, hv.valid)
        result = (len(self), hk.n, k.nulls, v.nulls, hv.nulls, buffers)
        self._start()
        return result


__all__ = ["ArrowColumns", "N_BUFFERS"]
