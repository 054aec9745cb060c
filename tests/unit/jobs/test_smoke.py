"""`orchestrator smoke`'s pure parts: the entry of a command, shapes, the probe's own checks,
the verdict on the ranks' results and submit's line."""

from __future__ import annotations

import dataclasses
import os

import pytest
from click.testing import CliRunner

from orchestrator.jobs import smoke_probe, smoke_verdicts
from orchestrator.scripts.smoke import EntryPoint, Shape, entry_of
from orchestrator.slurm.states import JobInfo, State


@pytest.mark.parametrize(
    ("command", "entry"),
    [
        (["python", "-m", "experiments.lm", "--seed", "1"], EntryPoint("module", "experiments.lm", "python")),
        (["python3", "-u", "-X", "dev", "-mpkg.train"], EntryPoint("module", "pkg.train", "python3")),
        (["/opt/venv/bin/python", "-W", "ignore", "train.py", "-m", "x"], EntryPoint("script", "train.py", "/opt/venv/bin/python")),
    ],
)
def test_the_entry_is_read_as_python_reads_its_command_line(command, entry):
    assert entry_of(command) == entry


@pytest.mark.parametrize("command", [["bash", "run.sh"], ["python", "-c", "print(1)"], ["python"], []])
def test_a_command_without_module_or_script_is_not_checked_and_says_why(command):
    found = entry_of(command)
    assert found.kind == "none" and found.name


def test_a_shape_key_is_a_file_name_that_tells_shapes_apart():
    shape = Shape("lm / x", 2, 8, "gpu", "dev-g", "/project/${SLURM_JOB_ACCOUNT}/containers/orchestrator.sif")
    assert "/" not in shape.key and shape.key.startswith("lm___x-2x8-")
    assert shape.label == "lm / x 2x8 gpu on dev-g in orchestrator.sif"
    assert dataclasses.replace(shape, image="").key != shape.key


@pytest.mark.parametrize(("nodelist", "first"), [("node[1-2]", "node1"), ("nid[005-008,010],x", "nid005"), ("a,b", "a"), ("solo", "solo")])
def test_the_probe_finds_rank_0s_node_without_scontrol(nodelist, first):
    assert smoke_probe.first_host(nodelist) == first


def _expect(tmp_path, kind: str, name: str, staged: bool = True) -> dict:
    return {"entry": {"kind": kind, "name": name}, "workspace": str(tmp_path), "staged": staged}


def test_the_probe_names_a_missing_package_without_running_the_script(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("import os\nimport not_installed_here_at_all\nraise SystemExit('ran')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(os.sys.path))
    with pytest.raises(smoke_probe.Failed, match=r"train.py imports not_installed_here_at_all: ModuleNotFoundError: .*staged copy"):
        smoke_probe.check_entry(_expect(tmp_path, "script", "train.py"))


def test_the_probe_imports_a_guarded_module_from_the_run_folder(tmp_path, monkeypatch):
    (tmp_path / "smokepkg_x").mkdir()
    (tmp_path / "smokepkg_x" / "__init__.py").write_text("")
    (tmp_path / "smokepkg_x" / "main.py").write_text("import json\n\nif __name__ == '__main__':\n    raise SystemExit('ran')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(os.sys.path))
    message = smoke_probe.check_entry(_expect(tmp_path, "module", "smokepkg_x.main"))
    assert message.startswith("imported smokepkg_x.main from ")
    with pytest.raises(smoke_probe.Failed, match="no module named 'smokepkg_x.nothing'"):
        smoke_probe.check_entry(_expect(tmp_path, "module", "smokepkg_x.nothing"))


def test_the_probe_compares_the_cpu_mask_with_the_plan():
    mine = sorted(os.sched_getaffinity(0))
    mask = hex(sum(1 << c for c in mine))
    assert "as planned" in smoke_probe.check_cpus({"masks": [mask]}, 0)
    with pytest.raises(smoke_probe.Failed, match=r"the plan binds local rank 0 to 63 \(0x8000000000000000\)"):
        smoke_probe.check_cpus({"masks": [hex(1 << 63)]}, 0)


class _Job:
    """What judge reads of a smoke job."""

    shape = Shape("lm", 1, 2, "cpu", "debug", "")
    item = "lm@0"
    digest = "d" * 64

    class expect:  # noqa: N801 - an attribute of the job, as SmokeJob names it
        world_size = 2


def _rank(rank: int, ok: bool = True, message: str = "fine") -> dict:
    return {"rank": rank, "node": "node1", "ok": ok, "seconds": 12.0, "checks": [{"check": "entry", "ok": ok, "message": message}]}


def test_the_verdict_names_the_first_failing_rank_and_its_message():
    info = JobInfo("7", State.FAILED, "FAILED", exit_code=1)
    ranks = {0: _rank(0), 1: _rank(1, False, "No module named 'x'")}
    v = smoke_verdicts.judge(_Job(), "7", info, ranks, "log", 0.0)  # type: ignore[arg-type]
    assert not v.passed and v.message == "rank 1 on node1: entry: No module named 'x'"


def test_ranks_without_a_result_are_named_with_the_jobs_end():
    info = JobInfo("7", State.FAILED, "TIMEOUT", exit_code=0)
    v = smoke_verdicts.judge(_Job(), "7", info, {0: _rank(0)}, "log", 0.0)  # type: ignore[arg-type]
    assert not v.passed and v.message.startswith("rank(s) 1 of 2 wrote no result: the job ended TIMEOUT")
    ok = smoke_verdicts.judge(_Job(), "7", JobInfo("7", State.COMPLETED, "COMPLETED", 0), {0: _rank(0), 1: _rank(1)}, "", 0.0)  # type: ignore[arg-type]
    assert ok.passed and ok.message == "2 rank(s) passed in 12 s"


def test_submits_line_says_which_shapes_passed_when_and_which_not_yet(tmp_path):
    tested, other = Shape("lm", 1, 2, "cpu", "debug", ""), Shape("lm", 2, 2, "cpu", "debug", "")
    v = smoke_verdicts.SmokeVerdict(tested.key, tested.label, "lm@0", "abc", "7", True, 1000.0, "2 rank(s) passed")
    smoke_verdicts.save(tmp_path, v)
    line = smoke_verdicts.summary(tmp_path, [(tested, "abc"), (other, "def")], now=lambda: 1000.0 + 12 * 60)
    passed = "(lm 1x2 cpu on debug: passed 12 min ago)"
    assert line == f"smoke-tested 1 of 2 shape(s) {passed}; not yet: lm 2x2 cpu on debug (orchestrator smoke)"
    changed = smoke_verdicts.summary(tmp_path, [(tested, "new")], now=lambda: 1000.0)
    assert changed == "smoke-tested 0 of 1 shape(s); not yet: lm 1x2 cpu on debug (changed since its smoke test) (orchestrator smoke)"


def test_a_profile_without_slurm_is_one_message_and_exit_2(tmp_path):
    from support import make_project

    from orchestrator.cli import main

    project = make_project(tmp_path / "p")
    done = CliRunner().invoke(main, ["smoke", "--project", str(project), "--cluster", "local"])
    assert done.exit_code == 2, done.output
    assert "smoke jobs are Slurm jobs, and profile 'local' has no Slurm" in done.output and "Traceback" not in done.output
