"""What the sites' documentation asks of a job, in the plan: the partition's memory request, every
GPU runtime's visibility variable hidden from CPU jobs (ROCR_VISIBLE_DEVICES on AMD too), and the
cost of a CPU job that holds GPU nodes."""

from __future__ import annotations

from orchestrator.config import params, profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import devices
from orchestrator.scripts.plan import make_plan

LUMI = params.Settings(account="project_465001234", image="site")


def plan(cluster="lumi", settings=LUMI, **job):
    spec = JobSpec(command=("python", "-m", "x"), **job)
    return make_plan(spec, "s@0", "", profile.load(cluster), settings, "/w")


def test_a_one_gcd_job_on_small_g_asks_60g_per_gcd():
    p = plan(gpus_per_node=1)
    assert p.partition == "small-g" and p.problems == ()
    assert "--mem-per-gpu=60G" in p.scheduler_args and not any(a.startswith("--mem=") for a in p.scheduler_args)
    assert "--mem-per-gpu=60G" in p.srun_args  # the blocking form asks it too


def test_a_whole_node_job_on_standard_g_asks_the_nodes_memory():
    p = plan(gpus_per_node=8, nodes=2)
    assert p.partition == "standard-g"
    assert "--mem=480G" in p.scheduler_args and not any(a.startswith("--mem-per-gpu") for a in p.scheduler_args)


def test_a_cpu_job_on_small_g_asks_no_memory_per_gpu():
    p = plan(cpus=8, partition="small-g")
    assert not any(a.startswith("--mem") for a in p.scheduler_args)


def test_frontier_asks_no_memory():  # docs silent (the profile and docs/reference/site-conventions.md say so)
    p = plan("frontier", params.Settings(account="prj042", image="site"), gpus_per_node=8)
    assert p.problems == () and not any(a.startswith("--mem") for a in p.scheduler_args)


def test_cpu_jobs_hide_rocr_visible_devices_too():
    env = dict(plan(cpus=4).env)
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        assert env[var] == "''"
    assert "ROCR_VISIBLE_DEVICES" in devices.HIDE_GPUS


def test_a_cpu_job_holding_a_whole_gpu_node_shows_its_cost():
    frontier = plan("frontier", params.Settings(account="prj042", image="site"), cpus=16)
    assert frontier.partition == "batch" and frontier.billed == "1 node-hours/h"
    juwels = plan("juwels-booster", params.Settings(account="mylab", image="site"), cpus=16, nodes=2)
    assert juwels.billed == "96 core-hours/h"


def test_a_cpu_job_on_a_shared_gpu_partition_is_billed_by_its_share_of_gcds():
    # LUMI's small-g: a slice of 8 cores (16 CPUs, 2 threads per core) per GCD, 0.5 GPU-hours each.
    assert plan(cpus=16, partition="small-g").billed == "0.5 GPU-hours/h"
    assert plan(cpus=17, partition="small-g").billed == "1 GPU-hours/h"


def test_a_cpu_job_on_a_cpu_partition_shows_no_gpu_cost():
    assert plan(cpus=16).partition == "small" and plan(cpus=16).billed is None
