"""The client is fully type-hinted: mypy finds no error in `kafkafast/client`, and every
function there has annotations (untyped or partly typed definitions are errors)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_client_passes_mypy_with_every_definition_annotated(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "kafkafast/client", "--ignore-missing-imports", "--follow-imports=silent",
         "--disallow-untyped-defs", "--disallow-incomplete-defs", "--cache-dir", str(tmp_path / "cache")],
        cwd=str(REPO), capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
