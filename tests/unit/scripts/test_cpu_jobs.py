"""CPU jobs (`orchestrator run --cpus N`): one task per node with N cores and no GPU, on the
profile's CPU partition; the stage-wide GPU/CPU choice never applies to them."""

from __future__ import annotations

import dataclasses
import os

import pytest
from fakes import FakeRunner
from support import ACCOUNT, invoke, make_project, require

from orchestrator.config import params, profile, selection
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import devices, matrix, render
from orchestrator.scripts.plan import make_plan
from orchestrator.util.runner import SubprocessRunner

ACCOUNTS = {"lumi": ACCOUNT, "testbed": ACCOUNT, "frontier": "abc123", "juwels-booster": "exalab", "generic-nvidia": "myproject"}
CMD = ("python", "-m", "experiments.lm.prepare", "--shard", "0")


def cpu_plan(cluster, cpus=8, *, settings=None, loaded=None, **job):
    settings = settings or params.Settings(account=ACCOUNTS.get(cluster), image="site")
    spec = JobSpec(command=CMD, cpus=cpus, **job)
    return make_plan(spec, "prepare@0", "", loaded or profile.load(cluster), settings, "/work/proj")


def env_of(plan) -> dict[str, str]:
    return dict(plan.env)


# --- the layout: one task, N cores, no GPU ------------------------------------------------------


