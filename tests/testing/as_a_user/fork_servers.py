"""The kafkafast test fork servers this pytest process started (its children)."""
import os


def fork_servers() -> list[int]:
    """This process's children that are kafkafast test fork servers."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"kafkafast.testing.fork_server" in cmdline:
            found.append(int(pid))
    return found
