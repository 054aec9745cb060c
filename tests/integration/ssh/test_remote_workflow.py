"""Issue 20's acceptance path in one go, the way a user works from a workstation: a clone of the
shipped pipeline (its benchmark matrix, Lightning training) submitted to the Slurm testbed through the
loopback sshd standing in for the login node, the connection cut right after the first sbatch and the
submit run again (each item submitted once), `status` followed to the end, `logs` read, the results
fetched, and `dvc metrics show`, `dvc plots show` and `orchestrator report` run on the workstation.
The pieces have their own tests beside this one (test_remote_submit, test_remote_fetch); this one
proves they compose on the real pipeline. The `login` fixture: conftest.py beside this."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, ROOT, jobs_of, require_training, with_git

pytestmark = [pytest.mark.ssh, pytest.mark.slurm, pytest.mark.slow]

ALIAS = "login-node"  # the login fixture's Host alias (conftest.py beside this)
ITEMS = ["benchmark@pydoc-topics-tiny-device_cfg0", "benchmark@pydoc-topics-tiny-device_cfg1"]
RESULTS = ["results/benchmark/pydoc-topics/tiny/1x1", "results/benchmark/pydoc-topics/tiny/1x2"]


def shipped_workstation(where: Path, profile: Path) -> Path:
    """A git clone of the shipped pipeline whose cluster is the login fixture's profile: the benchmark matrix
    of the tiny model on 1x1 and 1x2, a few steps."""
    where.mkdir(parents=True)
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(ROOT / name, where / name)
    shutil.copytree(ROOT / "experiments", where / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    (where / "containers").mkdir()
    shutil.copy(ROOT / "containers/none.digest", where / "containers/none.digest")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["orchestrator"].update(cluster=str(profile), account=ACCOUNT, login_host=ALIAS, image="none")
    params.pop("clusters")  # the matrix is the test's own: no cluster's values to switch to
    params["benchmark"].update(models=["tiny"], device_cfgs=[{"num_nodes": 1, "num_gpus": 1}, {"num_nodes": 1, "num_gpus": 2}])
    params["benchmark"].update(max_steps=10)
    (where / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return with_git(where, "the project")


def _wait_completed(login, project: Path, rows: int, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while True:
        done = login.orchestrator("status", "--remote", cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        if done.stdout.count("completed") >= rows or "failed" in done.stdout or time.monotonic() > deadline:
            return done.stdout
        time.sleep(3)


def test_the_shipped_matrix_from_a_workstation_submit_follow_fetch_and_report(slurm_testbed, login, tmp_path):
    require_training()
    project = shipped_workstation(tmp_path / "ws" / "proj", login.profile)
    remote = login.cluster_root / "proj"
    since = time.time()

    # Cut off right after the first item's sbatch: the network and the workstation's process both go.
    first = login.popen("submit", "--remote", "benchmark", cwd=project)
    deadline = time.monotonic() + 180
    while not any(f"{ITEMS[0]}: job" in p.read_text() for p in remote.glob(".orchestrator/remote/*-submit-*/log")):
        assert first.poll() is None and time.monotonic() < deadline, "the remote submit never got to sbatch, or ended first"
        time.sleep(0.02)
    login.stop_master()
    first.kill()
    first.communicate()

    again = login.orchestrator("submit", "--remote", "benchmark", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    table = _wait_completed(login, project, rows=3)  # two items and the job that records them
    assert table.count("completed") == 3, table
    names = Counter(j[1] for j in jobs_of(ACCOUNT, since, remote, expect=3))
    assert names == {ITEMS[0]: 1, ITEMS[1]: 1, "orchestrator-record": 1}, names

    logs = login.orchestrator("logs", "--remote", ITEMS[1], cwd=project)
    assert logs.returncode == 0, logs.stdout + logs.stderr
    assert "rank 1/2" in logs.stdout and "SLURMEnvironment" in logs.stdout, logs.stdout[-3000:]
    assert not (project / "results").exists()  # until fetched, the results are on the cluster only

    fetched = login.orchestrator("fetch", cwd=project)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert sorted(line.split(":")[0] for line in fetched.stdout.splitlines() if line.startswith("fetched ")) == [
        f"fetched {item}" for item in ITEMS
    ], fetched.stdout
    there = yaml.safe_load((remote / "dvc.lock").read_text())["stages"]
    here = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert {name: here[name] for name in ITEMS} == {name: there[name] for name in ITEMS}
    status = subprocess.run(["dvc", "status", *ITEMS, "--json"], cwd=project, capture_output=True, text=True)
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr
    for result in RESULTS:
        assert (project / result / "model").is_dir() and (project / result / "metrics.json").is_file()
        assert json.loads((project / result / "provenance.json").read_text())["state"] == "completed"

    metrics = subprocess.run(["dvc", "metrics", "show", "--json"], cwd=project, capture_output=True, text=True)
    assert metrics.returncode == 0, metrics.stderr
    shown = json.dumps(json.loads(metrics.stdout))
    assert all(f"{result}/metrics.json" in shown for result in RESULTS), shown[:2000]
    curves = f"{RESULTS[1]}/dvclive/plots/metrics"
    plots = subprocess.run(["dvc", "plots", "show", "--json", curves], cwd=project, capture_output=True, text=True)
    assert plots.returncode == 0 and '"step"' in plots.stdout, plots.stdout[-2000:] + plots.stderr

    report = login.orchestrator("report", "benchmark", "--out", "reports", cwd=project)
    assert report.returncode == 0, report.stdout + report.stderr
    summary = (project / "reports" / "summary.md").read_text()
    assert "(2 runs, 0 missing)" in summary, summary
    rows = [line.split(" | ")[:3] for line in summary.splitlines() if line.startswith("| 1x")]
    assert [row[0] for row in rows] == ["| 1x1", "| 1x2"] and all(float(row[2]) > 0 for row in rows), rows  # samples/s of each run
    assert (project / "reports" / "report.html").stat().st_size > 0
