"""Faults injected for real on the Slurm testbed: a login-node process killed at random
points, the controller and the database stopped while a job runs, a node set down
under a running job, and a job whose log shows seed 002's InfiniBand port error.

Each test ends with the matrix complete, one successful job per item (sacct), the
retries the tool made recorded in the ledger, and every output intact (checksums).
The counts these tests print are the README's reliability table.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, dvc, fail_node_under, jobs_of, make_project, run_orchestrator

from orchestrator.jobs import ledger

pytestmark = pytest.mark.slurm

# A job that works for a while and writes a file whose content is known in advance
# (so a checksum proves it whole); with FAULT set to a path, the first run fails
# the way the test asks and leaves that path behind.
WORK = """\
import hashlib, os, sys, time
out, seconds = sys.argv[1], float(sys.argv[2])
time.sleep(seconds)
fault = os.environ.get("FAULT")
node = os.environ["SLURMD_NODENAME"]
if fault and not os.path.exists(fault):
    open(fault, "w").write(node)
    if os.environ.get("FAULT_KIND") == "port-error":
        # What NCCL prints on a flaky InfiniBand link (seed 002), as this node.
        print(f"{node}:13939:14102 [0] transport/net_ib.cc:94 NCCL WARN NET/IB : Got async event : port error", flush=True)
        print("RuntimeError: NCCL communicator was aborted", flush=True)
    else:
        print("Traceback (most recent call last):\\nValueError: a bug in the training code", flush=True)
    sys.exit(1)
os.makedirs(out, exist_ok=True)
block = hashlib.sha256(os.path.basename(out).encode()).digest() * 32768  # 1 MiB
with open(os.path.join(out, "data.bin"), "wb") as f:
    for _ in range(4):
        f.write(block)
open(os.path.join(out, "node.txt"), "w").write(node)
"""


def expected_sha256(name: str) -> str:
    block = hashlib.sha256(name.encode()).digest() * 32768
    return hashlib.sha256(block * 4).hexdigest()


def work_project(root: Path, names: list[str], seconds: float, env: str = "") -> Path:
    params = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT}, "items": names, "seconds": seconds}
    stages = {
        "work": {
            "matrix": {"name": "${items}"},
            "cmd": f"{env}orchestrator run --nodes 1 --gpus-per-node 1 -- python work.py out/${{item.name}} ${{seconds}}",
            "deps": ["work.py"],
            "outs": [{"out/${item.name}": {"persist": True}}],
        }
    }
    project = make_project(root, dvc_yaml=yaml.safe_dump({"stages": stages}, sort_keys=False), params_yaml=yaml.safe_dump(params))
    (project / "work.py").write_text(WORK)
    return project


def assert_intact(project: Path, names: list[str]) -> None:
    for name in names:
        data = project / "out" / name / "data.bin"
        assert hashlib.sha256(data.read_bytes()).hexdigest() == expected_sha256(name), f"{data} is not what the job wrote"
    status = dvc(project, "status")
    assert status.returncode == 0 and "up to date" in status.stdout, status.stdout + status.stderr


def report(name: str, **counts) -> None:
    """One line per fault for the README's reliability table (pytest -s shows it)."""
    print(f"\nRELIABILITY {name}: " + json.dumps(counts), file=sys.stderr)


def _mended_dvc_files(project: Path, said: str) -> list[str]:
    """What the guarantees page tells a user whose `dvc repro` stops on one of DVC's own files:
    `dvc repro` killed while DVC rewrote .dvc/tmp/rwlock or dvc.lock in place leaves it cut
    short, and DVC reads both before any stage (or the orchestrator) runs. `orchestrator
    record` mends them and records what finished; the files it mended ([] when DVC stopped
    for another reason)."""
    if not any(words in said for words in DVC_FILE_CUT):
        return []
    mended = run_orchestrator("record", cwd=project, timeout=300)
    assert mended.returncode == 0, mended.stdout + mended.stderr
    text = mended.stdout + mended.stderr
    found = re.findall(r"(rwlock) was cut short by a killed DVC process|(dvc\.lock) could not be read", text)
    assert found, text
    return ["".join(f) for f in found]


