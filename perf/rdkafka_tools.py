"""librdkafka's `rdkafka_performance`, built from source for the benchmarks (no prebuilt
binaries), and a runner that parses what it prints.

    python -m perf.rdkafka_tools [--rdkafka-src DIR]      # build (or find) it; prints its path

Source: `--rdkafka-src DIR` (a librdkafka source tree), else Debian's source package of
librdkafka (`apt-get source --download-only librdkafka`, through a deb-src entry this adds as
/etc/apt/sources.list.d/kafkafast-src.sources if apt has none). The build (`./configure` with
the optional dependencies this machine lacks switched off, `make -C src`, `make -C examples
rdkafka_performance`) runs in a copy under ~/.cache/kafkafast-perf/ and the binary is kept
there, so a second run reuses it.

Producer runs use `-l -A FILE`: every payload starts with its send time and the delivery
report subtracts it from the time of the acknowledgement, so FILE holds each message's
produce->ack latency in microseconds (percentiles are computed from it here).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("KAFKAFAST_PERF_CACHE", Path.home() / ".cache" / "kafkafast-perf"))
DEB_SRC = Path("/etc/apt/sources.list.d/kafkafast-src.sources")
DEB_SRC_TEXT = """Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
# optional features whose libraries are not installed here (zlib and OpenSSL are)
CONFIGURE_FLAGS = ["--no-download", "--disable-zstd", "--disable-lz4-ext", "--disable-gssapi", "--disable-curl"]
SUMMARY = re.compile(
    r"% (?P<msgs>\d+) messages produced \((?P<bytes>\d+) bytes\), (?P<delivered>\d+) delivered "
    r"\(offset -?\d+, (?P<failed>\d+) failed\) in (?P<ms>\d+)ms: (?P<msgs_per_s>\d+) msgs/s and "
    r"(?P<mb_per_s>[\d.]+) MB/s, (?P<produce_failures>\d+) produce failures, (?P<in_queue>\d+) in queue")


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    print(f"rdkafka_tools: {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, timeout=1800)


def debian_source() -> Path:
    """The unpacked librdkafka source of Debian's package (downloaded once into the cache)."""
    src_dir = CACHE / "src"
    found = sorted(src_dir.glob("librdkafka-*/configure"))
    if found:
        return found[-1].parent
    src_dir.mkdir(parents=True, exist_ok=True)
    if not sorted(src_dir.glob("librdkafka_*.orig.tar.*")):
        if not DEB_SRC.exists():
            DEB_SRC.write_text(DEB_SRC_TEXT)
        _run(["apt-get", "update", "-q"])
        _run(["apt-get", "source", "--download-only", "librdkafka"], cwd=src_dir)
    tarball = sorted(src_dir.glob("librdkafka_*.orig.tar.*"))[-1]
    with tarfile.open(tarball) as tf:
        tf.extractall(src_dir, filter="data")
    return sorted(src_dir.glob("librdkafka-*/configure"))[-1].parent


def describe_source(src: Path | None = None) -> str:
    """Where the build's source came from, for the results."""
    if src:
        return f"source tree {Path(src).resolve()}"
    return f"Debian's source package, {debian_source().name}"


def setup(src: Path | None = None) -> Path:
    """The path of a built `rdkafka_performance` (built on first use, then cached)."""
    src = Path(src).resolve() if src else debian_source()
    key = hashlib.sha1(str(src).encode()).hexdigest()[:10]
    binary = CACHE / f"rdkafka_performance-{src.name}-{key}"
    if binary.exists():
        return binary
    build = CACHE / f"build-{src.name}-{key}"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(src, build, symlinks=True)
    _run(["./configure", *CONFIGURE_FLAGS], cwd=build)
    _run(["make", "-C", "src", "-j2", "librdkafka.a"], cwd=build)
    _run(["make", "-C", "examples", "rdkafka_performance"], cwd=build)
    shutil.copy2(build / "examples" / "rdkafka_performance", binary)
    shutil.rmtree(build, ignore_errors=True)
    return binary


def parse_summary(text: str) -> dict:
    """The last producer summary line of rdkafka_performance's output, as numbers."""
    found = list(SUMMARY.finditer(text))
    if not found:
        raise ValueError(f"no producer summary in rdkafka_performance output: {text[-500:]!r}")
    m = found[-1]
    out = {k: int(v) for k, v in m.groupdict().items() if k != "mb_per_s"}
    out["mb_per_s"] = float(m["mb_per_s"])
    return out


def percentiles(latencies_us: list[int]) -> dict:
    """p50/p99/max in ms of per-message latencies given in microseconds."""
    if not latencies_us:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan"), "samples": 0}
    s = sorted(latencies_us)

    def pct(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))] / 1000.0

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": s[-1] / 1000.0,
            "mean_ms": statistics.fmean(s) / 1000.0, "samples": len(s)}


def produce(binary: Path, bootstrap: str, topic: str, *, size: int, acks: str, count: int,
            rate: float = 0.0, skip: int = 0) -> dict:
    """One `rdkafka_performance -P` run of `count` messages (at `rate` msg/s if given): its
    summary, and produce->ack latency percentiles of every message after the first `skip`
    (the warm-up: connections and metadata)."""
    with tempfile.TemporaryDirectory(prefix="rdkperf-") as tmp:
        lat_file = Path(tmp) / "latency"
        cmd = [str(binary), "-P", "-t", topic, "-b", bootstrap, "-s", str(size), "-c", str(count),
               "-a", "-1" if acks == "all" else str(acks), "-l", "-A", str(lat_file), "-i", "60000",
               "-X", "linger.ms=5", "-X", f"batch.size={1 << 20}", "-X", "batch.num.messages=1000000",
               "-X", "max.in.flight.requests.per.connection=5", "-X", "enable.idempotence=false",
               "-X", f"queue.buffering.max.kbytes={64 << 10}", "-X", "message.timeout.ms=60000"]
        if rate:
            cmd += ["-r", f"{rate:g}"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        try:  # it exits 1 when a message failed; the summary counts those
            res = parse_summary(out.stdout)
        except ValueError:
            raise RuntimeError(f"rdkafka_performance exited {out.returncode}: {out.stderr[-500:]}") from None
        lat = [int(x) for x in lat_file.read_text().split()] if lat_file.exists() else []
    res.update(percentiles(lat[skip:]))
    res["errors"] = res["failed"] + (res["msgs"] - res["delivered"])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.rdkafka_tools")
    ap.add_argument("--rdkafka-src", type=Path, default=None, help="a librdkafka source tree (default: Debian's)")
    args = ap.parse_args(argv)
    print(setup(args.rdkafka_src))
    return 0


if __name__ == "__main__":
    sys.exit(main())
