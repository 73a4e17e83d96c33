"""`kafkafast dump-log`: kafka-dump-log.sh for the files of a (stopped) broker.

Reads segment (`.log`), offset index (`.index`) and time index (`.timeindex`) files
read-only with kafkafast's record and index code; never writes. For a segment: one line
per batch header (offsets, count, producer id/epoch/sequence, leader epoch, timestamps,
codec, position, size, CRC32C check), with --print-data-log one line per record. For an
index: its entries, and with --verify-index-only (or --index-sanity-check) whether each
entry points at the batch that holds its offset. Exit code 1 when a CRC, an index entry or
the file's tail is bad."""
from __future__ import annotations

import argparse
import mmap
import os
import struct
from typing import Any

from kafkafast.cli.common import CommandError, parser_for, print_json
from kafkafast.cli.coordinator_decoders import offsets_record, transaction_log_record
from kafkafast.records.batch import batch_crc_ok, decode_batch, read_batch_header
from kafkafast.records.model import BATCH_HEADER_SIZE

NAME = "dump-log"
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def add_parser(sub: Any) -> None:
    p = parser_for(sub, NAME, "print and check segment and index files of a stopped broker (kafka-dump-log.sh "
                              "flags)", [
        "kafkafast dump-log --files /var/lib/kafkafast/events-0/00000000000000000000.log --print-data-log",
        "kafkafast dump-log --files /var/lib/kafkafast/events-0/00000000000000000000.index --verify-index-only",
    ])
    p.add_argument("--files", required=True, help="comma-separated .log, .index and .timeindex files")
    p.add_argument("--print-data-log", action="store_true", help="print each record (keys, values, headers)")
    p.add_argument("--offsets-decoder", action="store_true",
                   help="decode __consumer_offsets records (implies --print-data-log)")
    p.add_argument("--transaction-log-decoder", action="store_true",
                   help="decode __transaction_state records (implies --print-data-log)")
    p.add_argument("--deep-iteration", action="store_true", help="decode records (implied by --print-data-log)")
    p.add_argument("--verify-index-only", action="store_true", help="check the index against its segment only")
    p.add_argument("--index-sanity-check", action="store_true", help="same as --verify-index-only")
    p.add_argument("--max-bytes", type=int, default=None, help="stop after this many bytes of a segment")
    p.add_argument("--output", choices=("text", "json"), default="text")


class Problems:
    def __init__(self) -> None:
        self.count = 0

    def add(self, out: list[str], line: str) -> None:
        self.count += 1
        out.append(line)


def _open_ro(path: str) -> tuple[memoryview | bytes, Any]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return b"", None
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        return memoryview(mm), mm
    finally:
        os.close(fd)


def _text(b: bytes | None) -> str:
    return "null" if b is None else bytes(b).decode("utf-8", "replace")


def iter_segment(buf: Any, limit: int | None = None) -> Any:
    """(position, BatchHeader or None, error) per batch of a segment's bytes; a batch that
    is cut off or impossible yields (position, None, reason) and ends the walk."""
    n = len(buf) if limit is None else min(len(buf), limit)
    pos = 0
    while pos < n:
        if n - pos < BATCH_HEADER_SIZE:
            yield pos, None, f"{n - pos} bytes at the end are too few for a batch header"
            return
        try:
            header = read_batch_header(buf, pos)
        except Exception as exc:  # noqa: BLE001 - any unreadable header ends the walk
            yield pos, None, f"unreadable batch header: {exc}"
            return
        if header.magic != 2:
            yield pos, None, f"magic {header.magic} (kafkafast writes only v2 batches)"
            return
        if header.batch_length < BATCH_HEADER_SIZE - 12 or header.size > len(buf) - pos:
            yield pos, None, f"batch claims {header.size} bytes, {len(buf) - pos} remain"
            return
        yield pos, header, None
        pos += header.size


def dump_segment(path: str, args: argparse.Namespace, out: list[str], problems: Problems, doc: dict) -> None:
    decoder = (offsets_record if args.offsets_decoder
               else transaction_log_record if args.transaction_log_decoder else None)
    buf, mm = _open_ro(path)
    try:
        base = int(os.path.basename(path).split(".")[0])
        out.append(f"Log starting offset: {base}")
        batches = doc.setdefault("batches", [])
        for pos, h, err in iter_segment(buf, args.max_bytes):
            if h is None:
                problems.add(out, f"Found invalid bytes at position {pos} of {path}: {err}")
                doc["error"] = err
                break
            valid = batch_crc_ok(buf, pos, h.size)
            if not valid:
                problems.count += 1
            ts_kind = "LogAppendTime" if h.timestamp_type == 1 else "CreateTime"
            out.append(
                f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                f"position: {pos} {ts_kind}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
                f"compresscodec: {CODECS.get(h.compression, h.compression)} crc: {h.crc} "
                f"isvalid: {str(valid).lower()}")
            entry = {"base_offset": h.base_offset, "last_offset": h.last_offset, "count": h.records_count,
                     "position": pos, "size": h.size, "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                     "base_sequence": h.base_sequence, "partition_leader_epoch": h.partition_leader_epoch,
                     "max_timestamp": h.max_timestamp, "timestamp_type": ts_kind,
                     "compression": CODECS.get(h.compression, h.compression), "crc": h.crc, "crc_valid": valid}
            batches.append(entry)
            if (args.print_data_log or args.deep_iteration or decoder is not None) and valid:
                _, records = decode_batch(buf, pos, check_crc=False)
                entry["records"] = []
                for i, r in enumerate(records):
                    seq = h.base_sequence + i if h.base_sequence >= 0 else -1
                    line = (f"| offset: {r.offset} {ts_kind}: {r.timestamp} "
                            f"keySize: {-1 if r.key is None else len(r.key)} "
                            f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                            f"headerKeys: [{','.join(k for k, _ in r.headers)}]")
                    if decoder is not None and not h.is_control:
                        key, payload = decoder(r.key, r.value, r.offset)
                        line += f" key: {key}" + (f" payload: {payload}" if payload is not None else "")
                    elif args.print_data_log:
                        line += f" key: {_text(r.key)} payload: {_text(r.value)}"
                    out.append(line)
                    entry["records"].append({"offset": r.offset, "timestamp": r.timestamp,
                                             "key": None if r.key is None else _text(r.key),
                                             "value": None if r.value is None else _text(r.value),
                                             "headers": {k: None if v is None else _text(v) for k, v in r.headers}})
    finally:
        del buf
        if mm is not None:
            mm.close()


