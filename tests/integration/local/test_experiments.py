"""DVC's experiments with orchestrated stages on `local`: `dvc exp run` in the workspace,
`--temp`, and `--queue` with `dvc queue start`, DVC's sweep syntax included. Queued and
temporary experiments run in DVC's own copies of the project under .dvc/tmp/exps/, where
DVC_ROOT names the repository they came from, not the copy."""

from __future__ import annotations

import os

from support import GIT_ENV, exp_metrics, queue_start, sweep_project, wait_for_queue
from support import dvc_exp as dvc


def test_exp_run_in_the_workspace_and_with_temp(tmp_path):
    project = sweep_project(tmp_path / "p", {"cluster": "local"})
    done = dvc(project, "exp", "run", "-S", "sweep.lr=0.5", "-n", "here")
    assert done.returncode == 0, done.stdout + done.stderr
    done = dvc(project, "exp", "run", "--temp", "-S", "sweep.lr=0.25", "-n", "temp")
    assert done.returncode == 0, done.stdout + done.stderr
    assert exp_metrics(project) == {"here": 1.0, "temp": 0.5}
    # The temporary copy is gone; its item ran from it, not from the workspace.
    assert not list((project / ".dvc/tmp/exps").glob("**/dvc.yaml"))
    assert dvc(project, "exp", "apply", "temp").returncode == 0
    assert '"score": 0.5' in (project / "out/m0.json").read_text()


def test_a_queued_sweep_runs_with_dvc_queue_start(tmp_path):
    project = sweep_project(tmp_path / "p", {"cluster": "local"})
    queued = dvc(project, "exp", "run", "--queue", "-S", "sweep.lr=0.1,0.2,0.3")
    assert queued.returncode == 0, queued.stdout + queued.stderr
    assert queued.stdout.count("Queued experiment") == 3
    queue_start(project, 3)
    status = wait_for_queue(project, 3)
    assert status.count("Success") == 3, status
    scores = exp_metrics(project)
    assert sorted(scores.values()) == [0.2, 0.4, 0.6], scores


def test_exp_run_with_a_clusters_values_gives_dvc_exactly_the_overlays_values(tmp_path):
    """`orchestrator exp run --cluster testbed` with values DVC's -S grammar mangled: a float
    written 3e-4 (sent as text, it came back text), a backslash (`\\w+` came back `\\\\w+`).
    `dvc exp show` lists exactly the overlay's values. An interpolation (`${oc.env:...}`), which
    DVC's -S would expand into params.yaml and the experiment's commit, runs with params.yaml
    switched instead: the experiment lists it as written, the secret is nowhere, and a --temp
    run puts the workspace's params.yaml back byte for byte."""
    import json
    import subprocess

    import yaml
    from support import ACCOUNT, make_project, run_orchestrator, with_git

    overlay = {"lr": 3e-4, "pattern": "\\w+", "note": 'say "hi"', "orchestrator": {"account": ACCOUNT}}
    base = {"orchestrator": {"cluster": "local", "account": None}, "lr": 0.1, "pattern": "x", "note": "none"}
    stage = {"cmd": "python3 -c \"import os; os.makedirs('out', exist_ok=True); open('out/m.json', 'w').write('{}')\""}
    stage |= {"params": ["lr", "pattern", "note"], "outs": ["out"]}
    pipeline = yaml.safe_dump({"stages": {"show": stage}})
    project = make_project(tmp_path / "p", dvc_yaml=pipeline, params_yaml=yaml.safe_dump({**base, "clusters": {"testbed": overlay}}))
    with_git(project, "values")
    env = {**os.environ, "ORCH_TEST_SECRET": "s3cr3t-value", **GIT_ENV}

    def shown(name: str) -> dict:
        exps = [e for entry in json.loads(dvc(project, "exp", "show", "--json").stdout) for e in entry.get("experiments") or []]
        (exp,) = [rev for e in exps for rev in e.get("revs") or [] if rev.get("name") == name]
        return exp["data"]["params"]["params.yaml"]["data"]

    done = run_orchestrator("exp", "run", "--cluster", "testbed", "-n", "on-testbed", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    values = shown("on-testbed")
    assert {k: values[k] for k in ("lr", "pattern", "note")} == {k: overlay[k] for k in ("lr", "pattern", "note")}, values
    assert values["orchestrator"] == {"cluster": "testbed", "account": ACCOUNT}

    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=project, check=True)
    text = (project / "params.yaml").read_text().replace('say "hi"', "${oc.env:ORCH_TEST_SECRET}")
    (project / "params.yaml").write_text(text)
    subprocess.run(["git", "commit", "-qam", "an interpolation"], cwd=project, env=env, check=True)
    done = run_orchestrator("exp", "run", "--cluster", "testbed", "--temp", "-n", "interpolated", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "params.yaml switched to testbed" in done.stderr
    assert shown("interpolated")["note"] == "${oc.env:ORCH_TEST_SECRET}"
    assert (project / "params.yaml").read_text() == text  # --temp: the workspace's file put back
    history = subprocess.run(["git", "log", "-p", "--all"], cwd=project, capture_output=True, text=True, check=True).stdout
    assert "s3cr3t-value" not in history and "s3cr3t-value" not in (project / "params.yaml").read_text()
    # your own -S would make DVC resolve the whole file: refused, nothing run
    refused = run_orchestrator("exp", "run", "--cluster", "testbed", "-n", "leak", "-S", "lr=0.5", cwd=project, env=env)
    assert refused.returncode == 2 and "holds ${...}, which DVC's -S resolves" in refused.stderr, refused.stderr
    assert "leak" not in dvc(project, "exp", "list", "--all-commits").stdout
