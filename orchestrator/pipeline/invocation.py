"""Whether the user asked for a stage to run again although its job already succeeded.

A finished job is normally this item's result for as long as its outputs exist:
running the stage again attaches to it, at no cost. To measure again on purpose
there are two ways, both for one command only:

- ``dvc repro -f`` (and ``dvc exp run -f``): DVC does not tell a stage it was
  forced, so the stage's ancestors are read from ``/proc`` (Linux login nodes);
- ``ORCH_FORCE=1`` in the environment (any way of running: ``dvc exp run --queue``
  workers, ``orchestrator run`` by hand, ``orchestrator submit``, which also has
  ``--force``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from orchestrator.errors import ConfigError

FORCE = "ORCH_FORCE"

_SHORT_FLAGS = re.compile(r"-[A-Za-z]+")


def forced(proc: Path = Path("/proc")) -> bool:
    """True when ``ORCH_FORCE=1`` or an ancestor process is a forced ``dvc repro`` / ``dvc exp run``."""
    if force_variable():
        return True
    pid = os.getppid()
    for _ in range(32):  # a bounded walk: the init process, or a cycle in a mocked /proc, ends it
        argv = _cmdline(proc, pid)
        if argv is not None and dvc_forced(argv):
            return True
        parent = _parent(proc, pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


_YES, _NO = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def force_variable() -> bool:
    """``ORCH_FORCE`` as a yes or no; any other value is refused (a typo must not submit a new job, nor silently not)."""
    text = os.environ.get(FORCE, "")
    if text.strip().lower() in _YES:
        return True
    if text.strip().lower() in _NO:
        return False
    shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}..."
    raise ConfigError(
        f"environment variable {FORCE}={shown} is not a yes or no",
        hints=[f"{FORCE}=1 submits a new job even if the last one succeeded; unset it (or 0) to reuse a finished job"],
    )


def dvc_forced(argv: list[str]) -> bool:
    """Whether ``argv`` is ``dvc repro``/``dvc exp run`` with ``-f``/``--force`` (also in a
    group of short flags, such as ``-fs``)."""
    names = [os.path.basename(a) for a in argv[:3]]  # dvc, python dvc, python -m dvc
    if "dvc" not in names or (names.index("dvc") > 0 and not names[0].startswith("python")):
        return False
    rest = argv[names.index("dvc") + 1 :]
    if rest[:1] == ["repro"]:
        flags = rest[1:]
    elif rest[:2] == ["exp", "run"]:
        flags = rest[2:]
    else:
        return False
    for arg in flags:
        if arg == "--":
            break
        if arg == "--force" or (_SHORT_FLAGS.fullmatch(arg) and "f" in arg[1:]):
            return True
    return False


def _cmdline(proc: Path, pid: int) -> list[str] | None:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(proc: Path, pid: int) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