def _segment_of(path: str) -> str:
    return os.path.splitext(path)[0] + ".log"


def _batch_index(seg_path: str) -> list[tuple[int, Any]]:
    if not os.path.exists(seg_path):
        raise CommandError(f"{seg_path} (the index's segment) does not exist")
    buf, mm = _open_ro(seg_path)
    try:
        return [(pos, h) for pos, h, _ in iter_segment(buf) if h is not None]
    finally:
        del buf
        if mm is not None:
            mm.close()


def _index_file(path: str, args: argparse.Namespace, doc: dict) -> tuple[int, bytes, list[tuple[int, Any]], bool, list]:
    """(base offset, the index's bytes, its segment's batches, verify only?, doc entries)."""
    base = int(os.path.basename(path).split(".")[0])
    with open(path, "rb") as fh:
        data = fh.read()
    return (base, data, _batch_index(_segment_of(path)), args.verify_index_only or args.index_sanity_check,
            doc.setdefault("entries", []))


def dump_offset_index(path: str, args: argparse.Namespace, out: list[str], problems: Problems, doc: dict) -> None:
    base, data, segment, verify, entries = _index_file(path, args, doc)
    batches = dict(segment)
    last_offset = -1
    for i in range(len(data) // _INDEX_ENTRY.size):
        rel, position = _INDEX_ENTRY.unpack_from(data, i * _INDEX_ENTRY.size)
        if rel == 0 and position == 0 and i > 0:
            break  # preallocated tail of an index that was not trimmed
        offset = base + rel
        entries.append({"offset": offset, "position": position})
        h = batches.get(position)
        if h is None or not h.base_offset <= offset <= h.last_offset:
            found = "no batch starts there" if h is None else f"the batch there holds {h.base_offset}-{h.last_offset}"
            problems.add(out, f"Index mismatch in {path}: offset {offset} at position {position}, but {found}")
        if offset <= last_offset:
            problems.add(out, f"Index offsets go backwards in {path}: {offset} after {last_offset}")
        last_offset = offset
        if not verify:
            out.append(f"offset: {offset} position: {position}")
    if len(data) % _INDEX_ENTRY.size:
        problems.add(out, f"{path}: size {len(data)} is not a multiple of {_INDEX_ENTRY.size}")


def dump_time_index(path: str, args: argparse.Namespace, out: list[str], problems: Problems, doc: dict) -> None:
    base, data, batches, verify, entries = _index_file(path, args, doc)
    end = batches[-1][1].last_offset if batches else base - 1
    last_ts = -1
    for i in range(len(data) // _TIME_ENTRY.size):
        ts, rel = _TIME_ENTRY.unpack_from(data, i * _TIME_ENTRY.size)
        if ts == 0 and rel == 0 and i > 0:
            break
        offset = base + rel
        entries.append({"timestamp": ts, "offset": offset})
        if ts < last_ts:
            problems.add(out, f"Time index timestamps go backwards in {path}: {ts} after {last_ts}")
        if offset > end:
            problems.add(out, f"Time index entry in {path} points past the segment's last offset {end}: {offset}")
        last_ts = ts
        if not verify:
            out.append(f"timestamp: {ts} offset: {offset}")


def run(args: argparse.Namespace) -> int:
    problems = Problems()
    docs = []
    for path in [f.strip() for f in args.files.split(",") if f.strip()]:
        out: list[str] = [f"Dumping {path}"]
        doc: dict = {"file": path}
        before = problems.count
        if not os.path.isfile(path):
            raise CommandError(f"{path} does not exist")
        if path.endswith(".log"):
            if args.verify_index_only or args.index_sanity_check:
                out.append("(--verify-index-only: segment files are checked through their indexes)")
            else:
                dump_segment(path, args, out, problems, doc)
        elif path.endswith(".index"):
            dump_offset_index(path, args, out, problems, doc)
        elif path.endswith(".timeindex"):
            dump_time_index(path, args, out, problems, doc)
        else:
            raise CommandError(f"{path}: not a .log, .index or .timeindex file")
        if (args.verify_index_only or args.index_sanity_check) and not path.endswith(".log"):
            out.append(f"{path} {'passed' if problems.count == before else 'failed'} the index check")
        docs.append(doc)
        if args.output == "text":
            print("\n".join(out))
    if args.output == "json":
        print_json({"files": docs, "problems": problems.count})
    return 1 if problems.count else 0
