"""KafkaJS — a Kafka client written from the protocol specification, independent of
librdkafka and the Java client — produces (idempotent, gzip), consumes in a group and
administers topics against the broker."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.tools import CI, HOW_TO_GET

JS = Path(__file__).resolve().parents[1] / "js"


def kafkajs_available() -> bool:
    return shutil.which("node") is not None and (JS / "node_modules" / "kafkajs").is_dir()


# Skipped with how to get them; not on CI, where a missing node fails the test.
needs_kafkajs = pytest.mark.skipif(not kafkajs_available() and not CI, reason=HOW_TO_GET["kafkajs"])


def run_kafkajs(script: str, *args: str) -> dict:
    """Runs tests/js/SCRIPT with node; the JSON of its last output line."""
    r = subprocess.run(["node", str(JS / script), *args], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_kafkajs
def test_kafkajs_produces_consumes_in_a_group_and_administers(broker_factory):
    b = broker_factory(settings={"group.initial.rebalance.delay.ms": "0"})
    summary = run_kafkajs("kafkajs_roundtrip.js", b.bootstrap)
    assert summary["consumed"] == 2000
    assert sum(int(high) for _, high in summary["offsets"]) == 2000
    assert summary["group"] == "Empty"
