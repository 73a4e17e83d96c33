"""The client x version matrix: confluent-kafka, kafka-python and aiokafka each at the older
release named by a `# matrix:` line of constraints.txt (run in a virtual environment,
tests/support/client_matrix.py) and at their pin, KafkaJS (tests/js), Debian's kcat
(librdkafka 2.0) and Debian's Sarama (Go; built here from the packaged sources, at protocol
2.1 and pinned to 0.10.2) each produce with every codec they support, consume in a group,
commit, read the committed offsets back and list offsets (tests/matrix_scripts/, one JSON
line per run). What they wrote is checked in the segment files: v2 batches compressed with the
producer's codec, every record where it was sent. The older kafka-python also runs pinned
to `api_version` (0, 9) and (0, 10, 1), through the legacy formats (the pinned kafka-python
does that in test_legacy_formats.py). Every case runs on a single node; kcat, KafkaJS and
Sarama, the clients no other test takes through both modes, also run on a 3-broker cluster
(the `kafka` fixture: topics with replication factor 3, the segment files read on each
partition's leader). The Python clients' cluster runs are tests/integration/test_real_clients.py's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.client_matrix import ClientVersion, Interpreters, matrix_versions
from tests.support.segments import CODEC_IDS, stored_batches
from tests.support.tools import missing_tool

SCRIPTS = Path(__file__).resolve().parents[1] / "matrix_scripts"
JS_MODULES = Path(__file__).resolve().parents[1] / "js" / "node_modules"
CI = os.environ.get("CI") == "true"
ALL = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 200
PARTITIONS = 2
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@dataclass(frozen=True)
class Case:
    id: str
    script: str
    codecs: tuple[str, ...]
    client: ClientVersion | None = None  # a Python client run by its interpreter
    api_version: tuple[int, ...] | None = None
    timestamps: bool = True  # the producer sets record timestamps (magic 1+, not kcat)


def python_cases() -> list[Case]:
    out = []
    for package, script in [("confluent-kafka", "confluent_kafka_client.py"), ("kafka-python", "kafka_python_client.py"),
                            ("aiokafka", "aiokafka_client.py")]:
        for cv in matrix_versions(package):
            out.append(Case(cv.id, script, tuple(ALL), cv))
            if package == "kafka-python" and not cv.newest:
                out += [Case(f"{cv.id}-api0.9", script, ("none", "gzip", "snappy", "lz4"), cv, (0, 9), False),
                        Case(f"{cv.id}-api0.10.1", script, ("none", "gzip", "snappy", "lz4"), cv, (0, 10, 1))]
    return out


NOT_PYTHON = [Case("kafkajs", "kafkajs_client.js", ("none", "gzip")),
              Case("kcat", "kcat_client.py", tuple(ALL), timestamps=False),
              Case("sarama", "sarama_client.go", tuple(ALL)),
              # Produce v2 with magic-1 message sets, Fetch v3, ListOffsets v1, the group at 0.10.2
              Case("sarama-api0.10.2", "sarama_client.go", ("none", "gzip", "snappy", "lz4"), api_version=(0, 10, 2))]
SARAMA_SOURCE = Path("/usr/share/gocode/src/github.com/Shopify/sarama")
CASES = python_cases() + NOT_PYTHON


@pytest.fixture(scope="session")
def sarama_client(tmp_path_factory) -> Path | None:
    """tests/matrix_scripts/sarama_client.go built against Debian's Sarama (GOPATH mode: the
    packaged sources, nothing fetched), once a session; None when Go or Sarama is missing."""
    if shutil.which("go") is None or not SARAMA_SOURCE.is_dir():
        return None
    out = tmp_path_factory.mktemp("sarama")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOCACHE": str(out / "cache"),
           "GOFLAGS": ""}
    build = subprocess.run(["go", "build", "-o", str(out / "sarama_client"), str(SCRIPTS / "sarama_client.go")],
                           capture_output=True, text=True, timeout=600, env=env)
    assert build.returncode == 0, build.stderr[-3000:]
    return out / "sarama_client"


@pytest.fixture(scope="session")
def interpreters() -> Interpreters:
    """The environments of the older client releases, built (or found built) once."""
    interp = Interpreters()
    interp.prepare(sorted({c.client for c in CASES if c.client is not None}, key=lambda cv: cv.id))
    return interp


def command(case: Case, interp: Interpreters, spec: dict, sarama: Path | None) -> list[str]:
    if case.script.endswith(".go"):
        if sarama is None:
            missing_tool("sarama")
        return [str(sarama), json.dumps(spec)]
    if case.script.endswith(".js"):
        if shutil.which("node") is None or not (JS_MODULES / "kafkajs").is_dir():
            if not CI:
                missing_tool("kafkajs")
        return ["node", str(SCRIPTS / case.script), json.dumps(spec)]
    if case.client is None:  # kcat, driven from this interpreter
        if KCAT is None:
            missing_tool("kcat")
        return [sys.executable, str(SCRIPTS / case.script), json.dumps(spec), str(KCAT)]
    try:
        python = interp.python(case.client)
    except RuntimeError as e:
        if CI:
            raise
        pytest.skip(str(e))  # no PyPI here
    return [python, str(SCRIPTS / case.script), json.dumps(spec)]


def expected(codec: str, t0: int) -> dict[int, list[tuple[int, bytes, bytes, int]]]:
    """partition -> [(record index, key, value, timestamp)] as the scripts produce (common.py)."""
    out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for i in range(N):
        out[i % PARTITIONS].append((i, b"k%d" % i, (b"%s-value-%d-" % (codec.encode(), i)) * 6, t0 + i))
    return out


def by_partition(d: dict) -> dict[str, dict[int, int]]:
    return {t: {int(p): o for p, o in parts.items()} for t, parts in d.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.in_cluster_only(case=NOT_PYTHON)
def test_client_produces_consumes_commits_and_lists_offsets(kafka, interpreters, sarama_client, case):
    t0 = int(time.time() * 1000) - 3_600_000
    topics = {codec: f"mx-{case.id}-{codec}" for codec in case.codecs}
    spec = {"bootstrap": kafka.bootstrap, "topics": topics, "n": N, "t0": t0, "group": f"mx-{case.id}",
            "api_version": case.api_version}
    cmd = command(case, interpreters, spec, sarama_client if case.script.endswith(".go") else None)
    for topic in topics.values():
        kafka.create_topic(topic, PARTITIONS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NODE_PATH"] = str(JS_MODULES)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    if case.client is not None:
        assert (res["client"], res["version"]) == (case.client.package, case.client.version)

    counts = {p: len(v) for p, v in expected("none", t0).items()}
    stored_ts: dict[str, dict[int, list[tuple[int, int]]]] = {}
    for codec, topic in topics.items():
        want = expected(codec, t0)
        for p in range(PARTITIONS):
            batches = stored_batches(kafka.partition_dir(topic, p).parent, topic, p)
            assert batches, (topic, p)
            assert {(h.magic, h.compression) for h, _ in batches} == {(2, CODEC_IDS[codec])}, (topic, p)
            records = [r for _, rs in batches for r in rs]
            assert [(r.offset, r.key, r.value) for r in records] == [(o, k, v) for o, (_, k, v, _) in enumerate(want[p])]
            if case.timestamps:
                assert [r.timestamp for r in records] == [ts for *_, ts in want[p]]
            stored_ts.setdefault(topic, {})[p] = [(r.offset, r.timestamp) for r in records]
        if res["produced"][codec] is not None:  # the offset each send was acknowledged with
            where = {i: [p, o] for p, rows in want.items() for o, (i, *_) in enumerate(rows)}
            assert res["produced"][codec] == [where[i] for i in range(N)]

    consumed = sorted(tuple(row) for row in res["consumed"])
    assert len(consumed) == N * len(topics)
    assert consumed == sorted((topic, p, o, k.decode(), v.decode()) for codec, topic in topics.items()
                              for p, rows in expected(codec, t0).items() for o, (_, k, v, _) in enumerate(rows))
    ends = {t: counts for t in topics.values()}
    assert by_partition(res["committed"]) == ends
    assert by_partition(res["latest"]) == ends
    assert by_partition(res["earliest"]) == {t: {p: 0 for p in range(PARTITIONS)} for t in topics.values()}
    if case.api_version == (0, 9):
        assert res["by_time"] is None  # ListOffsets v0 cannot ask by timestamp
    else:
        target = res["by_time_target"]
        assert by_partition(res["by_time"]) == {
            t: {p: min(o for o, ts in rows if ts >= target) for p, rows in parts.items()} for t, parts in stored_ts.items()}
