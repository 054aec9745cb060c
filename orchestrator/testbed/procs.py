"""The testbed's daemons as processes: which run (read from /proc), since when, and what they last logged.

There is no systemd here to ask, so a daemon is found by its argv: ``"slurmd:NODE"``
names the slurmd started with ``-N NODE``, the other names are in :data:`_DAEMONS`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every live process (zombies have an empty cmdline and drop out)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            found.append((int(entry.name), raw.rstrip(b"\0").decode(errors="replace").split("\0")))
    return found


def _runs(argv: list[str], *names: str) -> bool:
    """Whether argv runs one of ``names`` (scripts show as `/bin/sh /usr/bin/NAME`)."""
    return any(os.path.basename(a) in names for a in argv[:2])


def _node_of(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "-N" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("-N") and len(arg) > 2:
            return arg[2:]
    return None


# Which processes make up each daemon; "slurmd:NODE" is the slurmd of one node.
_DAEMONS: dict[str, Callable[[list[str]], bool]] = {
    "munge": lambda a: _runs(a, "munged"),
    "mysqld_safe": lambda a: _runs(a, "mysqld_safe", "mariadbd-safe"),
    "mariadb": lambda a: _runs(a, "mariadbd", "mysqld"),
    "slurmdbd": lambda a: _runs(a, "slurmdbd"),
    "slurmctld": lambda a: _runs(a, "slurmctld"),
}


def pids_of(daemon: str, table: list[tuple[int, list[str]]] | None = None) -> list[int]:
    table = processes() if table is None else table
    if daemon.startswith("slurmd:"):
        node = daemon.split(":", 1)[1]
        return [pid for pid, argv in table if _runs(argv, "slurmd") and _node_of(argv) == node]
    return [pid for pid, argv in table if _DAEMONS[daemon](argv)]


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch (0.0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, IndexError, StopIteration):
        return 0.0
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time in clock ticks


def log_tail(path: Path, lines: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
