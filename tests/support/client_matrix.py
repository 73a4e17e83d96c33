"""The Python clients of the client x version matrix and the interpreters that run them.

Every version comes from constraints.txt: a client's ordinary pin is its newest release and
runs in this interpreter (it is what `pip install -c constraints.txt` installed here); its
`# matrix: name==version` comment lines are older releases, each installed with pip into its
own virtual environment under `.matrix-venvs/` in the repository (its dependencies held to
the other pins of constraints.txt). An environment is built
once (the builds of one session run side by side) and reused by later sessions while the
requirements written into it (`matrix-pins.txt`) are the same; a change of pin rebuilds it.
"""
from __future__ import annotations

import fcntl
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints.txt"
VENVS = REPO / ".matrix-venvs"
# What a client needs besides itself to compress with every codec it knows (xxhash: the
# header checksum of magic-0 LZ4 in kafka-python).
CODEC_PACKAGES = {"confluent-kafka": [], "kafka-python": ["lz4", "python-snappy", "zstandard", "xxhash"],
                  "aiokafka": ["cramjam"]}
_PIN = re.compile(r"^\s*(#\s*matrix:\s*)?([A-Za-z0-9_.\-]+)==(\S+)\s*$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_constraints(path: Path = CONSTRAINTS) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(package -> its pin, package -> its older `# matrix:` versions), names canonical."""
    pins: dict[str, str] = {}
    older: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        m = _PIN.match(line)
        if m is None:
            continue
        name = canonical(m.group(2))
        if m.group(1):
            older.setdefault(name, []).append(m.group(3))
        else:
            pins[name] = m.group(3)
    return pins, older


@dataclass(frozen=True)
class ClientVersion:
    package: str
    version: str
    newest: bool  # the ordinary pin, run in this interpreter

    @property
    def id(self) -> str:
        return f"{self.package}-{self.version}"


def matrix_versions(package: str) -> list[ClientVersion]:
    """The older matrix versions of `package`, then its pin."""
    pins, older = read_constraints()
    name = canonical(package)
    return [ClientVersion(name, v, False) for v in older.get(name, [])] + [ClientVersion(name, pins[name], True)]


def requirements(cv: ClientVersion) -> list[str]:
    pins, _ = read_constraints()
    return [f"{cv.package}=={cv.version}"] + [f"{p}=={pins[canonical(p)]}" for p in CODEC_PACKAGES[cv.package]]


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def other_pins(cv: ClientVersion) -> list[str]:
    """constraints.txt's pins but the client's own: what its dependencies are held to."""
    pins, _ = read_constraints()
    return [f"{p}=={v}" for p, v in sorted(pins.items()) if p != cv.package]


def _wanted(cv: ClientVersion) -> str:
    return "\n".join([sys.version.split()[0], *requirements(cv), "constraints:", *other_pins(cv)]) + "\n"


def _ready(venv: Path, wanted: str) -> bool:
    marker = venv / "matrix-pins.txt"
    return _venv_python(venv).exists() and marker.exists() and marker.read_text() == wanted


def _pip_env() -> dict[str, str]:
    """pip's environment for an older client: run.sh exports PIP_CONSTRAINT (constraints.txt,
    which pins the newest release of that very client), so it is left out; the other pins
    travel in the environment's own constraints file (-c)."""
    env = dict(os.environ)
    env.pop("PIP_CONSTRAINT", None)
    return env


class Interpreters:
    """Python interpreters for client versions: `prepare()` builds the missing environments
    side by side; `python(cv)` is the interpreter to run that version with, or raises
    RuntimeError with pip's output when its environment could not be built."""

    def __init__(self, root: Path = VENVS, timeout: float = 300.0) -> None:
        self.root = root
        self.timeout = timeout
        self.failed: dict[ClientVersion, str] = {}

    def venv(self, cv: ClientVersion) -> Path:
        return self.root / cv.id

    def prepare(self, versions: list[ClientVersion]) -> None:
        self.root.mkdir(exist_ok=True)
        with open(self.root / ".lock", "w") as lock:  # one builder at a time per checkout
            fcntl.flock(lock, fcntl.LOCK_EX)
            building = []
            for cv in versions:
                if cv.newest:
                    try:
                        installed = importlib.metadata.version(cv.package)
                    except importlib.metadata.PackageNotFoundError:
                        installed = "nothing"
                    if installed != cv.version:
                        self.failed[cv] = f"{cv.package} {installed} is installed here, constraints.txt pins {cv.version}"
                    continue
                venv, wanted = self.venv(cv), _wanted(cv)
                if _ready(venv, wanted):
                    continue
                shutil.rmtree(venv, ignore_errors=True)
                subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
                held = venv / "constraints.txt"
                held.write_text("\n".join(other_pins(cv)) + "\n")
                # this interpreter's pip installs into the environment (--python): no pip inside it
                proc = subprocess.Popen([sys.executable, "-m", "pip", "--python", str(_venv_python(venv)), "install",
                                         "-q", "--no-input", "-c", str(held), *requirements(cv)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=_pip_env())
                building.append((cv, venv, wanted, proc))
            for cv, venv, wanted, proc in building:
                try:
                    out, _ = proc.communicate(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _ = proc.communicate()
                    out += f"\npip did not finish within {self.timeout}s"
                if proc.returncode == 0:
                    (venv / "matrix-pins.txt").write_text(wanted)
                else:
                    self.failed[cv] = out[-3000:]
                    shutil.rmtree(venv, ignore_errors=True)

    def python(self, cv: ClientVersion) -> str:
        if cv in self.failed:
            raise RuntimeError(f"no environment for {cv.id}:\n{self.failed[cv]}")
        return sys.executable if cv.newest else str(_venv_python(self.venv(cv)))
