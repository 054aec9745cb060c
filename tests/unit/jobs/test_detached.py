"""`orchestrator submit` against a fake Slurm: which items are queued, in what order,
waiting for which jobs; what a second submit attaches to; what the ledger keeps.

The real queue (dependencies held by slurmctld, the recording job's `dvc repro`)
is proven on the testbed in tests/integration/slurm/test_slurm_testbed.py.
"""

from __future__ import annotations

import getpass
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from fakes import FakeSlurm
from support import ACCOUNT, make_project

from orchestrator.errors import OrchestratorError, PipelineError
from orchestrator.jobs import backends, detached, ledger
from orchestrator.jobs.batch import ItemJob
from orchestrator.jobs.recorder import NO_WAVE_LEFT, RECORD_ITEM
from orchestrator.slurm.states import State

STAGES = {
    "prep": {
        "cmd": "orchestrator run --nodes 1 --gpus-per-node 1 -- python prep.py data",
        "deps": ["prep.py"],
        "outs": [{"data": {"persist": True}}],
    },
    "train": {
        "cmd": "orchestrator run --nodes 2 --gpus-per-node 1 -- python train.py data model",
        "deps": ["train.py", "data"],
        "outs": [{"model": {"persist": True}}],
    },
    # Another shape than prep (its own time limit): each is a job of its own, not tasks of one array.
    "solo": {"cmd": "orchestrator run --time 00:20:00 -- python solo.py", "deps": ["solo.py"], "outs": [{"solo": {"persist": True}}]},
}


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    params = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT}}
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": STAGES}), params_yaml=yaml.safe_dump(params))
    for script in ("prep.py", "train.py", "solo.py"):
        (project / script).write_text(f"print('{script}')\n")
    # DVC names stages relative to the working directory, as `orchestrator submit` runs in the project.
    monkeypatch.chdir(project)
    return project


def submit(root: Path, slurm: FakeSlurm, targets=(), at: float = 1000.0) -> tuple[list[ItemJob], list[str]]:
    lines: list[str] = []
    rows = detached.submit(root, None, slurm.runner, targets, say=lines.append, now=lambda: at)
    return rows, lines


def test_items_are_queued_upstream_first_and_wait_for_their_upstream_jobs(root):
    slurm = FakeSlurm()
    rows, lines = submit(root, slurm)
    calls = slurm.sbatch_calls()
    assert list(calls) == ["prep", "solo", "train", "record"]  # level by level: train waits for prep
    by_item = {r.item: r for r in rows}
    prep, train = by_item["prep"].job_id, by_item["train"].job_id
    assert "--dependency=afterok:" + prep in calls["train"] and "--kill-on-invalid-dep=yes" in calls["train"]
    assert not any(a.startswith("--dependency") for a in calls["prep"] + calls["solo"])
    assert by_item["train"].after == (prep,) and by_item["prep"].after == () and by_item["solo"].after == ()
    assert all(not r.attached and r.state == State.PENDING for r in rows)
    assert f"train: job {train} after {prep}" in lines


def test_the_recording_job_waits_for_every_job_and_is_in_the_ledger(root):
    slurm = FakeSlurm()
    rows, lines = submit(root, slurm)
    *items, recorder = rows
    ids = [r.job_id for r in items]
    assert recorder.item == RECORD_ITEM and recorder.after == tuple(ids)
    script = (root / ".orchestrator/scripts/record.sbatch").read_text()
    assert f"afterany:{':'.join(ids)}" in script and "dvc repro --keep-going" in script
    assert script.index("orchestrator record") < script.index("dvc repro --keep-going")  # one process records, then repro
    assert script.rstrip().endswith('exec orchestrator record --repro-exit "$repro"')  # and has the last word
    (rec,) = ledger.Ledger(root).records(RECORD_ITEM)
    assert rec.job_id == recorder.job_id and rec.provenance == {"after": ids, "targets": []}
    assert rec.log == f".orchestrator/logs/record-{recorder.job_id}.log" and rec.submitted_at == 1000.0
    assert any(f"recording job {recorder.job_id} records the results when they end" in line for line in lines)


