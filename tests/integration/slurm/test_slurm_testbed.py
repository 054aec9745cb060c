"""`dvc repro` through `orchestrator run` on the real Slurm testbed: real sbatch,
sacct, accounting, CPU masks, failures, and a killed login-node process."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import (
    ACCOUNT,
    ROOT,
    dvc,
    jobs_of,
    make_project,
    release_requeued,
    require_training,
    run_orchestrator,
    wait_for_requeue,
    wait_until_training,
)

pytestmark = pytest.mark.slurm

PROBE = """\
import json, os, sys, time
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
rank = os.environ["SLURM_PROCID"]
keys = (
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_JOB_ACCOUNT", "SLURMD_NODENAME", "ORCH_ITEM", "ORCH_DEVICES",
)
record = {k: os.environ.get(k) for k in keys}
record["cpus"] = sorted(os.sched_getaffinity(0))
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(record, f)
if os.environ.get("PROBE_FAIL") and os.path.basename(out) == os.environ["PROBE_FAIL"]:
    print("probe: failing on purpose", flush=True)
    sys.exit(1)
"""


def probe_project(root: Path, layouts: list[tuple[int, int]], downstream: bool = False, account: str = ACCOUNT) -> Path:
    params = {
        "orchestrator": {"cluster": "testbed", "account": account},
        "layouts": [{"nodes": n, "tasks": t} for n, t in layouts],
    }
    stages = {
        "probe": {
            "matrix": {"layout": "${layouts}"},
            "cmd": "orchestrator run --nodes ${item.layout.nodes} --gpus-per-node ${item.layout.tasks} -- "
            "python probe.py out/${item.layout.nodes}x${item.layout.tasks}",
            "deps": ["probe.py"],
            "outs": [{"out/${item.layout.nodes}x${item.layout.tasks}": {"persist": True}}],
        }
    }
    if downstream:
        stages["summary"] = {
            "cmd": "python -c \"import os; open('summary.txt', 'w').write(str(sorted(os.listdir('out'))))\"",
            "deps": ["out"],
            "outs": ["summary.txt"],
        }
    project = make_project(root, dvc_yaml=yaml.safe_dump({"stages": stages}, sort_keys=False), params_yaml=yaml.safe_dump(params))
    (project / "probe.py").write_text(PROBE)
    return project


def ranks(project: Path, layout: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((project / "out" / layout).glob("rank*.json"))]


def test_dvc_repro_runs_real_slurm_jobs_with_masks_applied(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 2), (2, 2)])
    since = time.time()
    done = dvc(project, "repro")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted job" in done.stderr + done.stdout

    two_nodes = ranks(project, "2x2")
    assert len(two_nodes) == 4
    assert {r["SLURMD_NODENAME"] for r in two_nodes} == {"node1", "node2"}
    assert {r["SLURM_JOB_ACCOUNT"] for r in two_nodes} == {ACCOUNT}
    # The rendered masks 0x1,0x2 really apply: local task 0 on CPU 0, task 1 on CPU 1.
    assert all(r["cpus"] == [int(r["SLURM_LOCALID"])] for r in two_nodes), two_nodes
    assert len(ranks(project, "1x2")) == 2

    jobs = jobs_of(ACCOUNT, since, project, expect=2)
    names = sorted(j[1] for j in jobs)
    assert names == ["probe@layout0", "probe@layout1"] and {j[2] for j in jobs} == {"COMPLETED"}
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"probe@layout0", "probe@layout1"}
    assert all(stage["outs"][0]["path"].startswith("out/") for stage in lock["stages"].values())
    status = run_orchestrator("status", cwd=project)
    assert status.returncode == 0 and status.stdout.count("completed") == 2


def test_a_failing_job_fails_its_stage_and_stops_downstream(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1), (1, 2)], downstream=True)
    done = dvc(project, "repro", env={"PROBE_FAIL": "1x2"})
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "probe@layout1: job" in text and "failed" in text and "exit code 1" in text
    assert "log: " in text and "probe: failing on purpose" in text
    lock = yaml.safe_load((project / "dvc.lock").read_text()) if (project / "dvc.lock").exists() else {"stages": {}}
    assert "probe@layout1" not in lock["stages"] and "summary" not in lock["stages"]
    assert not (project / "summary.txt").exists()


def test_killed_repro_attaches_instead_of_resubmitting(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1), (1, 2)])
    since = time.time()
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", "PROBE_SLEEP": "8"}
    first = subprocess.Popen(
        ["dvc", "repro"], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list((project / ".orchestrator/ledger").glob("*.json")):
        time.sleep(0.5)
    time.sleep(1)
    os.killpg(first.pid, signal.SIGKILL)  # the login-node process dies mid-wait
    first.wait()
    done = dvc(project, "repro", env={"PROBE_SLEEP": "8"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "attached to job" in done.stdout + done.stderr
    jobs = jobs_of(ACCOUNT, since, project, expect=2)
    assert sorted(j[1] for j in jobs) == ["probe@layout0", "probe@layout1"], jobs  # one job per item
    assert len(ranks(project, "1x2")) == 2


def test_preflight_stops_a_rejected_account_before_submitting(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)], account="project_465000001")
    since = time.time()
    done = dvc(project, "repro")
    assert done.returncode != 0
    assert "account 'project_465000001' is not one of" in done.stdout + done.stderr
    assert not list((project / ".orchestrator/ledger").glob("*.json")) or all(
        not json.loads(p.read_text())["records"] for p in (project / ".orchestrator/ledger").glob("*.json")
    )
    assert jobs_of("project_465000001", since) == []


def test_a_missing_image_stops_the_submission_before_sbatch(slurm_testbed, tmp_path):
    """On the login node the image's file system is there to look at: a job whose image is not
    would fail in every task, so it is not submitted."""
    project = probe_project(tmp_path / "p", [(1, 1)])
    profile = tmp_path / "with-image.yaml"
    text = ROOT.joinpath("orchestrator/config/profiles/testbed.yaml").read_text()
    profile.write_text(text + f"container:\n  runtime: apptainer\n  image: {tmp_path}/images/${{USER}}/team.sif\n")
    since = time.time()
    done = run_orchestrator("run", "--cluster", str(profile), "--name", "x", "--", "true", cwd=project, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"the container image {tmp_path}/images/{getpass.getuser()}/team.sif does not exist" in done.stderr, done.stderr
    assert jobs_of(ACCOUNT, since, project) == []


def test_unreachable_controller_and_wrong_cluster_are_clear_errors(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    conf = tmp_path / "elsewhere.conf"
    text = Path("/etc/slurm/slurm.conf").read_text()
    conf.write_text(text + "\nSlurmctldPort=6999\n")  # nobody listens there
    done = run_orchestrator("run", "--name", "x", "--", "true", cwd=project, env={**os.environ, "SLURM_CONF": str(conf)}, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "controller" in done.stderr, done.stderr
    lumi_like = tmp_path / "other.yaml"
    lumi_like.write_text(
        ROOT.joinpath("orchestrator/config/profiles/testbed.yaml").read_text().replace("cluster_name: testbed", "cluster_name: lumi")
    )
    done = run_orchestrator("run", "--cluster", str(lumi_like), "--name", "x", "--", "true", cwd=project, timeout=120)
    assert done.returncode != 0 and "ClusterName is 'testbed', but the profile is for 'lumi'" in done.stderr


def lightning_project(root: Path) -> Path:
    """The shipped pipeline on the testbed profile, its matrix one item of 2 nodes x 2 tasks (the
    smallest layout with ranks on both nodes; a second model would train the same ranks again)."""
    import shutil

    project = make_project(
        root,
        dvc_yaml=(ROOT / "dvc.yaml").read_text(),
        params_yaml=(ROOT / "params.yaml").read_text().replace("cluster: local ", "cluster: testbed "),
    )
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["benchmark"].update(models=["tiny"], device_cfgs=[{"num_nodes": 2, "num_gpus": 2}], max_steps=10)
    params.pop("clusters")  # the matrix is the test's own: no cluster's values to switch to
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return project


@pytest.mark.slow
def test_lightning_ddp_over_two_nodes_on_the_shipped_pipeline(slurm_testbed, tmp_path):
    require_training()
    project = lightning_project(tmp_path / "p")
    since = time.time()
    done = dvc(project, "repro", "benchmark", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    items = {"tiny": "benchmark@pydoc-topics-tiny-device_cfg0"}
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    for model, item in items.items():
        result = project / f"results/benchmark/pydoc-topics/{model}/2x2"
        metrics = json.loads((result / "metrics.json").read_text())
        assert metrics["world_size"] == 4 and metrics["cluster_environment"] == "SLURMEnvironment"
        prov = json.loads((result / "provenance.json").read_text())
        assert prov["profile"] == "testbed" and prov["nodelist"] == "node[1-2]" and prov["nodes"] == 2 and prov["requeues"] == 0
        assert prov["state"] == "completed" and prov["job_id"] in prov["job_ids"] and len(prov["script_sha256"]) == 64
        log = next((project / ".orchestrator/logs").glob(f"{item}-*.log")).read_text()
        ranks = [line.split() for line in log.splitlines() if line.startswith("rank ") and "env=" in line]
        assert sorted(r[1] for r in ranks) == ["0/4", "1/4", "2/4", "3/4"], log[-3000:]
        fields = [dict(kv.split("=", 1) for kv in r[2:]) for r in ranks]
        assert {f["env"] for f in fields} == {"SLURMEnvironment"}
        assert {f["node"] for f in fields} == {"node1", "node2"}
        # Each task's allowed CPUs are its rendered mask: 0x1 for local rank 0, 0x2 for local rank 1.
        assert all(f["cpus"] == f["local_rank"] for f in fields), fields
        assert {o["path"] for o in lock["stages"][item]["outs"]} >= {
            f"{result.relative_to(project)}/model",
            f"{result.relative_to(project)}/metrics.json",
        }
    jobs = jobs_of(ACCOUNT, since, project, expect=len(items))
    assert sorted(j[1] for j in jobs) == sorted(items.values()) and {j[3] for j in jobs} == {ACCOUNT}


def test_detached_submit_returns_at_once_and_records_everything(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1), (1, 2), (2, 1), (2, 2)])
    since = time.time()
    start = time.monotonic()
    env = {**os.environ, "PROBE_SLEEP": "3"}
    first, second = (
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "submit"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    )
    out1, err1 = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert time.monotonic() - start < 30  # it submits and returns; it does not wait for the jobs
    for proc in (first, second):  # nothing of ours stays behind on the login node
        assert subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True).stdout == b""
    deadline = time.time() + 240
    lock = {}
    while time.time() < deadline:
        if (project / "dvc.lock").exists():
            lock = yaml.safe_load((project / "dvc.lock").read_text()) or {}
            if len(lock.get("stages", {})) == 4:
                break
        time.sleep(2)
    assert len(lock.get("stages", {})) == 4, (out1, err1, out2, err2)
    status = dvc(project, "status")
    assert "up to date" in status.stdout, status.stdout
    names = sorted(j[1] for j in jobs_of(ACCOUNT, since, project, expect=5))
    # one job per item although two submits ran at once, and one recording job
    assert names == ["orchestrator-record", "probe@layout0", "probe@layout1", "probe@layout2", "probe@layout3"], names


def test_submit_chains_downstream_items_and_cancel_stops_them(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    stages = yaml.safe_load((project / "dvc.yaml").read_text())
    stages["stages"]["after"] = {
        "cmd": "orchestrator run -- python probe.py later",
        "deps": ["out", "probe.py"],
        "outs": [{"later": {"persist": True}}],
    }
    (project / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    done = run_orchestrator("submit", cwd=project, env={**os.environ, "PROBE_SLEEP": "30"}, timeout=60)
    assert done.returncode == 0, done.stderr
    ledger_after = json.loads((project / ".orchestrator/ledger/after.json").read_text())["records"][-1]
    first = json.loads((project / ".orchestrator/ledger/probe@layout0.json").read_text())["records"][-1]
    assert f"after {first['job_id']}" in done.stderr
    dependency = subprocess.run(["squeue", "-h", "-j", ledger_after["job_id"], "-o", "%E"], capture_output=True, text=True).stdout
    assert f"afterok:{first['job_id']}" in dependency
    cancelled = run_orchestrator("cancel", cwd=project)
    assert cancelled.returncode == 0 and "cancelled 3 job(s)" in cancelled.stdout, cancelled.stdout + cancelled.stderr
    time.sleep(3)
    status = run_orchestrator("status", cwd=project)
    assert status.stdout.count("cancelled") == 3, status.stdout  # two items and the recording job


def test_blocking_srun_form(slurm_testbed, tmp_path):
    """Seed 000's form: the script holds srun until the job ends; DVC records the result."""
    profile = tmp_path / "testbed-srun.yaml"
    profile.write_text((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text().replace("launcher: sbatch", "launcher: srun"))
    project = probe_project(tmp_path / "p", [(2, 2)])
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["orchestrator"]["cluster"] = str(profile)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    done = dvc(project, "repro")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ranks(project, "2x2")) == 4
    (record,) = json.loads((project / ".orchestrator/ledger/probe@layout0.json").read_text())["records"]
    assert record["backend"] == "srun" and record["state"] == "completed"
    assert record["script"].endswith(".sh")
    logs = run_orchestrator("logs", "probe@layout0", cwd=project)
    assert logs.returncode == 0, logs.stderr


