"""Where items run: the machine's GPUs found without torch, one explicit choice per stage,
written into every script, and GPUs asked for but missing refused before anything runs."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from fakes import FakeRunner, ok
from support import run_orchestrator

from orchestrator.config import machine, profile, selection
from orchestrator.config.machine import Machine
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.scripts import devices

H100 = "NVIDIA H100 80GB HBM3"


# --- the machine ---------------------------------------------------------------------------


def test_gpus_are_counted_by_the_vendor_tool_and_narrowed_by_the_visible_devices():
    runner = FakeRunner(answers={"nvidia-smi": ok(f"{H100}\n{H100}\n{H100}\n")}, installed={"nvidia-smi"})
    assert machine.detect(runner, {}) == Machine(machine._cores(), 3, H100, "counted by nvidia-smi")
    assert runner.calls == [["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]]
    assert machine.detect(runner, {"CUDA_VISIBLE_DEVICES": "1"}).gpus == 1
    assert machine.detect(runner, {"CUDA_VISIBLE_DEVICES": ""}).gpus == 0
    assert machine.detect(runner, {"CUDA_VISIBLE_DEVICES": "-1"}).gpus == 0
    assert machine.detect(runner, {"CUDA_VISIBLE_DEVICES": "0,1,-1,2"}).gpus == 2  # CUDA stops at the first invalid entry
    assert machine.detect(runner, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"}).gpus == 3  # never more than there are
    assert machine.detect(runner, {"CUDA_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0"}).gpus == 1


def test_amd_gpus_by_rocm_smi_and_none_without_a_tool_or_a_driver():
    csv = "device,Card series,Card model,Card vendor\ncard0,AMD Instinct MI250X,0x7408,AMD\ncard1,AMD Instinct MI250X,0x7408,AMD\n"
    amd = machine.detect(FakeRunner(answers={"rocm-smi": ok(csv)}, installed={"rocm-smi"}), {})
    assert (amd.gpus, amd.gpu_model, amd.peak_tflops_bf16) == (2, "AMD Instinct MI250X", 191.5)
    assert machine.detect(FakeRunner(installed=set()), {}).gpus == 0
    # nvidia-smi without a loaded driver exits non-zero: no GPU to use, not an error.
    broken = FakeRunner(answers={"nvidia-smi": ok("", "NVIDIA-SMI has failed", rc=9)}, installed={"nvidia-smi"})
    assert machine.detect(broken, {}).gpus == 0
    # Only the variable to go by (a container without the vendor tool).
    assert machine.detect(FakeRunner(installed=set()), {"CUDA_VISIBLE_DEVICES": "0,1"}).gpus == 2


def test_cores_are_the_ones_this_process_may_use():
    assert machine._cores() == len(os.sched_getaffinity(0))
    local = selection.load_profile("local", FakeRunner(installed=set()))
    assert local.profile.node.cores == len(os.sched_getaffinity(0))
    assert local.machine is not None and local.machine.gpus == 0
    assert selection.load_profile("lumi").machine is None  # a cluster's file describes its nodes


# --- the choice ----------------------------------------------------------------------------


def local_with(gpus: int) -> LoadedProfile:
    import dataclasses

    return dataclasses.replace(profile.load("local"), machine=Machine(2, gpus, H100 if gpus else None, "counted by nvidia-smi"))


@pytest.mark.parametrize(
    ("gpus", "most", "setting", "expected", "hidden"),
    [
        (0, 2, None, "cpu", False),
        (1, 1, None, "gpu", False),
        (1, 2, None, "cpu", True),  # not 1x1 on the GPU and 1x2 on CPU: one device for the stage
        (2, 2, "auto", "gpu", False),
        (2, 2, "cpu", "cpu", True),
        (4, 2, "gpu", "gpu", False),
    ],
)
def test_one_choice_per_stage_on_this_machine(gpus, most, setting, expected, hidden):
    chosen = devices.choose(setting, local_with(gpus), "lm", lambda: most)
    assert (chosen.accelerator, chosen.hide_gpus, chosen.problems) == (expected, hidden, ())
    assert chosen.peak_tflops_bf16 == (989.4 if expected == "gpu" else None)


def test_the_stage_is_not_resolved_when_the_choice_does_not_depend_on_it():
    def never():
        raise AssertionError("asked for the stage's items")

    assert devices.choose(None, local_with(0), "lm", never).accelerator == "cpu"
    assert devices.choose("cpu", local_with(2), "lm", never).accelerator == "cpu"
    assert devices.choose(None, profile.load("lumi"), "lm", never).accelerator == "gpu"


@pytest.mark.parametrize(
    ("loaded", "setting", "fragments"),
    [
        (local_with(0), "gpu", ["accelerator is gpu", "no GPU here", "valid here: auto or cpu"]),
        (local_with(1), "gpu", ["asks for up to 2 GPUs", "1 GPU(s) here", "valid here: auto"]),
        (profile.load("testbed"), "gpu", ["testbed nodes have GPUs that are stand-ins", "valid here: auto, cpu"]),
        (profile.load("lumi"), "cpu", ["lumi allocates a GPU per process", "valid here: auto, gpu"]),
    ],
)
def test_gpus_asked_for_but_missing_are_one_problem(loaded, setting, fragments):
    (problem,) = devices.choose(setting, loaded, "lm", lambda: 2).problems
    for fragment in fragments:
        assert fragment in problem


def test_profiles_say_where_their_processes_run():
    assert devices.choose(None, profile.load("testbed"), "lm", lambda: 2).accelerator == "cpu"  # fake GPUs
    for name in ("lumi", "frontier", "juwels-booster", "generic-nvidia"):
        assert devices.choose(None, profile.load(name), "lm", lambda: 8).accelerator == "gpu"


# --- the shipped pipeline on machines with 0, 1 and 2 GPUs ---------------------------------


def fake_gpus(folder: Path, count: int) -> dict[str, str]:
    """An environment whose PATH has an nvidia-smi that lists ``count`` H100s."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + "".join(f"echo '{H100}'\n" for _ in range(count)))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
    return {**env, "PATH": f"{folder}{os.pathsep}{env['PATH']}"}


