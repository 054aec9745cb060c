"""Run on a cluster what `render --cluster` showed, or nothing: a `clusters.testbed` entry whose
matrix differs from the base runs its items once switched (`orchestrator use`, `orchestrator exp
run --cluster`), and `dvc exp run -S orchestrator.cluster=testbed` alone runs nothing."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml
from support import ACCOUNT, make_project, with_git
from support import dvc_exp as dvc

pytestmark = pytest.mark.slurm

DVC_YAML = """\
stages:
  work:
    matrix:
      seed: ${work.seeds}
    cmd: >-
      orchestrator run --
      python3 -c "import json, os; os.makedirs('out', exist_ok=True);
      json.dump({'seed': ${item.seed}}, open('out/m${item.seed}.json', 'w'))"
    params: [work]
    metrics:
      - out/m${item.seed}.json:
          cache: false
          persist: true
"""
PARAMS = {
    "orchestrator": {"cluster": "local", "account": ACCOUNT},
    "work": {"seeds": [0]},
    "clusters": {"testbed": {"work": {"seeds": [1, 2]}}},
}


def jobs_since(since: float, workdir: str, n: int) -> list[list[str]]:
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobName,State,WorkDir"]
    deadline = time.time() + 60  # slurmdbd records an ended job a while later
    while True:
        rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()]
        ours = [row for row in rows if row[-1] == workdir or row[-1].startswith(workdir + "/")]
        if len(ours) >= n or time.time() > deadline:
            return ours
        time.sleep(1)


def test_only_the_switched_values_run_on_the_testbed(slurm_testbed, tmp_path):
    project = with_git(make_project(tmp_path / "p", dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump(PARAMS)), "switch")
    since = time.time()
    # The cluster named, its values not: DVC would resolve the base's one item; nothing runs.
    refused = dvc(project, "exp", "run", "--temp", "-n", "unswitched", "-S", "orchestrator.cluster=testbed")
    assert refused.returncode != 0
    assert "orchestrator use testbed" in refused.stdout + refused.stderr
    assert jobs_since(since, str(project.resolve()), 1) == []

    # One experiment with testbed's values: its two items, as jobs, and dvc exp show has them.
    done = subprocess.run(
        ["orchestrator", "exp", "run", "--cluster", "testbed", "--temp", "-n", "on-testbed"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shown = json.loads(dvc(project, "exp", "show", "--json").stdout)
    exps = [e for rev in shown for e in (rev.get("experiments") or []) if e.get("name") == "on-testbed"]
    assert exps, shown
    data = exps[0]["revs"][0]["data"]
    assert data["params"]["params.yaml"]["data"]["work"] == {"seeds": [1, 2]}
    assert data["params"]["params.yaml"]["data"]["orchestrator"]["cluster"] == "testbed"
    assert (project / "params.yaml").read_text() == yaml.safe_dump(PARAMS)  # the workspace as it was

    # The documented switch in the workspace: `orchestrator use testbed`, then dvc repro.
    since = time.time()
    switched = subprocess.run(["orchestrator", "use", "testbed"], cwd=project, capture_output=True, text=True)
    assert switched.returncode == 0, switched.stdout + switched.stderr
    repro = subprocess.run(["dvc", "repro"], cwd=project, capture_output=True, text=True, timeout=400)
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert sorted(p.name for p in (project / "out").iterdir()) == ["m1.json", "m2.json"]
    rows = [row for row in jobs_since(since, str(project.resolve()), 3) if row[-1] == str(project.resolve())]
    assert len(rows) == 2 and {row[1] for row in rows} == {"COMPLETED"}, rows
    assert sorted(row[0] for row in rows) == ["work@1", "work@2"] or all("work" in row[0] for row in rows), rows
