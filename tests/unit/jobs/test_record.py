"""`orchestrator record` against a fake Slurm: which items reach dvc.lock (succeeded, outputs
there), which are listed as failed or not finished, and that nothing else changes. That
the lock is the one `dvc repro` writes is proven on the testbed
(tests/integration/slurm/test_record_testbed.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from fakes import FakeSlurm
from test_detached import root, submit  # noqa: F401 - the fixture and the fake submission

from orchestrator.errors import PipelineError
from orchestrator.jobs import ledger, record
from orchestrator.pipeline import stages
from orchestrator.slurm.states import State


def submitted_with_prep_done(project: Path) -> tuple[FakeSlurm, dict[str, str]]:
    """Every item submitted (a fake Slurm), and prep's job completed with its output there."""
    slurm = FakeSlurm()
    rows, _ = submit(project, slurm)
    jobs = {r.item: r.job_id for r in rows}
    (project / "data").mkdir()
    (project / "data/x.txt").write_text("prep output\n")
    slurm.states[jobs["prep"]] = "COMPLETED"
    return slurm, jobs


def test_succeeded_items_are_recorded_and_the_others_listed(root):  # noqa: F811
    slurm, jobs = submitted_with_prep_done(root)
    slurm.states[jobs["train"]] = "RUNNING"
    slurm.states[jobs["solo"]] = "FAILED"
    found = record.record(root, None, slurm.runner, say=lambda line: None)
    assert found.recorded == ["prep"]
    assert found.unfinished == [("train", f"job {jobs['train']} running")]
    assert [(name, why.split(";")[0]) for name, why in found.failed] == [("solo", f"job {jobs['solo']} failed")]
    assert f"log .orchestrator/logs/solo-{jobs['solo']}.log" in found.failed[0][1]
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    assert list(lock["stages"]) == ["prep"] and lock["stages"]["prep"]["outs"][0]["path"] == "data"
    # The ledger learned the end states; one sacct for every job.
    assert ledger.Ledger(root).records("solo")[-1].state == State.FAILED
    assert len(slurm.runner.called("sacct")) == 1
    assert len(slurm.sbatch_calls()) == 4  # nothing submitted


def test_a_job_that_succeeded_without_its_outputs_is_not_recorded(root):  # noqa: F811
    slurm = FakeSlurm()
    rows, _ = submit(root, slurm, targets=("solo",))
    (solo,) = [r.job_id for r in rows if r.item == "solo"]
    slurm.states[solo] = "COMPLETED"
    found = record.record(root, None, slurm.runner, ("solo",))
    assert found.recorded == [] and found.failed[0][1].startswith(f"job {solo} completed, did not create solo")
    assert not (root / "dvc.lock").exists()


def test_an_unknown_target_is_one_error_and_nothing_is_recorded(root):  # noqa: F811
    import pytest

    from orchestrator.errors import PipelineError

    slurm = FakeSlurm()
    with pytest.raises(PipelineError) as caught:
        record.record(root, None, slurm.runner, ("nosuch",))
    assert "DVC cannot record the finished items" in caught.value.headline and "nosuch" in caught.value.render()
    assert not (root / "dvc.lock").exists() and slurm.runner.called("sacct") == []


def test_a_lock_file_cut_short_by_a_killed_dvc_process_does_not_stop_the_record(root):  # noqa: F811
    slurm = FakeSlurm()
    rows, _ = submit(root, slurm, targets=("solo",))
    slurm.states[rows[0].job_id] = "COMPLETED"
    (root / "solo").mkdir()
    (root / "solo/result.txt").write_text("done\n")
    lock = root / ".dvc/tmp/rwlock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text('{"read": {')  # what a SIGKILL mid-write leaves; DVC then refuses every command
    said = []
    found = record.record(root, None, slurm.runner, targets=("solo",), say=said.append)
    assert any("rwlock was cut short" in line for line in said), said
    assert lock.read_text() != '{"read": {'
    assert found.recorded == ["solo"] and "solo" in yaml.safe_load((root / "dvc.lock").read_text())["stages"], found


