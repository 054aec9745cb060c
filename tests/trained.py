"""The tests' real training runs (tests/integration/local/test_*_runs.py): their environment, and
what the runs they share are (integration/local/conftest.py's lm_runs and shipped_pipeline)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from support import training_environment

# The shared LM runs: their steps, profiled window (steps 2 to 3), and the xdist group of the
# modules that read them (one worker makes them once for all).
LM_STEPS = 6
PROFILE_WINDOW = "2:3"
LM_RUNS_GROUP = "lm-runs"
# The modules that import torch and Lightning into the worker's own process (they train or call
# training code there): one worker runs them all, so one worker, not each, spends the ~8 s of CPU
# the imports take.
IN_PROCESS_GROUP = "torch-in-process"

# The shipped pipeline after `dvc repro` (conftest.shipped_pipeline), read by test_shipped_pipeline.py and
# by test_classify_runs.py (its two-process run is the pipeline's 1x2 item): one worker makes it once.
SHIPPED_GROUP = "shipped-pipeline"
# Both experiments' max_steps in the project's params.yaml (30 as shipped).
SHIPPED_STEPS = 8
# Both experiments' items: what params.yaml's matrix expands to.
SHIPPED_BENCHMARK = [f"results/benchmark/pydoc-topics/tiny/{layout}" for layout in ("1x1", "1x2")]
SHIPPED_LM = [f"results/lm/tiny/k{k}/{layout}" for k in (0, 4) for layout in ("1x1", "1x2")]


@dataclass(frozen=True)
class LmRun:
    output: Path
    process: subprocess.CompletedProcess

    def ended_well(self) -> Path:
        """The run's output, once its process is known to have ended well: exit 0, and no C++
        runtime abort on its stderr."""
        assert self.process.returncode == 0, f"{self.output}: {self.process.stderr[-4000:]}"
        assert "terminate called" not in self.process.stderr, f"{self.output}: {self.process.stderr[-4000:]}"
        return self.output


def shared_cores_environment(*also: str) -> dict[str, str]:
    """:func:`support.training_environment` with one OpenMP thread a process, as `orchestrator run` gives tasks
    that share the machine's cores (scripts/job_environment.py).

    The tests start several training processes at once, beside the other tests' workers: left to torch,
    each starts a thread per core, and oversubscribed OpenMP threads spin, which tripled the CPU time of
    a six-step run on a loaded 2-core machine (30 s instead of 11) without changing what it computes."""
    return {**training_environment(*also), "OMP_NUM_THREADS": "1"}
