"""Adopting an existing DVC project: seed 000's LUMI benchmark stage, ported as it was written.

The team had a dvc.yaml stage calling `srun ... singularity exec /project/project_465000858/klajster.sif`,
their own image. Ported: `orchestrator init`, one params line naming that SIF, and `render --cluster
lumi` runs every task in it, with no images.yaml entry and no profile file. `render --check` warns that
the script the command runs is not among the stage's deps (a staged job on /flash would not find it),
until the stage declares it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from support import dvc_init, require, run_orchestrator

SIF = "/project/project_465000858/klajster.sif"
SCRIPT = "experiments/scripts/evaluate_lightning_classification.py"
CONFIG = "experiments/configs/eval/polemo2/allegro__herbert-base-cased.yaml"

# Seed 000's run_amd_benchmark: its matrix as it was, its srun/singularity line replaced by `orchestrator run`
# (the CPU masks, --ntasks-per-node, --gpus and the binds are the profile's and the plan's now).
DVC_YAML = """\
stages:
  run_amd_benchmark:
    matrix:
      dataset: [ "polemo2" ]
      embedding: [
        "allegro__herbert-base-cased",
      ]
      device_cfg: [
        {"num_nodes": 1, "num_gpus": 1},
        {"num_nodes": 1, "num_gpus": 2},
        {"num_nodes": 1, "num_gpus": 4},
        {"num_nodes": 1, "num_gpus": 8},
        {"num_nodes": 2, "num_gpus": 8},
      ]
    cmd: >-
      orchestrator run
      -N ${item.device_cfg.num_nodes}
      --gpus-per-node ${item.device_cfg.num_gpus}
      -t 24:00:00
      --account project_465000858
      --partition standard-g
      --
      python experiments/scripts/evaluate_lightning_classification.py
      --ds ${item.dataset}
      --embedding-path ${item.embedding}
      --pipeline-params-path experiments/configs/eval/${item.dataset}/${item.embedding}.yaml
      --output-path data/benchmark/amd/${item.embedding}_${item.dataset}_${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}
      --num-nodes ${item.device_cfg.num_nodes}
      --devices ${item.device_cfg.num_gpus}
      --gpu-type amd
      --accelerator gpu
      --retrains 1
"""
DEPS = "    deps:\n      - experiments\n"


def orchestrator(root: Path, *args: str) -> subprocess.CompletedProcess:
    done = run_orchestrator(*args, cwd=root, timeout=300)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def warnings(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("warning: ")]


def test_seed_000s_stage_runs_in_the_teams_own_sif_on_lumi(tmp_path):
    require("shellcheck")
    root = tmp_path / "lepiszcze"
    root.mkdir()
    dvc_init(root, scm=False)
    (root / "dvc.yaml").write_text(DVC_YAML)
    for path in (SCRIPT, CONFIG):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("# the team's code\n")

    init = orchestrator(root, "init")
    assert "params.yaml: added the orchestrator section" in init.stdout
    assert "nothing to do" in orchestrator(root, "init").stdout
    with (root / "params.yaml").open("a") as f:  # the one line porting needs: where the team's image is on LUMI
        f.write(f"clusters: {{lumi: {{orchestrator: {{image: {SIF}}}}}}}\n")

    orchestrator(root, "render", "--cluster", "lumi")
    scripts = sorted((root / ".orchestrator/scripts/lumi").iterdir())
    assert len(scripts) == 5
    for script in scripts:
        text = script.read_text()
        assert "  exec singularity exec \\\n" in text and f"\n    {SIF} \\\n" in text, script.name
        assert "containers/orchestrator.sif" not in text  # not the profile's image
        assert f"python {SCRIPT} --ds polemo2" in text
    two_nodes = [s.read_text() for s in scripts if "#SBATCH --nodes=2\n" in s.read_text()]
    assert len(two_nodes) == 1 and "#SBATCH --partition=standard-g\n" in two_nodes[0]

    # On lumi the job runs from a staged copy of the stage's deps, which name neither the script nor its
    # config: refused before any queue wait, naming both and the deps that fix it, nothing written.
    checked = run_orchestrator("render", "--cluster", "lumi", "--check", cwd=root, timeout=300)
    assert checked.returncode == 2 and "Traceback" not in checked.stderr, checked.stderr
    assert "cannot stage the jobs for cluster 'lumi'" in checked.stderr and "stage run_amd_benchmark (all 5 items)" in checked.stderr
    assert SCRIPT in checked.stderr and CONFIG in checked.stderr and "deps: [experiments]" in checked.stderr, checked.stderr

    (root / "dvc.yaml").write_text(DVC_YAML + DEPS)
    declared = orchestrator(root, "render", "--cluster", "lumi", "--check")
    assert declared.returncode == 0, declared.stderr
    found = [w for w in warnings(declared) if "billed for 8 GPUs" not in w]  # the 1-, 2- and 4-GCD items on whole nodes
    assert len(warnings(declared)) - len(found) == 3, declared.stderr
    assert len(found) == 2, declared.stderr  # the account and the preview's: they are not the stage's
    assert any("account 'project_465000858' is lumi's example" in w for w in found)  # the team's account left as the example
    assert any("until `orchestrator use lumi` writes them there" in w for w in found)  # a preview: params.yaml is local's
    # Laptop or CI: the SIF lives on LUMI, so it is not looked for here, and the note says so.
    assert f"note: image {SIF} not looked for: this is not a login node of lumi" in declared.stdout
    assert "which no dependency pins" in declared.stdout  # the digest is a dependency only if the stage declares it
    assert "5 script(s) for lumi and checked" in declared.stdout
