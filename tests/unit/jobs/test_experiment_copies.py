"""Jobs of DVC experiments run in DVC's own copies of the project (`dvc exp run --queue`,
`--temp`): the same experiment run again in a new copy (its worker died) follows its job,
found in the experiment's ledger in the project, and brings the outputs the job made in
the earlier copy; another experiment never shares its job. Against a fake Slurm; the
real queue is in tests/integration/slurm/test_experiments_testbed.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fakes import fake_slurm, ok
from support import run_fake

from orchestrator.jobs import experiment, ledger, submission

PARAMS = "orchestrator:\n  cluster: testbed\n  account: project_465000858\n"


@pytest.fixture
def parent(tmp_path) -> Path:
    root = tmp_path / "project"
    (root / ".dvc/tmp/exps").mkdir(parents=True)
    (root / "params.yaml").write_text(PARAMS)
    return root


def copy_of(parent: Path, name: str) -> Path:
    """A DVC temporary copy of the project, as DVC makes one per run of an experiment."""
    copy = parent / ".dvc/tmp/exps" / name
    copy.mkdir()
    shutil.copy(parent / "params.yaml", copy / "params.yaml")
    return copy


def test_the_same_experiment_in_a_new_copy_follows_its_job_and_another_does_not(parent, monkeypatch):
    monkeypatch.setenv("DVC_ROOT", str(parent))
    monkeypatch.setenv("DVC_EXP_NAME", "lr-01")
    first = copy_of(parent, "tmpaaaa")
    outcome, _ = run_fake(first, fake_slurm())  # job 101, completed
    assert outcome.record.job_id == "101" and outcome.record.workspace == str(first.resolve())
    assert not (first / ".orchestrator/ledger").exists()  # the experiment's ledger is in the project
    assert [r.job_id for r in ledger.Ledger(parent, folder=parent / ".orchestrator/exps/lr-01/ledger").records("bench@x")] == ["101"]

    shutil.rmtree(first)  # the worker died; DVC's next run of the experiment gets a new copy
    second = copy_of(parent, "tmpbbbb")
    runner = fake_slurm(sbatch=ok("102\n"))
    outcome, lines = run_fake(second, runner)
    assert outcome.attached and outcome.record.job_id == "101" and runner.called("sbatch") == []
    assert "attached to job 101" in lines[0]

    monkeypatch.setenv("DVC_EXP_NAME", "lr-02")  # another experiment with the very same script
    third = copy_of(parent, "tmpcccc")
    runner = fake_slurm(sbatch=ok("103\n"))
    outcome, _ = run_fake(third, runner)
    assert not outcome.attached and outcome.record.job_id == "103" and len(runner.called("sbatch")) == 1


def test_outside_an_experiment_copy_nothing_changes(parent, monkeypatch):
    monkeypatch.setenv("DVC_ROOT", str(parent))
    monkeypatch.setenv("DVC_EXP_NAME", "lr-01")
    assert experiment.detect(parent) is None  # `dvc exp run` in the workspace itself
    monkeypatch.delenv("DVC_EXP_NAME")
    assert experiment.detect(copy_of(parent, "tmpdddd")) is None


def test_outputs_made_in_an_earlier_copy_are_brought(parent, tmp_path):
    earlier = copy_of(parent, "tmpaaaa")
    (earlier / "out/model").mkdir(parents=True)
    (earlier / "out/model/weights.bin").write_bytes(b"w" * 100)
    (earlier / "out/metrics.json").write_text('{"score": 1}')
    later = copy_of(parent, "tmpbbbb")

    class Ws:
        root = later

    sub = submission.Submission(Ws(), None, later / "s.sbatch", "", "fp", ("out/model", "out/metrics.json", "out/absent"))  # type: ignore[arg-type]
    record = ledger.Record("bench@x", "fp", "slurm", "101", "testbed", "s.sbatch", 0.0, workspace=str(earlier))
    assert submission.bring_outputs(sub, record) == ["out/model", "out/metrics.json"]
    assert (later / "out/model/weights.bin").read_bytes() == b"w" * 100 and (later / "out/metrics.json").read_text() == '{"score": 1}'
    assert sub.missing() == ["out/absent"]
    same = ledger.Record("bench@x", "fp", "slurm", "101", "testbed", "s.sbatch", 0.0, workspace=str(later))
    assert submission.bring_outputs(sub, same) == []  # its own copy: nothing to bring