FAKE = """#!/bin/bash
echo "$(basename "$0") $* attach=${ORCH_ATTACH_ONLY:-0}" >> "$CALLS"
if [ "$(basename "$0")" = dvc ]; then exit "$DVC_EXIT"; fi
case "$*" in *--repro-exit*) exit "$LAST_EXIT" ;; *--next-wave*) exit "$WAVE_EXIT" ;; *) exit "$FIRST_EXIT" ;; esac
"""


def run_recording_job(root: Path, tmp_path: Path, **exits: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The rendered recording job run by bash, `orchestrator` and `dvc` faked on PATH: what it
    called, in order, and how it ended."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("orchestrator", "dvc"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.unlink(missing_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls), **{f"{k.upper()}_EXIT": str(v) for k, v in exits.items()}}
    done = subprocess.run(["bash", root / ".orchestrator/scripts/record.sbatch"], env=env, capture_output=True, text=True)
    return done, calls.read_text().splitlines()


@pytest.mark.parametrize(
    "first, repro, last, job_exit",
    [
        (1, 255, 0, 0),  # a cancelled item: `record` and `dvc repro` fail on it, the last step says it is no failure (issue 53)
        (0, 0, 0, 0),
        (2, 255, 1, 1),  # a real failure: the last step fails the job
    ],
)
def test_the_recording_job_ends_with_the_verdict_on_dvc_repros_exit(root, tmp_path, first, repro, last, job_exit):
    """`dvc repro`'s failure does not end the job (sacct showed its 255 as FAILED 127:0);
    `record --repro-exit` decides."""
    submit(root, FakeSlurm(), targets=("train",))
    done, calls = run_recording_job(root, tmp_path, first=first, dvc=repro, last=last)
    assert done.returncode == job_exit, done.stdout + done.stderr
    assert calls == [
        "orchestrator record train attach=0",
        "dvc repro --keep-going train attach=1",
        f"orchestrator record train --repro-exit {repro} attach=1",
    ]
    assert ("not every item was recorded" in done.stdout) == (first != 0)


@pytest.mark.parametrize("wave, job_exit, steps", [(0, 0, 2), (NO_WAVE_LEFT, 0, 4), (2, 2, 4)])
def test_a_recording_job_with_a_wave_after_it_submits_it_or_ends_with_the_verdict(root, tmp_path, wave, job_exit, steps):
    """A wave submitted: its own recording job goes on. None left: `dvc repro`, then the verdict.
    The wave refused: what was recorded is listed, and the job fails with the wave's exit."""
    slurm = FakeSlurm()
    slurm.max_submit(3, 1)
    submit(root, slurm, at=1000.0)
    done, calls = run_recording_job(root, tmp_path, first=1, wave=wave, dvc=255, last=0)
    assert done.returncode == job_exit and len(calls) == steps, (calls, done.stdout + done.stderr)
    assert calls[1].startswith("orchestrator submit --next-wave 1000.0") and calls[-1].startswith(
        "orchestrator submit" if steps == 2 else "orchestrator record --repro-exit 255"
    )


def test_each_submission_is_in_the_ledger(root):
    slurm = FakeSlurm()
    rows, _ = submit(root, slurm)
    book = ledger.Ledger(root)
    for row in rows[:-1]:
        (rec,) = book.records(row.item)
        assert (rec.job_id, rec.backend, rec.profile, rec.state) == (row.job_id, "slurm", "testbed", State.PENDING)
        assert rec.submitted_at == 1000.0
        assert len(rec.fingerprint) == 64 and rec.script == f".orchestrator/scripts/testbed/{row.item}.sbatch"
        assert rec.provenance["profile"] == "testbed" and rec.provenance["partition"] == "debug"
        assert "submitting" not in json.loads((root / f".orchestrator/ledger/{row.item}.json").read_text())


def test_a_second_submit_attaches_to_the_queued_jobs(root):
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    slurm.states[first[0].job_id] = "RUNNING"
    again, lines = submit(root, slurm, at=2000.0)
    assert len(slurm.runner.called("sbatch")) == len(first)  # nothing submitted again, the recorder included
    assert [(r.item, r.job_id) for r in again] == [(r.item, r.job_id) for r in first]
    assert all(r.attached for r in again) and again[0].state == State.RUNNING
    assert [r.after for r in again[:-1]] == [(), (), ()]  # an attached job's dependencies were set when it was queued
    assert any("(submitted earlier) records these jobs too" in line for line in lines)
    assert all(len(ledger.Ledger(root).records(r.item)) == 1 for r in again)


def test_a_finished_upstream_job_is_not_waited_for(root):
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    finish_all(root, slurm)
    (root / "train.py").write_text("print('train, changed')\n")
    again, _ = submit(root, slurm)
    by_item = {r.item: r for r in again}
    assert by_item["prep"].attached and by_item["prep"].state == State.COMPLETED
    assert not by_item["train"].attached and by_item["train"].job_id not in {r.job_id for r in first}
    assert not any(a.startswith("--dependency") for a in slurm.sbatch_calls()["train"])
    # solo did not change, and its job is done: `dvc repro` records it without a new job
    assert by_item["solo"].attached
    first_train = next(r.job_id for r in first if r.item == "train")
    assert [r.job_id for r in ledger.Ledger(root).records("train")] == [first_train, by_item["train"].job_id]


def finish_all(root: Path, slurm: FakeSlurm) -> None:
    """Every job succeeded and made its output, as the real jobs would."""
    for job in slurm.states:
        slurm.states[job] = "COMPLETED"
    for out in ("data", "model", "solo"):
        (root / out).write_text(out)


def test_a_finished_job_whose_output_was_deleted_is_submitted_again(root):
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    finish_all(root, slurm)
    (root / "solo").unlink()  # a scratch purge, a user removing a bad result
    again, lines = submit(root, slurm, targets=["solo"])
    (solo,) = [r for r in again if r.item == "solo"]
    (old,) = [r.job_id for r in first if r.item == "solo"]
    assert not solo.attached and solo.job_id != old
    assert any(f"job {old} succeeded, but its output solo is gone" in line for line in lines)
    # the old job stays in the item's history
    assert [r.job_id for r in ledger.Ledger(root).records("solo")] == [old, solo.job_id]


def test_force_submits_a_new_job_of_an_item_whose_job_succeeded(root, monkeypatch):
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    finish_all(root, slurm)
    (old,) = [r.job_id for r in first if r.item == "solo"]
    rows = detached.submit(root, None, slurm.runner, ["solo"], say=lambda _: None, now=lambda: 3000.0)
    assert rows[0].attached and rows[0].job_id == old  # its output is there: the job is its result
    rows = detached.submit(root, None, slurm.runner, ["solo"], say=lambda _: None, now=lambda: 3000.0, force=True)
    solo = rows[0]
    assert solo.item == "solo" and not solo.attached and solo.job_id != old
    monkeypatch.setenv("ORCH_FORCE", "1")  # the same, by the environment
    (again,) = [r for r in detached.submit(root, None, slurm.runner, ["solo"], say=lambda _: None) if r.item == "solo"]
    assert again.attached and again.job_id == solo.job_id  # forced, but its new job is still queued: never a duplicate


def test_targets_bring_their_upstream_items_and_nothing_else(root):
    slurm = FakeSlurm()
    rows, _ = submit(root, slurm, targets=("train",))
    assert [r.item for r in rows] == ["prep", "train", RECORD_ITEM]
    assert ledger.Ledger(root).records("solo") == []
    assert "dvc repro --keep-going train" in (root / ".orchestrator/scripts/record.sbatch").read_text()


def test_a_stale_plain_stage_feeding_an_item_stops_everything(root):
    stages = {"fetch": {"cmd": "python fetch.py", "deps": ["fetch.py"], "outs": ["raw"]}, **STAGES}
    stages["prep"] = {**stages["prep"], "deps": ["prep.py", "raw"]}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    (root / "fetch.py").write_text("print('fetch')\n")
    (root / "raw").write_text("fetched by hand, not by `dvc repro fetch`\n")
    slurm = FakeSlurm()
    with pytest.raises(PipelineError) as err:
        submit(root, slurm)
    assert "fetch: run `dvc repro fetch` first" in err.value.render()
    assert slurm.runner.called("sbatch") == []


def test_a_profile_without_a_scheduler_is_refused(root):
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestrator": {"cluster": "local"}}))
    slurm = FakeSlurm()
    with pytest.raises(OrchestratorError, match="has no scheduler"):
        submit(root, slurm)
    assert slurm.runner.called("sbatch") == []


def test_without_a_service_partition_the_user_is_told_to_run_dvc_repro_of_the_targets(root, tmp_path):
    from orchestrator.config.profile import BUILTIN_DIR

    text = (BUILTIN_DIR / "testbed.yaml").read_text()
    assert "  service_partition: debug\n" in text
    (tmp_path / "no-service.yaml").write_text(text.replace("  service_partition: debug\n", ""))
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestrator": {"cluster": str(tmp_path / "no-service.yaml"), "account": ACCOUNT}}))
    slurm = FakeSlurm()
    rows, lines = submit(root, slurm, targets=("train",))
    assert [r.item for r in rows] == ["prep", "train"]
    assert "record" not in slurm.sbatch_calls()
    assert "when the jobs end, run `dvc repro train`: it attaches to them and records the results" in lines


def test_a_refused_recording_job_says_the_jobs_are_queued(root):
    slurm = FakeSlurm()
    slurm.refuse["record.sbatch"] = "sbatch: error: invalid partition specified: debug\n"
    with pytest.raises(backends.SchedulerError) as err:
        submit(root, slurm)
    text = err.value.render()
    assert text.startswith("the recording job was refused: sbatch: error: invalid partition specified: debug")
    assert "the jobs are submitted; run `dvc repro` when they end" in text
    assert [r.job_id for r in ledger.Ledger(root).records("prep")] == ["101"]
    assert ledger.Ledger(root).records(RECORD_ITEM) == []


def test_submit_from_another_folder_submits_the_projects_items(root, monkeypatch):
    monkeypatch.chdir(root.parent)  # `orchestrator submit --project p` from outside it
    slurm = FakeSlurm()
    rows, lines = submit(root, slurm)
    assert [r.item for r in rows] == ["prep", "solo", "train", "orchestrator:record"]  # dvc.yaml's order


def test_a_stale_plain_stage_whose_output_is_missing_is_named_not_a_traceback(tmp_path, monkeypatch):
    stages = {
        "fetch": {"cmd": "python fetch.py", "deps": ["fetch.py"], "outs": ["raw"]},
        "train": {"cmd": "orchestrator run -- python train.py raw", "deps": ["train.py", "raw"], "outs": [{"model": {"persist": True}}]},
    }
    params = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT}}
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(params))
    for script in ("fetch.py", "train.py"):
        (project / script).write_text("print()\n")
    monkeypatch.chdir(project)
    slurm = FakeSlurm()
    with pytest.raises(PipelineError) as failed:
        submit(project, slurm)
    assert "fetch: run `dvc repro fetch` first" in str(failed.value) and slurm.runner.called("sbatch") == []


