"""A test whose tool (node and KafkaJS, kcat, ZooKeeper, systemd-analyze) is missing is skipped
saying how to get it, and fails on CI (CI=true), where run.sh has installed every tool."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_missing(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_needs_kcat.py").write_text(
        "from tests.support.tools import missing_tool\n\n\ndef test_needs_kcat():\n    missing_tool('kcat')\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q", "test_needs_kcat.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_skipped_with_how_to_get_it(tmp_path):
    r = run_missing(tmp_path, None)
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout
    assert "kcat is missing: `bash run.sh test` installs it as root (Debian package: kcat)" in r.stdout


def test_failed_on_ci(tmp_path):
    r = run_missing(tmp_path, "true")
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout
    assert "on CI every tool is installed; kcat is missing" in r.stdout
