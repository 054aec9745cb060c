"""What passes here runs there: a fresh project whose script imports a helper module its stage
does not declare is refused by `render --cluster lumi --check` (the job would end in an
ImportError on LUMI, after its queue wait), and `dvc repro` with orchestrator.stage_locally
refuses it the same way here; declared, both pass, and the staged local run brings its
outputs back."""

from __future__ import annotations

import json

from support import dvc, dvc_init, one_error, orchestrator_here

TRAIN = """\
import json, os, sys
from utils import sigmoid

lr = float(sys.argv[1])
os.makedirs(f"out/{lr}", exist_ok=True)
with open(f"out/{lr}/metrics.json", "w") as f:
    json.dump({"lr": lr, "score": sigmoid(lr), "cwd": os.getcwd()}, f)
"""
UTILS = "import math\n\n\ndef sigmoid(x):\n    return 1 / (1 + math.exp(-x))\n"
DVC_YAML = """\
stages:
  train:
    matrix:
      lr: [0.1]
    cmd: orchestrator run -- python3 src/train.py ${item.lr}
    deps: [DEPS]
    params: [orchestrator.cluster]
    metrics:
      - out/${item.lr}/metrics.json:
          cache: false
          persist: true
"""
PARAMS = """\
orchestrator:
  cluster: local
  image: none
  stage_locally: true
clusters:
  lumi:
    orchestrator: {account: project_465001234, image: /project/project_465001234/team.sif}
"""
FIX = "add them to the stage's deps in dvc.yaml, e.g. `deps: [src/train.py, src/utils.py]`, or the folder that holds them: `deps: [src]`"


def test_an_undeclared_helper_is_refused_for_lumi_and_here_and_runs_once_declared(tmp_path):
    project = tmp_path / "my-project"
    (project / "src").mkdir(parents=True)
    (project / "src/train.py").write_text(TRAIN)
    (project / "src/utils.py").write_text(UTILS)
    (project / "params.yaml").write_text(PARAMS)
    (project / "dvc.yaml").write_text(DVC_YAML.replace("DEPS", "src/train.py"))
    dvc_init(project, scm=False)

    render = orchestrator_here("render", "--cluster", "lumi", "--check", "--no-shellcheck", cwd=project)
    one_error(render, "cannot stage the jobs for cluster 'lumi'", "src/utils.py (imported by src/train.py)", FIX)
    assert not (project / ".orchestrator/scripts/lumi").exists()  # nothing half-written

    repro = dvc(project, "repro")
    assert repro.returncode != 0
    assert "cannot run train@0.1 on local" in repro.stderr and "src/utils.py (imported by src/train.py)" in repro.stderr, repro.stderr
    assert FIX in repro.stderr and "Traceback" not in repro.stderr and not (project / "out").exists()

    (project / "dvc.yaml").write_text(DVC_YAML.replace("DEPS", "src"))
    assert orchestrator_here("render", "--cluster", "lumi", "--check", "--no-shellcheck", cwd=project).returncode == 0
    repro = dvc(project, "repro")
    assert repro.returncode == 0, repro.stdout + repro.stderr
    for lr in ("0.1",):
        metrics = json.loads((project / f"out/{lr}/metrics.json").read_text())
        assert metrics["lr"] == float(lr) and metrics["cwd"] != str(project)  # ran from the staged copy, outputs back
        assert "/orchestrator-" in metrics["cwd"] and metrics["cwd"].endswith("/work")
