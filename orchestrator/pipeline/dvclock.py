"""DVC's read/write lock file (``.dvc/tmp/rwlock``), mended when a killed process left it cut short.

DVC rewrites that file, under its own guard lock, each time a command starts or ends reading
or writing outputs. A process killed in the middle (an interrupted login-node submit, a
SIGKILL from a job's time limit) leaves it empty or half-written, and every later DVC
command then stops with "Unable to read RWLock-file ... JSON structure is corrupted" until
someone deletes it by hand. Whoever wrote it was cut off mid-write, so its entries are gone
either way: under the same guard, an unreadable file is replaced by an empty lock.
"""

from __future__ import annotations

import json
from pathlib import Path


def mend(root: Path) -> bool:
    """Replace ``root``'s rwlock file with an empty lock if it is not JSON; True when it did."""
    path = root / ".dvc" / "tmp" / "rwlock"
    if not path.is_file():
        return False
    from dvc.lock import make_lock

    with make_lock(str(path.with_name("rwlock.lock")), tmp_dir=str(path.parent)):
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return False
        except (UnicodeDecodeError, json.JSONDecodeError):
            path.write_text("{}", encoding="utf-8")
            return True
