"""Fixtures of the fault tests: a small file system of their own to fill."""
from __future__ import annotations

import subprocess

import pytest

BALLAST_BYTES = 1 << 20


@pytest.fixture
def small_fs(tmp_path):
    """A 6 MiB tmpfs holding a 1 MiB ballast file (deleting it frees space) and an empty
    filler file (`storage_faults.top_up` takes the last pages with it), unmounted at the end."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {res.stderr.strip()}")
    try:
        with open(mnt / "ballast", "wb") as f:
            f.write(b"\0" * BALLAST_BYTES)
        (mnt / "filler").touch()
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
