"""Run on a cluster what `render --cluster` showed, or nothing: a `clusters.testbed` entry whose
matrix differs from the base runs its items once switched (`orchestrator use`, `orchestrator exp
run --cluster`), and `dvc exp run -S orchestrator.cluster=testbed` alone runs nothing."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml
from support import ACCOUNT, jobs_of, make_project, with_git
from support import dvc_exp as dvc

from orchestrator.jobs import ledger

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


def test_only_the_switched_values_run_on_the_testbed(slurm_testbed, tmp_path):
    project = with_git(make_project(tmp_path / "p", dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump(PARAMS)), "switch")
    since = time.time()
    # The cluster named, its values not: DVC would resolve the base's one item; nothing runs.
    refused = dvc(project, "exp", "run", "--temp", "-n", "unswitched", "-S", "orchestrator.cluster=testbed")
    assert refused.returncode != 0
    assert "orchestrator use testbed" in refused.stdout + refused.stderr
    # Refused before anything was planned: no ledger entry, no job (a job submitted would be in
    # sacct from its submission on).
    assert not (project / ".orchestrator/ledger").exists()
    assert jobs_of(ACCOUNT, since, project, inside=True) == []

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
    switched = subprocess.run(["orchestrator", "use", "testbed"], cwd=project, capture_output=True, text=True)
    assert switched.returncode == 0, switched.stdout + switched.stderr
    repro = subprocess.run(["dvc", "repro"], cwd=project, capture_output=True, text=True, timeout=400)
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert sorted(p.name for p in (project / "out").iterdir()) == ["m1.json", "m2.json"]
    # Exactly the overlay's two items ran from the workspace, each as the job its ledger names
    # (the temporary experiment's jobs ran in their own folders).
    jobs = jobs_of(ACCOUNT, since, project, expect=2)
    book = ledger.Ledger(project)
    assert sorted((job[1], job[2]) for job in jobs) == [("work@1", "COMPLETED"), ("work@2", "COMPLETED")], jobs
    assert sorted(job[0] for job in jobs) == sorted(r.job_id for item in ("work@1", "work@2") for r in book.records(item)), jobs
