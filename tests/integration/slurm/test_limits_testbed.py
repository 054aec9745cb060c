"""A site's MaxSubmitJobs on the real testbed: a matrix larger than the limit goes in waves,
each submitted by the recording job of the one before, every item run once and recorded; with
no room even for one item and the recording job, the submission is refused before anything is
queued, naming the limit (tests/unit/jobs/test_detached.py: the choices against a fake Slurm)."""

from __future__ import annotations

import collections
import getpass
import os
import re
import subprocess
import time

import pytest
import yaml
from support import GIT_ENV, dvc, exp_metrics, jobs_of, run_orchestrator, sweep_project
from test_arrays_testbed import shared_profile, sweep, wait_ended
from test_slurm_testbed import probe_project

pytestmark = pytest.mark.slurm

# The tests' own account: MaxSubmitJobs is set on its association (this user with it), so the limit
# binds these tests' jobs only and the other tests share the testbed meanwhile, as on a site where
# each project's allocation has its own limit.
LIMITED = "project_465000859"  # of the form the testbed profile asks for, as LUMI's


@pytest.fixture
def limited(slurm_testbed):
    """LIMITED, an account of this user on the testbed (made the first time). Each test lifts the limit it sets."""
    user = getpass.getuser()
    shown = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={LIMITED}", f"user={user}", "format=account"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if not shown.strip():
        cluster = f"cluster={slurm_testbed.cluster_name}"
        subprocess.run(["sacctmgr", "-i", "add", "account", LIMITED, cluster], check=True, capture_output=True)
        subprocess.run(["sacctmgr", "-i", "add", "user", user, f"account={LIMITED}", cluster], check=True, capture_output=True)
    return LIMITED


def _max_submit(value: int) -> None:
    where = ["where", f"user={getpass.getuser()}", f"account={LIMITED}"]
    subprocess.run(["sacctmgr", "-i", "modify", "user", *where, "set", f"maxsubmitjobs={value}"], check=True, capture_output=True)