@pytest.mark.slow
def test_requeue_signal_checkpoints_requeues_and_resumes(slurm_testbed, tmp_path):
    """The requeue protocol end to end: signal -> checkpoint -> exit 75 -> requeue
    from the batch script -> resume from the checkpoint -> completion. The signal is
    sent by hand here (Slurm's own delivery before a time limit has a 60 s
    resolution); the real time limit, inside the image, is test_lm_testbed.py's."""
    require_training()
    project = lightning_project(tmp_path / "p")
    params = yaml.safe_load((project / "params.yaml").read_text())
    # Steps enough that the signal, 3 s into training, lands mid-way: two ranks on two idle cores take
    # ~30 steps by then, and beside the whole suite ~15; the resumed run trains the rest.
    params["benchmark"].update(models=["tiny"], device_cfgs=[{"num_nodes": 1, "num_gpus": 2}], max_steps=150)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "ORCH_POLL_MAX_S": "2"}
    repro = subprocess.Popen(
        ["dvc", "repro", "benchmark"], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    job_id, log = wait_until_training(project, "benchmark@pydoc-topics-tiny-device_cfg0", repro, 180)
    time.sleep(3)  # some steps into training
    subprocess.run(["scancel", "--signal=USR1", job_id], check=True)
    assert wait_for_requeue(job_id, 120), log.read_text()[-4000:]
    release_requeued(job_id)
    out, _ = repro.communicate(timeout=600)
    assert repro.returncode == 0, out[-4000:]
    text = log.read_text()
    assert "on the requeue signal; exiting 75" in text and "requeueing job" in text, text[-4000:]
    assert "Restoring states from the checkpoint path" in text or "Restored all states from the checkpoint" in text, text[-4000:]
    result = project / "results/benchmark/pydoc-topics/tiny/1x2"
    assert json.loads((result / "metrics.json").read_text())["world_size"] == 2
    assert json.loads((result / "provenance.json").read_text())["requeues"] == 1
    assert not (result / "model/requeue.ckpt").exists() and sorted(p.name for p in (result / "model").iterdir()) == ["model.ckpt"]
    runs = subprocess.run(
        ["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "--format=JobIDRaw,State"], capture_output=True, text=True
    ).stdout.split()
    assert len(runs) == 2 and runs[-1].endswith("COMPLETED"), runs
