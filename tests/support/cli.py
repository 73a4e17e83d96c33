"""Runs the `kafkafast` command line of this tree as an operator would: a process of its own
with its own stdin, stdout, stderr and exit code. The process is forked from the test
session's fork server (kafkafast.testing.fork_server), which has imported kafkafast once:
a new interpreter would spend about a second importing it for every command."""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from kafkafast.testing.broker_process import ForkedProcess, ForkServer
from tests.support.broker_process import REPO


def kafkafast(*args: str, stdin: str | bytes | None = None, timeout: float = 60.0,
              check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`env`: variables added to this process's environment."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               KAFKAFAST_NO_PROGRESS="1", **(env or {}))
    data = stdin.encode() if isinstance(stdin, str) else stdin
    with tempfile.TemporaryDirectory(prefix="kafkafast-cli-") as tmp:
        stdio = [Path(tmp, name) for name in ("stdin", "stdout", "stderr")]
        stdio[0].write_bytes(data or b"")
        proc = ForkedProcess(ForkServer.get(), list(args), str(stdio[2]), stdio=[str(p) for p in stdio], env=env,
                             cwd=str(REPO))
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            raise subprocess.TimeoutExpired(["kafkafast", *args], timeout) from None
        out = subprocess.CompletedProcess(["kafkafast", *args], proc.returncode, stdio[1].read_bytes().decode(),
                                          stdio[2].read_bytes().decode())
    if check and out.returncode != 0:
        raise AssertionError(f"kafkafast {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out
