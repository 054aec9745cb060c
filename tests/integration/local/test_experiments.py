"""DVC's experiments with orchestrated stages on `local`: `dvc exp run` in the workspace,
`--temp`, and `--queue` with `dvc queue start`, DVC's sweep syntax included. Queued and
temporary experiments run in DVC's own copies of the project under .dvc/tmp/exps/, where
DVC_ROOT names the repository they came from, not the copy."""

from __future__ import annotations

from support import dvc_exp as dvc
from support import exp_metrics, sweep_project, wait_for_queue


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
    assert dvc(project, "queue", "start", "-j", "3").returncode == 0
    status = wait_for_queue(project, 3)
    assert status.count("Success") == 3, status
    scores = exp_metrics(project)
    assert sorted(scores.values()) == [0.2, 0.4, 0.6], scores