def exported(script: Path) -> dict[str, str]:
    lines = [line.strip()[len("export ") :] for line in script.read_text().splitlines() if line.strip().startswith("export ")]
    return dict(line.split("=", 1) for line in lines if "=" in line)  # not `export RANK LOCAL_RANK ...`


@pytest.mark.parametrize(("gpus", "expected"), [(0, "cpu"), (1, "cpu"), (2, "gpu")])
def test_the_shipped_pipeline_runs_every_item_of_a_stage_on_one_device(project, tmp_path, gpus, expected):
    env = fake_gpus(tmp_path / "bin", gpus)
    done = run_orchestrator("render", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    folder = project / ".orchestrator/scripts/local"
    scripts = sorted(s for s in folder.glob("*.sh") if s.name.startswith(("lm@", "benchmark@")))
    assert len(scripts) == 6
    for script in set(folder.glob("*.sh")) - set(scripts):  # the corpus's CPU jobs: on CPU whatever the machine has
        assert script.name.startswith(("lm-tokenizer", "lm-shard@")) and exported(script)["ORCH_ACCELERATOR"] == "cpu", script.name
    for script in scripts:
        env_of = exported(script)
        assert env_of["ORCH_ACCELERATOR"] == expected, script.name
        # A CPU item never sees the GPUs, whatever its command does with `auto`.
        assert ("CUDA_VISIBLE_DEVICES" in env_of) == (expected == "cpu" and gpus > 0)
        if gpus and expected == "cpu":
            assert env_of["CUDA_VISIBLE_DEVICES"] == env_of["HIP_VISIBLE_DEVICES"] == "''"
        assert ("ORCH_PEAK_TFLOPS" in env_of) == (expected == "gpu")
    assert f"stage lm on {expected.upper()}: " in done.stdout and f"stage benchmark on {expected.upper()}: " in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith(("lm@", "benchmark@"))]
    assert len(rows) == 6 and {row[2] for row in rows} == {expected}


def test_asking_for_gpus_the_machine_lacks_is_one_message_before_anything_is_written(project, tmp_path):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["orchestrator"]["accelerator"] = "gpu"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    done = run_orchestrator("render", cwd=project, env=fake_gpus(tmp_path / "bin", 1))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "orchestrator.accelerator is gpu, but stage lm asks for up to 2 GPUs and 1 GPU(s) here" in done.stderr
    assert not (project / ".orchestrator/scripts/local").exists() or not any((project / ".orchestrator/scripts/local").iterdir())
    # `dvc repro` runs each item through `orchestrator run`: the same refusal, and no job.
    env = {**fake_gpus(tmp_path / "bin", 1), "DVC_ROOT": str(project), "DVC_STAGE": "lm@tiny-0-device_cfg0"}
    run = run_orchestrator("run", "--", "python", "-c", "pass", cwd=project, env=env)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "orchestrator.accelerator is gpu, but stage lm asks for up to 2 GPUs" in run.stderr
    assert not (project / ".orchestrator/ledger").exists() or not any((project / ".orchestrator/ledger").iterdir())


