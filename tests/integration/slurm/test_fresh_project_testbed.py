"""Issue 34's adoption path on the testbed: a fresh DVC project (not this repository), the orchestrator from
its wheel in a clean venv (the ``wheel_venv`` fixture), and Get started's first-cluster steps as a person
types them: `orchestrator init --wrap-all` (which also declares orchestrator.cluster among the stage's
params), the cluster's values under `clusters.testbed`, `orchestrator render --cluster testbed --check`,
`orchestrator use testbed`, `dvc repro`. The testbed's matrix (three learning rates, the base two) is what
runs: its jobs in sacct, its metrics in the workspace."""

from __future__ import annotations

import functools
import json
import os
import time

import pytest
from support import ACCOUNT, GIT_ENV, jobs_of, require, run_in

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


def test_a_fresh_project_from_the_wheel_runs_the_testbed_s_matrix(slurm_testbed, wheel_venv, tmp_path):
    require("shellcheck")
    env = {**os.environ, **GIT_ENV, "PATH": f"{wheel_venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "ORCH_POLL_MAX_S": "2"}
    env.pop("PYTHONPATH", None)
    project = tmp_path / "my-project"
    project.mkdir()
    run = functools.partial(run_in, project, env=env, timeout=400)  # a limit for a hang only
    (project / "train.py").write_text(TRAIN)
    (project / "dvc.yaml").write_text(DVC_YAML)
    (project / "params.yaml").write_text("train:\n  lrs: [0.1, 0.2]\n")
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        run(*argv)
    run("orchestrator", "init", "--wrap-all")
    wrapped = (project / "dvc.yaml").read_text()
    # The wrap declares the cluster among the stage's params: the local results are stale after `use testbed`.
    assert "orchestrator run -- python3 train.py" in wrapped and "    params: [orchestrator.cluster]\n" in wrapped, wrapped
    with (project / "params.yaml").open("a") as f:
        f.write(CLUSTERS)
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "my project")

    preview = run("orchestrator", "render", "--cluster", "testbed", "--check")
    assert "3 script(s) for testbed and checked" in preview, preview
    run("orchestrator", "use", "testbed")
    run("git", "commit", "-q", "-am", "Switch to the testbed")
    since = time.time()
    run("dvc", "repro")

    scores = {p.parent.name: json.loads(p.read_text())["score"] for p in (project / "out").glob("*/metrics.json")}
    assert scores == {"0.1": 0.9, "0.2": 0.8, "0.3": 0.7}, scores
    rows = jobs_of(ACCOUNT, since, project, expect=3)
    assert len(rows) == 3 and {row[2] for row in rows} == {"COMPLETED"}, rows  # one job per item of the testbed's matrix
    assert run("dvc", "status").strip() in ("", "Data and pipelines are up to date.")
