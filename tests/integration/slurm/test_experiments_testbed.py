"""DVC's experiments with orchestrated stages on the real testbed: `dvc exp run --temp`
and a `--queue` sweep run by `dvc queue start -j 3`, each experiment's item a Slurm job
submitted from DVC's own copy of the project, with its own staging folder."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from support import ACCOUNT, GIT_ENV, exp_metrics, queue_start, sweep_project, wait_for_queue
from support import dvc_exp as dvc

pytestmark = pytest.mark.slurm


def test_a_queued_sweep_and_a_temp_experiment_run_as_slurm_jobs(slurm_testbed, tmp_path):
    project = sweep_project(tmp_path / "p", {"cluster": "testbed", "account": ACCOUNT})
    since = time.time()
    queued = dvc(project, "exp", "run", "--queue", "-S", "sweep.lr=0.1,0.2,0.3")
    assert queued.returncode == 0, queued.stdout + queued.stderr
    queue_start(project, 3)
    status = wait_for_queue(project, 3, timeout=400)
    assert status.count("Success") == 3, status
    done = dvc(project, "exp", "run", "--temp", "-S", "sweep.lr=0.5", "-n", "temp", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    scores = exp_metrics(project)
    assert sorted(scores.values()) == [0.2, 0.4, 0.6, 1.0], scores
    # One job per experiment, each from its own copy of the project (.dvc/tmp/exps/...).
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobIDRaw,State,WorkDir"]
    deadline = time.time() + 60  # slurmdbd records a job that just ended a while later (seen: over 10 s)
    while True:
        rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()]
        ours = [row for row in rows if row[-1].startswith(str(project.resolve()) + "/.dvc/tmp/exps/")]
        if len(ours) >= 4 or time.time() > deadline:
            break
        time.sleep(1)
    assert len(ours) == 4 and len({row[-1] for row in ours}) == 4, rows
    assert {row[1] for row in ours} == {"COMPLETED"}


def test_a_detached_sweep_becomes_dvc_experiments_without_a_login_process(slurm_testbed, tmp_path):
    """`orchestrator sweep -S ...` returns at once; the jobs and then the sweep's recording
    job run with nothing on the login node; `dvc exp show` then lists each point with its
    params and metric, and `dvc exp apply` brings one back."""
    project = sweep_project(tmp_path / "p", {"cluster": "testbed", "account": ACCOUNT})
    env = {**os.environ, **GIT_ENV}  # the recording job commits experiments (sbatch passes the environment on)
    started = time.monotonic()
    done = subprocess.run(
        ["orchestrator", "sweep", "-S", "sweep.lr=0.1,0.2,0.3", "--name", "grid"], cwd=project, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 60 and "sweep grid: 3 points; recording job" in done.stdout, done.stdout
    recorder = done.stdout.strip().rsplit(" ", 1)[-1]
    deadline = time.time() + 300
    while subprocess.run(["squeue", "-h", "-j", recorder], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline, "the recording job did not end"
        time.sleep(2)
    log = (project / f".orchestrator/logs/record-{recorder}.log").read_text()
    assert "3 saved, 0 not finished, 0 failed" in log, log
    scores = exp_metrics(project)
    assert {name: scores.get(name) for name in ("grid-0", "grid-1", "grid-2")} == {"grid-0": 0.2, "grid-1": 0.4, "grid-2": 0.6}, scores
    applied = dvc(project, "exp", "apply", "grid-2")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "lr: 0.3" in (project / "params.yaml").read_text()
    assert json.loads((project / "out/m0.json").read_text())["score"] == 0.6


SLOW_SWEEP = """\
stages:
  work:
    matrix:
      seed: [0]
    cmd: >-
      orchestrator run --
      python3 -c "import json, os, time; time.sleep(40); os.makedirs('out', exist_ok=True);
      json.dump({'lr': ${sweep.lr}, 'score': 2 * ${sweep.lr}}, open('out/m${item.seed}.json', 'w'))"
    params: [sweep]
    metrics:
      - out/m${item.seed}.json:
          cache: false
          persist: true
