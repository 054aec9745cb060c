"""The build job of `container build NAME --on-cluster`, pure (orchestrator/containers/on_cluster.py):
what it runs, its sbatch script with hostile values (run by bash here: the build command arrives
word for word, nothing in a value runs), what it refuses; and the builders' flags (build.py)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok

from orchestrator.config import profile
from orchestrator.config.profile_schema import ContainerBuild, Profile
from orchestrator.containers import build, on_cluster
from orchestrator.containers.images import ContainerError
from orchestrator.util.runner import Completed

HOSTILE = 'it\'s $(touch PWNED) `id` "q" ;&|\\'


def with_build(**build_values) -> Profile:
    p = profile.load("testbed").profile
    b = ContainerBuild(**{"partition": "debug", **build_values})
    return dataclasses.replace(p, container=dataclasses.replace(p.container, runtime="apptainer", image="/img/x.sif", build=b))


def plan(p=None, **kw) -> on_cluster.BuildJob:
    args = {
        "profile": p or with_build(),
        "image": "tiny",
        "target": "/shared/u/tiny.sif",
        "workspace": "/home/u/proj",
        "orchestrator": ["/venv/bin/orchestrator"],
        "account": "project_465000858",
        "digest_file": "/home/u/proj/.orchestrator/images/tiny.on-cluster.digest",
    }
    return on_cluster.plan(**{**args, **kw})


def test_the_job_runs_the_same_build_into_the_profiles_path():
    job = plan(force=True, overrides=["base=/a b.sif"])
    assert job.job_name == "orchestrator-build-tiny" and job.partition == "debug" and (job.time, job.cpus) == ("01:00:00", 8)
    assert job.command == (
        "/venv/bin/orchestrator", "container", "build", "--out=/shared/u/tiny.sif",
        "--digest-file=/home/u/proj/.orchestrator/images/tiny.on-cluster.digest", "--builder=fakeroot", "--force",
        "--set=base=/a b.sif", "--", "tiny",
    )  # fmt: skip
    assert job.output_of("42") == ".orchestrator/images/tiny.build-job-42.out"
    assert on_cluster.job_file(Path("/shared/u/tiny.sif")) == Path("/shared/u/.tiny.sif.build-job")


def test_a_given_timeout_goes_to_the_build_in_the_job():
    assert plan(timeout=600.0).command[-3:] == ("--timeout=600.0", "--", "tiny")
    assert "--timeout" not in plan().command  # the build's own default there


def test_the_job_runs_the_installed_orchestrator_not_a_copy_in_the_project():
    assert on_cluster.orchestrator_argv("/venv/bin/python3", True) == ["/venv/bin/orchestrator"]
    assert on_cluster.orchestrator_argv("/venv/bin/python3", False) == ["/venv/bin/python3", "-m", "orchestrator"]


def test_the_slurm_name_of_a_queue_partition_is_used_with_its_qos():
    p = profile.load("frontier").profile
    b = ContainerBuild(partition="debug")  # Frontier's debug queue is `-p batch -q debug`
    p = dataclasses.replace(p, container=dataclasses.replace(p.container, build=b))
    job = plan(p)
    assert (job.partition, job.qos) == ("batch", "debug")
    lines = on_cluster.script(job).splitlines()
    assert "#SBATCH --partition=batch" in lines and "#SBATCH --qos=debug" in lines
    assert not any(line.startswith("#SBATCH --qos") for line in on_cluster.script(plan()).splitlines())  # a plain partition: none


def test_the_script_is_deterministic_and_names_every_resource():
    text = on_cluster.script(plan())
    assert text == on_cluster.script(plan())
    for line in [
        "#SBATCH --job-name=orchestrator-build-tiny",
        "#SBATCH --account=project_465000858",
        "#SBATCH --partition=debug",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --time=01:00:00",
        "#SBATCH --output=.orchestrator/images/tiny.build-job-%j.out",
        "cd /home/u/proj",
    ]:
        assert line in text.splitlines(), line
    assert "--account" not in on_cluster.script(plan(account=None))


def test_hostile_values_reach_the_build_word_for_word(tmp_path):
    workspace = tmp_path / f"ws {HOSTILE}"
    workspace.mkdir()
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    python.chmod(0o755)
    setup = ("echo setup ran", f'X={shlex.quote(HOSTILE)}; echo "$X"')
    job = plan(
        with_build(setup=setup), target=f"/shared/{HOSTILE}/tiny.sif", workspace=str(workspace), orchestrator=[str(python)],
        digest_file=f"{workspace}/d.digest", overrides=[f"base={HOSTILE}"],
    )  # fmt: skip
    script = tmp_path / "job.sbatch"
    script.write_text(on_cluster.script(job))
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["setup ran", HOSTILE]  # setup lines are code, each eval'd as written
    assert lines[2:] == list(job.command[1:])
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_values_slurm_directives_cannot_carry_are_refused():
    with pytest.raises(ContainerError, match=r"account 'a b\\nc' has characters Slurm directives cannot carry"):
        plan(account="a b\nc")


def test_a_relative_target_and_a_missing_section_are_refused():
    with pytest.raises(ContainerError, match="is not absolute"):
        plan(target="images/tiny.sif")
    p = with_build()
    with pytest.raises(ContainerError, match="has no container.build section"):
        plan(dataclasses.replace(p, container=dataclasses.replace(p.container, build=None)))


# --- the builders' flags ----------------------------------------------------------------------


def test_builder_flags():
    assert build.builder_flags("fakeroot") == ["--fakeroot"]
    assert build.builder_flags("proot") == []
    with pytest.raises(ContainerError, match="unknown builder 'sudo': expected one of fakeroot, proot"):
        build.builder_flags("sudo")


def fake_runtime(name: str) -> FakeRunner:
    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, f"{name} version 4.2\n", "")
        Path(argv[-2]).write_bytes(b"SIF")
        return Completed(tuple(argv), 0, "", "")

    return FakeRunner(answers={name: fake_build, "git": ok("", rc=128)}, installed={name, "proot"})


def test_the_proot_builder_runs_singularity_build_without_fakeroot(tiny):
    runner = fake_runtime("singularity")
    said: list[str] = []
    result = build.build(tiny, "tiny", runner, builder="proot", say=said.append)
    assert result.built and runner.called("singularity")[-1][1:3] == ["build", "--force"]
    assert any("with singularity build (proot)" in line for line in said), said


def test_the_fakeroot_builder_says_so(tiny):
    runner = fake_runtime("apptainer")
    said: list[str] = []
    build.build(tiny, "tiny", runner, say=said.append)
    assert runner.called("apptainer")[-1][1:4] == ["build", "--fakeroot", "--force"]
    assert any("with apptainer build --fakeroot;" in line for line in said), said


def test_the_proot_builder_without_proot_names_the_module(tiny):
    runner = fake_runtime("singularity")
    runner.installed = {"singularity"}
    with pytest.raises(ContainerError, match=r"the proot builder needs proot on PATH") as err:
        build.build(tiny, "tiny", runner, builder="proot")
    assert "module load LUMI systools" in " ".join(err.value.hints)
    assert not runner.called("singularity")
