"""The cluster's own configuration, as ``scontrol show config`` prints it.

One reader for every question asked of it (ClusterName for the profile
selection and the pre-flight check, AcctGatherEnergyType for the energy
report), so an unreachable controller is handled the same way everywhere.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from orchestrator.util.runner import Runner


@dataclass(frozen=True)
class ClusterConfig:
    text: str  # scontrol's output, parsed on demand: a few of its ~200 keys are ever read

    def get(self, key: str) -> str | None:
        return parse_config_value(self.text, key)


def read(runner: Runner, timeout: float = 30) -> tuple[ClusterConfig | None, str | None]:
    """The configuration, or None and why not (no scontrol, no answer, an error)."""
    if runner.which("scontrol") is None:
        return None, "scontrol not found: not a Slurm login node"
    try:
        done = runner.run(["scontrol", "show", "config"], timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"Slurm did not answer: {exc}"
    if done.returncode != 0:
        return None, f"`scontrol show config` failed: {done.stderr.strip() or done.returncode}"
    return ClusterConfig(done.stdout), None


def parse_config_value(text: str, key: str) -> str | None:
    """A value from ``scontrol show config`` (``ClusterName = lumi``)."""
    m = re.search(rf"^{re.escape(key)}\s*=\s*(\S+)", text, re.M)
    return m.group(1) if m else None