def test_no_room_for_one_item_and_the_recording_job_is_refused_before_anything_is_queued(root):
    slurm = FakeSlurm()
    slurm.max_submit(3, 2)
    with pytest.raises(backends.SchedulerError) as caught:
        submit(root, slurm)
    err = caught.value
    assert err.headline == (
        f"3 item(s) and the recording job would need 4 jobs, but the association of {getpass.getuser()} "
        f"with account {ACCOUNT} allows 3 queued or running (MaxSubmitJobs) and 2 are already: nothing was submitted"
    )
    assert "submit at most 1 now" in err.hints[0]
    assert slurm.sbatch_calls() == {} and not (root / ".orchestrator/ledger/prep.json").exists()
    # Room enough: submitted as usual, in one go.
    slurm.max_submit(10, 2)
    rows, _ = submit(root, slurm)
    assert len(rows) == 4 and not any(r.deferred for r in rows)


def test_over_maxsubmitjobs_the_items_go_in_waves_each_submitted_by_the_last_ones_recording_job(root):
    slurm = FakeSlurm()
    slurm.max_submit(3, 1)  # room for 2: one item and the recording job
    rows, lines = submit(root, slurm, at=1000.0)
    by_item = {r.item: r for r in rows}
    assert list(slurm.sbatch_calls()) == ["prep", "record"]  # upstream first: train waits for prep's wave
    assert by_item["solo"].deferred and by_item["train"].deferred and by_item["solo"].job_id == ""
    prep, recorder = by_item["prep"].job_id, by_item[RECORD_ITEM]
    assert recorder.after == (prep,)
    assert any("1 of 3 item(s) submitted now, the other 2 in waves" in line for line in lines)
    assert ledger.Ledger(root).records(RECORD_ITEM)[-1].provenance["waiting"] == 2  # for `orchestrator status`
    script = (root / ".orchestrator/scripts/record.sbatch").read_text()
    assert "orchestrator submit --next-wave 1000.0" in script
    assert script.index("orchestrator record") < script.index("--next-wave") < script.index("dvc repro --keep-going")

    # The recording job (running: one of our queued jobs) submits the next wave; prep is done.
    slurm.states[prep], slurm.states[recorder.job_id] = "COMPLETED", "RUNNING"
    rows = detached.submit(root, None, slurm.runner, (), say=lines.append, now=lambda: 2000.0, since=1000.0)
    by_item = {r.item: r for r in rows}
    assert "prep" not in by_item  # its job ended since the first wave: never submitted again
    assert [Path(a[-1]).stem for a in slurm.runner.called("sbatch")][2:] == ["solo", "record"] and by_item["train"].deferred
    solo = by_item["solo"].job_id
    assert "--next-wave 1000.0" in (root / ".orchestrator/scripts/record.sbatch").read_text()  # the first wave's time, kept

    # solo fails: the third wave does not submit it again; train goes (prep has ended), and no wave follows.
    slurm.states[solo] = "FAILED"
    said: list[str] = []
    rows = detached.submit(root, None, slurm.runner, (), say=said.append, now=lambda: 3000.0, since=1000.0)
    assert [r.item for r in rows] == ["train", RECORD_ITEM] and rows[0].after == ()
    assert f"solo: job {solo} ended (failed); not submitted again in this submission" in said
    assert "--next-wave" not in (root / ".orchestrator/scripts/record.sbatch").read_text()

    # Every item has had its job: a further --next-wave submits nothing.
    slurm.states[rows[0].job_id] = "COMPLETED"
    before = len(slurm.runner.called("sbatch"))
    assert detached.submit(root, None, slurm.runner, (), say=said.append, now=lambda: 4000.0, since=1000.0) == []
    assert len(slurm.runner.called("sbatch")) == before and said[-1] == "every item of this submission has had its job: no further wave"


