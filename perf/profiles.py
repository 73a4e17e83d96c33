"""Benchmark profiles: what `python -m perf.run --profile NAME` measures.

`full` is the committed run (about 10-15 minutes on the 2-core reference machine);
`tiny` proves the harness works in CI in seconds and asserts no speed.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Profile:
    name: str
    sizes: tuple[int, ...]
    partitions: tuple[int, ...]
    acks: tuple[str, ...]
    warmup_s: float
    duration_s: float
    repeats: int
    producers: int  # load processes per produce run
    extra_produce: tuple[tuple[int, int, str, str], ...] = ()  # (size, partitions, acks, compression)
    consume_sizes: tuple[int, ...] = (1024,)
    consume_partitions: int = 16
    consume_bytes: int = 256 << 20  # preloaded per consume run
    consumers: int = 1
    latency_size: int = 1024
    latency_partitions: int = 16
    latency_fractions: tuple[float, ...] = (0.1, 0.5, 0.8)
    latency_duration_s: float = 5.0
    latency_linger_ms: int = 5  # as in the throughput runs that set the maximum
    latency_repeats: int = 1  # runs per (rate, broker), alternating brokers; the row holds their medians
    ceiling_bytes: int = 512 << 20
    workers: int = 0  # kafkafast workers; 0 = number of CPUs
    settings: dict = field(default_factory=dict)
    skip: tuple[str, ...] = ()  # phases this profile leaves out (as --skip)


PROFILES = {
    "full": Profile(
        name="full", sizes=(100, 1024, 16384, 102400), partitions=(1, 16), acks=("1", "all"),
        warmup_s=0.5, duration_s=2.5, repeats=3, producers=2,
        extra_produce=((1024, 16, "0", "none"), (1024, 16, "1", "lz4")),
        consume_sizes=(1024, 102400), consume_bytes=256 << 20, consumers=2,
    ),
    "quick": Profile(  # the headline cases only, for development (about 1-2 minutes)
        name="quick", sizes=(1024,), partitions=(16,), acks=("1",), warmup_s=1.0, duration_s=2.0, repeats=1,
        producers=2, consume_sizes=(1024, 102400), consume_bytes=128 << 20, consumers=2, latency_fractions=(0.5,),
        latency_duration_s=2.0, ceiling_bytes=128 << 20,
    ),
    "issue17": Profile(  # issue 17's rows only: 1 KiB x 16 acks=1 throughput and CPU-s/GB, latency at 10/50/80%
        name="issue17", sizes=(1024,), partitions=(16,), acks=("1",), warmup_s=1.0, duration_s=3.0, repeats=5,
        producers=2, latency_fractions=(0.1, 0.5, 0.8), latency_duration_s=4.0, latency_repeats=3, workers=2,
        skip=("ceilings", "consume"),
    ),
    "tiny": Profile(
        name="tiny", sizes=(1024,), partitions=(1,), acks=("1",), warmup_s=0.2, duration_s=0.5,
        repeats=1, producers=1, consume_sizes=(1024,), consume_partitions=2, consume_bytes=2 << 20,
        latency_fractions=(0.1,), latency_partitions=2, latency_duration_s=0.5, ceiling_bytes=8 << 20,
    ),
}
