"""The run's results file, ``metrics.json``: what DVC's ``metrics`` reads."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write(path: Path, metrics: Mapping[str, Any]) -> None:
    """Write atomically: a reader (DVC, a report, a requeued job) sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Named by pid rather than mkstemp: mkstemp's 0600 mode would hide the results
    # from the rest of a cluster project's group; open() honours the umask.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(dict(metrics), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