def test_a_later_wave_leaves_out_what_depends_on_a_failed_item(root):
    slurm = FakeSlurm()
    slurm.max_submit(3, 1)
    rows, _ = submit(root, slurm, at=1000.0)
    slurm.states[rows[0].job_id] = "FAILED"  # prep
    said: list[str] = []
    rows = detached.submit(root, None, slurm.runner, (), say=said.append, now=lambda: 2000.0, since=1000.0)
    assert [r.item for r in rows] == ["solo", RECORD_ITEM]
    assert "train: not submitted, it depends on an item that failed" in said


def test_without_a_service_partition_there_are_no_waves_and_a_submission_over_the_limit_is_refused(root, tmp_path):
    from orchestrator.config.profile import BUILTIN_DIR

    text = (BUILTIN_DIR / "testbed.yaml").read_text().replace("  service_partition: debug\n", "")
    (tmp_path / "no-service.yaml").write_text(text)
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestrator": {"cluster": str(tmp_path / "no-service.yaml"), "account": ACCOUNT}}))
    slurm = FakeSlurm()
    slurm.max_submit(2, 0)
    with pytest.raises(backends.SchedulerError) as caught:
        submit(root, slurm)
    assert caught.value.headline.startswith("3 item(s) would need 3 jobs, but the association of")
    assert caught.value.headline.endswith(
        "nothing was submitted (waves need the profile's scheduler.service_partition, where the job that submits the next one runs)"
    )
    assert slurm.sbatch_calls() == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit", "--next-wave", "soon"], "Invalid value for '--next-wave': 'soon' is not a valid float range."),
        (["sweep", "--next-wave", "soon", "--name", "grid"], "Invalid value for '--next-wave': 'soon' is not a valid float range."),
        (["sweep", "--next-wave", "1000.0"], "error: --next-wave needs the sweep's --name"),
        # nan passes every range check and inf every minimum: neither is a time
        (["submit", "--next-wave", "nan"], "Invalid value for '--next-wave': 'nan' is not a finite number (x>=0)"),
        (["submit", "--next-wave", "inf"], "Invalid value for '--next-wave': 'inf' is not a finite number (x>=0)"),
        (["submit", "--next-wave", "-1"], "Invalid value for '--next-wave': -1.0 is not in the range x>=0."),
        (["sweep", "--next-wave", "nan", "--name", "grid"], "Invalid value for '--next-wave': 'nan' is not a finite number (x>=0)"),
        (["sweep", "--next-wave", "-inf", "--name", "grid"], "Invalid value for '--next-wave': -inf is not in the range x>=0."),
    ],
)
def test_a_bad_next_wave_is_one_message_and_nothing_is_submitted(root, args, message):
    from support import invoke

    done = invoke(*args, "--project", str(root))
    assert done.exit_code == 2 and message in done.output and "Traceback" not in done.output, done.output
    assert not (root / ".orchestrator/ledger").exists()  # nothing submitted


