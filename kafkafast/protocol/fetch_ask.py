"""A replica follower's Fetch v12 request body, packed straight from its fetch parameters (no
generated objects): the same bytes as the generated `FetchRequest.encode` at v12 with no
cluster_id and no unknown tagged fields.

    replica_id int32, max_wait_ms int32, min_bytes int32, max_bytes int32, isolation_level int8,
    session_id int32, session_epoch int32,
    topics [compact array]
        topic compact_string
        partitions [compact array]
            partition int32, current_leader_epoch int32, fetch_offset int64,
            last_fetched_epoch int32, log_start_offset int64, partition_max_bytes int32,
            tagged fields
        tagged fields
    forgotten_topics_data [compact array]
        topic compact_string, partitions [compact array of int32], tagged fields
    rack_id compact_string
    tagged fields

`FetchAsk` carries the body to `BrokerConnection.send_frame`, which writes the request header
before it as for any request.
"""
from __future__ import annotations

import struct

from kafkafast.protocol._generated.fetch import FetchRequest

FETCH_ASK_VERSION = 12
_HEAD = struct.Struct(">iiiibii")
# partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
# partition_max_bytes, and the empty tagged fields (one zero byte)
PARTITION = struct.Struct(">iiqiqiB")
_INT32 = struct.Struct(">i")

# (partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes)
Params = tuple[int, int, int, int, int, int]


_SMALL = [bytes([n]) for n in range(128)]


def _uvarint(v: int) -> bytes:
    if v < 128:
        return _SMALL[v]
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_NAMES: dict[str, bytes] = {}  # topic names as compact strings (a broker has a bounded set of topics)


def _compact_string(s: str) -> bytes:
    got = _NAMES.get(s)
    if got is None:
        b = s.encode()
        got = _uvarint(len(b) + 1) + b
        if len(_NAMES) < 10_000:
            _NAMES[s] = got
    return got


class FetchAsk:
    """An encoded Fetch v12 request body, sendable as a request (`API_KEY`, `encode`)."""

    API_KEY = FetchRequest.API_KEY
    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body

    def encode(self, w, version: int) -> None:
        if version != FETCH_ASK_VERSION:
            raise ValueError(f"FetchAsk is a v{FETCH_ASK_VERSION} body, not v{version}")
        w.raw(self.body)


def encode_fetch_ask(replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int,
                     session_id: int, session_epoch: int, topics: dict[str, list[Params]],
                     forgotten: dict[str, list[int]], rack_id: str = "") -> FetchAsk:
    """`topics`: each topic's partitions' fetch parameters, in request order; `forgotten`: the
    partitions each topic drops from the session."""
    pack = PARTITION.pack
    parts = [_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch),
             _uvarint(len(topics) + 1)]
    for topic, ps in topics.items():
        parts.append(_compact_string(topic))
        parts.append(_uvarint(len(ps) + 1))
        parts.extend([pack(*p, 0) for p in ps])
        parts.append(b"\x00")
    parts.append(_uvarint(len(forgotten) + 1))
    for topic, ids in forgotten.items():
        parts.append(_compact_string(topic))
        parts.append(_uvarint(len(ids) + 1))
        parts.extend([_INT32.pack(i) for i in ids])
        parts.append(b"\x00")
    parts.append(_compact_string(rack_id))
    parts.append(b"\x00")
    return FetchAsk(b"".join(parts))


__all__ = ["FETCH_ASK_VERSION", "FetchAsk", "PARTITION", "Params", "encode_fetch_ask"]
