"""Runs the `kafkafast` command line of this tree as a subprocess, as an operator would."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.support.broker_process import REPO


def kafkafast(*args: str, stdin: str | bytes | None = None, timeout: float = 60.0,
              check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`env`: variables added to this process's environment."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               KAFKAFAST_NO_PROGRESS="1", **(env or {}))
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([sys.executable, "-m", "kafkafast.cli.main", *args], input=data, capture_output=True,
                          timeout=timeout, env=env, cwd=str(REPO))
    out = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())
    if check and proc.returncode != 0:
        raise AssertionError(f"kafkafast {' '.join(args)} exited {proc.returncode}:\n{out.stdout}\n{out.stderr}")
    return out