def test_a_dvc_lock_cut_short_is_put_back_from_the_copy_kept_and_what_finished_since_recorded(root):  # noqa: F811
    """`dvc repro` killed while DVC dumped dvc.lock: DVC refuses every command until the lock is
    whole. `record` puts back the copy an earlier command kept (the cut file moved aside) and
    records the item that finished since from the ledger."""
    from orchestrator.pipeline import dvcfiles

    slurm, jobs = submitted_with_prep_done(root)
    record.record(root, None, slurm.runner, say=lambda line: None)
    kept = (root / "dvc.lock").read_text()
    assert (root / dvcfiles.KEPT_DIR / "dvc.lock").read_text() == kept  # record keeps what it wrote
    slurm.states[jobs["solo"]] = "COMPLETED"
    (root / "solo").mkdir()
    (root / "solo/result.txt").write_text("done\n")
    (root / "dvc.lock").write_text(kept + "  so")  # DVC was adding solo's entry when it was killed
    with pytest.raises(PipelineError) as refused:
        dvcfiles.require_readable(root)
    assert "run `orchestrator record`" in refused.value.render()
    said: list[str] = []
    found = record.record(root, None, slurm.runner, say=said.append)
    assert "dvc.lock could not be read" in said[0] and "put back the last readable copy (kept " in said[0], said
    assert found.recorded == ["solo"] and found.up_to_date == ["prep"], found
    assert set(yaml.safe_load((root / "dvc.lock").read_text())["stages"]) == {"prep", "solo"}
    (aside,) = (root / dvcfiles.CUT_DIR).iterdir()
    assert aside.read_text() == kept + "  so"


def test_a_job_missing_from_slurm_for_a_moment_is_asked_for_again(root, monkeypatch):  # noqa: F811
    """The recording job starts as the last job ends: slurmdbd may not have it yet, and the
    controller no longer lists it. Asked again after a pause, it is recorded, not left 'pending'."""
    from orchestrator.jobs import submission

    slurm = FakeSlurm()
    rows, _ = submit(root, slurm, targets=("solo",))
    (job,) = [r.job_id for r in rows if r.item == "solo"]
    (root / "solo").mkdir()
    (root / "solo/x.txt").write_text("solo output\n")
    hidden = slurm.states.pop(job)  # in no list yet
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        slurm.states[job] = "COMPLETED"  # slurmdbd has written it meanwhile

    monkeypatch.setattr(submission, "pause", pause)
    assert hidden == "PENDING"
    found = record.record(root, None, slurm.runner, targets=("solo",), say=lambda line: None)
    assert found.recorded == ["solo"] and pauses == [1.0]


# What DVC would read as the project's record: a regular file of a mapping only, and a
# message that names the file (issue 33).
LOCKS = {
    "a list": lambda path: path.write_text("[1, 2]\n"),
    "a FIFO": lambda path: os.mkfifo(path),
    "a link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "a folder": lambda path: path.mkdir(),
    "larger than the cap": lambda path: (path.write_text(""), os.truncate(path, stages.MAX_LOCK_BYTES + 1)),
}


@pytest.mark.parametrize("lock", LOCKS)
@pytest.mark.parametrize("command", ["record", "submit"])
def test_a_lock_file_that_is_not_dvcs_record_is_one_error_naming_it(root, lock, command):  # noqa: F811
    slurm = FakeSlurm()
    path = root / "dvc.lock"
    LOCKS[lock](path)
    before = path.lstat()
    with pytest.raises(PipelineError) as caught:
        if command == "record":
            record.record(root, None, slurm.runner, say=lambda line: None)
        else:
            submit(root, slurm)
    message = caught.value.render()
    assert str(path) in message and caught.value.exit_code == 2, message
    expected = {"a list": "the top level: expected a dictionary", "a folder": "is a folder", "larger than the cap": "larger than 1 GiB"}
    assert expected.get(lock, "is not a regular file") in message
    after = path.lstat()
    assert not slurm.sbatch_calls() and (after.st_mode, after.st_size, after.st_mtime_ns) == (
        before.st_mode,
        before.st_size,
        before.st_mtime_ns,
    )


# --- the recording job's last step (issue 53): `record --repro-exit N` after `dvc repro --keep-going` ---