# DVC's words for its own files cut short, as the guarantees page lists them.
DVC_FILE_CUT = ("Unable to read RWLock-file", "'./dvc.lock' is invalid", "'./dvc.lock' validation failed")


def test_login_process_killed_at_random_points_converges_without_duplicates(slurm_testbed, tmp_path):
    """`dvc repro` (with its `orchestrator run`s) is SIGKILLed, as a login node kills a
    session, at random moments (planning, sbatch, waiting, DVC recording) at least 20
    times; then one `dvc repro` runs to the end. Whenever a run gets to the end before
    its kill, the matrix is made stale again (a new `seconds`: new scripts), so every
    kill lands on real work however fast the machine is. Every version of every item
    has exactly one job (sacct's jobs are the ledger's, one per fingerprint), all
    completed, and every output is whole."""
    names = ["a", "b", "c"]
    project = work_project(tmp_path / "p", names, seconds=4)
    since = time.time()
    rng = random.Random(20261121)
    kills, rounds, mends = 0, 0, []
    out = tmp_path / "repro.log"
    while kills < 20:
        with out.open("w") as log:
            proc = subprocess.Popen(
                ["dvc", "repro"],
                cwd=project,
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "ORCH_POLL_FIRST_S": "0.2", "ORCH_POLL_MAX_S": "1"},
            )
            try:
                rc = proc.wait(timeout=rng.uniform(0.3, 5.0))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kills += 1
                continue
        if rc != 0 and (files := _mended_dvc_files(project, out.read_text())):
            mends += files
            continue
        assert rc == 0, out.read_text()
        rounds += 1
        params = yaml.safe_load((project / "params.yaml").read_text())
        params["seconds"] = 4 + rounds / 100
        (project / "params.yaml").write_text(yaml.safe_dump(params))
    done = dvc(project, "repro", timeout=600)
    if done.returncode != 0 and (files := _mended_dvc_files(project, done.stdout + done.stderr)):
        mends += files
        done = dvc(project, "repro", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = jobs_of(ACCOUNT, since, project, expect=len(names) * (rounds + 1))
    assert all(job[2] == "COMPLETED" for job in jobs), f"failed jobs: {jobs}"
    book = ledger.Ledger(project)
    for name in names:
        records = book.records(f"work@{name}")
        assert sorted(j[0] for j in jobs if j[1] == f"work@{name}") == sorted(r.job_id for r in records), (
            f"jobs the ledger does not know: {jobs}"
        )
        assert len({r.fingerprint for r in records}) == len(records) == rounds + 1, (
            f"duplicate jobs for one version of work@{name}: {records}"
        )
    assert_intact(project, names)
    adopted = sum(r.adopted for history in book.items().values() for r in history.records)
    report(
        "login process killed", kills=kills, matrix_versions=rounds + 1, jobs=len(jobs), duplicates=0, adopted_orphans=adopted,
        rwlock_mends=mends.count("rwlock"), dvc_lock_mends=mends.count("dvc.lock"),
    )  # fmt: skip


def test_killed_between_sbatch_and_the_ledger_adopts_the_orphaned_job(slurm_testbed, tmp_path):
    """The narrowest window, hit on purpose: an `sbatch` on PATH that submits for real,
    prints the job id, then SIGKILLs the whole `dvc repro` session before the ledger
    records the job. The next `dvc repro` finds that job (by name and working dir)
    and follows it: one job, not two."""
    names = ["a"]
    project = work_project(tmp_path / "p", names, seconds=3)
    shim = tmp_path / "bin"
    shim.mkdir()
    real = subprocess.run(["bash", "-c", "command -v sbatch"], capture_output=True, text=True, check=True).stdout.strip()
    (shim / "sbatch").write_text(f"#!/bin/bash\n{real} \"$@\"\nrc=$?\nkill -9 -- -$(ps -o pgid= $$ | tr -d ' ')\nexit $rc\n")
    (shim / "sbatch").chmod(0o755)
    since = time.time()
    proc = subprocess.run(
        ["dvc", "repro"],
        cwd=project,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"},
    )
    assert proc.returncode == -signal.SIGKILL
    (record_file,) = (project / ".orchestrator/ledger").glob("*.json")
    assert json.loads(record_file.read_text()) == {"records": [], "submitting": json.loads(record_file.read_text())["submitting"]}
    (orphan,) = jobs_of(ACCOUNT, since, project, expect=1)
    done = dvc(project, "repro", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"found job {orphan[0]}" in done.stderr and "interrupted earlier run" in done.stderr
    jobs = jobs_of(ACCOUNT, since, project, expect=1)
    assert [j[0] for j in jobs] == [orphan[0]] and jobs[0][2] == "COMPLETED", jobs
    (rec,) = ledger.Ledger(project).records("work@a")
    assert rec.adopted and rec.job_id == orphan[0]
    assert_intact(project, names)
    report("killed between sbatch and the ledger", kills=1, orphans_adopted=1, duplicates=len(jobs) - 1)


@pytest.mark.testbed_exclusive  # slurmctld and slurmdbd stopped
def test_controller_and_database_down_while_waiting_keeps_waiting(slurm_testbed, tmp_path):
    """slurmctld and slurmdbd are stopped while the job runs (so neither squeue nor
    sacct answers), then started again: `orchestrator run` says it cannot ask, keeps
    polling with backoff, and records the job when it ends: no resubmission."""
    from orchestrator.testbed import cluster

    names = ["a"]
    # Long enough to outlast the controller's stop (seconds after "running on"); the rest of the
    # job, past the restart, is the test's time alone: it holds the whole testbed.
    project = work_project(tmp_path / "p", names, seconds=15)
    bed = cluster.Testbed(slurm_testbed, timeout=180)
    since = time.time()
    log = tmp_path / "repro.err"
    with log.open("w") as err:
        proc = subprocess.Popen(
            ["dvc", "repro"], cwd=project, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "ORCH_POLL_MAX_S": "2"}
        )
    try:
        deadline = time.time() + 120
        while "running on" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.5)
        down_at = time.time()
        bed.stop("slurmctld")
        bed.stop("slurmdbd")
        while "cannot ask the scheduler" not in log.read_text():
            assert proc.poll() is None and time.time() < down_at + 60, log.read_text()
            time.sleep(0.5)
        time.sleep(5)  # a few more failed polls
    finally:
        bed.up()
    assert proc.wait(timeout=300) == 0, log.read_text()
    text = log.read_text()
    jobs = jobs_of(ACCOUNT, since, project, expect=1)
    assert len(jobs) == 1 and jobs[0][2] == "COMPLETED", jobs
    assert text.count("submitted job") == 1 and "retrying in" in text
    assert_intact(project, names)
    report(
        "slurmctld and slurmdbd down while waiting", failed_polls=text.count("cannot ask the scheduler"), jobs=len(jobs), resubmissions=0
    )


