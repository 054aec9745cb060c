"""Plain helpers the test modules share: paths, requirements (skip, or fail under CI),
throwaway projects, the command line, recorders on PATH, training runs, the Slurm testbed.

Fixtures live in conftest.py and test doubles in fakes.py; this module holds functions
and constants only. It imports nothing heavy at import time: torch, DVC and the CLI load
inside the helpers that use them, so a unit test that needs none of them stays light.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
LOCKS = Path(tempfile.gettempdir()) / "orchestrator-tests-locks"
# The account every testbed job and fake Slurm uses (the testbed profile's account_example).
ACCOUNT = "project_465000858"


# --- requirements: skip without them, fail under CI=true ---------------------------------------


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``; under CI=true, where every test must run, fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, and CI=true: CI must run this test (the test command installs what it needs)")
    pytest.skip(reason)


def examples(count: int) -> int:
    """A property test's example count: ``count`` under CI=true, a fifth of it (at least 10)
    for a developer's run, so that the fast tier stays fast and CI still explores fully."""
    return count if os.environ.get("CI") == "true" else max(10, count // 5)


def machine_lock() -> FileLock:
    """The lock around installing Debian packages or starting a machine-wide daemon: session
    fixtures run once per pytest-xdist worker, other pytest runs may share the machine, and
    two apt-get at once fail on dpkg's own lock."""
    LOCKS.mkdir(exist_ok=True)
    return FileLock(LOCKS / "machine.lock")


def require(tool: str) -> str:
    """The path of ``tool``; skip (fail under CI) without it."""
    path = shutil.which(tool)
    if path is None:
        skip_or_fail(f"{tool} is not installed")
    return path


def require_root_and_apt(what: str) -> None:
    """Skip (fail under CI) unless ``what`` can install Debian packages and start daemons."""
    if os.geteuid() != 0:
        skip_or_fail(f"{what} needs root")
    if shutil.which("apt-get") is None:
        skip_or_fail(f"{what} needs Debian's apt-get")


def require_training() -> None:
    """Skip without the training extras, except under CI, where a skip is a failure: for the tests
    that train, here or in the testbed's jobs (which run this Python). Found, not imported: importing
    Lightning would cost the test's worker ~8 s of CPU for nothing."""
    missing = [name for name in ("torch", "pytorch_lightning", "dvclive") if importlib.util.find_spec(name) is None]
    if missing:
        skip_or_fail(f"{', '.join(missing)} not installed (pip install -e '.[train]')")


# --- throwaway projects ----------------------------------------------------------------------


@contextlib.contextmanager
def script_module(path: Path, name: str) -> Iterator:
    """A script that is not a package module (benchmarks/*.py) imported as ``name``, for the
    time of the block: registered in sys.modules meanwhile, as its dataclasses look it up there."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


def make_project(where: Path, dvc_yaml: str | None = None, params_yaml: str | None = None) -> Path:
    """A DVC project (no git) with the shipped pipeline, or the given files."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "dvc.yaml").write_text(dvc_yaml if dvc_yaml is not None else (ROOT / "dvc.yaml").read_text())
    (where / "params.yaml").write_text(params_yaml if params_yaml is not None else (ROOT / "params.yaml").read_text())
    # The shipped stages depend on the image's digest file (none.digest: no image).
    (where / "containers").mkdir(exist_ok=True)
    shutil.copy(ROOT / "containers/none.digest", where / "containers/none.digest")
    dvc_init(where, scm=False)
    return where


_DVC_TEMPLATES: dict[bool, Path] = {}


def dvc_init(where: Path, scm: bool) -> None:
    """What `dvc init` (``--no-scm`` unless ``scm``; ``-f``: any .dvc/ there is replaced) writes,
    copied from one project initialised once per test process: about a second saved in each of
    the many tests that make a project."""
    template = _DVC_TEMPLATES.get(scm)
    if template is None:
        template = Path(tempfile.mkdtemp(prefix="orchestrator-dvc-template-"))
        if scm:
            subprocess.run(["git", "init", "-q"], cwd=template, check=True)
        subprocess.run(["dvc", "init", "-q", *([] if scm else ["--no-scm"])], cwd=template, check=True)
        _DVC_TEMPLATES[scm] = template
        atexit.register(shutil.rmtree, template, True)
    shutil.rmtree(where / ".dvc", ignore_errors=True)
    # shutil.copy, not copy2: .dvc/tmp/btime's modification time is the project's own birth time.
    shutil.copytree(template / ".dvc", where / ".dvc", copy_function=shutil.copy)
    shutil.copy(template / ".dvcignore", where / ".dvcignore")


SWEEP_DVC_YAML = """\
stages:
  work:
    matrix:
      seed: [0]
    cmd: >-
      orchestrator run --
      python3 -c "import json, os; os.makedirs('out', exist_ok=True);
      json.dump({'lr': ${sweep.lr}, 'score': 2 * ${sweep.lr}}, open('out/m${item.seed}.json', 'w'))"
    params: [sweep]
    metrics:
      - out/m${item.seed}.json:
          cache: false
          persist: true
"""


def sweep_project(where: Path, orchestrator: dict) -> Path:
    """A git + DVC project (DVC experiments need git) whose one orchestrated item writes a
    metric from params.yaml's ``sweep.lr``; ``orchestrator``: the params' section."""
    params = yaml.safe_dump({"orchestrator": orchestrator, "sweep": {"lr": 0.1}})
    return with_git(make_project(where, dvc_yaml=SWEEP_DVC_YAML, params_yaml=params), "sweep")


def sweep_project_on_testbed(tmp_path: Path, monkeypatch) -> Path:
    """:func:`sweep_project` on the testbed profile, the current folder, with git's identity set: the sweep tests' project."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    root = sweep_project(tmp_path / "p", {"cluster": "testbed", "account": ACCOUNT})
    monkeypatch.chdir(root)
    return root


def with_git(project: Path, message: str) -> Path:
    """``project`` (a DVC project) made a git repository too, everything in it committed."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    dvc_init(project, scm=True)  # with git this time
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "-m", message], cwd=project, check=True)
    return project


