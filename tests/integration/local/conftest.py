"""Fixtures that modules of integration/local share."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import LM_SHORT, ROOT, require, require_training, run_in
from trained import LM_STEPS, PROFILE_WINDOW, SHIPPED_STEPS, LmRun, shared_cores_environment


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


@pytest.fixture(scope="session")
def shipped_pipeline(tmp_path_factory) -> Path:
    """A Git + DVC project with the shipped dvc.yaml, params.yaml and experiments/, after `dvc repro`.

    The one change to the shipped files is the one a user makes for a quick first run: params.yaml's
    `max_steps` lowered (SHIPPED_STEPS) before the commit. The LM's steps were most of the pipeline's
    CPU, and nothing that reads it depends on how many there are, only that every one is logged.
    test_shipped_pipeline.py and test_classify_runs.py read it (their modules share the xdist group
    SHIPPED_GROUP, so one worker makes it once)."""
    require_training()
    require("git")
    project = tmp_path_factory.mktemp("pipeline") / "project"
    project.mkdir()
    shutil.copy(ROOT / "dvc.yaml", project / "dvc.yaml")
    shipped = (ROOT / "params.yaml").read_text()
    assert shipped.count("\n  max_steps: 30\n") == 2, "the shipped benchmark's and LM's max_steps are no longer 30"
    (project / "params.yaml").write_text(shipped.replace("\n  max_steps: 30\n", f"\n  max_steps: {SHIPPED_STEPS}\n"))
    (project / "containers").mkdir()
    shutil.copy(ROOT / "containers/none.digest", project / "containers/none.digest")
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["orchestrator"]["cluster"] == "local"
    assert params["lm"]["max_steps"] == params["benchmark"]["max_steps"] == SHIPPED_STEPS
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"]):
        run_in(project, *argv)
    run_in(project, "git", "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-qm", "the shipped pipeline")
    started = time.monotonic()
    # Alone on 2 cores ~2 minutes; at nice 5 beside the whole suite's testbed groups it has taken 14.
    run_in(project, "dvc", "repro", timeout=1800)
    print(f"\ndvc repro of the shipped pipeline: {time.monotonic() - started:.0f} s")
    return project
