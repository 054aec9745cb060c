"""Issue 53's acceptance: the workstation loop of docs/how-to/workstation.md, five rounds, the tool
installed from its wheel on both sides, the loopback sshd as the login node (the `login` fixture,
conftest.py beside this) and the Slurm testbed as the cluster.

Each round is what a user does: change something (a param, the matrix), `submit --remote`, follow it
(`status --remote --watch`), `fetch`, `git add -A && git commit`. One round cancels an item while it
runs, one presses Ctrl-C in the submit and runs it again. No round runs a command on the login node
by hand. After each: every item ran exactly once for its version (sacct), `dvc status` is clean but
for the cancelled item, and no result's provenance calls its code dirty."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, GIT_ENV, ROOT, jobs_of

pytestmark = [pytest.mark.ssh, pytest.mark.slurm, pytest.mark.slow]

TRAIN = """\
import json, os, sys, time

lr, seed = float(sys.argv[1]), int(sys.argv[2])
with open({runs!r}, "a") as f:  # which item ran in which job: an array's tasks are named after the array
    f.write(f"{{lr}} {{seed}} {{os.environ['SLURM_JOB_ID']}}\\n")
hold = os.path.join({hold!r}, str(lr))
while os.path.exists(hold):  # the test holds an item here to act while it runs
    time.sleep(0.1)
os.makedirs(f"out/{{lr}}", exist_ok=True)
with open(f"out/{{lr}}/metrics.json", "w") as f:
    json.dump({{"lr": lr, "seed": seed, "score": round(1 - lr + seed / 100, 3)}}, f)