def exp_metrics(project: Path) -> dict[str, float]:
    """`dvc exp show --json`: each experiment's name and its `score` metric (None without one)."""
    done = subprocess.run(["dvc", "exp", "show", "--json"], cwd=project, capture_output=True, text=True, check=True)
    found = {}
    for baseline in json.loads(done.stdout):
        for exp in baseline.get("experiments") or []:
            for rev in exp.get("revs") or []:
                data = rev.get("data") or {}
                metrics = (data.get("metrics") or {}).get("out/m0.json", {}).get("data", {})
                found[rev.get("name") or rev["rev"]] = metrics.get("score")
    return found


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def dvc_exp(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`dvc ARGS` where DVC commits experiments (git needs an identity, which CI lacks)."""
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", **GIT_ENV}
    return subprocess.run(["dvc", *args], cwd=project, capture_output=True, text=True, timeout=timeout, env=env)


def queue_start(project: Path, jobs: int) -> None:
    """`dvc queue start -j JOBS`, returning once DVC has: the workers it leaves behind inherit
    its stdout and stderr, so a captured `dvc queue start` returns only when the last worker has
    ended (a worker lingers a minute after the queue is empty; under load it timed out at 300 s)."""
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", **GIT_ENV}
    started = subprocess.run(
        ["dvc", "queue", "start", "-j", str(jobs)],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        timeout=120,
    )
    assert started.returncode == 0


def wait_for_queue(project: Path, count: int, timeout: float = 240) -> str:
    """`dvc queue status` once ``count`` experiments have ended (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        status = dvc_exp(project, "queue", "status").stdout
        rows = [line.split() for line in status.splitlines() if line[:1].isalnum() and not line.startswith(("Task", "Worker"))]
        if sum(row[-1] in ("Success", "Failed") for row in rows) >= count or time.monotonic() > deadline:
            return status
        time.sleep(2)


def executor_project(root: Path) -> Path:
    """All Workspace.open needs: a folder whose params.yaml names the account."""
    root.mkdir()
    (root / "params.yaml").write_text(f"orchestrator:\n  account: {ACCOUNT}\n")
    return root


PYPROJECT = """\
[project]
name = "demo"
version = "0"
[project.optional-dependencies]
train = ["torch==2.13.0", "pytorch-lightning>=2.5,<2.7", "dvclive>=3.48"]
"""

TINY_DEF = """\
Bootstrap: scratch

%files
    {{ src_dir | path }} /opt/src

%labels
    org.orchestrator.image {{ name | label }}
    org.orchestrator.content-hash {{ content_hash | label }}
    org.orchestrator.git-commit {{ git_commit | label }}
    org.test.flavour {{ flavour | label }}
"""

IMAGES = """\
tiny:
  definition: tiny.def.j2
  source: [pkg, pyproject.toml]
site:
  definition: localimage.def.j2
  source: [pkg, pyproject.toml]
  base: base.sif
  activate: with-conda
"""


def make_tiny(where: Path, flavour: str = "plain") -> Path:
    """A project with a tiny scratch image (``tiny``) and the real localimage template (``site``)."""
    (where / "containers").mkdir(parents=True)
    (where / "pkg").mkdir()
    (where / "pkg" / "mod.py").write_text("x = 1\n")
    (where / "pyproject.toml").write_text(PYPROJECT)
    (where / "containers" / "images.yaml").write_text(IMAGES)
    (where / "containers" / "tiny.def.j2").write_text(TINY_DEF.replace("{{ flavour | label }}", flavour))
    (where / "containers" / "localimage.def.j2").write_text((ROOT / "containers" / "localimage.def.j2").read_text())
    return where


REPORT_DVC_YAML = """\
stages:
  benchmark:
    matrix:
      dataset: ${benchmark.datasets}
      model: ${benchmark.models}
      device_cfg: ${benchmark.device_cfgs}
    cmd: >-
      orchestrator run --nodes ${item.device_cfg.num_nodes} --gpus-per-node ${item.device_cfg.num_gpus} --
      python -m experiments.classify --dataset ${item.dataset} --model ${item.model}
      --output results/benchmark/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}
    outs:
      - results/benchmark/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}/model:
          persist: true
    metrics:
      - results/benchmark/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}/metrics.json:
          cache: false
          persist: true
"""
REPORT_CONFIGS = [(1, 1, 100.0), (1, 2, 190.0), (1, 4, 360.0), (2, 4, None)]  # 2x4 never produced metrics


def weak(gpus: int, throughput: float, **extra) -> dict:
    """A run's metrics under weak scaling: a per-device batch of 16."""
    return {
        "samples_per_second": throughput,
        "world_size": gpus,
        "devices": gpus,
        "batch_size": 16,
        "global_batch_size": 16 * gpus,
        **extra,
    }


def fabricate(root: Path) -> Path:
    """A results tree as `dvc repro` of REPORT_DVC_YAML would leave it, the 2x4 run missing."""
    params = {
        "orchestrator": {"cluster": "local"},
        "benchmark": {
            "datasets": ["pydoc-topics"],
            "models": ["tiny"],
            "device_cfgs": [{"num_nodes": n, "num_gpus": g} for n, g, _ in REPORT_CONFIGS],
        },
    }
    project = make_project(root, dvc_yaml=REPORT_DVC_YAML, params_yaml=yaml.safe_dump(params))
    for i, (nodes, gpus, throughput) in enumerate(REPORT_CONFIGS):
        if throughput is None:
            continue
        folder = project / f"results/benchmark/pydoc-topics/tiny/{nodes}x{gpus}"
        world = nodes * gpus
        metrics = weak(
            world, throughput, num_nodes=nodes, mean_step_time_s=16 * world / throughput, torch_version="2.13.0", lightning_version="2.6.6"
        )
        metrics["accelerator"] = "gpu"
        if gpus == 2:
            metrics.update(gpu_energy_j=3.6e5, power_source="nvml-energy")
        if gpus == 4:
            metrics.update(model_tflops_per_device=156.0, profile_forward_s=0.05, profile_backward_s=0.1)
        (folder / "dvclive/plots/metrics/train").mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(metrics))
        prov = {
            "item": f"benchmark@pydoc-topics-tiny-device_cfg{i}",
            "backend": "slurm",
            "job_id": str(500 + i),
            "elapsed_s": 600,
            "requeues": 0,
        }
        prov.update(profile="juwels-booster", profile_source="built-in", nodes=nodes)
        (folder / "provenance.json").write_text(json.dumps(prov))
        steps = "\n".join(f"{s}\t{2.0 - s / 100 - i / 50}" for s in range(1, 31))
        (folder / "dvclive/plots/metrics/train/loss.tsv").write_text(f"step\tloss\n{steps}\n")
    return project


# --- the command line ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Distributions:
    wheel: Path
    sdist: Path | None  # None: built without `build` (pip wheel), no sdist


def distributions_of_this_tree(folder: Path) -> Distributions:
    """This checkout built into ``folder`` as a release is: its sdist, then the wheel built from that
    sdist (`python -m build`, each step in an isolated build environment, as a user's pip would);
    where `build` is not installed (the test extra brings it), the wheel alone with pip."""
    if importlib.util.find_spec("build") is None:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(ROOT)], check=True, timeout=600)
    else:
        subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(folder), str(ROOT)], check=True, timeout=600)
    return distributions_in(folder)


