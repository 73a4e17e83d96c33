"""run.sh, the README's two commands: the install (pip and the Cython build) runs once and again only
when what it is made from changes, and `run.sh test PATHS` runs those paths, not the whole suite.

run.sh runs here on a copy of its inputs with PYTHON set to a stand-in interpreter that writes
down how it was called (pip install, pytest) instead of installing."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/sh
# "-c <check>": the installed-from-here check; -m pip / -m pytest: written down.
if [ "$1" = "-c" ]; then
  case "$2" in *direct_url*) [ -f "$(dirname "$0")/installed" ]; exit $? ;; esac
  echo fake 3.11; exit 0
fi
echo "$*" >> "$(dirname "$0")/calls"
if [ "$2" = "pip" ]; then touch "$(dirname "$0")/installed"; fi
"""


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("run.sh", "setup.py", "pyproject.toml", "constraints.txt"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "cython_ext", root / "cython_ext", ignore=shutil.ignore_patterns("*.c", "*.so"))
    (root / "kafkafast" / "_native").mkdir(parents=True)
    for pxd in (REPO / "kafkafast" / "_native").glob("*.pxd"):
        shutil.copy(pxd, root / "kafkafast" / "_native" / pxd.name)
    (root / "tests" / "unit").mkdir(parents=True)
    (root / "tests" / "unit" / "test_a.py").write_text("def test_a(): pass\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return root


def run_sh(root: Path, *args: str) -> tuple[str, list[str]]:
    """run.sh's output and the interpreter calls it made. (As root, run.sh first checks the Debian
    tools; run.sh test installed them before this test ran.)"""
    calls = root.parent / "bin" / "calls"
    calls.unlink(missing_ok=True)
    env = dict(os.environ, PYTHON=str(root.parent / "bin" / "python"))
    r = subprocess.run(["bash", "run.sh", *args], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, calls.read_text().splitlines() if calls.exists() else []


def pip_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip ")]


def test_install_runs_once_and_again_only_when_a_cython_source_changes(tmp_path):
    root = checkout(tmp_path)
    out, calls = run_sh(root, "test", "tests/unit/test_a.py::test_a", "-q")
    assert pip_calls(calls) == ["-m pip install -q -e .[test,spark,perf]"]
    assert "installing kafkafast[test,spark,perf]" in out and "building its compiled twins" in out

    out, calls = run_sh(root, "test", "-q")
    assert pip_calls(calls) == [], out
    assert "nothing changed since" in out
    out, calls = run_sh(root, "broker", "--help")  # the test extras include what the broker needs
    assert pip_calls(calls) == [], out

    with open(root / "cython_ext" / "records.pyx", "a") as fh:
        fh.write("\n# changed\n")
    _, calls = run_sh(root, "test", "-q")
    assert pip_calls(calls) == ["-m pip install -q -e .[test,spark,perf]"]
    _, calls = run_sh(root, "test", "-q")
    assert pip_calls(calls) == []


def test_test_paths_are_passed_through_and_the_whole_suite_runs_without_them(tmp_path):
    root = checkout(tmp_path)
    _, calls = run_sh(root, "test", "tests/unit/test_a.py::test_a", "-x", "-q")
    assert calls[-1] == "-m pytest -p no:cacheprovider tests/unit/test_a.py::test_a -x -q"
    _, calls = run_sh(root, "test", "tests/unit", "-k", "a")
    assert calls[-1] == "-m pytest -p no:cacheprovider tests/unit -k a"
    _, calls = run_sh(root, "test", "--timeout", "900", "-ra")  # .ci/run's command
    assert calls[-1] == "-m pytest -p no:cacheprovider tests --timeout 900 -ra"
    _, calls = run_sh(root, "test")
    assert calls[-1] == "-m pytest -p no:cacheprovider tests"
