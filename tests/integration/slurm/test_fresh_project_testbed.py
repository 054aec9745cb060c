"""Issue 34's adoption path on the testbed: a fresh DVC project (not this repository), the orchestrator from
its wheel in a clean venv (the ``wheel_venv`` fixture), and Get started's first-cluster steps as a person
types them: `orchestrator init --wrap-all` (which also declares orchestrator.cluster among the stage's
params), the cluster's values under `clusters.testbed`, `orchestrator render --cluster testbed --check`,
`orchestrator use testbed`, `dvc repro`. The testbed's matrix (three learning rates, the base two) is what
runs: its jobs in sacct, its metrics in the workspace."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from support import ACCOUNT, GIT_ENV, jobs_of, require

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN = """\
import json, os, sys

lr = float(sys.argv[1])
os.makedirs(f"out/{lr}", exist_ok=True)
with open(f"out/{lr}/metrics.json", "w") as f:
    json.dump({"lr": lr, "score": 1 - lr}, f)
"""
DVC_YAML = """\
stages:
  train:
    matrix:
      lr: ${train.lrs}
    cmd: python3 train.py ${item.lr}
    deps: [train.py]
    metrics:
      - out/${item.lr}/metrics.json:
          cache: false
          persist: true
"""
CLUSTERS = f"""
clusters:
  testbed:
    orchestrator: {{account: {ACCOUNT}}}
    train: {{lrs: [0.1, 0.2, 0.3]}}
"""


def run(argv: list[str], cwd: Path, env: dict, timeout: float = 400) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_a_fresh_project_from_the_wheel_runs_the_testbed_s_matrix(slurm_testbed, wheel_venv, tmp_path):
    require("shellcheck")
    env = {**os.environ, **GIT_ENV, "PATH": f"{wheel_venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "ORCH_POLL_MAX_S": "2"}
    env.pop("PYTHONPATH", None)
    project = tmp_path / "my-project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "dvc.yaml").write_text(DVC_YAML)
    (project / "params.yaml").write_text("train:\n  lrs: [0.1, 0.2]\n")
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        run(argv, project, env)
    run(["orchestrator", "init", "--wrap-all"], project, env)
    wrapped = (project / "dvc.yaml").read_text()
    # The wrap declares the cluster among the stage's params: the local results are stale after `use testbed`.
    assert "orchestrator run -- python3 train.py" in wrapped and "    params: [orchestrator.cluster]\n" in wrapped, wrapped
    with (project / "params.yaml").open("a") as f:
        f.write(CLUSTERS)
    run(["git", "add", "-A"], project, env)
    run(["git", "commit", "-q", "-m", "my project"], project, env)

    preview = run(["orchestrator", "render", "--cluster", "testbed", "--check"], project, env)
    assert "3 script(s) for testbed and checked" in preview.stdout, preview.stdout
    run(["orchestrator", "use", "testbed"], project, env)
    run(["git", "commit", "-q", "-am", "Switch to the testbed"], project, env)
    since = time.time()
    run(["dvc", "repro"], project, env)

    scores = {p.parent.name: json.loads(p.read_text())["score"] for p in (project / "out").glob("*/metrics.json")}
    assert scores == {"0.1": 0.9, "0.2": 0.8, "0.3": 0.7}, scores
    rows = jobs_of(ACCOUNT, since, project, expect=3)
    assert len(rows) == 3 and {row[2] for row in rows} == {"COMPLETED"}, rows  # one job per item of the testbed's matrix
    assert run(["dvc", "status"], project, env).stdout.strip() in ("", "Data and pipelines are up to date.")
