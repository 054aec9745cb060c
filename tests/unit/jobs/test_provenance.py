"""Provenance: what a submission records (code version, profile and script by hash,
image), what `orchestrator show` prints, and the provenance.json beside the metrics."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from fakes import FakeRunner
from support import invoke

from orchestrator.config import selection
from orchestrator.jobs import ledger, provenance
from orchestrator.slurm.states import State
from orchestrator.util import yamlio
from orchestrator.util.runner import Completed, SubprocessRunner

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SCRIPT = "#!/bin/bash\n#SBATCH --nodes=2\nsrun python train.py\n"


def git(status: str = "", head: str = COMMIT, head_rc: int = 0) -> FakeRunner:
    """A runner whose git is at ``head``, with ``status`` as `git status --porcelain`'s answer."""

    def answer(argv):
        if "rev-parse" in argv:
            return Completed(tuple(argv), head_rc, head + "\n", "" if head_rc == 0 else "fatal: not a git repository")
        return Completed(tuple(argv), 0, status.replace("\n", "\0") if "-z" in argv else status, "")

    return FakeRunner({"git": answer}, installed={"git"})


def test_a_submission_records_code_profile_and_script(tmp_path):
    loaded = selection.load_profile("testbed")
    runner = git()
    prov = provenance.at_submission(tmp_path, runner, loaded, SCRIPT)
    assert prov == {
        "profile": "testbed",
        "profile_source": "built-in",
        "profile_sha256": hashlib.sha256(loaded.text.encode()).hexdigest(),
        "script_sha256": hashlib.sha256(SCRIPT.encode()).hexdigest(),
        "git_commit": COMMIT,
        "git_dirty": False,
    }
    assert ["git", "-C", str(tmp_path), "rev-parse", "HEAD"] in runner.calls
    # The partition the plan chose: whole nodes or GPUs, what the report's cost is billed by. The profile's
    # name for it, which the script need not say (Frontier's debug queue is `-p batch -q debug` there).
    script = SCRIPT.replace("#SBATCH --nodes=2", "#SBATCH --partition=batch")
    partitioned = provenance.at_submission(tmp_path, runner, loaded, script, None, "debug")
    assert partitioned["partition"] == "debug"
    assert provenance.of_job("#SBATCH --partition=batch\n", "debug") == {
        "script_sha256": provenance.script_hash("#SBATCH --partition=batch\n"),
        "partition": "debug",
    }  # what each task of an array records of its own job
    assert provenance.of_job(SCRIPT, None) == {"script_sha256": provenance.script_hash(SCRIPT)}


def test_an_image_file_of_params_is_what_provenance_names():
    lumi = selection.load_profile("lumi")
    own = provenance.at_submission(Path("."), git(), lumi, SCRIPT, "/project/project_465000858/klajster.sif")
    assert own["image"] == "/project/project_465000858/klajster.sif"
    assert provenance.at_submission(Path("."), git(), lumi, SCRIPT)["image"] == lumi.profile.container.image


def test_changed_tracked_files_make_it_dirty_untracked_ones_do_not(tmp_path):
    loaded = selection.load_profile("testbed")
    runner = git(status=" M orchestrator/jobs/detached.py\nD  old.py\nA  new.py\n")
    prov = provenance.at_submission(tmp_path, runner, loaded, SCRIPT)
    assert prov["git_dirty"] is True and prov["git_dirty_files"] == ["orchestrator/jobs/detached.py", "old.py", "new.py"]
    statuses = [argv for argv in runner.called("git") if "status" in argv]
    assert statuses and all("--untracked-files=no" in s for s in statuses)  # results beside the code are not a change to the code