"""


def test_an_experiment_run_again_after_its_worker_was_killed_follows_its_job(slurm_testbed, tmp_path):
    """`dvc queue kill` stops a queued experiment's run (as a worker's death would) while its
    Slurm job runs; the same experiment queued again (same name) follows that job instead of
    submitting a second one, and ends with the job's metric."""
    project = sweep_project(tmp_path / "p", {"cluster": "testbed", "account": ACCOUNT})
    (project / "dvc.yaml").write_text(SLOW_SWEEP)
    subprocess.run(["git", "commit", "-qam", "slow"], cwd=project, env={**os.environ, **GIT_ENV}, check=True)
    since = time.time()
    assert dvc(project, "exp", "run", "--queue", "-n", "again", "-S", "sweep.lr=0.3").returncode == 0
    queue_start(project, 1)
    deadline = time.time() + 180
    while not (running := _running(project)):
        assert time.time() < deadline, "the experiment's job did not start"
        time.sleep(1)
    killed = dvc(project, "queue", "kill", "again")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    wait_for_queue(project, 1, timeout=120)
    dvc(project, "queue", "remove", "--failed")
    assert _running(project) == running  # the job outlived the experiment's run
    assert dvc(project, "exp", "run", "--queue", "-n", "again", "-S", "sweep.lr=0.3").returncode == 0
    queue_start(project, 1)
    status = wait_for_queue(project, 1, timeout=300)
    assert status.count("Success") == 1, status
    assert exp_metrics(project).get("again") == 0.6
    time.sleep(5)  # slurmdbd lists a job that just ended a little later
    assert _states(project, since) == [(running[0], "COMPLETED")]  # that job, and no second one


def _running(project) -> list[str]:
    """The running jobs of the project's experiment copies, as squeue says at once (slurmdbd
    may list a short job's start only when it has ended)."""
    rows = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %Z"], capture_output=True, text=True, check=True).stdout
    copies = str(project.resolve()) + "/.dvc/tmp/exps/"
    return [job for job, workdir in (line.split(maxsplit=1) for line in rows.splitlines()) if workdir.startswith(copies)]


def _states(project, since: float) -> list[tuple[str, str]]:
    """States of the jobs submitted from the project's experiment copies since ``since``."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobIDRaw,State,WorkDir"]
    rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()]
    return [(row[0], row[1].split()[0]) for row in rows if row[-1].startswith(str(project.resolve()) + "/.dvc/tmp/exps/")]


def test_exp_run_with_the_testbeds_values_runs_there_and_dvc_lists_them_exactly(slurm_testbed, tmp_path):
    """`orchestrator exp run --cluster testbed` on an overlay of a float spelled 3e-4, a
    backslash (`\\w+`) and an interpolation (`${oc.env:...}`, which DVC's -S would expand into
    the commit): the item runs as a testbed job with 3e-4, and `dvc exp show` lists each value
    exactly as the overlay has it; the secret is nowhere in git."""
    from support import SWEEP_DVC_YAML, make_project, run_orchestrator, with_git

    params_yaml = (
        "orchestrator:\n  cluster: local\n  account: null\n"
        "sweep:\n  lr: 0.1\n  pattern: x\n  note: none\n"
        "clusters:\n  testbed:\n    orchestrator:\n      account: " + ACCOUNT + "\n"
        "    sweep:\n      lr: 3e-4\n      pattern: '\\w+'\n      note: ${oc.env:ORCH_TEST_SECRET}\n"
    )
    project = with_git(make_project(tmp_path / "p", dvc_yaml=SWEEP_DVC_YAML, params_yaml=params_yaml), "values")
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", "ORCH_TEST_SECRET": "s3cr3t-value", **GIT_ENV}
    done = run_orchestrator("exp", "run", "--cluster", "testbed", "-n", "on-testbed", cwd=project, env=env, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert exp_metrics(project)["on-testbed"] == 6e-4  # the job computed it from 3e-4
    exps = json.loads(dvc(project, "exp", "show", "--json").stdout)
    (rev,) = [r for b in exps for e in b.get("experiments") or [] for r in e.get("revs") or [] if r.get("name") == "on-testbed"]
    values = rev["data"]["params"]["params.yaml"]["data"]
    assert values["sweep"] == {"lr": 3e-4, "pattern": "\\w+", "note": "${oc.env:ORCH_TEST_SECRET}"}, values
    assert values["orchestrator"]["cluster"] == "testbed"
    history = subprocess.run(["git", "log", "-p", "--all"], cwd=project, capture_output=True, text=True, check=True).stdout
    assert "s3cr3t-value" not in history
    assert _slurm_jobs_of(project)  # it ran as a Slurm job on the testbed


def _slurm_jobs_of(project) -> list[str]:
    deadline = time.time() + 60  # slurmdbd lists a job that just ended a while later
    while True:
        argv = ["sacct", "-X", "-n", "-P", "-S", "now-1hour", "-A", ACCOUNT, "--format=JobIDRaw,WorkDir"]
        rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()]
        ours = [row[0] for row in rows if row[-1].startswith(str(project.resolve()))]
        if ours or time.time() > deadline:
            return ours
        time.sleep(2)
