"""A fork server for test brokers: the broker is imported once, each broker is a fork.

Starting `kafkafast broker` in a new interpreter costs about half a second, nearly all
of it importing the broker (the generated protocol codecs above all). This process
imports it once, then forks a child for every broker a test asks for; the child runs
the same `kafkafast.cli.main.main(argv)` that the command runs. The fork server is
single-threaded and has no event loop, so forking it is safe (the broker creates its
loop, and its workers, after the fork, as always).

Protocol on stdin/stdout, one JSON object per line each way:

    {"spawn": [argv...], "log": path}   -> {"pid": pid}    the child is a session leader
        optional: "stdio": [stdin path, stdout path, stderr path] instead of /dev/null and the
        log (a command line run by a test), "env": {name: value} its whole environment (else
        the server's), "cwd": its working directory
    {"wait": pid, "timeout": seconds}   -> {"code": exit code, or null if still running}

The fork server ends when its stdin closes, which happens when the process that started
it exits however it exits; its brokers die with it (PR_SET_PDEATHSIG), so nothing
outlives a killed test run. (Not PR_SET_PDEATHSIG for the fork server itself: that fires
when the *thread* that started it ends, and it may be started from a helper thread.)
"""
from __future__ import annotations

import encodings.utf_16_be  # noqa: F401  (the group coordinator's key hash: a codec is imported on first use)
import importlib
import json
import os
import signal
import sys
import time
import traceback

# Everything a broker imports, imported once here (this module runs only as the fork server's
# __main__): each forked broker starts with them loaded.
import uvloop  # noqa: F401

import kafkafast.broker.broker  # noqa: F401
import kafkafast.broker.group_coordinator  # noqa: F401
import kafkafast.broker.registry as registry
import kafkafast.metrics.server  # noqa: F401  (`kafkafast broker` imports it to start /metrics when asked)
import kafkafast.runtime.server  # noqa: F401
import kafkafast.runtime.supervisor  # noqa: F401
import kafkafast.runtime.worker  # noqa: F401
import kafkafast.testing.faults  # noqa: F401
from kafkafast.cli.main import COMMANDS, main
from kafkafast.testing.broker_process import die_with_parent

# main() builds the parsers of every command before it runs `broker`, and the command lines tests
# run are forks too: every command's module.
for _command_module in COMMANDS.values():
    importlib.import_module(f"kafkafast.cli.{_command_module}")


def _child(argv: list[str], log_path: str, stdio: list[str] | None = None, env: dict[str, str] | None = None,
           cwd: str | None = None) -> None:
    """In the forked child: become what `kafkafast <argv>` would be, then exit."""
    code = 1
    try:
        os.setsid()
        die_with_parent()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        stdin_path, stdout_path, stderr_path = stdio or (os.devnull, log_path, log_path)
        for fd, path, flags in ((0, stdin_path, os.O_RDONLY), (1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                                (2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False)  # not the server's reader of its commands (and what it read ahead)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        code = main(argv) or 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def serve() -> None:
    registry.load_handlers()
    reply = sys.stdout
    print(json.dumps({"ready": os.getpid()}), file=reply, flush=True)
    exited: dict[int, int] = {}
    for line in sys.stdin:
        command = json.loads(line)
        if "spawn" in command:
            pid = os.fork()
            if pid == 0:
                _child(command["spawn"], command["log"], command.get("stdio"), command.get("env"), command.get("cwd"))
            print(json.dumps({"pid": pid}), file=reply, flush=True)
        elif "wait" in command:
            pid, deadline = command["wait"], time.monotonic() + command.get("timeout", 0)
            code = exited.get(pid)
            while code is None:
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not a child of ours
                    code = exited[pid] = -1
                    break
                if done:
                    code = exited[pid] = _exit_code(status)
                    break
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            print(json.dumps({"code": code}), file=reply, flush=True)


if __name__ == "__main__":
    serve()
