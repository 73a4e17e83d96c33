"""A Fetch v12-17 request frame read straight into plain values (no generated objects, one
`struct` read per run of fixed-width fields): what the leader's lean path for a follower's
incremental fetch needs (broker/handlers/fetch.py, `follower_fetch`). The mirror of
`fetch_ask`, which packs the follower's request.

Reads the same fields as `api.decode_request` with the generated `FetchRequest.decode`
(tests/unit/test_fetch_scan.py compares them over v12-17, tagged fields included):

    request header v2: api_key int16, api_version int16, correlation_id int32,
        client_id nullable string (int16 length), tagged fields
    replica_id int32 (v12-14), max_wait_ms int32, min_bytes int32, max_bytes int32,
    isolation_level int8, session_id int32, session_epoch int32,
    topics [compact array]: topic compact_string (v12) | topic_id uuid (v13+),
        partitions [compact array]: partition int32, current_leader_epoch int32,
            fetch_offset int64, last_fetched_epoch int32, log_start_offset int64,
            partition_max_bytes int32, tagged fields (0: replica_directory_id uuid, v17+)
        tagged fields
    forgotten_topics_data [compact array]: topic compact_string (v12) | topic_id uuid (v13+),
        partitions [compact array of int32], tagged fields
    rack_id compact_string
    tagged fields (0: cluster_id; 1: replica_state {replica_id int32, replica_epoch int64,
        tagged fields}, v15+)

`scan_fetch` answers None for anything it does not read the way the generated decoder would
(another API or version, truncated or malformed bytes, a null where none may be, invalid
UTF-8): the caller then takes the general path, whose decoder reports the error.
"""
from __future__ import annotations

import struct

FETCH_KEY = 1
MIN_SCAN_VERSION = 12
MAX_SCAN_VERSION = 17
ZERO_UUID = bytes(16)

_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_HEAD_V12 = struct.Struct(">iiiibii")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session
_HEAD_V15 = struct.Struct(">iiibii")  # the same without replica_id (in replica_state)
_PARTITION = struct.Struct(">iiqiqi")
_REPLICA_STATE = struct.Struct(">iq")
_INT32 = struct.Struct(">i")

# (partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
#  partition_max_bytes, replica_directory_id, unknown tagged fields or None)
ScannedPartition = tuple


class Malformed(Exception):
    """Bytes the scan does not read (never leaves this module)."""


class ScannedFetch:
    """A Fetch request's fields. `topics`: (topic name, topic id, [ScannedPartition]) in request
    order (v12 names, v13+ ids: the other is '' / 16 zero bytes, as the generated decoder
    leaves it); `forgotten`: (topic name, topic id, [partition index])."""

    __slots__ = ("version", "correlation_id", "client_id", "replica_id", "replica_epoch", "max_wait_ms",
                 "min_bytes", "max_bytes", "isolation_level", "session_id", "session_epoch", "topics",
                 "forgotten", "rack_id", "cluster_id")

    def __init__(self) -> None:
        self.replica_epoch = -1
        self.cluster_id: str | None = None


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Malformed("varint too long")


