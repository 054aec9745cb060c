"""Jobs inside the image on the real testbed: every task in `apptainer exec`, with
container and torchrun variables leaked into the launching environment, Slurm's rank variables
reaching Lightning and torch.distributed's (RANK, WORLD_SIZE, ...) the task, and the job's code
(the image holds none) imported from its staged copy of the workspace, first on PYTHONPATH."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from support import (
    ACCOUNT,
    ROOT,
    container_profile,
    dvc,
    make_project,
    require_training,
)

from orchestrator.scripts.job_environment import workspace_tag

pytestmark = [pytest.mark.slurm, pytest.mark.apptainer]

LEAKED = {"SINGULARITY_BIND": "/leaked/singularity/path", "APPTAINER_BIND": "/leaked/apptainer/path", "APPTAINER_BINDPATH": "/leaked/too"}
# A torchrun's, from the shell the job was submitted in: Lightning would pick TorchElasticEnvironment.
LEAKED |= {"TORCHELASTIC_RUN_ID": "leaked", "GROUP_RANK": "0"}
PROBE = """\
import json, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
keys = (
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_JOB_ID",
    "APPTAINER_CONTAINER", "APPTAINER_BIND", "SINGULARITY_BIND", "PYTHONPATH",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "GROUP_RANK",
)
record = {k: os.environ.get(k) for k in keys}
record["mounts"] = mounts
record["cwd"] = os.getcwd()
with open(os.path.join(out, "rank" + os.environ["SLURM_PROCID"] + ".json"), "w") as f:
    json.dump(record, f)
"""


def container_project(
    tmp: Path, image: Path, device_cfgs: list[dict], max_steps: int, stages: dict | None = None, batch_size: int = 16
) -> Path:
    """The shipped pipeline on the testbed with every task in the CI image: params name
    the image, and its digest file (what `container build` writes) is in place."""
    profile = container_profile(tmp, image)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["orchestrator"] = {"cluster": str(profile), "account": ACCOUNT, "image": "ci"}
    params["benchmark"].update(models=["tiny"], device_cfgs=device_cfgs, max_steps=max_steps, batch_size=batch_size)
    pipeline = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    pipeline["stages"].update(stages or {})
    project = make_project(
        tmp / "p", dvc_yaml=yaml.safe_dump(pipeline, sort_keys=False), params_yaml=yaml.safe_dump(params, sort_keys=False)
    )
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(image.with_suffix(".digest"), project / "containers/ci.digest")
    return project


@pytest.mark.slow
def test_tasks_run_in_the_image_with_declared_binds_and_rank_variables(slurm_testbed, ci_image, tmp_path):
    require_training()
    probe = {
        "cmd": "orchestrator run --nodes 2 --gpus-per-node 2 -- python probe.py out",
        "deps": ["probe.py", "containers/${orchestrator.image}.digest"],
        "outs": [{"out": {"persist": True}}],
    }
    project = container_project(tmp_path, ci_image, [{"num_nodes": 2, "num_gpus": 2}], 10, {"probe": probe})
    (project / "probe.py").write_text(PROBE)

    done = dvc(project, "repro", "benchmark", "probe", env=LEAKED, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    workspace = str(project.resolve())
    fast = tmp_path / "fast" / "root"
    staged = f"{fast}/probe.{workspace_tag(workspace)}"  # the item's folder, per workspace
    ranks = [json.loads(p.read_text()) for p in sorted((project / "out").glob("rank*.json"))]
    assert sorted(r["SLURM_PROCID"] for r in ranks) == ["0", "1", "2", "3"]
    for r in ranks:
        assert r["APPTAINER_CONTAINER"] == str(ci_image)  # really inside the image
        assert r["SLURM_NTASKS"] == "4" and r["SLURM_JOB_ID"]
        # torch.distributed's names, set outside the image from Slurm's and passed in; the torchrun ones cleared.
        assert (r["RANK"], r["LOCAL_RANK"], r["NODE_RANK"]) == (r["SLURM_PROCID"], r["SLURM_LOCALID"], r["SLURM_NODEID"])
        assert (r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["MASTER_ADDR"]) == ("4", "2", "node1")
        assert r["MASTER_PORT"] == str(15000 + int(r["SLURM_JOB_ID"]) % 10000)
        assert r["TORCHELASTIC_RUN_ID"] is None and r["GROUP_RANK"] is None
        assert workspace in r["mounts"] and any(m.startswith(str(fast)) for m in r["mounts"])
        assert not any(m.startswith("/leaked") for m in r["mounts"])  # the leaked binds were cleared
        # Apptainer tells the task what it bound: exactly the declared binds (the
        # workspace and the fast working dir), none of the leaked ones.
        for name in ("APPTAINER_BIND", "SINGULARITY_BIND"):
            assert set(r[name].split(",")) == {workspace, staged}, r[name]
        # Staging: the task ran from the copy on fast storage, and its outputs came back.
        assert r["cwd"] == f"{staged}/work", r["cwd"]
        assert r["PYTHONPATH"] == f"{staged}/work", r["PYTHONPATH"]  # the copy's code first; the host's PYTHONPATH kept out
    assert Path(staged).parent.is_dir() and not Path(staged).exists()  # scratch cleaned up after success

    metrics = json.loads((project / "results/benchmark/pydoc-topics/tiny/2x2/metrics.json").read_text())
    assert metrics["world_size"] == 4 and metrics["cluster_environment"] == "SLURMEnvironment"
    log = next((project / ".orchestrator/logs").glob("benchmark@*-*.log")).read_text()
    lines = [line for line in log.splitlines() if line.startswith("rank ") and "env=SLURMEnvironment" in line]
    assert len(lines) == 4, log[-3000:]
    script = next((project / ".orchestrator/scripts").rglob("benchmark@*.sbatch")).read_text()
    assert "exec apptainer exec" in script and str(ci_image) in script

    # The image digest is a dependency of the stages: a new image makes them stale.
    assert dvc(project, "status", "benchmark", "probe", "--json").stdout.strip() == "{}"
    (project / "containers/ci.digest").write_text("content-sha256:" + "0" * 64 + "\n")  # what a build of other inputs writes
    stale = json.loads(dvc(project, "status", "benchmark", "probe", "--json").stdout)
    assert set(stale) == {"benchmark@pydoc-topics-tiny-device_cfg0", "probe"}, stale
    assert all({"changed deps": {"containers/ci.digest": "modified"}} in v for v in stale.values()), stale