def test_settle_lists_what_was_not_recorded_and_the_plain_stages_after_it(root):  # noqa: F811
    """prep succeeded, train failed, solo was cancelled; `report` (plain) is after train, `lone`
    (plain) after nothing stale: `dvc repro --keep-going` skipped the first, and the second it
    left stale with nothing stale upstream (its command failed)."""
    slurm, jobs = submitted_with_prep_done(root)
    slurm.states[jobs["train"]] = "FAILED"
    slurm.states[jobs["solo"]] = "CANCELLED by 0"
    dvc_yaml = yaml.safe_load((root / "dvc.yaml").read_text())
    dvc_yaml["stages"]["report"] = {"cmd": "python report.py", "deps": ["report.py", "model"], "outs": ["report.txt"]}
    dvc_yaml["stages"]["lone"] = {"cmd": "python lone.py", "deps": ["lone.py"], "outs": ["lone.txt"]}
    (root / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml))
    for script in ("report.py", "lone.py"):
        (root / script).write_text("print('plain')\n")
    found = record.record(root, None, slurm.runner, say=lambda line: None, settle=True)
    assert found.recorded == ["prep"] and {name for name, _ in found.failed} == {"train", "solo"}
    assert sorted(found.left) == [("lone", []), ("report", ["train"])]
    seen = record.verdict(found, repro_exit=255)
    assert not seen.ok and any(line.startswith("failed: lone:") for line in seen.lines), seen
    assert "not run, after an item not recorded or a stage that failed: report" in seen.lines
    # Targets: what `dvc repro --keep-going report` covers, its upstream items included.
    found = record.record(root, None, slurm.runner, ("report",), say=lambda line: None, settle=True)
    assert found.up_to_date == ["prep"] and [name for name, _ in found.failed] == ["train"] and found.left == [("report", ["train"])]
    assert record.verdict(found, repro_exit=255).ok


def test_settle_finds_nothing_left_where_the_plain_stage_ran(root):  # noqa: F811
    slurm, jobs = submitted_with_prep_done(root)
    slurm.states[jobs["train"]] = "CANCELLED by 0"
    slurm.states[jobs["solo"]] = "CANCELLED by 0"
    found = record.record(root, None, slurm.runner, say=lambda line: None, settle=True)
    assert found.left == [] and found.recorded == ["prep"]
    seen = record.verdict(found, repro_exit=255)
    assert seen.ok and seen.lines[0].startswith(f"1 recorded, not recorded: solo (job {jobs['solo']} cancelled; log "), seen
    assert f"train (job {jobs['train']} cancelled; log .orchestrator/logs/train-{jobs['train']}.log)" in seen.lines[0]
    assert "`orchestrator submit` submits what was not recorded again" in seen.lines[-1]


CANCELLED = ("train@0.2", "job 7 cancelled; log .orchestrator/logs/train@0.2-7.log")


@pytest.mark.parametrize(
    "found, repro_exit, ok, says",
    [
        # Every item recorded: nothing to say but that.
        (record.Recorded(recorded=["a", "b"], up_to_date=["c"]), 0, True, ["3 recorded"]),
        # A cancelled item fails `dvc repro`: reported, not this job's failure.
        (
            record.Recorded(recorded=["a", "b", "c"], failed=[CANCELLED]),
            255,
            True,
            [f"3 recorded, not recorded: {CANCELLED[0]} ({CANCELLED[1]})"],
        ),
        # An item that never had a job, and the plain stage after it.
        (
            record.Recorded(
                up_to_date=["a"], unfinished=[("b", "no job submitted for its current script and inputs")], left=[("s", ["b"])]
            ),
            255,
            True,
            [
                "1 recorded, not recorded: b (no job submitted for its current script and inputs)",
                "not run, after an item not recorded or a stage that failed: s",
            ],
        ),
        # A plain stage that failed on its own: the recording failed, whatever else was not recorded.
        (record.Recorded(recorded=["a"], failed=[CANCELLED], left=[("s", [])]), 255, False, ["failed: s: stale after `dvc repro`"]),
        # `dvc repro` failed with nothing left to explain it (DVC stopped).
        (record.Recorded(recorded=["a"]), 255, False, ["failed: `dvc repro` exited 255 with every stage up to date"]),
    ],
)
def test_the_verdict_fails_the_recording_job_only_for_a_real_failure(found, repro_exit, ok, says):
    seen = record.verdict(found, repro_exit)
    assert seen.ok == ok, seen
    for line in says:
        assert any(said.startswith(line) for said in seen.lines), (line, seen.lines)


def test_the_verdict_names_the_first_items_not_recorded_and_counts_the_rest():
    found = record.Recorded(failed=[(f"train@{i}", f"job {i} failed") for i in range(25)])
    (head, _) = record.verdict(found, 255, shown=3).lines
    assert head == "0 recorded, not recorded: train@0 (job 0 failed), train@1 (job 1 failed), train@2 (job 2 failed) and 22 more"
