"""`orchestrator smoke` on the real testbed: every shape of the shipped pipeline passes in under
two minutes each, and a missing package and an undeclared file fail with the rank's message
before any item's job is submitted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from support import ACCOUNT, ROOT, make_project


def smoke_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`orchestrator ARGS` from this checkout, with no PYTHONPATH in its environment: the jobs
    inherit it, and one naming this checkout would put its experiments/ ahead of the staged copy
    (which the probe rightly reports as a failure)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); runpy.run_module('orchestrator', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def smoke_jobs(project: Path, since: float) -> list[tuple[str, str, int]]:
    """(job name, state, elapsed seconds) of the jobs submitted from ``project`` since ``since``."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 3600))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobName,State,ElapsedRaw,WorkDir"]
    rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines() if line]
    return [(r[0], r[1], int(r[2] or 0)) for r in rows if r[3] == str(project.resolve())]


def test_every_shape_of_the_shipped_pipeline_passes(slurm_testbed, tmp_path):
    project = make_project(tmp_path / "p")
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    switched = smoke_cli("use", "testbed", cwd=project)
    assert switched.returncode == 0, switched.stderr
    since = time.time()
    done = smoke_cli("smoke", cwd=project)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    # The testbed's matrix: benchmark and lm at 1x2 and 2x2, the two CPU stages at 1x1.
    assert "6 of 6 shape(s) passed" in text, text
    for shape in ("benchmark 1x2 cpu on debug", "benchmark 2x2 cpu on debug", "lm 2x2 cpu on debug", "lm-tokenizer 1x1 cpu on debug"):
        assert f"passed: {shape}:" in text, text
    jobs = smoke_jobs(project, since)
    assert len(jobs) == 6 and all(name.startswith("smoke-") and state == "COMPLETED" for name, state, _ in jobs), jobs
    assert all(seconds < 120 for _, _, seconds in jobs), jobs
    # Every rank ran from the staged copy and saw the CPU mask it was planned.
    two_nodes = [json.loads(p.read_text()) for p in project.glob(".orchestrator/smoke/jobs/lm-2x2-*/ranks/rank-*.json")]
    assert len(two_nodes) == 4
    checks = {c["check"]: c["message"] for r in two_nodes for c in r["checks"]}
    assert "/work/experiments/lm/__main__.py" in checks["entry"] and "as planned" in checks["cpus"], checks
    # Nothing of an item: no outputs, no ledger, no dvc.lock.
    assert not (project / "results").exists() and not (project / "dvc.lock").exists()
    assert not (project / ".orchestrator/ledger").exists()
    assert len(list(project.glob(".orchestrator/smoke/verdicts/*.json"))) == 6

    # submit's line, from the verdicts kept (asked of the plans, without submitting anything).
    sys.path.insert(0, str(ROOT))
    from orchestrator.jobs import smoke
    from orchestrator.scripts.workspace import Workspace
    from orchestrator.util.runner import SubprocessRunner

    ws = Workspace.open(project, None, SubprocessRunner())
    plans = {name: ws.plan(job) for name, job in ws.jobs.items() if name.startswith("lm@")}
    line = smoke.summary_line(ws, plans)
    assert line is not None and line.startswith("smoke-tested 2 of 2 shape(s) (lm 1x2 cpu on debug: passed 0 min ago"), line


def persist(out: str) -> dict:
    return {out: {"persist": True}}


BROKEN = {
    # python -m: the module imports a package the environment lacks.
    "app/__init__.py": "",
    "app/train.py": 'import json\nimport not_installed_anywhere\n\nif __name__ == "__main__":\n    print(json)\n',
    # python script.py under staging: helpers.py is in the project but not in the stage's deps.
    "train.py": "import helpers\n\nhelpers.main()\n",
    "helpers.py": "def main():\n    pass\n",
}


def test_a_missing_package_and_an_undeclared_file_fail_with_the_rank_message(slurm_testbed, tmp_path):
    stages = {
        "missing": {"cmd": "orchestrator run -N 1 -G 1 -- python -m app.train", "deps": ["app"], "outs": [persist("out-missing")]},
        "undeclared": {"cmd": "orchestrator run -N 1 -G 1 -- python train.py", "deps": ["train.py"], "outs": [persist("out-undeclared")]},
    }
    params = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT}}
    project = make_project(tmp_path / "p", yaml.safe_dump({"stages": stages}), yaml.safe_dump(params))
    for name, text in BROKEN.items():
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text(text)
    since = time.time()
    done = smoke_cli("smoke", cwd=project)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "FAILED: missing 1x1 cpu on debug: rank 0 on " in text, text
    # The guarded module is imported (not run): the error names the line of the staged copy that failed.
    assert "entry: ModuleNotFoundError: No module named 'not_installed_anywhere' (" in text and "/work/app/train.py:2)" in text, text
    assert "FAILED: undeclared 1x1 cpu on debug: rank 0 on " in text, text
    assert "train.py imports helpers: ModuleNotFoundError: No module named 'helpers' (the staged copy" in text, text
    assert "0 of 2 shape(s) passed" in text and "Traceback" not in text
    # Before any item's job: only the smoke jobs ran, and nothing of an item was written.
    assert sorted(name.split("-")[1] for name, _, _ in smoke_jobs(project, since)) == ["missing", "undeclared"]
    assert not (project / "out-missing").exists() and not (project / "dvc.lock").exists()