def _text(buf: bytes, pos: int, n: int, end: int) -> str:
    if n < 0 or pos + n > end:
        raise Malformed("string past the end")
    try:
        return str(buf[pos:pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed("invalid utf-8") from exc


def _compact_string(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    n, pos = _uvarint(buf, pos, end)
    if n == 0:
        raise Malformed("null string where not nullable")
    return _text(buf, pos, n - 1, end), pos + n - 1


def _array_length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    n, pos = _uvarint(buf, pos, end)
    if n == 0:
        raise Malformed("null array where not nullable")
    if n - 1 > end - pos:
        raise Malformed("array longer than the bytes left")
    return n - 1, pos


def _tag_list(buf: bytes, pos: int, end: int) -> tuple[list[tuple[int, bytes]], int]:
    """The tagged fields at `pos` as (tag, bytes) in order, a repeated tag as often as it
    comes (the generated decoder reads each occurrence)."""
    count, pos = _uvarint(buf, pos, end)
    if not count:
        return [], pos
    if count > end - pos:
        raise Malformed("tag count longer than the bytes left")
    tags = []
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if pos + size > end:
            raise Malformed("tagged field past the end")
        tags.append((tag, bytes(buf[pos:pos + size])))
        pos += size
    return tags, pos


def _tags(buf: bytes, pos: int, end: int) -> tuple[dict[int, bytes] | None, int]:
    """The tagged fields at `pos` as {tag: bytes} (None when there are none; a repeated tag's
    last bytes, as the generated decoder keeps unknown tags)."""
    tags, pos = _tag_list(buf, pos, end)
    return (dict(tags) if tags else None), pos


def _uuid(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 16 > end:
        raise Malformed("uuid past the end")
    return bytes(buf[pos:pos + 16]), pos + 16


def _topic(buf: bytes, pos: int, end: int, by_name: bool) -> tuple[str, bytes, int]:
    """A topic's name (v12) or id (v13+): (name or '', id or 16 zero bytes, position after)."""
    if by_name:
        name, pos = _compact_string(buf, pos, end)
        return name, ZERO_UUID, pos
    topic_id, pos = _uuid(buf, pos, end)
    return "", topic_id, pos


def scan_fetch(frame: bytes | bytearray | memoryview, followers_incremental: bool = False) -> ScannedFetch | None:
    """The Fetch v12-17 request in `frame` (header and body, no size prefix), or None. With
    `followers_incremental`, also None as soon as the request shows it is not an incremental
    one (session id 0, epoch <= 0) or, up to v14, not a follower's (replica_id < 0)."""
    try:
        return _scan(frame, followers_incremental)
    except (Malformed, struct.error, IndexError):
        return None


def _scan(buf: bytes | bytearray | memoryview, followers_incremental: bool) -> ScannedFetch | None:
    end = len(buf)
    api_key, version, correlation_id, n = _HEADER.unpack_from(buf, 0)
    if api_key != FETCH_KEY or not MIN_SCAN_VERSION <= version <= MAX_SCAN_VERSION:
        return None
    s = ScannedFetch()
    s.version, s.correlation_id = version, correlation_id
    pos = 10
    if n >= 0:
        s.client_id = _text(buf, pos, n, end)
        pos += n
    else:
        s.client_id = None
    if buf[pos] == 0:  # the header's tagged fields (none is read): none, usually
        pos += 1
    else:
        _, pos = _tags(buf, pos, end)
    if version >= 15:
        s.replica_id = -1
        (s.max_wait_ms, s.min_bytes, s.max_bytes, s.isolation_level, s.session_id,
         s.session_epoch) = _HEAD_V15.unpack_from(buf, pos)
        pos += _HEAD_V15.size
    else:
        (s.replica_id, s.max_wait_ms, s.min_bytes, s.max_bytes, s.isolation_level, s.session_id,
         s.session_epoch) = _HEAD_V12.unpack_from(buf, pos)
        pos += _HEAD_V12.size
    if followers_incremental and (s.session_id == 0 or s.session_epoch <= 0 or (version < 15 and s.replica_id < 0)):
        return None
    by_name = version <= 12
    unpack_partition = _PARTITION.unpack_from
    psize = _PARTITION.size
    topics = []
    count, pos = _array_length(buf, pos, end)
    for _ in range(count):
        name, topic_id, pos = _topic(buf, pos, end, by_name)
        parts = []
        nparts = buf[pos] - 1
        if 0 <= nparts < 0x7F and nparts <= end - pos - 1:  # one byte, as a session's requests have
            pos += 1
        else:
            nparts, pos = _array_length(buf, pos, end)
        for _ in range(nparts):
            fields = unpack_partition(buf, pos)
            pos += psize
            if pos < end and buf[pos] == 0:  # no tagged fields (the usual case)
                pos += 1
                parts.append(fields + (ZERO_UUID, None))
                continue
            found, pos = _tag_list(buf, pos, end)
            directory = ZERO_UUID
            tags = None
            for tag, raw in found:
                if tag == 0 and version >= 17:
                    if len(raw) < 16:
                        raise Malformed("replica_directory_id shorter than a uuid")
                    directory = raw[:16]
                else:
                    tags = tags or {}
                    tags[tag] = raw
            parts.append(fields + (directory, tags))
        if buf[pos] == 0:
            pos += 1
        else:
            _, pos = _tags(buf, pos, end)
        topics.append((name, topic_id, parts))
    s.topics = topics
    forgotten = []
    if buf[pos] == 1:  # none (the usual case)
        count = 0
        pos += 1
    else:
        count, pos = _array_length(buf, pos, end)
    for _ in range(count):
        name, topic_id, pos = _topic(buf, pos, end, by_name)
        nparts, pos = _array_length(buf, pos, end)
        if pos + 4 * nparts > end:
            raise Malformed("partitions past the end")
        forgotten.append((name, topic_id, list(struct.unpack_from(f">{nparts}i", buf, pos))))
        pos += 4 * nparts
        _, pos = _tags(buf, pos, end)
    s.forgotten = forgotten
    if buf[pos] == 1:  # no rack (a follower's usual rack_id)
        s.rack_id = ""
        pos += 1
    else:
        s.rack_id, pos = _compact_string(buf, pos, end)
    if buf[pos] != 0:
        found, pos = _tag_list(buf, pos, end)
        for tag, raw in found:
            if tag == 0:
                n, p = _uvarint(raw, 0, len(raw))
                s.cluster_id = None if n == 0 else _text(raw, p, n - 1, len(raw))
            elif tag == 1 and version >= 15:
                s.replica_id, s.replica_epoch = _REPLICA_STATE.unpack_from(raw, 0)
                _tags(raw, _REPLICA_STATE.size, len(raw))
    return s


__all__ = ["MAX_SCAN_VERSION", "MIN_SCAN_VERSION", "ScannedFetch", "scan_fetch"]
