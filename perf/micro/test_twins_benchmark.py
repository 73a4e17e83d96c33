"""Micro benchmarks: compiled twin vs pure twin on the broker's hot paths.

Run explicitly (not part of the normal suite):

    pytest perf/micro/test_twins_benchmark.py --benchmark-group-by=func

* produce path: validate_batches + assign_offsets over a 1 MiB produce payload of 1 KiB
  records (16 uncompressed batches of 64 records);
* varint decoding of 10,000 mixed-size varints;
* offset index search over a 4 MiB index (524,288 entries), 1,000 lookups.
"""
from __future__ import annotations

import random
import struct
from types import ModuleType

import pytest

from kafkafast import native
from kafkafast.records import encode_batch


def _twin(name: str, kind: str) -> ModuleType:
    if kind == "pure":
        return native.load_pure(name)
    try:
        return native.load_compiled(name)
    except ImportError:
        pytest.skip("compiled twin not built")


@pytest.fixture(scope="module")
def produce_payload() -> bytes:
    value = bytes(range(256)) * 4  # 1 KiB
    batch = encode_batch([(1_700_000_000_000 + i, b"key-%04d" % i, value, []) for i in range(64)])
    payload = batch * 16
    assert 1_000_000 < len(payload) < 1_200_000
    return payload


@pytest.mark.parametrize("kind", ["cython", "pure"])
def test_validate_and_assign_offsets_1mib(benchmark, produce_payload: bytes, kind: str) -> None:  # type: ignore[no-untyped-def]
    codec = _twin("records", kind)
    buf = bytearray(produce_payload)

    def produce() -> int:
        codec.validate_batches(buf, 1 << 21)
        return codec.assign_offsets(buf, 1000, 5)

    assert benchmark(produce) == 1000 + 16 * 64


@pytest.mark.parametrize("kind", ["cython", "pure"])
def test_decode_10k_varints(benchmark, kind: str) -> None:  # type: ignore[no-untyped-def]
    codec = _twin("records", kind)
    rng = random.Random(7)
    values = [rng.choice([rng.randint(-64, 63), rng.randint(-(2**31), 2**31), rng.randint(-(2**63), 2**63 - 1)]) for _ in range(10_000)]
    buf = b"".join(codec.encode_varint(v) for v in values)
    decode = codec.decode_varint

    def run() -> int:
        pos = 0
        total = 0
        while pos < len(buf):
            v, pos = decode(buf, pos)
            total += 1
        return total

    assert benchmark(run) == 10_000


@pytest.mark.parametrize("kind", ["cython", "pure"])
def test_offset_index_1000_lookups(benchmark, kind: str) -> None:  # type: ignore[no-untyped-def]
    search = _twin("index_search", kind)
    n = 524_288
    buf = b"".join(struct.pack(">ii", i * 3, i * 4096) for i in range(n))
    rng = random.Random(3)
    targets = [rng.randrange(n * 3) for _ in range(1000)]

    def run() -> int:
        lookup = search.offset_index_lookup
        return sum(lookup(buf, n, t) for t in targets)

    assert benchmark(run) > 0
