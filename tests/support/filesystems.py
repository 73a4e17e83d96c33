"""Helpers for tests that fill a small file system of their own (see tests/fault/conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path


def top_up(mount: Path) -> None:
    """Take every page left on the small file system (into its filler file)."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_APPEND)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
