"""Jobs inside the image on the real testbed: every task in `apptainer exec`, with
container variables leaked into the launching environment, Slurm's rank variables
reaching Lightning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, make_project
from test_slurm_testbed import ACCOUNT, dvc, require_torch

pytestmark = [pytest.mark.slurm, pytest.mark.apptainer]

LEAKED = {"SINGULARITY_BIND": "/leaked/singularity/path", "APPTAINER_BIND": "/leaked/apptainer/path", "APPTAINER_BINDPATH": "/leaked/too"}
PROBE = """\
import json, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
keys = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_JOB_ID", "APPTAINER_CONTAINER", "APPTAINER_BIND", "SINGULARITY_BIND")
record = {k: os.environ.get(k) for k in keys}
record["mounts"] = mounts
with open(os.path.join(out, "rank" + os.environ["SLURM_PROCID"] + ".json"), "w") as f:
    json.dump(record, f)
"""


def container_profile(tmp: Path, image: Path) -> Path:
    data = yaml.safe_load((ROOT / "orchestrator/profiles/testbed.yaml").read_text())
    data["name"] = "testbed-apptainer"
    data["container"] = {"runtime": "apptainer", "image": str(image)}
    data["storage"] = {"workdir_root": str(tmp / "fast") + "/root"}
    path = tmp / "testbed-apptainer.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_tasks_run_in_the_image_with_declared_binds_and_rank_variables(slurm_testbed, ci_image, tmp_path):
    require_torch()
    profile = container_profile(tmp_path, ci_image)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["orchestrator"] = {"cluster": str(profile), "account": ACCOUNT}
    params["benchmark"].update(models=["tiny"], device_cfgs=[{"num_nodes": 2, "num_gpus": 2}], max_steps=10)
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    stages["stages"]["probe"] = {
        "cmd": "orchestrator run --nodes 2 --gpus-per-node 2 -- python probe.py out",
        "deps": ["probe.py"],
        "outs": [{"out": {"persist": True}}],
    }
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump(stages, sort_keys=False), params_yaml=yaml.safe_dump(params, sort_keys=False))
    (project / "probe.py").write_text(PROBE)
    import shutil

    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))

    done = dvc(project, "repro", env=LEAKED, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    workspace = str(project.resolve())
    fast = str(tmp_path / "fast")
    ranks = [json.loads(p.read_text()) for p in sorted((project / "out").glob("rank*.json"))]
    assert sorted(r["SLURM_PROCID"] for r in ranks) == ["0", "1", "2", "3"]
    for r in ranks:
        assert r["APPTAINER_CONTAINER"] == str(ci_image)  # really inside the image
        assert r["SLURM_NTASKS"] == "4" and r["SLURM_JOB_ID"]
        assert workspace in r["mounts"] and any(m.startswith(fast) for m in r["mounts"])
        assert not any(m.startswith("/leaked") for m in r["mounts"])  # the leaked binds were cleared
        # Apptainer tells the task what it bound: exactly the declared binds (the
        # workspace and the fast working dir), none of the leaked ones.
        for name in ("APPTAINER_BIND", "SINGULARITY_BIND"):
            assert set(r[name].split(",")) == {workspace, f"{fast}/root/probe"}, r[name]

    metrics = json.loads((project / "results/benchmark/pydoc-topics/tiny/2x2/metrics.json").read_text())
    assert metrics["world_size"] == 4 and metrics["cluster_environment"] == "SLURMEnvironment"
    log = next((project / ".orchestrator/logs").glob("benchmark@*-*.log")).read_text()
    lines = [line for line in log.splitlines() if line.startswith("rank ") and "env=SLURMEnvironment" in line]
    assert len(lines) == 4, log[-3000:]
    script = next((project / ".orchestrator/scripts").rglob("benchmark@*.sbatch")).read_text()
    assert "exec apptainer exec" in script and str(ci_image) in script