def _our_queue_drained(timeout: float = 120) -> None:
    """Wait for the account's jobs from earlier tests to end: they count against the limit, and the
    waves' sizes asserted here assume none does (a recording job may still be finishing)."""
    deadline = time.time() + timeout
    argv = ["squeue", "-h", "-u", getpass.getuser(), "-A", LIMITED]
    while subprocess.run(argv, capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline, "jobs of earlier tests are still queued"
        time.sleep(2)


def _points_saved(project) -> int:
    """How many of the sweep's points are experiments yet. While a recording job saves one, DVC's
    `exp show` fails ("unknown Git revision 'refs/exps/exec/EXEC_BASELINE'", a ref that exists
    only meanwhile): that reads as not yet."""
    try:
        return len([name for name in exp_metrics(project) if name.startswith("grid-")])
    except subprocess.CalledProcessError:
        return 0


def test_a_matrix_over_maxsubmitjobs_runs_in_waves_each_item_once(limited, tmp_path):
    project = sweep(tmp_path / "p", 12, shared_profile(tmp_path), account=limited, array_parallel=6)
    _our_queue_drained()
    since = time.time()
    _max_submit(5)
    try:
        done = run_orchestrator("submit", cwd=project, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "allows 5 queued or running jobs (MaxSubmitJobs), 0 are: 4 of 12 item(s) submitted now, the other 8 in waves" in done.stderr
        assert done.stdout.count("next wave") == 8, done.stdout
        # Waves of 4, 3, 3 and 2 items (the running recording job counts against the limit), each with its recording job.
        jobs = wait_ended(project, since, 16, timeout=600, account=limited)
    finally:
        _max_submit(-1)
    runs = collections.Counter((project / "runs.log").read_text().split())
    assert runs == {str(i): 1 for i in range(12)}, (runs, jobs)
    names = collections.Counter(j[1] for j in jobs)
    assert names["orchestrator-record"] == 4 and all(j[2] == "COMPLETED" for j in jobs), jobs
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert sorted(lock["stages"]) == sorted(f"work@{i}" for i in range(12))
    assert dvc(project, "status").stdout.strip() == "Data and pipelines are up to date."
    # Each wave's recording job records its items (dvc.lock grows wave by wave) and submits the next;
    # the last one, with no item left, runs the final `dvc repro`.
    logs = [p.read_text() for p in sorted((project / ".orchestrator/logs").glob("record-*.log"), key=lambda p: int(p.stem[7:]))]
    assert [log.count("then submits the next wave") for log in logs] == [1, 1, 0, 0], logs
    # dvc.lock grows wave by wave: the first wave's items are recorded before the last wave runs. (A task
    # that has just ended may not be in Slurm's accounting yet: a later wave's job records it then.)
    assert re.search(r"^work@\d+ +recorded", logs[0], re.M), logs[0]
    assert "didn't change, skipping" in logs[-1] and "didn't change, skipping" not in logs[0]  # dvc repro's words
    # A second submit finds everything done.
    again = run_orchestrator("submit", cwd=project)
    assert again.returncode == 0 and "nothing to submit" in again.stdout, again.stderr


def test_no_room_for_an_item_and_the_recording_job_is_refused_up_front(limited, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)], account=limited)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["layouts"] = [{"nodes": 1, "tasks": 1, "i": i} for i in range(200)]
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    pipeline = (project / "dvc.yaml").read_text().replace("${item.layout.nodes}x${item.layout.tasks}", "${item.layout.i}")
    (project / "dvc.yaml").write_text(pipeline)
    since = time.time()
    _max_submit(1)
    try:
        done = run_orchestrator("submit", cwd=project)
    finally:
        _max_submit(-1)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "200 item(s) and the recording job would need 201 jobs, but the association of" in done.stderr
    assert "allows 1 queued or running (MaxSubmitJobs)" in done.stderr and "nothing was submitted" in done.stderr
    assert jobs_of(limited, since, project) == []
    assert not (project / ".orchestrator/ledger").exists() or not any((project / ".orchestrator/ledger").glob("probe@*.json"))


def test_a_sweep_over_maxsubmitjobs_goes_in_waves_and_every_point_becomes_an_experiment(limited, tmp_path):
    project = sweep_project(tmp_path / "p", {"cluster": "testbed", "account": limited})
    _our_queue_drained()
    env = {**os.environ, **GIT_ENV}  # the recording jobs commit experiments (sbatch passes the environment on)
    since = time.time()
    _max_submit(3)
    try:
        argv = ["orchestrator", "sweep", "-S", "sweep.lr=0.1,0.2,0.3,0.4", "--name", "grid"]
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 of 4 item(s) submitted now, the other 2 in waves" in done.stderr, done.stderr
        assert done.stdout.count("(1 in a later wave)") == 2, done.stdout
        deadline = time.time() + 600
        while _points_saved(project) < 4 and time.time() < deadline:
            time.sleep(3)
    finally:
        _max_submit(-1)
    # Waves of 2, 1 and 1 points (the running recording job counts against the limit), each with its
    # recording job; the points' jobs run in their copies of the project, under it.
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", limited, "--format=JobName,State,WorkDir"]
    deadline = time.time() + 60  # slurmdbd records a job that just ended a while later (seen: over 10 s)
    while True:
        rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()]
        jobs = [row for row in rows if row[2].startswith(str(project.resolve()))]
        if len(jobs) >= 7 or time.time() > deadline:
            break
        time.sleep(2)
    assert collections.Counter(j[0] for j in jobs)["orchestrator-record"] == 3 and len(jobs) == 7, jobs
    scores = exp_metrics(project)
    assert {f"grid-{i}": scores.get(f"grid-{i}") for i in range(4)} == {"grid-0": 0.2, "grid-1": 0.4, "grid-2": 0.6, "grid-3": 0.8}, scores