def test_submit_mends_a_cut_dvc_lock_once_the_profile_takes_jobs_and_not_before(root):
    """A dvc.lock a killed `dvc repro` cut short: `submit` puts back the last readable copy and
    says so; with a profile that cannot submit, it refuses first and changes nothing."""
    from orchestrator.pipeline import dvcfiles

    whole = "schema: '2.0'\nstages:\n  solo:\n    cmd: python solo.py\n"
    (root / "dvc.lock").write_text(whole)
    dvcfiles.keep(root)
    (root / "dvc.lock").write_text("schema: '2.0'\nstages:\n  pre")
    with pytest.raises(OrchestratorError, match="has no scheduler"):
        detached.submit(root, "local", FakeSlurm().runner, say=print)
    assert (root / "dvc.lock").read_text().endswith("  pre") and not (root / dvcfiles.CUT_DIR).exists()
    slurm = FakeSlurm()
    rows, lines = submit(root, slurm)
    assert lines[0].startswith(f"{root / 'dvc.lock'} could not be read") and "put back the last readable copy" in lines[0], lines
    assert (root / "dvc.lock").read_text() == whole and len(slurm.sbatch_calls()) == 4


def test_submit_warns_once_per_kind_of_item_billed_for_gpus_it_does_not_use(tmp_path, monkeypatch):
    """The testbed's nodes, billed whole as a site bills them (a profile file with site.billing)."""
    from orchestrator.config import profile

    text = (profile.BUILTIN_DIR / "testbed.yaml").read_text().replace("processes_on: cpu", "processes_on: gpu")
    billed = tmp_path / "billed.yaml"
    billed.write_text(text + "site:\n  billing: {unit: node-hours, per_node_hour: 1, source: a test}\n")
    params = {"orchestrator": {"cluster": str(billed), "account": ACCOUNT}}
    stages = {"train": {"matrix": {"seed": [1, 2, 3]}, "cmd": "orchestrator run --gpus-per-node 1 -- python t.py ${item.seed}"}}
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(params))
    monkeypatch.chdir(project)
    _, lines = submit(project, FakeSlurm())
    warned = [line for line in lines if line.startswith("warning:")]
    assert warned == [
        "warning: train@1, train@2, train@3: billed for 4 GPUs (a whole node of debug: 1 node-hours/h), uses 1: "
        "ask for 4 GPUs per node (--gpus-per-node 4)"
    ]
