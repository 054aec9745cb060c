"""`orchestrator sweep` against a fake Slurm, with real git and DVC: the points DVC's -S syntax
makes, their copies of the project, one submission for all, the points saved as DVC experiments
once their jobs succeeded, a failed point submitted again alone. The real scheduler is in
tests/integration/slurm/test_arrays_testbed.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeSlurm
from support import exp_metrics, sweep_project_on_testbed

from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.jobs import status, sweep
from orchestrator.util.runner import SubprocessRunner

REAL = ("git", "dvc")


class SlurmAndGit:
    """git and dvc for real, the Slurm commands from the fake."""

    def __init__(self, slurm: FakeSlurm) -> None:
        self.slurm, self.real = slurm, SubprocessRunner()

    def run(self, argv, *, input=None, timeout=None):
        return (self.real if argv[0] in REAL else self.slurm.runner).run(argv, input=input, timeout=timeout)

    def spawn(self, argv, cwd=None):
        raise AssertionError(f"nothing is spawned: {argv}")

    def which(self, name):
        return self.real.which(name) if name in REAL else self.slurm.runner.which(name)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    return sweep_project_on_testbed(tmp_path, monkeypatch)


def finish(project: Path, slurm: FakeSlurm, made: sweep.Sweep, failing: set[str] = frozenset()) -> None:
    """Every job of the sweep ends; the succeeded ones wrote their metrics, as the real jobs would."""
    for point in made.points:
        copy = project / point.folder
        if not copy.is_dir():
            continue
        lr = float(point.overrides["params.yaml"][0].split("=")[1])
        for path in (copy / ".orchestrator/ledger").glob("work@0.json"):
            job = json.loads(path.read_text())["records"][-1]["job_id"]
            slurm.states[job] = "FAILED" if point.name in failing else "COMPLETED"
        if point.name not in failing:
            (copy / "out").mkdir(exist_ok=True)
            (copy / "out/m0.json").write_text(json.dumps({"lr": lr, "score": 2 * lr}))


def test_each_point_is_submitted_from_its_own_copy_and_saved_as_an_experiment(project):
    slurm = FakeSlurm()
    runner = SlurmAndGit(slurm)
    lines: list[str] = []
    made, jobs, recorder = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], say=lines.append, now=lambda: 1000.0)
    assert [p.overrides for p in made.points] == [{"params.yaml": [f"sweep.lr={v}"]} for v in ("0.1", "0.2", "0.3")]
    assert [p.name for p in made.points] == [f"{made.name}-{i}" for i in range(3)]
    for point in made.points:  # each copy has its params, the project's own are untouched
        assert f"lr: {point.overrides['params.yaml'][0].split('=')[1]}" in (project / point.folder / "params.yaml").read_text()
        assert len(jobs[point.name]) == 1 and not jobs[point.name][0].attached
    assert "lr: 0.1" in (project / "params.yaml").read_text()
    # One array for the three points (their items have one shape), its tasks run in their copies.
    assert len(slurm.runner.called("sbatch")) == 2  # the array and the recording job
    (array_id,) = {js[0].job_id.split("_")[0] for js in jobs.values()}
    assert [jobs[p.name][0].job_id for p in made.points] == [f"{array_id}_{i}" for i in range(3)]
    assert recorder is not None and recorder.after == (array_id,)
    script = Path(slurm.runner.called("sbatch")[0][-1]).read_text()
    assert all(f"{project / p.folder}/.orchestrator/arrays/scripts/" in script for p in made.points)
    for point in made.points:  # each copy's ledger has its task, with a log it can find
        rec = json.loads((project / point.folder / ".orchestrator/ledger/work@0.json").read_text())["records"][0]
        assert (project / point.folder / rec["log"]).resolve().parent == (project / made.points[0].folder / ".orchestrator/logs").resolve()
    assert f"orchestrator sweep --record {made.name}" in (project / f".orchestrator/scripts/sweep-{made.name}.sbatch").read_text()
    # status --sweep: every point's items in one table, one sacct for all
    asked = len(slurm.runner.called("sacct"))
    rows = status.refresh_all([(project / p.folder, p.name) for p in made.points], runner)
    assert [r.item for r in rows] == [f"{p.name} work@0" for p in made.points] and len(slurm.runner.called("sacct")) == asked + 1
    # Again before anything ended: every job is attached to, nothing new
    before = len(slurm.runner.called("sbatch"))
    again, jobs2, _ = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], say=lines.append)
    assert again.name == made.name and all(js[0].attached for js in jobs2.values())
    assert len(slurm.runner.called("sbatch")) == before  # the earlier recording job is still queued: it records these too

    finish(project, slurm, made)
    found = sweep.record_points(project, None, runner, made.name, say=lines.append)
    assert found.saved == [p.name for p in made.points] and not found.failed
    metrics = exp_metrics(project)
    assert {metrics[p.name] for p in made.points} == {0.2, 0.4, 0.6}
    assert not any((project / p.folder).exists() for p in made.points)  # saved: the copies are gone
    # The same sweep once more: every point saved, nothing submitted.
    _, jobs3, recorder3 = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], say=lines.append)
    assert jobs3 == {} and recorder3 is None and len(slurm.runner.called("sbatch")) == before


def test_a_failed_point_is_listed_kept_and_submitted_again_alone(project):
    slurm = FakeSlurm()
    runner = SlurmAndGit(slurm)
    made, jobs, _ = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2"], name="grid", say=lambda _: None)
    finish(project, slurm, made, failing={"grid-1"})
    found = sweep.record_points(project, None, runner, "grid", say=lambda _: None)
    assert found.saved == ["grid-0"] and [n for n, _ in found.failed] == ["grid-1"]
    failed_job = jobs["grid-1"][0].job_id
    assert f"job {failed_job} failed" in found.failed[0][1] and ".log" in found.failed[0][1]
    assert (project / made.points[1].folder).is_dir() and set(exp_metrics(project)) == {"grid-0"}
    before = len(slurm.runner.called("sbatch"))
    _, again, _ = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2"], name="grid", say=lambda _: None)
    assert list(again) == ["grid-1"] and not again["grid-1"][0].attached  # only the failed point
    assert len(slurm.runner.called("sbatch")) == before + 2  # its job and a recording job


def test_the_sweeps_recording_job_fails_only_for_a_failure_of_its_own(project, monkeypatch):
    """Issue 53's kind: a point not saved because its item's job failed (or was cancelled) is
    listed, and the recording job (`--recording-job`) ends 0; a point whose copy is gone is the
    recording's own failure. By hand, both exit 1 as before."""
    import shutil

    from support import invoke

    slurm = FakeSlurm()
    runner = SlurmAndGit(slurm)
    made, _, _ = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], name="grid", say=lambda _: None)
    script = (project / ".orchestrator/scripts/sweep-grid.sbatch").read_text()
    assert "exec orchestrator sweep --record grid --recording-job" in script
    finish(project, slurm, made, failing={"grid-1"})
    monkeypatch.setattr("orchestrator.util.runner.SubprocessRunner", lambda: runner)
    job = invoke("sweep", "--record", "grid", "--recording-job", "--project", str(project))
    assert job.exit_code == 0 and "grid-1" in job.output and "no failure of the recording" in job.output, job.output
    assert invoke("sweep", "--record", "grid", "--project", str(project)).exit_code == 1  # by hand: as before
    assert not (project / made.points[0].folder).exists()  # saved: its copy is gone, and nothing is wrong
    shutil.rmtree(project / made.points[1].folder)  # gone by hand: the recording cannot save it
    found = sweep.record_points(project, None, runner, "grid", say=lambda _: None)
    assert found.errors == ["grid-1"] and [n for n, _ in found.failed] == ["grid-1"]
    assert invoke("sweep", "--record", "grid", "--recording-job", "--project", str(project)).exit_code == 1


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["sweep.lr=range(1"], "malformed sweep 'sweep.lr=range(1'"),
        ([], "a sweep needs at least one -S"),
    ],
)
def test_a_malformed_sweep_is_one_clear_error_and_nothing_is_made(project, sets, said):
    slurm = FakeSlurm()
    with pytest.raises(ConfigError) as caught:
        sweep.submit(project, None, SlurmAndGit(slurm), sets, say=lambda _: None)
    assert said in caught.value.render()
    assert slurm.runner.called("sbatch") == [] and not (project / sweep.SWEEPS_DIR).exists()