def test_what_runs_write_is_no_change_to_the_code(tmp_path):
    """A committed metrics file rewritten by the next run, dvc.lock, DVC's .gitignore lines: results,
    not code; the run is clean. A changed param or script still makes it dirty."""
    project = tmp_path / "p"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=project, check=True)
    pipeline = "stages:\n  train:\n    cmd: python train.py\n    metrics: [{out/m.json: {cache: false}}]\n    plots: [curves]\n"
    for name, text in {"dvc.yaml": pipeline, "params.yaml": "lr: 1\n", "train.py": "v1\n", "dvc.lock": "schema: '2.0'\n",
                       ".gitignore": "", "out/m.json": "{}", "curves/a.csv": "x\n"}.items():  # fmt: skip
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    ident = ["-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", *ident, "commit", "-qm", "the project"], cwd=project, check=True)
    for name, text in {"out/m.json": '{"loss": 1}', "curves/a.csv": "y\n", "dvc.lock": "schema: '2.0'\nstages: {}\n",
                       ".gitignore": "/model\n"}.items():  # fmt: skip
        (project / name).write_text(text)
    loaded = selection.load_profile("testbed")
    prov = provenance.at_submission(project, SubprocessRunner(), loaded, SCRIPT)
    assert prov["git_dirty"] is False and "git_dirty_files" not in prov
    (project / "params.yaml").write_text("lr: 2\n")
    prov = provenance.at_submission(project, SubprocessRunner(), loaded, SCRIPT)
    assert prov["git_dirty"] is True and prov["git_dirty_files"] == ["params.yaml"]


def test_a_dirty_run_names_at_most_twenty_changed_files(tmp_path):
    runner = git(status="".join(f" M f{i}.py\n" for i in range(25)))
    files = provenance.at_submission(tmp_path, runner, selection.load_profile("testbed"), SCRIPT)["git_dirty_files"]
    assert files == [f"f{i}.py" for i in range(20)] + ["(+5 more)"]


@pytest.mark.parametrize("runner", [FakeRunner(installed=set()), git(head="", head_rc=128)], ids=["no git", "not a repository"])
def test_without_git_there_is_no_commit(tmp_path, runner):
    prov = provenance.at_submission(tmp_path, runner, selection.load_profile("testbed"), SCRIPT)
    assert "git_commit" not in prov and "git_dirty" not in prov
    assert prov["script_sha256"] == hashlib.sha256(SCRIPT.encode()).hexdigest()


def test_a_different_script_or_profile_has_a_different_hash(tmp_path):
    testbed, lumi = selection.load_profile("testbed"), selection.load_profile("lumi")
    first = provenance.at_submission(tmp_path, git(), testbed, SCRIPT)
    assert provenance.at_submission(tmp_path, git(), testbed, SCRIPT + "echo more\n")["script_sha256"] != first["script_sha256"]
    other = provenance.at_submission(tmp_path, git(), lumi, SCRIPT)
    assert other["profile"] == "lumi" and other["profile_sha256"] != first["profile_sha256"]


def test_a_profile_file_is_named_by_its_path(tmp_path):
    from orchestrator.config.profile import BUILTIN_DIR

    path = tmp_path / "mine.yaml"
    path.write_text((BUILTIN_DIR / "testbed.yaml").read_text())
    prov = provenance.at_submission(tmp_path, git(), selection.load_profile(str(path)), SCRIPT)
    assert prov["profile_source"] == str(path)
    assert prov["profile_sha256"] == hashlib.sha256(path.read_text().encode()).hexdigest()


def test_the_image_is_recorded_when_the_job_runs_in_a_container(tmp_path):
    with_image = selection.load_profile("generic-nvidia")
    assert with_image.profile.container.image and with_image.profile.container.runtime
    assert provenance.at_submission(tmp_path, git(), with_image, SCRIPT)["image"] == with_image.profile.container.image
    assert "image" not in provenance.at_submission(tmp_path, git(), selection.load_profile("testbed"), SCRIPT)


# --- a finished job's provenance ---------------------------------------------------------------


def record(job_id: str, fp: str = "f" * 64, **more) -> ledger.Record:
    values = dict(
        item="train@x",
        fingerprint=fp,
        backend="slurm",
        job_id=job_id,
        profile="testbed",
        script=".orchestrator/scripts/testbed/train@x.sbatch",
        submitted_at=1000.0,
        state=State.COMPLETED,
        exit_code=0,
        log=f".orchestrator/logs/train@x-{job_id}.log",
        nodelist="node[1-2]",
        nodes=2,
        elapsed_s=95,
        requeues=1,
        provenance={"profile": "testbed", "git_commit": COMMIT, "git_dirty": False, "script_sha256": "s" * 64},
    )
    values.update(more)
    return ledger.Record(**values)


