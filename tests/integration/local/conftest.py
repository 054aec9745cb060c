"""Fixtures that modules of integration/local share."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import LM_SHORT, require_training
from trained import LM_STEPS, PROFILE_WINDOW, LmRun, shared_cores_environment


@pytest.fixture(scope="session")
def lm_runs(tmp_path_factory) -> dict[str, LmRun]:
    """Real runs of `python -m experiments.lm`, profiled, all at once, each in its own folder:
    "small" (one process, 4 sequences a step), "large" (one process, 8, with a Chrome trace) and
    "ddp" (two DDP processes over gloo, 8 in all, and a peak of its own: ORCH_PEAK_TFLOPS).

    test_lm_runs.py and test_profiling_runs.py read the same runs (their modules share the xdist
    group LM_RUNS_GROUP, so one worker makes them once): a training process is ~10 s of CPU, most
    of it imports, and the profiler changes nothing the run computes (the DDP run's weights
    match the one process's of the same global batch)."""
    require_training()
    base = tmp_path_factory.mktemp("lm-runs")
    plans = {
        "small": (["--batch-size", "4"], {}),
        "large": (["--batch-size", "8", "--profile-trace"], {}),
        "ddp": (["--devices", "2", "--global-batch-size", "8"], {"ORCH_PEAK_TFLOPS": "0.05"}),
    }
    started = {}
    for name, (extra, env) in plans.items():
        cwd = base / name
        cwd.mkdir()
        output = cwd / "results" / "out"  # nested, not there yet
        argv = [sys.executable, "-m", "experiments.lm", *LM_SHORT, "--max-steps", str(LM_STEPS), "--seed", "5", "--goldfish-k", "0"]
        argv += ["--tokenizer", "bytes", "--profile-steps", PROFILE_WINDOW, "--output", str(output), *extra]
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**shared_cores_environment("ORCH_PEAK_TFLOPS"), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started[name] = (process, output)
    done = {}
    for name, (process, output) in started.items():
        stdout, stderr = process.communicate(timeout=600)
        done[name] = LmRun(output, subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return done
