"""What a broker stored: the record batches in a partition's segment files, read with
kafkafast's own batch reader."""
from __future__ import annotations

from pathlib import Path

from kafkafast.records import iter_record_batches
from kafkafast.records.model import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

# Client codec names -> the attribute bits of a batch compressed with it.
CODEC_IDS = {None: CODEC_NONE, "none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4,
             "zstd": CODEC_ZSTD}


def stored_batches(data_dir: Path, topic: str, partition: int = 0) -> list:
    """(header, records) of every batch in the partition's segment files, in order."""
    out = []
    for seg in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        out += list(iter_record_batches(seg.read_bytes()))
    return out
