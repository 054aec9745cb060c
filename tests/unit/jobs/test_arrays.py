"""Job arrays in `orchestrator submit`, against a fake Slurm: which items share an array, what
the array's script runs, what the ledger keeps per task, what a second or interrupted submit
does. The real scheduler running the tasks is proven on the testbed
(tests/integration/slurm/test_arrays_testbed.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from fakes import FakeSlurm
from support import ACCOUNT, make_project

from orchestrator.errors import ConfigError
from orchestrator.jobs import arrays, detached, ledger, status
from orchestrator.jobs.batch import ItemJob
from orchestrator.jobs.recorder import RECORD_ITEM
from orchestrator.slurm import commands
from orchestrator.slurm.states import State


def sweep(tmp_path: Path, count: int, params: dict | None = None, extra: dict | None = None) -> Path:
    """A matrix of ``count`` one-node items of one shape, each writing out/<i>."""
    stages = {
        "work": {
            "matrix": {"i": list(range(count))},
            "cmd": "orchestrator run -- python3 work.py ${item.i}",
            "deps": ["work.py"],
            "outs": [{"out/${item.i}": {"persist": True}}],
        },
        **(extra or {}),
    }
    settings = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT, **(params or {})}}
    root = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(settings))
    (root / "work.py").write_text("print('work')\n")
    return root


def submit(root: Path, slurm: FakeSlurm, at: float = 1000.0, targets=()) -> tuple[list[ItemJob], list[str]]:
    lines: list[str] = []
    rows = detached.submit(root, None, slurm.runner, targets, say=lines.append, now=lambda: at)
    return rows, lines


@pytest.fixture(autouse=True)
def in_project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_items_of_one_shape_are_the_tasks_of_one_array(tmp_path, monkeypatch):
    root = sweep(tmp_path, 5)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    rows, lines = submit(root, slurm)
    calls = slurm.runner.called("sbatch")
    assert len(calls) == 2  # the array and the recording job
    array_id = rows[0].job_id.split("_")[0]
    assert [r.job_id for r in rows[:-1]] == [f"{array_id}_{i}" for i in range(5)]
    assert rows[-1].item == RECORD_ITEM and rows[-1].after == (array_id,)  # the array's id waits for every task
    assert f"afterany:{array_id}\n" in (root / ".orchestrator/scripts/record.sbatch").read_text()
    assert any(line.startswith(f"array {array_id}: 5 items (work@0 ... work@4)") for line in lines)
    script = Path(calls[0][-1]).read_text()
    assert "#SBATCH --array=0-4\n" in script and script.count("#SBATCH --job-name=") == 1
    # Every directive of the item's own script is the array's, but its name and log.
    item_script = (root / ".orchestrator/scripts/testbed/work@0.sbatch").read_text()
    own = [line for line in item_script.splitlines() if line.startswith("#SBATCH") and "--job-name" not in line and "--output" not in line]
    assert own and all(line in script.splitlines() for line in own)
    # Each task's record: its own id, log and frozen script; no intent left.
    book = ledger.Ledger(root)
    for i in range(5):
        (rec,) = book.records(f"work@{i}")
        assert rec.job_id == f"{array_id}_{i}" and rec.provenance["array"] == array_id
        assert rec.provenance["partition"] == "debug"  # the plan's, what the report bills by
        assert rec.log.endswith(f"-{array_id}_{i}.log") and rec.log.startswith(".orchestrator/logs/work.array-")
        assert (root / rec.script).read_text() == (root / f".orchestrator/scripts/testbed/work@{i}.sbatch").read_text()
        assert "submitting" not in json.loads((root / f".orchestrator/ledger/work@{i}.json").read_text())


def test_the_array_script_runs_the_item_of_its_task_index(tmp_path, monkeypatch):
    root = sweep(tmp_path, 3)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    rows, _ = submit(root, slurm)
    script = Path(slurm.runner.called("sbatch")[0][-1])
    book = ledger.Ledger(root)
    frozen = {i: book.records(f"work@{i}")[0].script for i in range(3)}
    for i in range(3):  # the member scripts replaced by ones that say who they are
        (root / frozen[i]).write_text(f"echo I am work@{i}\n")
    for i in range(3):
        done = subprocess.run(
            ["bash", str(script)], cwd=root, env={"SLURM_ARRAY_TASK_ID": str(i), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
        )
        assert (done.returncode, done.stdout) == (0, f"I am work@{i}\n")
    done = subprocess.run(
        ["bash", str(script)], cwd=root, env={"SLURM_ARRAY_TASK_ID": "7", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert done.returncode == 2 and "array task '7' names no item" in done.stderr


def test_a_new_render_does_not_change_what_a_queued_task_runs(tmp_path, monkeypatch):
    root = sweep(tmp_path, 2)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    submit(root, slurm)
    rec = ledger.Ledger(root).records("work@0")[0]
    before = (root / rec.script).read_text()
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestrator": {"cluster": "testbed", "account": ACCOUNT, "time": "00:07:00"}}))
    submit(root, slurm, at=2000.0)  # new scripts (a new time limit): new jobs, new frozen copies
    assert (root / rec.script).read_text() == before
    assert ledger.Ledger(root).records("work@0")[-1].script != rec.script


def test_array_parallel_caps_the_running_tasks(tmp_path, monkeypatch):
    root = sweep(tmp_path, 4, params={"array_parallel": 2})
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    submit(root, slurm)
    assert "#SBATCH --array=0-3%2\n" in Path(slurm.runner.called("sbatch")[0][-1]).read_text()


def test_a_bad_array_parallel_is_one_clear_error(tmp_path, monkeypatch):
    root = sweep(tmp_path, 2, params={"array_parallel": 0})
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    with pytest.raises(ConfigError) as caught:
        submit(root, slurm)
    assert "orchestrator.array_parallel is 0" in caught.value.render() and "at least 1" in caught.value.render()
    assert slurm.runner.called("sbatch") == []


def test_arrays_are_cut_to_max_array_size(tmp_path, monkeypatch):
    root = sweep(tmp_path, 7)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    slurm.config += "MaxArraySize            = 3\n"
    rows, _ = submit(root, slurm)
    specs = [Path(argv[-1]).read_text() for argv in slurm.runner.called("sbatch")[:-1]]
    assert ["#SBATCH --array=0-2\n" in specs[0], "#SBATCH --array=0-2\n" in specs[1], "--array" in specs[2]] == [True, True, False]
    assert len({r.job_id.split("_")[0] for r in rows[:-1]}) == 3  # 3 + 3 in arrays, the seventh alone


def test_items_of_other_shapes_or_other_upstream_jobs_are_not_one_array(tmp_path, monkeypatch):
    extra = {
        "long": {  # another time limit: another shape
            "matrix": {"i": [0, 1]},
            "cmd": "orchestrator run --time 00:30:00 -- python3 work.py ${item.i}",
            "deps": ["work.py"],
            "outs": [{"long/${item.i}": {"persist": True}}],
        },
        "after": {  # each waits for its own upstream task
            "matrix": {"i": [0, 1]},
            "cmd": "orchestrator run -- python3 work.py ${item.i}",
            "deps": ["work.py", "out/${item.i}"],
            "outs": [{"after/${item.i}": {"persist": True}}],
        },
    }
    root = sweep(tmp_path, 2, extra=extra)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    rows, _ = submit(root, slurm)
    jobs = {r.item: r for r in rows}
    work, long = commands.array_of(jobs["work@0"].job_id), commands.array_of(jobs["long@0"].job_id)
    assert work != long and jobs["work@1"].job_id == f"{work}_1" and jobs["long@1"].job_id == f"{long}_1"
    # after@i waits for work@i alone: two jobs, not one array waiting for both.
    assert jobs["after@0"].after == (f"{work}_0",) and jobs["after@1"].after == (f"{work}_1",)
    assert "_" not in jobs["after@0"].job_id and "_" not in jobs["after@1"].job_id
    deps = [a for argv in slurm.runner.called("sbatch") for a in argv if a.startswith("--dependency=afterok")]
    assert sorted(deps) == [f"--dependency=afterok:{work}_0", f"--dependency=afterok:{work}_1"]


def test_a_second_submit_attaches_to_every_task(tmp_path, monkeypatch):
    root = sweep(tmp_path, 4)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    slurm.states[first[1].job_id] = "RUNNING"
    again, _ = submit(root, slurm, at=2000.0)
    assert len(slurm.runner.called("sbatch")) == 2
    assert [(r.job_id, r.attached) for r in again[:-1]] == [(r.job_id, True) for r in first[:-1]]
    assert again[1].state == State.RUNNING


def test_a_failed_task_is_submitted_again_alone(tmp_path, monkeypatch):
    root = sweep(tmp_path, 3)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    for i, r in enumerate(first[:-1]):
        slurm.states[r.job_id] = "FAILED" if i == 1 else "COMPLETED"
        if i != 1:
            (root / "out").mkdir(exist_ok=True)
            (root / f"out/{i}").write_text("done")
    again, _ = submit(root, slurm, at=2000.0)
    jobs = {r.item: r for r in again}
    assert jobs["work@0"].attached and jobs["work@2"].attached
    assert not jobs["work@1"].attached and "_" not in jobs["work@1"].job_id  # one item: a plain job
    assert [r.job_id for r in ledger.Ledger(root).records("work@1")] == [first[1].job_id, jobs["work@1"].job_id]


def test_a_submit_killed_after_sbatch_leaves_tasks_the_next_one_adopts(tmp_path, monkeypatch):
    root = sweep(tmp_path, 4)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    appended = []
    real_append = ledger.ItemLedger.append

    def dies_after_two(self, record):
        if len(appended) == 2:
            raise KeyboardInterrupt("killed")  # as SIGINT between two ledger writes would
        appended.append(record.item)
        real_append(self, record)

    monkeypatch.setattr(ledger.ItemLedger, "append", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        submit(root, slurm)
    monkeypatch.setattr(ledger.ItemLedger, "append", real_append)
    (array_id,) = {j.split("_")[0] for j in slurm.states}
    again, lines = submit(root, slurm, at=2000.0)
    assert len([a for a in slurm.runner.called("sbatch") if "record.sbatch" not in a[-1]]) == 1  # never a second array
    assert [(r.job_id, r.attached) for r in again[:-1]] == [(f"{array_id}_{i}", True) for i in range(4)]
    for i in range(4):
        (rec,) = ledger.Ledger(root).records(f"work@{i}")
        assert rec.job_id == f"{array_id}_{i}" and rec.adopted == (i >= 2)
        assert rec.log.endswith(f"-{array_id}_{i}.log")


def test_a_damaged_ledger_file_of_a_task_finds_its_task_again(tmp_path, monkeypatch):
    root = sweep(tmp_path, 3)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    (root / ".orchestrator/ledger/work@1.json").write_text("{not json")
    again, _ = submit(root, slurm, at=2000.0)
    assert len(slurm.runner.called("sbatch")) == 2  # nothing new
    assert again[1].attached and again[1].job_id == first[1].job_id


def test_status_summarises_each_array(tmp_path, monkeypatch):
    root = sweep(tmp_path, 4)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    array_id = first[0].job_id.split("_")[0]
    slurm.states.update({f"{array_id}_0": "COMPLETED", f"{array_id}_1": "RUNNING"})
    before = len(slurm.runner.called("sacct"))
    rows = status.refresh(root, slurm.runner)
    assert len(slurm.runner.called("sacct")) == before + 1  # one query for every task
    assert [r.state for r in rows if r.item.startswith("work@")] == [State.COMPLETED, State.RUNNING, State.PENDING, State.PENDING]
    (summary,) = status.summaries(rows)
    assert (summary.array_id, summary.tasks, summary.counts) == (array_id, 4, {"completed": 1, "running": 1, "pending": 2})
    assert summary.items == "work@0 ... work@3"


def test_cancel_of_one_item_cancels_its_task_only(tmp_path, monkeypatch):
    root = sweep(tmp_path, 3)
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    first, _ = submit(root, slurm)
    assert status.cancel(root, slurm.runner, ["work@1"]) == [first[1].job_id]
    assert slurm.runner.called("scancel") == [["scancel", first[1].job_id]]
    assert status.log_path(root, "work@2") == root / ledger.Ledger(root).records("work@2")[0].log


def test_grouping_is_by_shape_and_cut_by_size():
    class P:  # the plan fields grouping reads
        def __init__(self, item, args, workspace="/w"):
            self.item, self.scheduler_args, self.workspace = item, args, workspace

    def member(item, time):
        return arrays.Member(P(item, ("--job-name=" + item, f"--time={time}", "--output=x")), item, "fp-" + item)  # type: ignore[arg-type]

    found, alone = arrays.group([(member(f"a@{i}", "1:00"), ()) for i in range(5)] + [(member("b", "2:00"), ())], max_size=2)
    assert [[m.plan.item for m in a.members] for a in found] == [["a@0", "a@1"], ["a@2", "a@3"]]
    assert [m.plan.item for m in alone] == ["a@4", "b"]
    assert found[0].directives == ("--time=1:00",) and found[0].name != found[1].name


@pytest.mark.parametrize(
    ("matrix", "said"),
    [
        ("      i: [1, 2\n", "expected ',' or ']', but got ':' at line 5, column 8"),  # YAML cut short: where, not just "corrupted"
        ("      i: 3\n", "stages.work.matrix.i: expected str"),  # not a list of values
    ],
)
def test_a_malformed_sweep_is_one_clear_error_and_nothing_is_submitted(tmp_path, monkeypatch, matrix, said):
    from orchestrator.errors import PipelineError

    root = sweep(tmp_path, 2)
    (root / "dvc.yaml").write_text("stages:\n  work:\n    matrix:\n" + matrix + "    cmd: orchestrator run -- true\n")
    monkeypatch.chdir(root)
    slurm = FakeSlurm()
    with pytest.raises(PipelineError) as caught:
        submit(root, slurm)
    assert said in caught.value.render()
    assert slurm.runner.called("sbatch") == [] and not (root / arrays.ARRAYS_DIR).exists()