def test_of_joins_the_submission_and_how_the_job_ran():
    earlier, other, last = record("101", state=State.FAILED), record("102", fp="e" * 64), record("103")
    data = provenance.of(last, [earlier, other, last])
    assert data == {
        "item": "train@x",
        "profile": "testbed",
        "git_commit": COMMIT,
        "git_dirty": False,
        "script_sha256": "s" * 64,
        "backend": "slurm",
        "job_id": "103",
        "job_ids": ["101", "103"],  # the submissions of this fingerprint only
        "nodelist": "node[1-2]",
        "nodes": 2,
        "requeues": 1,
        "elapsed_s": 95,
        "state": "completed",
        "exit_code": 0,
        "script": ".orchestrator/scripts/testbed/train@x.sbatch",
        "log": ".orchestrator/logs/train@x-103.log",
        "fingerprint": "f" * 64,
        "rerun": f"git checkout {COMMIT} && dvc repro train@x",
    }


def test_how_the_job_ran_wins_over_what_submission_recorded():
    rec = record("103", provenance={"job_id": "stale", "state": "pending", "profile": "testbed"})
    data = provenance.of(rec, [rec])
    assert (data["job_id"], data["state"], data["profile"]) == ("103", "completed", "testbed")


def test_without_a_commit_the_rerun_says_which_to_check_out():
    rec = record("103", provenance={"profile": "testbed"})
    assert provenance.of(rec, [rec])["rerun"] == "git checkout <commit> && dvc repro train@x"


def test_show_prints_it_as_yaml_that_reads_back():
    rec = record("103")
    data = provenance.of(rec, [rec])
    assert yaml.safe_load(yamlio.dump(data)) == data


def test_show_prints_the_newest_job_of_an_item(tmp_path):
    book = ledger.Ledger(tmp_path)
    with book.locked("train@x") as records:
        records.append(record("101", state=State.FAILED))
        records.append(record("103"))
    done = invoke("show", "train@x", "--project", str(tmp_path))
    assert done.exit_code == 0, done.output
    shown = yaml.safe_load(done.output)
    assert shown["job_id"] == "103" and shown["job_ids"] == ["101", "103"] and shown["git_commit"] == COMMIT


def test_provenance_json_is_written_once_beside_each_metrics_folder(tmp_path):
    metrics = ["results/a/metrics.json", "results/a/eval.json", "results/b/metrics.json"]
    for m in metrics:
        (tmp_path / m).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "results/a/provenance.json").write_text("{}\n")  # an earlier run's
    data = provenance.of(record("103"), [record("103")])
    provenance.write_beside(tmp_path, metrics, data, [*metrics, "results/a/provenance.json", "results/./b/provenance.json"])
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["results/a/provenance.json", "results/b/provenance.json"]  # nothing left beside them
    for folder in ("a", "b"):
        text = (tmp_path / "results" / folder / provenance.FILE).read_text()
        assert json.loads(text) == data and text.endswith("}\n")
        assert list(json.loads(text)) == sorted(data)  # sorted keys: the file diffs cleanly between runs


def test_nothing_is_written_without_metrics(tmp_path):
    provenance.write_beside(tmp_path, [], {"job_id": "1"}, [])
    assert list(Path(tmp_path).iterdir()) == []


def test_the_file_name_is_the_one_dvc_stages_know():
    from orchestrator.pipeline import stages

    assert provenance.FILE == stages.PROVENANCE_FILE == "provenance.json"


def test_the_image_files_own_sha256_is_recorded_and_hashed_once(tmp_path, monkeypatch):
    """The digest file names what went into an image; provenance names the exact file a job ran in."""
    from orchestrator.util import files

    lumi = selection.load_profile("lumi")
    (tmp_path / "images").mkdir()
    own = tmp_path / "images" / "klajster.sif"
    own.write_bytes(b"a SIF")
    prov = provenance.at_submission(tmp_path, git(), lumi, SCRIPT, "images/klajster.sif")  # relative to the project
    assert prov["image"] == "images/klajster.sif" and prov["image_sha256"] == hashlib.sha256(b"a SIF").hexdigest()
    monkeypatch.setattr(files, "sha256_file", lambda p: pytest.fail("hashed again although the image did not change"))
    files._SHA256_MEMO.clear()  # a new process: the hash remembered beside the image still serves
    assert provenance.at_submission(tmp_path, git(), lumi, SCRIPT, str(own))["image_sha256"] == prov["image_sha256"]
    monkeypatch.undo()
    own.write_bytes(b"another SIF")
    assert provenance.at_submission(tmp_path, git(), lumi, SCRIPT, str(own))["image_sha256"] == hashlib.sha256(b"another SIF").hexdigest()


