"""Staging's copy back with real rsync: items whose outputs share a folder (out/0, out/1, ...)
copying back at once all arrive (a sweep on the testbed lost 3 of 64 to rsync's shared
holding folder), and a copy that does not arrive fails the job instead of passing silently."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from support import ACCOUNT, require

from orchestrator.config import params, profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import render
from orchestrator.scripts.plan import make_plan


def stage_out_script(workspace: Path, item: int) -> str:
    """The functions of item ``item``'s batch script that copy its output back, then a call."""
    spec = JobSpec(command=("python", "work.py"), nodes=1, gpus_per_node=1)
    plan = make_plan(
        spec, f"work@{item}", "", profile.load("testbed"), params.Settings(account=ACCOUNT), str(workspace), "sbatch",
        inputs=("work.py",), outputs=(f"out/{item}",),
    )  # fmt: skip
    text = render.render(plan)
    functions = [re.search(pattern, text, re.S).group(0) for pattern in (r"orch_sync\(\) \(.*?\n\)\n", r"orch_stage_out\(\) \{.*?\n\}\n")]
    return "set -euo pipefail\n" + "".join(functions) + "orch_stage_out\n"


@pytest.mark.parametrize("round_", range(3))  # rsync's shared holding folder lost 1 of 48 in 2 rounds of 3 here
def test_outputs_that_share_a_folder_all_arrive_when_copied_back_at_once(tmp_path, round_):
    require("rsync")
    workspace = tmp_path / "ws"
    (workspace / "out").mkdir(parents=True)
    procs = []
    for i in range(48):
        stage = tmp_path / f"stage{i}"
        (stage / "out").mkdir(parents=True)
        (stage / "out" / str(i)).write_bytes(os.urandom(256 * 1024))
        env = {**os.environ, "ORCH_STAGE": str(stage), "SLURM_JOB_ID": str(1000 + i)}
        procs.append(subprocess.Popen(["bash", "-c", stage_out_script(workspace, i)], env=env, stderr=subprocess.PIPE, text=True))
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 48, errors
    assert sorted(int(p.name) for p in (workspace / "out").iterdir()) == list(range(48))  # no holding folder left behind
    for i in range(48):
        assert (workspace / "out" / str(i)).read_bytes() == (tmp_path / f"stage{i}" / "out" / str(i)).read_bytes()


def test_a_copy_that_does_not_arrive_fails_the_job(tmp_path):
    """As rsync does when it cannot place a file: it exits 0 without it. (A stand-in rsync on
    PATH that copies nothing; running as root, the real one cannot be made to fail so.)"""
    workspace = tmp_path / "ws"
    (workspace / "out").mkdir(parents=True)
    stage = tmp_path / "stage"
    (stage / "out").mkdir(parents=True)
    (stage / "out" / "0").write_text("result")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rsync").write_text("#!/bin/sh\necho 'Unable to create partial-dir for out/0 -- discarding completed file.' >&2\nexit 0\n")
    (bin_dir / "rsync").chmod(0o755)
    env = {**os.environ, "ORCH_STAGE": str(stage), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", stage_out_script(workspace, 0)], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and f"orchestrator: out/0 did not arrive in {workspace}" in done.stderr, done.stderr


def test_inputs_read_in_place_are_linked_not_copied(tmp_path):
    """params' orchestrator.read_in_place: the corpus stays where it is, the rest is copied."""
    require("rsync")
    workspace = tmp_path / "ws"
    (workspace / "data/lm/tokens").mkdir(parents=True)
    (workspace / "data/lm/tokens/shard.bin").write_bytes(b"\0" * 1024)
    (workspace / "work.py").write_text("print(1)\n")
    spec = JobSpec(command=("python", "work.py"), nodes=1, gpus_per_node=1)
    settings = params.Settings(account=ACCOUNT, read_in_place=("data/lm",))
    plan = make_plan(
        spec, "work@0", "", profile.load("testbed"), settings, str(workspace), "sbatch",
        inputs=("work.py", "data/lm/tokens"), outputs=("out/0",),
    )  # fmt: skip
    assert plan.staging.in_place == ("data/lm/tokens",) and plan.staging.inputs == ("work.py", "out/0")
    text = render.render(plan)
    functions = [re.search(pattern, text, re.S).group(0) for pattern in (r"orch_sync\(\) \(.*?\n\)\n", r"orch_stage_in\(\) \{.*?\n\}\n")]
    stage = tmp_path / "stage"
    (stage / "data/lm/tokens").mkdir(parents=True)  # copied by a run from before the setting
    for _ in range(2):  # and a requeued run stages in again
        script = "set -euo pipefail\n" + "".join(functions) + "orch_stage_in\n"
        done = subprocess.run(["bash", "-c", script], env={**os.environ, "ORCH_STAGE": str(stage)}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert (stage / "work.py").read_text() == "print(1)\n" and not (stage / "work.py").is_symlink()
        assert (stage / "data/lm/tokens").is_symlink() and (stage / "data/lm/tokens").resolve() == (workspace / "data/lm/tokens")
        assert (stage / "data/lm/tokens/shard.bin").stat().st_size == 1024
