"""The profile's container.build section (`container build NAME --on-cluster`): defaults, LUMI's
proot builder, one message per bad key, every problem at once."""

from __future__ import annotations

import textwrap

import pytest

from orchestrator.config import profile
from orchestrator.config.profile_schema import ContainerBuild
from orchestrator.errors import ConfigError, ProfileError

BASE = """\
name: mine
description: test
scheduler:
  kind: slurm
  default_partition: gpu
  partitions:
    gpu: {max_nodes: 2, max_time: "01:00:00", whole_node: true}
    cpu: {max_nodes: 4, max_time: "1-00:00:00", slurm_partition: shared}
node:
  cores: 16
  gpus: 2
  gpu_cores: ["0-7", "8-15"]
container:
  runtime: apptainer
  image: /project/${SLURM_JOB_ACCOUNT}/x.sif
"""


def load(tmp_path, text: str):
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(text))
    return profile.load(str(path)).profile


def test_a_build_section_gets_its_defaults(tmp_path):
    b = load(tmp_path, BASE + "  build: {partition: cpu}\n").container.build
    assert b == ContainerBuild(partition="cpu", time="01:00:00", cpus=8, builder="fakeroot", setup=())


def test_no_build_section_is_none(tmp_path):
    assert load(tmp_path, BASE).container.build is None


def test_lumi_builds_with_proot_on_its_cpu_partition():
    b = profile.load("lumi").profile.container.build
    assert (b.partition, b.builder, b.setup) == ("small", "proot", ("module load LUMI systools",))


def test_wrong_types_and_unknown_keys_one_line_each(tmp_path):
    text = BASE + "  build: {partition: cpu, cpus: many, builder: cotainr, sudo: yes}\n"
    with pytest.raises(ConfigError) as err:
        load(tmp_path, text)
    problems = err.value.problems
    assert any(p.startswith("container.build.cpus: expected int") for p in problems), problems
    assert any(p.startswith("container.build.builder: invalid value (cotainr") for p in problems), problems
    assert any("container.build: unknown key(s) sudo; valid keys: partition, time, cpus, builder, setup" in p for p in problems)
    assert len(problems) == 3


def test_bad_meanings_are_all_reported(tmp_path):
    text = BASE + ('  build: {partition: big, time: soon, cpus: 0, builder: proot, setup: ["module load x", ""]}\n')
    with pytest.raises(ProfileError) as err:
        load(tmp_path, text)
    problems = err.value.problems
    assert "container.build.partition 'big' is not one of: gpu, cpu" in problems
    assert any(p.startswith("container.build.time: 'soon' is not a Slurm time") for p in problems), problems
    assert "container.build.cpus 0: must be at least 1" in problems
    assert any(p.startswith("container.build.builder proot is SingularityCE's") for p in problems), problems
    assert any(p.startswith("container.build.setup[1] ''") for p in problems), problems
    assert len(problems) == 5, problems


def test_a_build_needs_a_partition_an_image_and_slurm(tmp_path):
    no_partition = BASE + "  build: {cpus: 2}\n"
    with pytest.raises(ProfileError) as err:
        load(tmp_path, no_partition)
    assert list(err.value.problems) == ["container.build.partition is not set: name the partition build jobs run in, one of: gpu, cpu"]
    no_image = BASE.replace("  image: /project/${SLURM_JOB_ACCOUNT}/x.sif\n", "") + "  build: {partition: cpu}\n"
    with pytest.raises(ProfileError) as err:
        load(tmp_path, no_image)
    assert any("container.build is set but container.image is not" in p for p in err.value.problems)
    local = "name: here\ndescription: t\nscheduler: {kind: none, launcher: local}\nnode: {cores: 4, gpus: 0}\n"
    local += "container: {runtime: apptainer, image: /x.sif, build: {partition: cpu}}\n"
    with pytest.raises(ProfileError) as err:
        load(tmp_path, local)
    assert any("builds run as Slurm jobs, and this profile has no Slurm" in p for p in err.value.problems)