def test_a_profile_image_path_is_filled_in_from_the_jobs_account(tmp_path, monkeypatch):
    path = tmp_path / "cluster.yaml"
    profile = yaml.safe_load(selection.load_profile("lumi").text)
    profile["container"]["image"] = str(tmp_path) + "/${SLURM_JOB_ACCOUNT}/${USER}/orchestrator.sif"
    path.write_text(yaml.safe_dump(profile))
    loaded = selection.load_profile(str(path))
    monkeypatch.setenv("USER", "al")
    image = tmp_path / "project_465000858" / "al" / "orchestrator.sif"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"the cluster's image")
    prov = provenance.at_submission(tmp_path, git(), loaded, SCRIPT, account="project_465000858")
    assert prov["image"] == profile["container"]["image"] and prov["image_sha256"] == hashlib.sha256(b"the cluster's image").hexdigest()
    # No account (the reference is known only in the job), or no such file here: no sha256, the path still.
    assert "image_sha256" not in provenance.at_submission(tmp_path, git(), loaded, SCRIPT) and "image" in prov
    image.unlink()
    assert "image_sha256" not in provenance.at_submission(tmp_path, git(), loaded, SCRIPT, account="project_465000858")


def test_a_stage_that_does_not_declare_it_gets_it_under_the_orchestrators_folder(tmp_path):
    """Before: provenance.json was written beside the metrics whether declared or not, an untracked
    file in the user's results that git lists and DVC does not know."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out/metrics.json").write_text('{"loss": 1.0}\n')
    data = provenance.of(record("103"), [record("103")])
    provenance.write_beside(tmp_path, ["out/metrics.json"], data, ["out/metrics.json"])
    assert not (tmp_path / "out/provenance.json").exists()
    kept = tmp_path / ".orchestrator/provenance/out/provenance.json"
    assert json.loads(kept.read_text()) == data and provenance.find(tmp_path, "out") == kept
    (tmp_path / "out/provenance.json").write_text("{}\n")  # declared later: the file beside the metrics wins
    assert provenance.find(tmp_path, "out") == tmp_path / "out/provenance.json"


def test_the_report_reads_the_provenance_kept_under_the_orchestrators_folder(tmp_path):
    from orchestrator.analysis import runs

    (tmp_path / "out").mkdir()
    (tmp_path / "out/metrics.json").write_text('{"loss": 1.0}\n')
    provenance.write_beside(tmp_path, ["out/metrics.json"], {"job_id": "103", "profile": "testbed"}, [])
    run = runs.read_run(tmp_path, runs.Expected("train@x", "train", "out", 1, 1))
    assert run.provenance == {"job_id": "103", "profile": "testbed"}


def test_a_run_from_uncommitted_changes_says_it_cannot_be_rerun_and_why(tmp_path):
    """Before: `show` printed `git checkout COMMIT && dvc repro ITEM`, which runs other code than the job ran."""
    dirty = {"profile": "testbed", "git_commit": COMMIT, "git_dirty": True, "git_dirty_files": ["train.py", "lib/model.py"]}
    book = ledger.Ledger(tmp_path)
    with book.locked("train@x") as records:
        records.append(record("103", provenance=dirty))
    done = invoke("show", "train@x", "--project", str(tmp_path))
    assert done.exit_code == 0, done.output
    shown = yaml.safe_load(done.output)
    assert shown["rerun"] is None and "git checkout" not in done.output
    assert shown["not_rerunnable"].startswith(
        f"submitted from a workspace with uncommitted changes (train.py, lib/model.py) on commit {COMMIT}: "
        "that commit does not hold the code this job ran, so it cannot be re-run exactly"
    )
    unnamed = provenance.of(record("104", provenance={"git_commit": COMMIT, "git_dirty": True}), [])
    assert "(which files was not recorded)" in unnamed["not_rerunnable"]  # a record from before the files were kept