def test_uncommitted_changes_are_refused_with_the_files_named(project):
    (project / "dvc.yaml").write_text((project / "dvc.yaml").read_text() + "\n# changed\n")
    with pytest.raises(OrchestratorError) as caught:
        sweep.submit(project, None, SlurmAndGit(FakeSlurm()), ["sweep.lr=0.1,0.2"], say=lambda _: None)
    assert "uncommitted changes" in caught.value.render() and "dvc.yaml" in caught.value.render()


def test_recording_an_unknown_sweep_names_the_known_ones(project):
    with pytest.raises(OrchestratorError) as caught:
        sweep.record_points(project, None, SlurmAndGit(FakeSlurm()), "nosuch")
    assert "no sweep named 'nosuch'" in caught.value.render()


def test_a_damaged_ledger_file_in_a_copy_finds_its_task_of_the_shared_array(project):
    slurm = FakeSlurm()
    runner = SlurmAndGit(slurm)
    made, jobs, _ = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], name="grid", say=lambda _: None)
    (project / made.points[2].folder / ".orchestrator/ledger/work@0.json").write_text("{cut short")
    before = len(slurm.runner.called("sbatch"))
    _, again, _ = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], name="grid", say=lambda _: None)
    assert again["grid-2"][0].attached and again["grid-2"][0].job_id == jobs["grid-2"][0].job_id
    assert len(slurm.runner.called("sbatch")) == before


