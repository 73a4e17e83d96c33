"""Types of the compiled twin built from cython_ext/records.pyx (pure twin:
kafkafast/records/_pure_codec.py)."""
import mmap
from collections.abc import Iterable
from typing import Any

from kafkafast.records.model import BatchHeader, Record

_Buffer = bytes | bytearray | memoryview | mmap.mmap
_Writable = bytearray | memoryview | mmap.mmap

def read_batch_header(buf: _Buffer, pos: int = 0) -> BatchHeader: ...
def batch_crc_ok(buf: _Buffer, pos: int, size: int) -> bool: ...
def validate_batches(buf: _Buffer, max_batch_size: int) -> list[BatchHeader]: ...
def validate_record_stream(chunks: Iterable[_Buffer], count: int, max_bytes: int,
                           timestamps: bool = False) -> int | tuple[int, int, int]: ...
def assign_offsets(buf: _Writable, base_offset: int, leader_epoch: int, log_append_time: int = -1) -> int: ...
def scan_valid_prefix(buf: _Buffer, start_pos: int = 0) -> tuple[int, list[tuple[int, BatchHeader]]]: ...
def scan_follower_batches(
    buf: _Buffer, log_end_offset: int, latest_epoch: int
) -> tuple[int, int, list[tuple[int, int, int, int]], list[tuple[int, ...]], list[tuple[int, int]]]: ...
def decode_varint(buf: _Buffer, pos: int = 0) -> tuple[int, int]: ...
def decode_uvarint(buf: _Buffer, pos: int = 0) -> tuple[int, int]: ...
def encode_varint(n: int) -> bytes: ...
def encode_uvarint(n: int) -> bytes: ...
def decode_records(buf: _Buffer, count: int, base_offset: int, first_timestamp: int) -> list[Record]: ...
def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Iterable[tuple[str | bytes, bytes | bytearray | memoryview | None]] = (),
) -> bytes: ...
def decode_consumer_records(
    buf: _Buffer,
    count: int,
    base_offset: int,
    first_timestamp: int,
    log_append_time: int,
    topic: str,
    partition: int,
    start: int,
    end: int,
    out: list[ConsumerRecord],
) -> int: ...
def append_to_last(
    q: Any, timestamp: int, key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None, headers: Any, future_type: Any,
) -> Any: ...

class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
    ) -> None: ...

class BatchBuilder:
    compression: int
    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    max_size: int | None
    def __init__(
        self,
        compression: int = 0,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        max_size: int | None = None,
    ) -> None: ...
    @property
    def record_count(self) -> int: ...
    @property
    def estimated_size(self) -> int: ...
    def append(
        self,
        timestamp: int,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Iterable[tuple[str | bytes, bytes | bytearray | memoryview | None]] = (),
    ) -> bool: ...
    def build(self) -> bytes: ...
    def reset(self) -> bool: ...