def distributions_in(folder: Path) -> Distributions:
    (wheel,) = folder.glob("*.whl")
    sdists = sorted(folder.glob("*.tar.gz"))
    return Distributions(wheel, sdists[0] if sdists else None)


def venv_with(wheel: Path, venv: Path, system_site_packages: bool = False) -> Path:
    """A venv at ``venv`` with ``wheel`` installed and nothing else of its own: made without pip
    (ensurepip's copy costs seconds) and filled by this interpreter's pip (``--python``)."""
    options = ["--system-site-packages"] if system_site_packages else []
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *options, str(venv)], check=True, timeout=300)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(pip, check=True, timeout=300)
    return venv


def invoke(*args: str):
    """`orchestrator ARGS` in this process (click's test runner): its exit code, output and exception."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    return CliRunner().invoke(main, list(args))


def benchmark_usage_error(script: str, *args: str) -> subprocess.CompletedProcess:
    """``python benchmarks/SCRIPT ARGS`` in a fresh process, which must end as a usage error: exit 2, no traceback."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    return done


# Where the CI image is cached by content hash, across sessions (the `ci_image` fixture).
IMAGE_CACHE = Path(os.environ.get("ORCHESTRATOR_IMAGE_CACHE", "/var/cache/orchestrator-images"))


def one_error(done: subprocess.CompletedProcess, *expected: str) -> str:
    """A user error as the CLI reports it: exit 2, one `error:` line, no traceback, these words in it; the text."""
    text = done.stdout + done.stderr
    assert done.returncode == 2, text
    assert "Traceback" not in text and text.count("error:") == 1, text
    for words in expected:
        assert words in text, text
    return text


