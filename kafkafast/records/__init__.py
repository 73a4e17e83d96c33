"""Kafka record batches (v2, and legacy v0/v1 message sets for reading) and compression.

The batch grammar is written at the top of `kafkafast/records/batch.py`; legacy message
sets at the top of `legacy.py`; codec wire formats at the top of `compression.py`.
Hot paths run in the compiled twin `kafkafast._native.records` when it is built.
"""
from kafkafast.records.batch import (
    BatchBuilder,
    assign_offsets,
    batch_crc_ok,
    crc32c,
    decode_batch,
    decode_uvarint,
    decode_varint,
    encode_batch,
    encode_uvarint,
    encode_varint,
    iter_record_batches,
    read_batch_header,
    scan_valid_prefix,
    validate_batches,
    validate_compressed_records,
    validate_record_stream,
)
from kafkafast.records.compression import (
    MAX_DECOMPRESSED_SIZE,
    DecompressedSizeError,
    compress,
    decompress,
    iter_decompressed,
)
from kafkafast.records.model import (
    BATCH_HEADER_SIZE,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    TIMESTAMP_CREATE,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    LegacyHeader,
    Record,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "CODEC_NONE",
    "CODEC_GZIP",
    "CODEC_SNAPPY",
    "CODEC_LZ4",
    "CODEC_ZSTD",
    "TIMESTAMP_CREATE",
    "TIMESTAMP_LOG_APPEND",
    "MAX_DECOMPRESSED_SIZE",
    "BatchHeader",
    "LegacyHeader",
    "Record",
    "BatchBuilder",
    "read_batch_header",
    "batch_crc_ok",
    "validate_batches",
    "validate_compressed_records",
    "validate_record_stream",
    "iter_decompressed",
    "DecompressedSizeError",
    "assign_offsets",
    "scan_valid_prefix",
    "encode_varint",
    "decode_varint",
    "encode_uvarint",
    "decode_uvarint",
    "compress",
    "decompress",
    "decode_batch",
    "iter_record_batches",
    "encode_batch",
    "crc32c",
]
