"""Kafka record batches, magic v2: validation, offset assignment, recovery scan, decode, build.

The v2 batch grammar (all integers big-endian; "varint" is zigzag LEB128 as in protobuf,
"varlong" the same for int64):

    RecordBatch =>                             byte offset
      baseOffset            int64              0
      batchLength           int32              8    bytes after this field: size - 12
      partitionLeaderEpoch  int32              12
      magic                 int8               16   2
      crc                   uint32             17   CRC32C of attributes .. end of batch
      attributes            int16              21   bits 0-2 codec (0 none, 1 gzip, 2 snappy,
                                                    3 lz4, 4 zstd), bit 3 timestamp type
                                                    (1 = LogAppendTime), bit 4 transactional,
                                                    bit 5 control, bit 6 delete horizon set
      lastOffsetDelta       int32              23   records_count - 1 as written by producers
      baseTimestamp         int64              27   ("first_timestamp")
      maxTimestamp          int64              35
      producerId            int64              43
      producerEpoch         int16              51
      baseSequence          int32              53
      recordsCount          int32              57
      records               [Record]           61   compressed as one blob when codec != 0

    Record =>
      length                varint             bytes of the record after this field
      attributes            int8               unused (0)
      timestampDelta        varlong            relative to baseTimestamp
      offsetDelta           varint             relative to baseOffset
      keyLength             varint             -1 = null key
      key                   bytes
      valueLength           varint             -1 = null value
      value                 bytes
      headerCount           varint
      Header =>
        headerKeyLength     varint
        headerKey           UTF-8 string
        headerValueLength   varint             -1 = null value
        value               bytes

The CRC does not cover baseOffset, batchLength or partitionLeaderEpoch, which is why the
broker can assign offsets and the leader epoch in place without recomputing it; switching
a batch to LogAppendTime (attributes and maxTimestamp change) does require a new CRC.

On the broker, batches stay opaque bytes: `validate_batches` checks what a producer sent,
`validate_compressed_records` decompresses compressed batches (streaming, never holding
more than a piece) to check their records as Kafka's LogValidator does, while the stored
bytes stay exactly as the producer compressed them; `assign_offsets` stamps it in place, `scan_valid_prefix` recovers segment files. Records
are only decoded (`decode_batch`, `iter_record_batches`) where a feature needs them.
Legacy v0/v1 message sets are read by `kafkafast.records.legacy`.

The hot functions come from the compiled twin `kafkafast._native.records` or its pure
twin `kafkafast.records._pure_codec`, chosen once by `kafkafast.native.load("records")`.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from crc32c import crc32c as _crc32c

from kafkafast import native
from kafkafast.protocol.errors import CorruptMessageError, KafkaError, MessageTooLargeError
from kafkafast.records.compression import CODEC_NAMES, DecompressedSizeError, decompress, iter_decompressed
from kafkafast.records.legacy import decode_legacy_entry
from kafkafast.records.model import (
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_OVERHEAD,
    CODEC_NONE,
    CRC_START,
    NO_TIMESTAMP,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    LegacyHeader,
    Record,
)

Buffer = bytes | bytearray | memoryview
HeaderList = Iterable[tuple[str, bytes | None]]

_codec = native.load("records")

read_batch_header = _codec.read_batch_header
batch_crc_ok = _codec.batch_crc_ok
validate_batches = _codec.validate_batches
assign_offsets = _codec.assign_offsets
scan_valid_prefix = _codec.scan_valid_prefix
scan_follower_batches = _codec.scan_follower_batches
encode_varint = _codec.encode_varint
decode_varint = _codec.decode_varint
encode_uvarint = _codec.encode_uvarint
decode_uvarint = _codec.decode_uvarint
validate_record_stream = _codec.validate_record_stream


def crc32c(data: Buffer) -> int:
    """CRC32C (Castagnoli) of `data`, the checksum of v2 batches."""
    return _crc32c(data)


def validate_compressed_records(buf: Buffer, max_decompressed: int, max_batch_size: int | None = None,
                                timestamps: list[tuple[int, BatchHeader, int, int]] | None = None) -> int:
    """Check the records inside every batch of a producer's record set: a compressed
    payload decompresses (whole, nothing after it), to at most `max_decompressed` bytes, and
    every payload holds exactly recordsCount well-formed records with offset deltas 0, 1,
    2, ... (`validate_record_stream`). Returns the decompressed bytes checked. With a
    `timestamps` list, appends (position, header, smallest record timestamp, largest record
    timestamp) for each batch checked (the records' own timestamps: firstTimestamp plus
    their deltas, whatever the header's maxTimestamp says).

    Raises CorruptMessageError, or MessageTooLargeError past the bound. The walk stops
    quietly at the first batch whose header `validate_batches` rejects (it says why; a
    batch over `max_batch_size` is one, so it is never decompressed); the CRC is its job
    too, this runs on any bytes safely."""
    mv = memoryview(buf)
    n = len(mv)
    pos = total = 0
    while n - pos >= BATCH_HEADER_SIZE:
        try:
            header = read_batch_header(mv, pos)
        except KafkaError:
            return total
        size = header.size
        if (size > n - pos or (max_batch_size is not None and size > max_batch_size)
                or header.records_count <= 0 or header.last_offset_delta != header.records_count - 1):
            return total
        want = timestamps is not None
        if header.compression == CODEC_NONE:  # the records are checked as they are, as Kafka's
            try:                                 # LogValidator walks an uncompressed batch too
                walked = validate_record_stream((mv[pos + BATCH_HEADER_SIZE : pos + size],), header.records_count,
                                                size, want)
            except CorruptMessageError as exc:
                raise CorruptMessageError(f"batch at {pos}: {exc.message}") from None
        else:
            try:
                walked = validate_record_stream(
                    iter_decompressed(header.compression, mv[pos + BATCH_HEADER_SIZE : pos + size], max_decompressed),
                    header.records_count, max_decompressed, want)
                total += walked[0] if want else walked
            except (DecompressedSizeError, MessageTooLargeError):
                raise MessageTooLargeError(
                    f"batch at {pos}: records decompress to more than {max_decompressed} bytes") from None
            except CorruptMessageError as exc:
                raise CorruptMessageError(f"batch at {pos}: {exc.message}") from None
            except KafkaError:  # a codec number validate_batches refuses
                return total
        if timestamps is not None:
            _, lowest, highest = walked
            timestamps.append((pos, header, header.first_timestamp + lowest, header.first_timestamp + highest))
        pos += size
    return total


_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35
_CRC_AT = 17
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


def set_create_time_max_timestamps(buf: bytearray | memoryview,
                                   timestamps: list[tuple[int, BatchHeader, int, int]]) -> int:
    """What Kafka's LogValidator makes of each batch a producer sends to a CreateTime topic:
    its maxTimestamp the largest of its records' timestamps (NO_TIMESTAMP at least) and its
    timestamp type CreateTime. `timestamps` is what `validate_compressed_records` found.
    A batch whose header says otherwise (a client that leaves maxTimestamp at -1, or sets
    the LogAppendTime bit) is rewritten in `buf`, which must be writable, and its CRC computed
    again, but only when its CRC held: a corrupt batch stays as it came, for the append to
    refuse. Returns how many batches were rewritten."""
    mv = memoryview(buf)
    rewritten = 0
    for pos, header, _lowest, highest in timestamps:
        want = max(highest, NO_TIMESTAMP)
        if header.max_timestamp == want and not header.attributes & ATTR_TIMESTAMP_TYPE:
            continue
        size = header.size
        if not batch_crc_ok(mv, pos, size):
            continue
        _I16.pack_into(mv, pos + _ATTRIBUTES_AT, header.attributes & ~ATTR_TIMESTAMP_TYPE)
        _I64.pack_into(mv, pos + _MAX_TIMESTAMP_AT, want)
        _U32.pack_into(mv, pos + _CRC_AT, _crc32c(mv[pos + CRC_START:pos + size]))
        rewritten += 1
    return rewritten


# A topic's compression.type -> the codec its batches are stored with (None: the producer's).
TOPIC_CODECS = {"producer": None, "uncompressed": CODEC_NONE,
                **{name: codec for codec, name in CODEC_NAMES.items() if codec != CODEC_NONE}}


def recompressed(buf: Buffer, timestamps: list[tuple[int, BatchHeader, int, int]], codec: int) -> bytearray | None:
    """The record set with every batch not compressed with `codec` rebuilt with it, as Kafka's
    LogValidator rebuilds a producer's batch when the topic's compression.type differs: the
    same records (keys, values, headers, timestamps) and the same producer id, epoch, base
    sequence, transactional and control flags. None when every batch already is. `timestamps` is what
    `validate_compressed_records` found (so each payload is known to decompress within its
    bound); the batches must have passed `validate_batches` (their CRCs held)."""
    if all(header.compression == codec for _, header, _, _ in timestamps):
        return None
    out = bytearray()
    mv = memoryview(buf)
    for pos, header, _, _ in timestamps:
        if header.compression == codec:
            out += mv[pos:pos + header.size]
            continue
        _header, records = decode_batch(mv, pos, check_crc=False)
        out += encode_batch([(r.timestamp, r.key, r.value, r.headers) for r in records], codec,
                            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                            base_sequence=header.base_sequence, is_transactional=header.is_transactional,
                            is_control=header.is_control, partition_leader_epoch=header.partition_leader_epoch)
    return out


def decode_batch(buf: Buffer, pos: int = 0, *, check_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """The v2 batch at `pos` and its records (decompressed; offsets and timestamps absolute).

    Control batches return their records too; callers skip them. With LogAppendTime every
    record's timestamp is the batch's maxTimestamp, as Kafka consumers report it.
    """
    header = read_batch_header(buf, pos)
    mv = memoryview(buf)
    size = header.size
    if size > len(mv) - pos:
        raise CorruptMessageError(f"batch at {pos} claims {size} bytes, {len(mv) - pos} present")
    if check_crc and not batch_crc_ok(mv, pos, size):
        raise CorruptMessageError(f"batch at {pos}: CRC32C mismatch")
    payload: Buffer = mv[pos + BATCH_HEADER_SIZE : pos + size]
    if header.compression != CODEC_NONE:
        payload = decompress(header.compression, payload)
    records = _codec.decode_records(payload, header.records_count, header.base_offset, header.first_timestamp)
    if header.timestamp_type == TIMESTAMP_LOG_APPEND:
        for record in records:
            record.timestamp = header.max_timestamp
    return header, records


_ENTRY_LENGTH = struct.Struct(">i")


def iter_entries(buf: Buffer) -> Iterator[tuple[int, int, int]]:
    """(position, size, magic) of each complete entry of a fetched record set, in order:
    v2 batches and legacy v0/v1 entries share the offset and length fields, and the magic
    byte (offset 16) tells them apart. A partial entry at the end ends the walk (brokers
    truncate the last batch of a fetch response to max_bytes); a negative length raises."""
    n = len(buf)
    pos = 0
    while n - pos >= 17:
        length = _ENTRY_LENGTH.unpack_from(buf, pos + 8)[0]
        if length < 0:
            raise CorruptMessageError(f"negative entry length {length} at {pos}")
        size = length + BATCH_LENGTH_OVERHEAD
        if size > n - pos:
            return
        yield pos, size, buf[pos + 16]
        pos += size


def iter_record_batches(
    buf: Buffer, *, check_crc: bool = True
) -> Iterator[tuple[BatchHeader | LegacyHeader, list[Record]]]:
    """Batches of a fetched record set (see `iter_entries`): v2 batches and legacy v0/v1
    entries, in order."""
    mv = memoryview(buf)
    for pos, _size, magic in iter_entries(mv):
        if magic == 2:
            header, records = decode_batch(mv, pos, check_crc=check_crc)
            yield header, records
        elif magic in (0, 1):
            legacy_header, records = decode_legacy_entry(mv, pos, check_crc=check_crc)
            yield legacy_header, records
        else:
            raise CorruptMessageError(f"unknown magic {magic} at {pos}")


# Accumulates records and builds one v2 batch; the compiled twin appends each record into a
# C buffer (one call per record), the header and CRC are written by build().
BatchBuilder = _codec.BatchBuilder
# The client's record type, and the decoder that makes them straight from batch bytes.
ConsumerRecord = _codec.ConsumerRecord
decode_consumer_records = _codec.decode_consumer_records
append_to_last = _codec.append_to_last


def encode_batch(
    records: Sequence[tuple[int, Buffer | None, Buffer | None, HeaderList]]
    | Iterable[tuple[int, Buffer | None, Buffer | None, HeaderList]],
    compression: int = CODEC_NONE,
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One v2 batch holding `records`, each (timestamp, key, value, headers)."""
    builder = BatchBuilder(
        compression,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
    )
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    return builder.build()
