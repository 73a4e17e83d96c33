"""The client's decoding of fetched record sets: offsets from `start`, control batches
skipped, a partial last batch ignored, the next fetch offset read from batch headers alone
(`fetched_next_offset`, used to send the next Fetch before decoding) agreeing with the full
decode, and corruption reported with the records before it kept."""
from __future__ import annotations

import pytest

from kafkafast.client.records import decode_fetched, fetched_next_offset
from kafkafast.protocol.errors import CorruptMessageError
from kafkafast.records import CODEC_GZIP, CODEC_LZ4, BatchBuilder


def _batch(base: int, values: list[bytes], *, codec: int = 0, control: bool = False) -> bytes:
    b = BatchBuilder(codec, base_offset=base, is_control=control)
    for v in values:
        b.append(1_700_000_000_000, None, v)
    return b.build()


def _record_set() -> bytes:
    return (_batch(0, [b"a", b"b", b"c"])
            # a transaction marker (control record: key version 0, type 1 = COMMIT)
            + _batch(3, [b"\x00\x00\x00\x00\x00\x00"], control=True)
            + _batch(4, [b"d", b"e"], codec=CODEC_GZIP)
            + _batch(6, [b"f"], codec=CODEC_LZ4))


def test_control_batches_are_skipped_and_offsets_continue_past_them() -> None:
    records, next_offset = decode_fetched(_record_set(), "t", 0, 0)
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b"), (2, b"c"), (4, b"d"), (5, b"e"),
                                                      (6, b"f")]
    assert next_offset == 7 == fetched_next_offset(_record_set(), 0)


def test_records_before_start_are_dropped_and_a_partial_last_batch_ignored() -> None:
    data = _record_set()
    cut = data[:-5]  # the broker truncated the last batch to max bytes
    records, next_offset = decode_fetched(cut, "t", 0, 1)
    assert [r.offset for r in records] == [1, 2, 4, 5]
    assert next_offset == 6 == fetched_next_offset(cut, 1)
    assert fetched_next_offset(b"", 9) == 9 and fetched_next_offset(None, 9) == 9
    assert fetched_next_offset(data[:30], 4) == 4  # not even one whole batch


def test_corrupt_batch_keeps_the_records_before_it_and_names_its_offset() -> None:
    data = bytearray(_record_set())
    data[-3] ^= 0xFF  # inside the last batch (offset 6)
    out: list = []
    with pytest.raises(CorruptMessageError, match="t-0: batch at offset 6"):
        decode_fetched(bytes(data), "t", 0, 0, out=out)
    assert [r.offset for r in out] == [0, 1, 2, 4, 5]
    assert fetched_next_offset(bytes(data), 0) == 7  # headers only: the decode is what checks
