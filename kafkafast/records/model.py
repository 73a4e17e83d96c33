"""Value types of the record layer: batch headers, records, legacy message headers.

These live in their own module (importing nothing from the rest of `kafkafast.records`)
so that both twins of the codec -- the compiled `kafkafast._native.records` and the pure
`kafkafast.records._pure_codec` -- can build them without an import cycle.
The byte layout they describe is documented at the top of `kafkafast/records/batch.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

BATCH_HEADER_SIZE = 61
# batchLength counts the bytes after itself: everything from partitionLeaderEpoch on.
BATCH_LENGTH_OVERHEAD = 12
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - BATCH_LENGTH_OVERHEAD  # 49
# The CRC32C covers attributes .. end of batch.
CRC_START = 21

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_MASK = 0x07

TIMESTAMP_CREATE = 0
TIMESTAMP_LOG_APPEND = 1

ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_TIMESTAMP = -1
NO_SEQUENCE = -1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a v2 record batch, decoded (see `batch.py` for the layout)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + BATCH_LENGTH_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_LOG_APPEND if self.attributes & ATTR_TIMESTAMP_TYPE else TIMESTAMP_CREATE

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record; wraps past 2^31-1 to 0 as Kafka does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


@dataclass(frozen=True, slots=True)
class LegacyHeader:
    """One top-level v0/v1 message of a legacy message set.

    Layout: offset int64, message_size int32, then the message: crc uint32 (CRC32 of the
    rest), magic int8, attributes int8, timestamp int64 (magic 1 only), key bytes (int32
    length, -1 = null), value bytes (int32 length, -1 = null). A compressed message is a
    wrapper whose value is a compressed message set of inner messages.
    """

    offset: int
    size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic >= 1 and self.attributes & ATTR_TIMESTAMP_TYPE:
            return TIMESTAMP_LOG_APPEND
        return TIMESTAMP_CREATE

    @property
    def next_offset(self) -> int:
        return self.offset + 1


@dataclass(slots=True)
class Record:
    """One decoded record; `offset` and `timestamp` are absolute.

    `attributes` is the per-record attributes byte (unused in v2, the message attributes
    for legacy v0/v1 messages).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0