def test_a_bad_setting_names_the_valid_ones(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["orchestrator"]["accelerator"] = "tpu"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    done = run_orchestrator("render", cwd=project)
    assert done.returncode == 2 and "orchestrator.accelerator is 'tpu'; valid: auto, gpu, cpu" in done.stderr


def test_an_item_run_alone_gets_its_stages_choice(project, tmp_path, monkeypatch):
    """Inside `dvc repro` each item is planned by its own `orchestrator run`: it resolves its
    stage to choose as `render` does, so 1x1 does not take the GPU that 1x2 cannot have."""
    from orchestrator.pipeline import stages
    from orchestrator.scripts.workspace import Workspace
    from orchestrator.util.runner import SubprocessRunner

    for gpus, expected in ((1, "cpu"), (2, "gpu")):
        monkeypatch.setenv("PATH", fake_gpus(tmp_path / f"bin{gpus}", gpus)["PATH"])
        ws = Workspace.open(project, None, SubprocessRunner())
        item = stages.resolve_one(project, "lm@tiny-0-device_cfg0")
        (job,), _ = stages.jobs([item])
        assert job.spec.gpus_per_node == 1
        assert ws.plan(job).accelerator == expected
        alone = Workspace.open(project, None, SubprocessRunner())
        assert alone.plan(job, staged=False).accelerator == "gpu"  # an ad-hoc job (`run` by hand) is its own stage


def test_nvidia_smi_that_hangs_does_not_hang_render(tmp_path):
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\nsleep 60\n")
    tool.chmod(0o755)

    class Quick:
        def which(self, name):
            return str(tool) if name == "nvidia-smi" else None

        def run(self, argv, *, input=None, timeout=None):
            raise subprocess.TimeoutExpired(argv, timeout or 0)

    assert machine.detect(Quick(), {}).gpus == 0


# --- torch.compile's caches ------------------------------------------------------------------


@pytest.mark.parametrize("name", profile.builtin_names())
def test_compile_caches_go_to_each_nodes_disk_never_home(name):
    from orchestrator.config.params import Settings
    from orchestrator.pipeline.runargs import JobSpec
    from orchestrator.scripts.plan import make_plan

    spec = JobSpec(command=("python", "train.py"), nodes=1, gpus_per_node=1)
    plan = make_plan(spec, "s@i", "", profile.load(name), Settings(account="project_465000858"), "/w")
    env = dict(plan.env)
    for var, leaf in (("TORCHINDUCTOR_CACHE_DIR", "/inductor"), ("TRITON_CACHE_DIR", "/triton")):
        assert env[var] == f'"/tmp/${{USER}}-torch-compile"{leaf}', name
        assert var in plan.node_local_dirs  # made on every node before the task starts
        assert "HOME" not in env[var] and "~" not in env[var]


def test_a_profile_moves_or_turns_off_the_compile_caches(tmp_path):
    import dataclasses

    from orchestrator.config.params import Settings
    from orchestrator.pipeline.runargs import JobSpec
    from orchestrator.scripts.plan import make_plan

    spec = JobSpec(command=("python", "train.py"), nodes=1, gpus_per_node=1)
    lumi = profile.load("lumi")
    p = lumi.profile
    moved = dataclasses.replace(p, storage=dataclasses.replace(p.storage, compile_cache="/flash/${SLURM_JOB_ACCOUNT}/cc"))
    env = dict(make_plan(spec, "s@i", "", dataclasses.replace(lumi, profile=moved), Settings(account="project_465000858"), "/w").env)
    assert env["TRITON_CACHE_DIR"] == '"/flash/${SLURM_JOB_ACCOUNT}/cc"/triton'
    off = dataclasses.replace(p, storage=dataclasses.replace(p.storage, compile_cache=None))
    plan = make_plan(spec, "s@i", "", dataclasses.replace(lumi, profile=off), Settings(account="project_465000858"), "/w")
    assert not {"TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"} & set(dict(plan.env))
    # A profile's own variable wins, and is made node-local only if the profile says so.
    own = dataclasses.replace(
        p, environment=dataclasses.replace(p.environment, variables={**p.environment.variables, "TRITON_CACHE_DIR": "/scratch/t"})
    )
    plan = make_plan(spec, "s@i", "", dataclasses.replace(lumi, profile=own), Settings(account="project_465000858"), "/w")
    env = dict(plan.env)
    assert env["TRITON_CACHE_DIR"] == '"/scratch/t"' and env["TORCHINDUCTOR_CACHE_DIR"].endswith("/inductor")
    assert plan.node_local_dirs.count("TRITON_CACHE_DIR") == 0