"""
# docs/get-started/my-project.sh's pipeline, as the page writes it: metrics and provenance in git (cache:
# false), so the workstation tracks results once fetched and every later run there rewrites tracked files.
PIPELINE = re.search(r"cat > dvc.yaml <<'YAML'\n(.*?)^YAML$", (ROOT / "docs/get-started/my-project.sh").read_text(), re.S | re.M)[1]


class Workstation:
    """The user's clone and the wheel's `orchestrator` on PATH, its ssh the login fixture's."""

    def __init__(self, login, project: Path, venv: Path) -> None:
        self.login, self.project = login, project
        self.env = {**login.env, **GIT_ENV, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        self.env.pop("PYTHONPATH", None)

    def run(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True, text=True, timeout=timeout)

    def ok(self, *argv: str, timeout: float = 600) -> str:
        done = self.run(*argv, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(argv)} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def params(self, **train) -> None:
        data = yaml.safe_load((self.project / "params.yaml").read_text())
        data["train"].update(train)
        (self.project / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    def commit(self, message: str) -> None:
        self.ok("git", "add", "-A")
        self.ok("git", "commit", "-q", "-m", message)

    def follow_and_fetch(self) -> str:
        """`status --remote --watch` to the end, then `fetch`: what fetch said."""
        self.ok("orchestrator", "status", "--remote", "--watch")
        return self.ok("orchestrator", "fetch")

    def changed(self) -> list[str]:
        done = self.run("dvc", "status", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return sorted(json.loads(done.stdout))


def the_project(where: Path, login, hold: Path, runs: Path) -> Path:
    where.mkdir(parents=True)
    (where / "train.py").write_text(TRAIN.format(hold=str(hold), runs=str(runs)))
    (where / "dvc.yaml").write_text(PIPELINE)
    settings = {"cluster": str(login.profile), "account": ACCOUNT, "login_host": "login-node"}
    (where / "params.yaml").write_text(yaml.safe_dump({"orchestrator": settings, "train": {"lrs": [0.1, 0.2], "seed": 0}}, sort_keys=False))
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "my project"]):
        subprocess.run(argv, cwd=where, check=True, capture_output=True, env={**os.environ, **GIT_ENV})
    return where


def test_five_rounds_of_the_workstation_loop_need_no_login_by_hand(slurm_testbed, login, wheel_venv, tmp_path):
    hold, runs = tmp_path / "hold", tmp_path / "runs.log"
    hold.mkdir()
    runs.touch()
    ws = Workstation(login, the_project(tmp_path / "ws" / "my-project", login, hold, runs), wheel_venv)
    remote = login.cluster_root / "my-project"
    since = time.time()
    counted = {"jobs": 0, "runs": 0}

    def ran(**items: str) -> None:
        """This round's runs are exactly ``items`` (train@<lr> -> its job's state in sacct), one run each,
        and the cluster got no item job beyond them (an array's tasks each a row of sacct)."""
        wanted = {f"train@{lr.replace('_', '.')}": state for lr, state in items.items()}
        lines = runs.read_text().splitlines()[counted["runs"] :]
        counted["runs"] += len(lines)
        deadline = time.monotonic() + 180  # slurmdbd may record an ended job some seconds later
        while True:
            jobs = [r for r in jobs_of(ACCOUNT, since, remote) if r[1] != "orchestrator-record"]
            if len(jobs) >= counted["jobs"] + len(wanted) or time.monotonic() > deadline:
                break
            time.sleep(2)
        new, counted["jobs"] = jobs[counted["jobs"] :], len(jobs)
        states = {r[0]: r[2].split()[0] for r in jobs}  # "CANCELLED by 0": by whom is not the test's
        got = Counter(f"train@{line.split()[0]}" for line in lines)
        assert got == Counter(list(wanted)), (lines, jobs)
        assert {f"train@{line.split()[0]}": states.get(line.split()[2]) for line in lines} == wanted, (lines, jobs)
        assert len(new) == len(wanted), (new, lines)

    def clean_provenance(*lrs: str) -> None:
        for lr in lrs:
            prov = json.loads((ws.project / "out" / lr / "provenance.json").read_text())
            assert prov["git_dirty"] is False and prov["state"] == "completed", prov

    def records_completed() -> None:
        records = [r for r in jobs_of(ACCOUNT, since, remote) if r[1] == "orchestrator-record"]
        assert records and all(state == "COMPLETED" for _, _, state, _ in records), records

    # The tool on the login node, from this wheel-installed one (its dependencies the node's own).
    ws.ok("orchestrator", "remote", "install", "--system-site-packages")

    # Round 1: the first submit.
    ws.ok("orchestrator", "submit", "--remote")
    fetched = ws.follow_and_fetch()
    ran(**{"0_1": "COMPLETED", "0_2": "COMPLETED"})
    assert ws.changed() == [] and "fetched train@0.1" in fetched and "fetched train@0.2" in fetched
    clean_provenance("0.1", "0.2")
    ws.commit("round 1: results")

    # Round 2: one more item; the committed results of round 1 go back with the sync, only the new item runs.
    ws.params(lrs=[0.1, 0.2, 0.3])
    ws.commit("round 2: lr 0.3 too")
    ws.ok("orchestrator", "submit", "--remote")
    ws.follow_and_fetch()
    ran(**{"0_3": "COMPLETED"})
    assert ws.changed() == []
    clean_provenance("0.1", "0.2", "0.3")
    ws.commit("round 2: results")

    # Round 3: a new seed for every item; one of them cancelled while it runs. The runs there rewrite the
    # results the workstation committed: the next sync must keep them, not stop.
    ws.params(seed=1)
    ws.commit("round 3: seed 1")
    (hold / "0.2").touch()
    ws.ok("orchestrator", "submit", "--remote")
    deadline = time.monotonic() + 600
    while "0.2 1 " not in runs.read_text():  # it runs, held: cancel it now
        assert time.monotonic() < deadline, runs.read_text()
        time.sleep(0.5)
    ws.ok("orchestrator", "cancel", "--remote", "train@0.2")
    (hold / "0.2").unlink()
    fetched = ws.follow_and_fetch()
    ran(**{"0_1": "COMPLETED", "0_2": "CANCELLED", "0_3": "COMPLETED"})
    assert ws.changed() == ["train@0.2"], fetched  # the cancelled one: its results are round 2's
    clean_provenance("0.1", "0.3")
    records_completed()
    ws.commit("round 3: results")

    # Round 4: the cancelled item again, its submit stopped with Ctrl-C and run again (it follows or runs after).
    first = subprocess.Popen(
        ["orchestrator", "submit", "--remote"], cwd=ws.project, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    said = ""
    while "running `orchestrator submit" not in said:
        line = first.stderr.readline()
        assert line, f"the submit ended before it ran there: {said}"
        said += line
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode in (0, 130), said + err  # 0: it had ended already
    ws.ok("orchestrator", "submit", "--remote")
    ws.follow_and_fetch()
    ran(**{"0_2": "COMPLETED"})
    assert ws.changed() == []
    clean_provenance("0.1", "0.2", "0.3")
    ws.commit("round 4: results")

    # Round 5: an item leaves the matrix and the others run with a new seed; fetch skips the one gone.
    ws.params(lrs=[0.2, 0.3], seed=2)
    ws.commit("round 5: without 0.1, seed 2")
    ws.ok("orchestrator", "submit", "--remote")
    fetched = ws.follow_and_fetch()
    ran(**{"0_2": "COMPLETED", "0_3": "COMPLETED"})
    assert "skipped train@0.1: not a stage of this project's dvc.yaml" in fetched, fetched
    assert ws.changed() == []
    clean_provenance("0.2", "0.3")
    ws.commit("round 5: results")
    records_completed()
    # What the login node holds is the workstation's last commit, and its own tracked files are as committed.
    there = subprocess.run(["git", "-C", str(remote), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert there == ws.ok("git", "rev-parse", "HEAD~1").strip()
