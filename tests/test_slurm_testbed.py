"""`dvc repro` through `orchestrator run` on the real Slurm testbed: real sbatch,
sacct, accounting, CPU masks, failures, and a killed login-node process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import make_project

pytestmark = pytest.mark.slurm

ACCOUNT = "project_465000858"
PROBE = """\
import json, os, sys, time
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
rank = os.environ["SLURM_PROCID"]
record = {k: os.environ.get(k) for k in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_JOB_ACCOUNT", "SLURMD_NODENAME", "ORCH_ITEM", "ORCH_DEVICES")}
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
            "cmd": "orchestrator run --nodes ${item.layout.nodes} --gpus-per-node ${item.layout.tasks} -- python probe.py out/${item.layout.nodes}x${item.layout.tasks}",
            "deps": ["probe.py"],
            "outs": [{"out/${item.layout.nodes}x${item.layout.tasks}": {"persist": True}}],
        }
    }
    if downstream:
        stages["summary"] = {"cmd": "python -c \"import os; open('summary.txt', 'w').write(str(sorted(os.listdir('out'))))\"", "deps": ["out"], "outs": ["summary.txt"]}
    project = make_project(root, dvc_yaml=yaml.safe_dump({"stages": stages}, sort_keys=False), params_yaml=yaml.safe_dump(params))
    (project / "probe.py").write_text(PROBE)
    return project


def dvc(project: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["dvc", *args], cwd=project, capture_output=True, text=True, timeout=timeout, env={**os.environ, "ORCH_POLL_MAX_S": "2", **(env or {})})


def jobs_of(account: str, since: float) -> list[list[str]]:
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 1))
    done = subprocess.run(["sacct", "-X", "-n", "-P", "-S", start, "-A", account, "--format=JobIDRaw,JobName,State,Account"], capture_output=True, text=True, check=True)
    return [line.split("|") for line in done.stdout.splitlines() if line]


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

    jobs = jobs_of(ACCOUNT, since)
    names = sorted(j[1] for j in jobs)
    assert names == ["probe@layout0", "probe@layout1"] and {j[2] for j in jobs} == {"COMPLETED"}
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"probe@layout0", "probe@layout1"}
    assert all(stage["outs"][0]["path"].startswith("out/") for stage in lock["stages"].values())
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status"], cwd=project, capture_output=True, text=True)
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
    first = subprocess.Popen(["dvc", "repro"], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not list((project / ".orchestrator/ledger").glob("*.json")):
        time.sleep(0.5)
    time.sleep(1)
    os.killpg(first.pid, signal.SIGKILL)  # the login-node process dies mid-wait
    first.wait()
    (project / ".dvc/tmp/rwlock").unlink(missing_ok=True)  # a killed dvc leaves its lock behind
    done = dvc(project, "repro", env={"PROBE_SLEEP": "8"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "attached to job" in done.stdout + done.stderr
    jobs = jobs_of(ACCOUNT, since)
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


def test_unreachable_controller_and_wrong_cluster_are_clear_errors(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    conf = tmp_path / "elsewhere.conf"
    text = Path("/etc/slurm/slurm.conf").read_text()
    conf.write_text(text + "\nSlurmctldPort=6999\n")  # nobody listens there
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--name", "x", "--", "true"], cwd=project, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": str(conf)}, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "controller" in done.stderr, done.stderr
    lumi_like = tmp_path / "other.yaml"
    lumi_like.write_text(Path(__file__).parent.parent.joinpath("orchestrator/profiles/testbed.yaml").read_text().replace("cluster_name: testbed", "cluster_name: lumi"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--cluster", str(lumi_like), "--name", "x", "--", "true"], cwd=project, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "ClusterName is 'testbed', but the profile is for 'lumi'" in done.stderr