def node_of_running_job(log: Path, proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    """(job id, node) once `orchestrator run` says the job is running."""
    deadline = time.time() + timeout
    while True:
        m = re.search(r"job (\d+) running on (node\d)", log.read_text())
        if m:
            return m.group(1), m.group(2)
        assert proc.poll() is None and time.time() < deadline, log.read_text()
        time.sleep(0.3)


def sacct_runs(job_id: str) -> list[list[str]]:
    out = subprocess.run(
        ["sacct", "-X", "-D", "-n", "-P", "-j", job_id, "--format=JobIDRaw,State,NodeList"], capture_output=True, text=True, check=True
    ).stdout
    return [line.split("|") for line in out.splitlines() if line]


@pytest.mark.testbed_exclusive  # a node set down
def test_node_set_down_under_a_running_job_reruns_it_elsewhere(slurm_testbed, tmp_path):
    """The node under a running job is set DOWN (what slurmctld does when a node stops
    answering): the job ends NODE_FAIL, Slurm requeues it (--requeue), `orchestrator
    run` keeps the pending job off the failed node and records the fault; the job
    completes on the other node; one job id, outputs whole."""
    names = ["a"]
    # The node goes down within seconds of "running on"; the job then runs again whole, while this
    # test holds the whole testbed: 12 s each time, not more.
    project = work_project(tmp_path / "p", names, seconds=12)
    log = tmp_path / "repro.err"
    with log.open("w") as err:
        proc = subprocess.Popen(
            ["dvc", "repro"], cwd=project, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "ORCH_POLL_MAX_S": "1"}
        )
    job, node = node_of_running_job(log, proc)
    fail_node_under(job, node, log, proc)
    runs = sacct_runs(job)
    assert [r[1] for r in runs] == ["NODE_FAIL", "COMPLETED"] and runs[0][2] == node and runs[1][2] != node, runs
    (rec,) = ledger.Ledger(project).records("work@a")
    assert rec.job_id == job and rec.fault_nodes == (node,) and node in rec.excluded and rec.requeues == 1
    assert (project / "out/a/node.txt").read_text() != node
    assert_intact(project, names)
    status = subprocess.run(["orchestrator", "status"], cwd=project, capture_output=True, text=True)
    assert f"avoiding {node}" in status.stdout, status.stdout + status.stderr
    report("node set down mid-job", node_failures=1, requeued_by_slurm=1, excluded=list(rec.excluded), jobs=1)