def test_lumi_cpu_job_goes_to_lumi_c_small_without_a_gpu():
    p = cpu_plan("lumi", 16)
    assert p.problems == () and p.notes == ()
    assert p.partition == "small" and (p.tasks_per_node, p.gpus_per_node, p.cpus, p.accelerator) == (1, 0, 16, "cpu")
    for arg in ["--partition=small", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=16"]:
        assert arg in p.scheduler_args
    assert not any(a.startswith("--gpus-per-node") for a in p.scheduler_args)
    assert "--exclusive" not in p.scheduler_args  # small is shared: allocated by cores
    assert p.step_args == ("--kill-on-bad-exit=1", "--cpus-per-task=16", "--cpu-bind=cores") and p.binding is None
    env = env_of(p)
    assert (env["OMP_NUM_THREADS"], env["ORCH_DEVICES"], env["ORCH_ACCELERATOR"]) == ("16", "1", "cpu")
    assert all(env[var] == "''" for var in devices.HIDE_GPUS) and "ORCH_PEAK_TFLOPS" not in env
    # No GPU asked for, none to pass into the container (LUMI's images bring their own ROCm: no flag there at all).
    assert "--nv" not in cpu_plan("juwels-booster", 4).container.flags and "--nv" in cpu_plan("juwels-booster", None).container.flags


def test_testbed_cpu_job_takes_a_whole_node_of_its_one_partition():
    p = cpu_plan("testbed", 4, nodes=2)
    assert p.problems == () and p.partition == "debug"
    args = p.scheduler_args
    assert "--nodes=2" in args and "--ntasks-per-node=1" in args and "--cpus-per-task=4" in args and "--exclusive" in args
    assert not any("gpus" in a for a in args)
    assert "--cpu-bind=cores" in p.step_args and not any("mask_cpu" in a for a in p.step_args)
    script = render.render(p)
    assert "# A CPU job: one task per node with 4 cores and no GPU" in script
    assert "export OMP_NUM_THREADS=4\n" in script and "export CUDA_VISIBLE_DEVICES=''\n" in script


def test_local_cpu_job_is_one_process_with_n_threads():
    p = cpu_plan("local", 2)
    assert p.problems == () and p.scheduler_args == () and p.step_args == () and p.form == "local"
    env = env_of(p)
    assert (env["OMP_NUM_THREADS"], env["ORCH_DEVICES"]) == ("2", "1")
    assert "one process of 2 threads (OMP_NUM_THREADS)" in render.render(p)


def test_the_stage_choice_is_never_consulted(monkeypatch):
    """Not even handed in: Workspace.plan passes its stage's choice, which is for GPU layouts."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("devices.choose consulted for a CPU job")

    monkeypatch.setattr(devices, "choose", refuse)
    gpu_here = devices.Devices("gpu", "1 GPU(s) here")
    loaded = dataclasses.replace(profile.load("local"), machine=selection.machine.Machine(2, 1, "NVIDIA H100", "counted"))
    p = make_plan(JobSpec(command=CMD, cpus=2), "prepare@0", "", loaded, params.Settings(), "/w", device=gpu_here)
    assert p.accelerator == "cpu" and env_of(p)["CUDA_VISIBLE_DEVICES"] == "''"
    # orchestrator.accelerator steers the training's stages, not a CPU job.
    assert cpu_plan("lumi", 8, settings=params.Settings(account=ACCOUNT, image="site", accelerator="gpu")).problems == ()


def test_a_profiles_omp_setting_does_not_cap_a_cpu_jobs_threads(tmp_path):
    text = profile.load("testbed").text.replace("    GLOO_SOCKET_IFNAME: lo\n", "    GLOO_SOCKET_IFNAME: lo\n    OMP_NUM_THREADS: '1'\n")
    path = tmp_path / "testbed-omp.yaml"
    path.write_text(text)
    loaded = profile.load(str(path))
    cpu = [v for k, v in cpu_plan("testbed", 6, loaded=loaded).env if k == "OMP_NUM_THREADS"]
    gpu = [v for k, v in cpu_plan("testbed", None, loaded=loaded).env if k == "OMP_NUM_THREADS"]
    assert cpu == ["6"] and gpu == ['"1"']


# --- which partition ------------------------------------------------------------------------


def test_partition_order_flag_then_cpu_partition_then_the_default():
    gpu_jobs_partition = params.Settings(account=ACCOUNT, image="site", partition="dev-g")
    assert cpu_plan("lumi", settings=gpu_jobs_partition).partition == "small"  # params' partition is the GPU jobs'
    assert cpu_plan("lumi", None, settings=gpu_jobs_partition).partition == "dev-g"
    assert cpu_plan("lumi", partition="small-g").partition == "small-g"
    # No CPU partition: where the GPU jobs go (params', else the profile's default).
    assert cpu_plan("generic-nvidia").partition == "gpu"
    assert cpu_plan("generic-nvidia", settings=params.Settings(account="myproject", image="x", partition="debug")).partition == "debug"


@pytest.mark.parametrize(("cluster", "held"), [("frontier", "a whole GPU node"), ("juwels-booster", "a whole GPU node")])
def test_gpu_only_clusters_run_cpu_jobs_on_gpu_nodes_with_a_note(cluster, held):
    p = cpu_plan(cluster, 8)
    assert p.problems == () and "--exclusive" in p.scheduler_args and not any("gpus" in a for a in p.scheduler_args)
    (note,) = p.notes
    assert note.startswith(f"a CPU job (--cpus 8) on partition {p.partition} ({cluster} names no CPU partition (scheduler.cpu_partition))")
    assert note.endswith(f"it holds {held} and uses none of its GPUs")


def test_a_gpu_partition_given_by_hand_gets_the_note_too():
    (note,) = cpu_plan("lumi", 8, partition="small-g").notes
    assert "(not lumi's CPU partition small)" in note and "a share of a GPU node" in note
    assert cpu_plan("testbed", 4).notes == ()  # the testbed's GPUs are stand-ins (processes_on: cpu)
    assert make_plan(JobSpec(command=CMD), "train@0", "", profile.load("frontier"), params.Settings(account="abc123"), "/w").notes == ()


# --- what does not fit --------------------------------------------------------------------------


def test_more_cores_than_a_node_has_names_both_numbers():
    assert cpu_plan("lumi", 256).problems == ()
    assert (
        "asks for 257 CPUs per task (--cpus 257), but a node of partition small has 256 (its cpus_per_node)"
        in cpu_plan("lumi", 257).problems
    )
    on_gpu_nodes = cpu_plan("lumi", 113, partition="standard-g").problems
    assert (
        "asks for 113 CPUs per task (--cpus 113), but lumi nodes have 112 usable (64 cores x 2 thread(s), 8 of them reserved)"
        in on_gpu_nodes
    )
    assert cpu_plan("testbed", 8).problems == ()
    assert "asks for 9 CPUs per task (--cpus 9), but testbed nodes have 8 usable (8 cores x 1 thread(s))" in cpu_plan("testbed", 9).problems


def test_local_counts_the_cores_this_process_may_use():
    loaded = selection.machine_profile(profile.load("local"), FakeRunner(installed=set()))
    cores = len(os.sched_getaffinity(0))
    assert cpu_plan("local", cores, loaded=loaded).problems == ()
    (problem,) = cpu_plan("local", cores + 1, loaded=loaded).problems
    expected = f"asks for {cores + 1} CPUs per task (--cpus {cores + 1}), but profile 'local' runs on this machine, "
    assert problem == expected + f"where this process may use {cores} core(s)"


def test_nodes_over_the_partitions_limit_as_for_gpu_jobs():
    assert "asks for 5 nodes, but partition small allows at most 4" in cpu_plan("lumi", 8, nodes=5).problems
    assert any(
        m.startswith("asks for 2 nodes, but profile 'local' runs on this one machine") for m in cpu_plan("local", 1, nodes=2).problems
    )


# --- a pipeline with a CPU stage: render, its notes and checks --------------------------------

DVC_YAML = """\
stages:
  prepare:
    matrix:
      shard: [0, 1]
    cmd: orchestrator run --cpus 2 --no-container -- python -m experiments.lm.prepare --shard ${item.shard}
    outs:
      - data/tokens/${item.shard}: {persist: true}
  train:
    cmd: orchestrator run -G 1 --no-container -- python -m experiments.lm --devices 1
    deps: [data/tokens/0, data/tokens/1]
    outs:
      - results/lm: {persist: true}
"""
PARAMS = f"""\
orchestrator: {{cluster: local, account: {ACCOUNT}, image: none}}
clusters:
  frontier: {{orchestrator: {{account: abc123}}}}
"""


@pytest.fixture
def cpu_project(tmp_path):
    return make_project(tmp_path / "project", DVC_YAML, PARAMS)


def test_a_cpu_stage_is_not_part_of_the_machines_gpu_choice(cpu_project, tmp_path, monkeypatch):
    """On a 1-GPU machine the GPU stage takes the GPU; the CPU stage neither counts towards that
    choice nor gets one (it hides the GPU from its processes)."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    rendered = matrix.render_matrix(cpu_project, "local", SubprocessRunner())
    by_item = {p.item: p for p in rendered.plans}
    assert by_item["train"].accelerator == "gpu" and "CUDA_VISIBLE_DEVICES" not in env_of(by_item["train"])
    for item in ("prepare@0", "prepare@1"):
        assert by_item[item].accelerator == "cpu" and env_of(by_item[item])["CUDA_VISIBLE_DEVICES"] == "''"
    assert set(rendered.devices) == {"train"}


@pytest.mark.parametrize("cluster", ["lumi", "testbed", "local"])
def test_cpu_scripts_pass_bash_and_shellcheck(cpu_project, cluster):
    require("shellcheck")
    rendered = matrix.check_or_raise(matrix.render_matrix(cpu_project, cluster, SubprocessRunner()), SubprocessRunner())
    assert {p.item: p.accelerator for p in rendered.plans if p.item.startswith("prepare@")} == {"prepare@0": "cpu", "prepare@1": "cpu"}


def test_render_prints_the_note_once_for_the_items_it_concerns(cpu_project):
    done = invoke("render", "--project", str(cpu_project), "--cluster", "frontier")
    assert done.exit_code == 0, done.output
    notes = [line for line in done.output.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: prepare@0, prepare@1: a CPU job (--cpus 2) on partition batch (frontier names no CPU partition "
        "(scheduler.cpu_partition)): it holds a whole GPU node and uses none of its GPUs"
    ]
    lumi = invoke("render", "--project", str(cpu_project), "--cluster", "lumi")
    assert lumi.exit_code == 0, lumi.output
    assert "note:" not in lumi.output
    script = (cpu_project / ".orchestrator/scripts/lumi/prepare@0.sbatch").read_text()
    assert "#SBATCH --partition=small\n" in script and "#SBATCH --cpus-per-task=2\n" in script and "--gpus-per-node" not in script