def orchestrator_here(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`orchestrator ARGS` run from ``cwd`` in this process (click's test runner), in
    :func:`run_orchestrator`'s shape: what a fresh process would answer, without its second of
    start-up (DVC's imports) on every call. An exception the CLI does not turn into a message
    is raised, as a fresh process's traceback would fail the test."""
    with contextlib.chdir(cwd):
        result = invoke(*args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["orchestrator", *args], result.exit_code, result.stdout, result.stderr)


def run_orchestrator(*args: str, cwd: Path, env: dict | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`orchestrator ARGS` in a fresh process (``python -m orchestrator``), as users and DVC run it."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_in(project: Path, *argv: str | Path, env: Mapping[str, str] | None = None, timeout: float = 120) -> str:
    """``argv`` in ``project`` (with ``env`` instead of this process's environment, if given),
    which must end well: its stdout."""
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def container_cli(*args: str, cwd: Path = ROOT, timeout: float = 3600) -> tuple[subprocess.CompletedProcess, float]:
    """`orchestrator container ARGS` in a fresh process, and the CPU seconds it and its children took
    (Python's start-up included). CPU, not wall time: beside the whole suite a 0.4-second no-op check
    has taken 2.3 s of wall time; a rebuild or a rehash of the image takes seconds of CPU either way."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = run_orchestrator("container", *args, cwd=cwd, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# --- `orchestrator run` of one item against a fake Slurm --------------------------------------


def run_fake(project: Path, runner, clock=None, item: str = "bench@x"):
    """foreground.run_item of a 2x2 job for ``item``, with quick polling: its outcome and what it said."""
    from fakes import FakeClock

    from orchestrator.jobs import foreground
    from orchestrator.pipeline.runargs import JobSpec

    spec = JobSpec(command=("python", "train.py", "--devices", "2"), nodes=2, gpus_per_node=2)
    lines = []
    ctx = foreground.Context(project, item)
    polling = foreground.Polling(first_s=1, max_s=8, heartbeat_s=100)
    outcome = foreground.run_item(ctx, spec, None, None, runner, clock or FakeClock(), polling, lines.append)
    return outcome, lines


# --- recorders on PATH: what a rendered script hands srun, the container and python ----------

HOSTILE_DVC_YAML = """\
stages:
  hostile:
    matrix:
      dataset: ${datasets}
      note: ${notes}
    cmd: >-
      orchestrator run --nodes 1 --gpus-per-node 2 --
      python -m experiments.classify
      --dataset '${item.dataset}' --note "${item.note}" --devices 2
      --output 'results/${item.dataset}'
    outs:
      - results/${item.dataset}:
          persist: true
"""

RECORDER = """#!/bin/bash
# Record this call's argv (NUL-separated) and environment, then act like {name}.
n=$(ls "$RECORD_DIR" | wc -l)
printf '%s\\0' "{name}" "$@" > "$RECORD_DIR/$n.{name}.argv"
{action}
"""
ACTIONS = {
    # srun: run the task (the trailing `bash -c orch_task`) as rank 0 of node 0, of one task, with the
    # variables srun gives every task (the job's script reads them under `set -u`).
    "srun": (
        "export SLURM_NODEID=0 SLURM_LOCALID=0 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_NTASKS_PER_NODE=1 "
        'SLURM_JOB_ID="${SLURM_JOB_ID:-1}" SLURM_JOB_ACCOUNT=project_465000858 SLURM_JOB_NODELIST=node1\nexec "${@: -3}"'
    ),
    # the container runtime: run what follows the image, as apptainer would inside it.
    "apptainer": 'while [ $# -gt 0 ] && [[ "$1" != *.sif ]]; do shift; done; shift; exec "$@"',
    "singularity": 'while [ $# -gt 0 ] && [[ "$1" != *.sif ]]; do shift; done; shift; exec "$@"',
    "scontrol": "echo node1",
    "python": ":",
}


def install_recorders(bin_dir: Path) -> None:
    """srun, apptainer, singularity, scontrol and python as recorders in ``bin_dir`` (put it first on PATH)."""
    bin_dir.mkdir()
    for name, action in ACTIONS.items():
        path = bin_dir / name
        path.write_text(RECORDER.format(name=name, action=action))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def calls(record_dir: Path, name: str) -> list[list[str]]:
    """The argv (without the command) of every recorded call of ``name``, in call order."""
    found = sorted(record_dir.glob(f"*.{name}.argv"), key=lambda p: int(p.name.split(".")[0]))
    return [p.read_bytes().decode().split("\0")[1:-1] for p in found]


# --- training runs ---------------------------------------------------------------------------

# Small enough for seconds per run of the LM on two cores. 32 validation sequences, not the
# default 4,096: the test corpora have ~900 at this length, and their 225 batches of 4 took longer
# than the training steps (a loss on 32 still tells runs apart, or shows them equal).
LM_SHORT = ["--model", "tiny", "--seq-len", "32", "--accelerator", "cpu", "--val-rows", "32"]
# The profiler's categories (experiments/common/profiling.py), in the order its breakdown lists them.
PROFILE_CATEGORIES = ["kernel", "memcpy", "memset", "communication", "runtime", "data_loader", "cpu_exec", "other"]


def isolated(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """Runs of an experiment's main in this process, in tmp_path, leaving the process as they found it (a fixture's body)."""
    require_training()
    import torch

    monkeypatch.chdir(tmp_path)  # outside any Git or DVC project, for DVCLive
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    deterministic = torch.are_deterministic_algorithms_enabled()
    environ = dict(os.environ)
    handler = signal.getsignal(signal.SIGUSR1)
    yield tmp_path
    torch.use_deterministic_algorithms(deterministic)
    os.environ.clear()
    os.environ.update(environ)  # seed_everything leaves PL_GLOBAL_SEED behind
    signal.signal(signal.SIGUSR1, handler)


def signal_at(step: int):
    """A callback that sends this process the requeue signal after ``step`` steps, as Slurm does before the time limit."""
    import pytorch_lightning as pl

    class SignalAt(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == step:
                os.kill(os.getpid(), signal.SIGUSR1)

    return SignalAt()


def training_environment(*also: str) -> dict[str, str]:
    """The environment of a local training run, even inside a Slurm allocation or a torchrun: no
    inherited layout (no SLURM_* variables, no torchrun variables, none of ``also``), and this
    checkout's experiments/ on PYTHONPATH."""
    leaked = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", *also)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in leaked}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def model_weights(output: Path) -> dict:
    """The state dict a run saved in ``output``/model/model.ckpt."""
    import torch

    return torch.load(output / "model" / "model.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def write_operators(path: Path, rows: dict[str, tuple[float, float]], steps: int = 2) -> Path:
    """An operators.json (a profiled run's) with ``rows``: operator -> (calls, host_total_us)."""
    path.write_text(json.dumps({"steps": steps, "operators": {k: {"calls": c, "host_total_us": t} for k, (c, t) in rows.items()}}))
    return path


# --- the rank environment (docs/reference/ranks.md) ------------------------------------------

DDP_EXAMPLE = ROOT / "docs/reference/ddp_allreduce.py"


def ddp_project(root: Path, cluster: str, nodes: int, gpus: int) -> Path:
    """A project whose one stage runs the ranks page's plain torch.distributed example on ``cluster``."""
    params = {"orchestrator": {"cluster": cluster, "account": ACCOUNT}}
    cmd = f"orchestrator run -N {nodes} --gpus-per-node {gpus} -- python ddp_allreduce.py out"
    stages = {"ddp": {"cmd": cmd, "deps": ["ddp_allreduce.py"], "outs": [{"out": {"persist": True}}]}}
    project = make_project(root, dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(params))
    shutil.copy(DDP_EXAMPLE, project / "ddp_allreduce.py")
    return project


def ddp_ranks(project: Path) -> list[dict]:
    """What each process of :func:`ddp_project`'s job saw, by rank."""
    return [json.loads(path.read_text()) for path in sorted((project / "out").glob("rank-*.json"), key=lambda p: int(p.stem[5:]))]


# --- the Slurm testbed -----------------------------------------------------------------------


def dvc(project: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`dvc ARGS` in ``project``, its `orchestrator run`s polling at least every 2 s."""
    return subprocess.run(
        ["dvc", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "ORCH_POLL_MAX_S": "2", **(env or {})},
    )


def jobs_of(account: str, since: float, project: Path | None = None, expect: int = 0, inside: bool = False) -> list[list[str]]:
    """Jobs under ``account`` since ``since`` (sacct), submitted from ``project`` if given
    (``inside``: from it or a folder in it, such as a temporary experiment's): other tests'
    jobs may overlap in time. With ``expect``, waits up to 180 s for that many: slurmdbd may
    record a job that just ended a while later (seen: over 10 s), and sacct lists a job held by a
    dependency (a detached submit's record job) only once it is eligible, when the items have ended
    (beside the whole suite, 60 s were once too few)."""
    # The working dir tells the jobs apart; the window only bounds the query, wide
    # enough for a clock that steps (this VM's has, mid-suite).
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 3600))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", account, "--format=JobIDRaw,JobName,State,Account,WorkDir"]
    deadline = time.time() + 180
    while True:
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        rows = [line.split("|") for line in done.stdout.splitlines() if line]
        where = str(project.resolve()) if project else ""
        found = [row[:4] for row in rows if not where or row[4] == where or (inside and row[4].startswith(where + "/"))]
        if len(found) >= expect or time.time() > deadline:
            return found
        time.sleep(1)


def job_field(job_id: str, name: str) -> str:
    """One field of `scontrol show job`."""
    shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return next(w.split("=", 1)[1] for w in shown.split() if w.startswith(name + "="))


def wait_until_training(project: Path, item: str, repro: subprocess.Popen, timeout: float) -> tuple[str, Path]:
    """The job id and log of ``item``'s latest submission, once both ranks of its
    training are up ("rank 1/2" in the log); the test fails if they are not in time."""
    ledger = project / f".orchestrator/ledger/{item}.json"
    job_id, log = None, None
    deadline = time.time() + timeout
    while time.time() < deadline and repro.poll() is None:
        # The ledger holds only the intent while sbatch runs: no record yet.
        records = json.loads(ledger.read_text())["records"] if job_id is None and ledger.exists() else None
        if records:
            job_id = records[-1]["job_id"]
            log = project / f".orchestrator/logs/{item}-{job_id}.log"
        if log is not None and log.exists() and "rank 1/2" in log.read_text():
            return job_id, log
        time.sleep(0.5)
    said = log.read_text() if log is not None and log.exists() else repro.communicate()[0] if repro.poll() is not None else "(no log yet)"
    repro.kill()
    pytest.fail(f"the job did not start training: {said[-3000:]}")


def wait_for_requeue(job_id: str, timeout: float) -> bool:
    """True once the job was requeued (its first run ended, the next one is pending or on)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if job_field(job_id, "Restarts") != "0":
            return True
        time.sleep(1)
    return False


def release_requeued(job_id: str, *updates: str) -> None:
    """Lift the hold Slurm puts on a requeued job (begin time: 120 s on), once its
    previous run has left the node, and 2 s later: slurmd refuses the credential of a
    launch from the same second as the old run's end ("Killing non-startable batch
    job: Job credential revoked", seen here when released at once), which is what the
    hold guards against."""
    deadline = time.time() + 60
    while job_field(job_id, "JobState") != "PENDING" and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now", *updates], check=True)


def fail_node_under(job_id: str, node: str, log: Path, repro: subprocess.Popen) -> None:
    """Set the node under a running job DOWN (what slurmctld does when a node stops
    answering), wait for the watching `dvc repro` to say it lost a node, lift the hold
    Slurm puts on the requeued job, and wait for the repro to finish; the node is resumed
    whatever happens (usually back already: ReturnToService=2)."""
    try:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=fault-injection"], check=True)
        deadline = time.time() + 120
        while "lost a node" not in log.read_text():
            assert repro.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.5)
        # Slurm holds a requeued job a while (BeginTime); the test does not wait it out.
        subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=False)
        assert repro.wait(timeout=300) == 0, log.read_text()
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False, capture_output=True)
        if repro.poll() is None:
            repro.kill()


def slurm_seconds(text: str) -> int:
    """squeue's elapsed time, [D-]H:MM:SS or M:SS, in seconds."""
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


# --- image pushes ----------------------------------------------------------------------------

# A directory name a remote shell would split, unquote or execute if a word went unquoted.
HOSTILE_DIR = "dir with space 'single' \"double\" $(touch ship-canary) `touch ship-canary` ;& *"


def sha(path: Path) -> str:
    """The sha256 of ``path``'s bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- SIF files: images with the labels our definitions set (orchestrator/containers/identity.py) ---

CREATED = 1795636898  # 2026-11-25T20:01:38Z, as a SIF header stores it
_SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
_SIF_DESCRIPTOR = struct.Struct("<iBIIIqqqqqqq128s384s")


def make_sif(labels: dict | None, *, definition: int = 1715, created: int = CREATED, tail: int = 4096) -> bytes:
    """A SIF laid out as Apptainer 1.4 lays one out: header, 48 descriptors from 4096, the
    definition, the inspect metadata with the labels, then a partition (random bytes)."""
    total, table_at = 48, 4096
    data_at = table_at + total * _SIF_DESCRIPTOR.size
    deffile = b"B" * definition
    meta = json.dumps({"data": {"attributes": {"labels": labels, "deffile": "..."}}}).encode() if labels is not None else b""
    objects = [(0x4001, data_at, len(deffile))] + ([(0x4006, data_at + len(deffile), len(meta))] if labels is not None else [])
    table = bytearray(total * _SIF_DESCRIPTOR.size)
    for i, (kind, at, size) in enumerate(objects):
        _SIF_DESCRIPTOR.pack_into(table, i * _SIF_DESCRIPTOR.size, kind, 1, i + 1, 0, 0, at, size, size, created, created, 0, 0, b"", b"")
    header = _SIF_HEADER.pack(
        b"#!/usr/bin/env run-singularity\n", b"SIF_MAGIC\0", b"01\0", b"02\0", os.urandom(16), created, created,
        total - len(objects), total, table_at, len(table), data_at, len(deffile) + len(meta) + tail,
    )  # fmt: skip
    return header.ljust(table_at, b"\0") + bytes(table) + deffile + meta + os.urandom(tail)


def sif_labels(name: str, content: str = "c") -> dict:
    """The labels of image ``name`` of containers/images.yaml, whose content hash is ``content`` * 64."""
    return {
        "org.label-schema.build-arch": "amd64",
        "org.orchestrator.image": name,
        "org.orchestrator.content-hash": f"sha256:{content * 64}",
    }


def reader(data: bytes):
    """``read(offset, size)`` over ``data``, as identity.sif_identity takes it."""
    return lambda offset, size: data[offset : offset + size]


def container_profile(tmp: Path, image: Path) -> Path:
    """The testbed profile with every task in ``image`` (Apptainer) and its fast working
    folders under ``tmp``/fast/root, where a test can see them made and cleaned up."""
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["name"] = "testbed-apptainer"
    data["container"] = {"runtime": "apptainer", "image": str(image)}
    data["storage"] = {"workdir_root": str(tmp / "fast") + "/root"}
    path = tmp / "testbed-apptainer.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