def test_port_error_in_the_log_is_retried_on_another_node_and_a_python_error_is_not(slurm_testbed, tmp_path):
    """Item `net` fails once printing seed 002's NCCL port error as its node: the tool
    classifies it as a node fault and submits it again with that node excluded, and
    the retry completes elsewhere. Item `bug` fails once with a Python exception: one
    job, no retry, the stage fails."""
    fault = tmp_path / "fault-net"
    net = work_project(tmp_path / "net", ["net"], seconds=1, env=f"FAULT={fault} FAULT_KIND=port-error ")
    since = time.time()
    done = dvc(net, "repro", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    bad_node = fault.read_text()
    jobs = jobs_of(ACCOUNT, since, net, expect=2)
    assert [j[2] for j in jobs] == ["FAILED", "COMPLETED"], jobs
    first, retry = ledger.Ledger(net).records("work@net")
    assert first.fault_nodes == (bad_node,) and "port error" in first.fault and retry.excluded == (bad_node,)
    assert (
        subprocess.run(["scontrol", "show", "job", retry.job_id], capture_output=True, text=True).stdout.count(f"ExcNodeList={bad_node}")
        == 1
        or retry.nodelist != bad_node
    )
    assert (net / "out/net/node.txt").read_text() != bad_node
    assert "failed on a node fault (interconnect error on " + bad_node in done.stderr
    assert_intact(net, ["net"])

    bug = work_project(tmp_path / "bug", ["bug"], seconds=1, env=f"FAULT={tmp_path / 'fault-bug'} FAULT_KIND=python ")
    since = time.time()
    failed = dvc(bug, "repro", timeout=300)
    assert failed.returncode != 0 and "ValueError: a bug in the training code" in failed.stderr
    assert len(jobs_of(ACCOUNT, since, bug, expect=1)) == 1 and "node fault" not in failed.stderr
    (rec,) = ledger.Ledger(bug).records("work@bug")
    assert rec.fault is None and rec.state.value == "failed"
    report(
        "interconnect error in the log / Python exception",
        port_error_jobs=len(jobs),
        retried=1,
        excluded=[bad_node],
        python_error_jobs=1,
        python_error_retried=0,
    )