@pytest.mark.parametrize("name", ["bad name", "-x", "a/b", "x" * 90, ""])
def test_a_bad_sweep_name_is_one_clear_error_and_nothing_is_made(project, name):
    slurm = FakeSlurm()
    with pytest.raises(ConfigError) as caught:
        sweep.submit(project, None, SlurmAndGit(slurm), ["sweep.lr=0.1,0.2"], name=name, say=lambda _: None)
    assert "sweep name" in caught.value.render() and "letters, digits" in caught.value.render()
    assert slurm.runner.called("sbatch") == [] and not (project / sweep.SWEEPS_DIR).exists()


def test_over_maxsubmitjobs_a_sweep_goes_in_waves_and_every_point_is_saved(project):
    slurm = FakeSlurm()
    runner = SlurmAndGit(slurm)
    slurm.max_submit(3, 1)  # room for one item and the recording job
    lines: list[str] = []
    made, jobs, recorder = sweep.submit(project, None, runner, ["sweep.lr=0.1,0.2,0.3"], name="grid", say=lines.append, now=lambda: 1000.0)
    assert [sum(j.deferred for j in jobs[p.name]) for p in made.points] == [0, 1, 1]
    assert len(slurm.runner.called("sbatch")) == 2 and recorder is not None  # the first point's job and the recording job
    script = (project / ".orchestrator/scripts/sweep-grid.sbatch").read_text()
    assert "orchestrator sweep --record grid" in script and "orchestrator sweep --name grid --next-wave 1000.0" in script

    def end_wave() -> None:
        for point in made.points:
            path = project / point.folder / ".orchestrator/ledger/work@0.json"
            if path.exists():
                slurm.states[json.loads(path.read_text())["records"][-1]["job_id"]] = "COMPLETED"
                lr = float(point.overrides["params.yaml"][0].split("=")[1])
                (project / point.folder / "out").mkdir(exist_ok=True)
                (project / point.folder / "out/m0.json").write_text(json.dumps({"lr": lr, "score": 2 * lr}))

    waves = 1
    while True:  # what each wave's recording job does: record, then submit the next wave
        end_wave()
        sweep.record_points(project, None, runner, "grid", say=lines.append)
        if sweep.next_wave(project, None, runner, "grid", 1000.0, say=lines.append, now=lambda w=waves: 2000.0 + w) is None:
            break
        waves += 1
        assert waves <= 3
    assert waves == 3 and lines[-1] == "every item of sweep grid has had its job: no further wave"
    assert len(slurm.runner.called("sbatch")) == 6  # three items and three recording jobs: none submitted twice
    assert set(exp_metrics(project)) == {p.name for p in made.points}
