"""Acceptance tests of the LM experiment (experiments/lm/) on the real Slurm testbed,
through the shipped pipeline's `lm` stage: `dvc repro` -> `orchestrator run` -> sbatch.

1. Two nodes x two tasks (gloo over loopback) end with the weights and losses of one
   node x four tasks of the same global batch.
2. A real Slurm time limit interrupts a run inside the CI image (requeue signal into the
   container -> checkpoint -> exit 75 -> outputs copied back from the fast working folder ->
   requeue from the batch script, outside, where scontrol is), the requeued job resumes, and
   the final weights equal (bit for bit) those of an uninterrupted run of the same command
   in the same image. (One test for the time limit, in the image: each takes minutes of
   Slurm's clock, and the host's own path is the same protocol without `apptainer exec`,
   checked with a signal sent by hand in test_slurm_testbed.py.)
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import (
    ACCOUNT,
    ROOT,
    container_profile,
    dvc,
    jobs_of,
    make_project,
    model_weights,
    release_requeued,
    require_training,
    slurm_seconds,
    wait_until_training,
)

from orchestrator.scripts.job_environment import workspace_tag

pytestmark = pytest.mark.slurm

STAGE_TIME = "00:30:00"  # the stage's --time (params lm.time): what a requeued run gets back


def cpu_profile(where: Path) -> Path:
    """The testbed profile as CPU-only nodes (``gpus: 0``), so that tasks are not bound.

    The testbed's nodes claim 8 cores and 4 fake GPUs, with GPU i "closest" to core i;
    four tasks per node would get the masks 0x1,0x2,0x4,0x8, and cores 2 and 3 do not
    exist on this 2-core machine: task/affinity fails the step. No valid binding of
    four tasks exists here: the orchestrator checks that tasks share no core (explicit
    ``cpu_masks`` and derived ``gpu_cores`` alike), and two cores cannot give four tasks
    a core each; a partition without ``whole_node`` still binds (``--cpu-bind=cores``, to
    cores Slurm numbers up to 7). What the orchestrator offers for this is a CPU-only
    node (``gpus: 0``: `--gpus-per-node` is then the number of CPU processes per node):
    no GPU gres, no masks, no ``--cpu-bind``. With ``--exclusive`` every task is
    allocated the node's 8 cores, more than one per task, so Slurm's auto-binding does
    not apply either and each task may run on both real cores (asserted from the log).
    ``OMP_NUM_THREADS`` is 1 (instead of cores / tasks = 2 or 4) so that the four
    processes on two cores do not also fight over OpenMP threads; both layouts get it.
    Everything else (cluster name, partition, account rule, staging) is the testbed's.
    """
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["name"] = "testbed-cpu"
    data["description"] = "The testbed's two nodes as CPU-only nodes: unbound CPU processes"
    for key in ("gpu_cores", "gpu"):
        data["node"].pop(key)
    data["node"]["gpus"] = 0
    data["environment"]["variables"]["OMP_NUM_THREADS"] = "1"
    path = where / "testbed-cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def lm_project(root: Path, cluster: str, layouts: list[tuple[int, int]], image: Path | None = None, **lm: object) -> Path:
    """The shipped pipeline (dvc.yaml, params.yaml, experiments/) on ``cluster``, its `lm`
    matrix narrowed to the tiny model, the plain loss and ``layouts`` (nodes, tasks); with
    ``image``, every task in that image (params name it `ci`, its digest file in place)."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["orchestrator"].update(cluster=cluster, account=ACCOUNT, image="ci" if image else "none")
    params.pop("clusters")  # the matrix is the test's own, on any cluster: no cluster's values to switch to
    params["lm"].update(
        models=["tiny"], goldfish_ks=[0], device_cfgs=[{"num_nodes": n, "num_gpus": t} for n, t in layouts], time=STAGE_TIME, **lm
    )
    project = make_project(root, dvc_yaml=(ROOT / "dvc.yaml").read_text(), params_yaml=yaml.safe_dump(params, sort_keys=False))
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    if image:
        shutil.copy(image.with_suffix(".digest"), project / "containers/ci.digest")
    return project


def item(index: int) -> str:
    return f"lm@tiny-0-device_cfg{index}"


def result(project: Path, layout: str) -> Path:
    return project / "results/lm/tiny/k0" / layout


def train_losses(output: Path) -> list[tuple[int, float]]:
    """The per-step training loss DVCLive logged (rank 0's)."""
    rows = (output / "dvclive/plots/metrics/train/loss.tsv").read_text().split("\n")[1:]
    return [(int(step), float(loss)) for step, loss in (row.split("\t") for row in rows if row)]


def job_log(project: Path, name: str) -> str:
    (path,) = (project / ".orchestrator/logs").glob(f"{name}-*.log")
    return path.read_text()


def rank_lines(log: str) -> list[dict[str, str]]:
    """The RankReport lines: ``rank 3/4 env=SLURMEnvironment node_rank=1 ... cpus=0,1 ... node=node2``."""
    lines = [line.split() for line in log.splitlines() if line.startswith("rank ") and " env=" in line]
    return [{"rank": words[1], **dict(w.split("=", 1) for w in words[2:])} for words in lines]


def headline(log: str) -> str:
    """What rank 0 says it runs (layout, data, model, batch, steps), after its environment."""
    line = next(line for line in log.splitlines() if line.startswith("cluster_environment="))
    return line.split("global_rank=0 ", 1)[1]


def slurm(*argv: str, timeout: float = 90) -> str:
    """Run a Slurm command, retrying while the controller does not answer: other sessions
    on this testbed restart slurmctld now and then (its jobs survive, its answers pause)."""
    deadline = time.time() + timeout
    while True:
        done = subprocess.run(list(argv), check=False, capture_output=True, text=True)
        if done.returncode == 0 or time.time() > deadline:
            break
        time.sleep(2)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return done.stdout


@pytest.fixture
def cancel_leftovers(tmp_path):
    """Whatever happens, no job of this test stays queued or running on the testbed."""
    yield
    listed = slurm("squeue", "-h", "-o", "%i %Z")
    mine = [
        line.split()[0] for line in listed.splitlines() if len(line.split()) == 2 and line.split()[1].startswith(str(tmp_path.resolve()))
    ]
    if mine:
        subprocess.run(["scancel", *mine], check=False)


@pytest.mark.slow
def test_two_nodes_of_two_tasks_match_one_node_of_four(slurm_testbed, tmp_path, cancel_leftovers):
    """One global batch of 8 over 4 gloo ranks, laid out 2 nodes x 2 tasks and 1 node x 4
    tasks (see :func:`cpu_profile` for why the tasks are not bound here): every rank
    reads the same shard of every step's batch in both layouts, so the weights and the
    loss curves agree up to floating-point rounding (they are in fact bit-equal here).
    A run that formed two worlds of two, or read other batches, differs by far more."""
    require_training()
    import torch

    project = lm_project(
        tmp_path / "p", str(cpu_profile(tmp_path)), [(2, 2), (1, 4)], max_steps=12, global_batch_size=8, seq_len=32, seed=5
    )
    since = time.time()
    done = dvc(project, "repro", "lm", timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    layouts = {"2x2": (item(0), {"node1", "node2"}), "1x4": (item(1), None)}
    host_cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))  # what slurmd, on this host, has too
    for layout, (name, nodes) in layouts.items():
        metrics = json.loads((result(project, layout) / "metrics.json").read_text())
        assert (metrics["world_size"], metrics["global_batch_size"], metrics["cluster_environment"]) == (4, 8, "SLURMEnvironment"), metrics
        log = job_log(project, name)
        ranks = rank_lines(log)
        assert sorted(r["rank"] for r in ranks) == ["0/4", "1/4", "2/4", "3/4"], log[-3000:]
        assert {r["env"] for r in ranks} == {"SLURMEnvironment"}
        used = {r["node"] for r in ranks}
        assert used == nodes if nodes else len(used) == 1, ranks
        assert all(r["cpus"] == host_cpus for r in ranks), ranks  # unbound: every real core
    said = [headline(job_log(project, name)) for name, _ in layouts.values()]
    assert said[0].replace("num_nodes=2 devices=2", "num_nodes=1 devices=4") == said[1], said  # all else alike

    two_by_two, one_by_four = model_weights(result(project, "2x2")), model_weights(result(project, "1x4"))
    assert two_by_two.keys() == one_by_four.keys()
    differences = {name: (two_by_two[name] - one_by_four[name]).abs().max().item() for name in two_by_two}
    assert all(torch.allclose(two_by_two[name], one_by_four[name], rtol=0, atol=1e-6) for name in two_by_two), differences
    curves = [train_losses(result(project, layout)) for layout in layouts]
    assert [step for step, _ in curves[0]] == list(range(1, 13)), curves[0]
    assert curves[0][-1][1] < curves[0][0][1]  # it trained
    assert [s for s, _ in curves[0]] == [s for s, _ in curves[1]]
    assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for (_, a), (_, b) in zip(*curves, strict=True)), curves
    val = [json.loads((result(project, layout) / "metrics.json").read_text())["val_loss"] for layout in layouts]
    assert math.isclose(*val, rel_tol=1e-6), val

    # The corpus's jobs first (the tokeniser, then its shards as one array), then the two layouts'.
    jobs = jobs_of(ACCOUNT, since, project, expect=5)
    names = sorted("lm-shard (array task)" if j[1].startswith("lm-shard.array-") else j[1] for j in jobs)
    assert names == ["lm-shard (array task)"] * 2 + ["lm-tokenizer", item(0), item(1)], jobs
    assert {j[2] for j in jobs} == {"COMPLETED"}, jobs


# The interrupted run: one node x two tasks (DDP: the ranks agree on the step to stop
# at), 400 steps of about 0.15 s on its two cores, 0.3 s beside the reference run.
RESUME = {"max_steps": 400, "global_batch_size": 16, "seq_len": 64, "seed": 7}


def lm_argv(output: str, nodes: int, tasks: int, data: str) -> list[str]:
    """The `lm` stage's command (dvc.yaml) with RESUME's values: the reference runs exactly
    it, on the corpus the pipeline prepared (``data``)."""
    return [
        "-m", "experiments.lm", "--data", data, "--model", "tiny", "--goldfish-k", "0", "--num-nodes", str(nodes),
        "--devices", str(tasks), "--max-steps", str(RESUME["max_steps"]), "--global-batch-size", str(RESUME["global_batch_size"]),
        "--seq-len", str(RESUME["seq_len"]), "--seed", str(RESUME["seed"]), "--output", output,
    ]  # fmt: skip


def local_environment() -> dict[str, str]:
    """The reference run's environment, which `apptainer exec` passes into the image: no Slurm variables leaking in, one
    OpenMP thread per process as the job's tasks have. Run from outside the DVC project, with the project's experiments/."""
    leaked = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ORCH_")) and k not in leaked}
    return {**env, "OMP_NUM_THREADS": "1"}


def job_fields(job_id: str) -> dict[str, str]:
    shown = slurm("scontrol", "-o", "show", "job", job_id)
    return dict(w.split("=", 1) for w in shown.split() if "=" in w)


def restarts(job_id: str) -> int:
    return int(job_fields(job_id)["Restarts"])


@pytest.mark.slow
def test_time_limit_interrupts_and_the_requeued_job_resumes_to_the_same_weights(slurm_testbed, ci_image, tmp_path, cancel_leftovers):
    """The requeue protocol under a real time limit, on the testbed profile with every task
    in the CI image (Slurm's signal reaches the training inside `apptainer exec`).

    Slurm keeps time limits in whole minutes and checks them every 30 s; at a check
    where less than the signal time + 30 s (USR1@30: 60 s) remain, it sends the signal.
    So the test cuts the limit, once training runs, to the fewest whole minutes that
    leave at least 35 s: with the job under 25 s old that is one minute, already inside
    the signal window, and the signal comes at the next check (within 30 s), while the
    job would only be killed at the minute; older, the signal comes at most 65 s after
    the cut. The training checkpoints (model/requeue.ckpt) and exits 75, the batch
    script requeues, the test releases Slurm's 120 s hold and gives the limit back, and
    the next run resumes. The reference is the same command run locally without
    interruption, started at the cut (not before: the job's start-up, on two cores,
    would take longer than 25 s beside it): it keeps the cores busy while Slurm
    requeues and restarts the job, and it slows the job's steps, which only makes the
    signal land further inside the training. A resume that lost or repeated steps, or
    restarted the data order, ends with other weights.
    """
    require_training()
    import torch

    project = lm_project(tmp_path / "p", str(container_profile(tmp_path, ci_image)), [(1, 2)], image=ci_image, **RESUME)
    name, output = item(0), result(project, "1x2")
    started = time.monotonic()
    repro = subprocess.Popen(
        ["dvc", "repro", "lm"],
        cwd=project,
        env={**os.environ, "ORCH_POLL_MAX_S": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    reference = None
    try:
        job_id, log = wait_until_training(project, name, repro, 300)
        time.sleep(2)  # past setup, where the signal handler is installed: into the steps
        training = time.monotonic()
        elapsed = slurm_seconds(slurm("squeue", "-h", "-j", job_id, "-o", "%M").strip())
        minutes = max(1, math.ceil((elapsed + 35) / 60))
        slurm("scontrol", "update", f"jobid={job_id}", f"TimeLimit={minutes}")
        (tmp_path / "data").symlink_to(project / "data")  # the same --data as the job's, so the headlines compare
        reference = subprocess.Popen(
            [
                "apptainer", "exec", "--bind", str(tmp_path), "--pwd", str(tmp_path), "--env", f"PYTHONPATH={project}",
                "--env", "OMP_NUM_THREADS=1", str(ci_image), "python", *lm_argv("reference", 1, 2, "data/lm/tokens"),
            ],
            cwd=tmp_path, env=local_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.time() + 180
        while restarts(job_id) == 0 and repro.poll() is None and time.time() < deadline:
            time.sleep(1)
        assert restarts(job_id) == 1, f"no requeue (did the training end before the signal came?):\n{log.read_text()[-4000:]}"
        requeued = time.monotonic()
        assert (output / "model/requeue.ckpt").is_file()  # copied back from the staging dir before the requeue
        release_requeued(job_id, f"TimeLimit={STAGE_TIME}")  # the next run gets the stage's limit back
        out, _ = repro.communicate(timeout=600)
        reference_out, _ = reference.communicate(timeout=600)
    finally:
        for proc in (repro, reference):
            if proc is not None and proc.poll() is None:
                proc.kill()
    print(
        f"\ntraining from {training - started:.0f} s (job {elapsed} s old, limit cut to {minutes} min); "
        f"requeued at {requeued - started:.0f} s; all done at {time.monotonic() - started:.0f} s"
    )
    assert repro.returncode == 0, out[-4000:]
    assert reference.returncode == 0, reference_out[-4000:]

    text = log.read_text()
    stopped = re.search(r"checkpointed at step (\d+) on the requeue signal; exiting 75", text)
    assert stopped and 0 < int(stopped.group(1)) < RESUME["max_steps"], text[-4000:]  # interrupted mid-training
    print(f"checkpointed at step {stopped.group(1)} of {RESUME['max_steps']}")
    assert "requeueing job" in text, text[-4000:]
    assert "Restored all states from the checkpoint" in text or "Restoring states from the checkpoint path" in text, text[-4000:]
    assert text.count("cluster_environment=SLURMEnvironment") == 2  # two runs of the training
    assert headline(text) == headline(reference_out)  # the same configuration, rank 0 says
    runs = slurm("sacct", "-D", "-X", "-n", "-P", "-j", job_id, "--format=JobIDRaw,State").split()
    assert [r.split("|")[1] for r in runs] == ["REQUEUED", "COMPLETED"], runs

    assert json.loads((output / "provenance.json").read_text())["requeues"] == 1
    assert not (output / "model/requeue.ckpt").exists()  # finished: nothing left to resume from
    script = next((project / ".orchestrator/scripts").rglob(f"{name}.sbatch")).read_text()
    assert "exec apptainer exec" in script and str(ci_image) in script
    fast = tmp_path / "fast/root"  # the fast working folder: made for the job, gone after its success
    assert fast.is_dir() and not (fast / f"{name}.{workspace_tag(str(project.resolve()))}").exists()
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["world_size"], metrics["max_steps"]) == (2, RESUME["max_steps"])
    resumed, whole = model_weights(output), model_weights(tmp_path / "reference")
    assert resumed.keys() == whole.keys()
    assert all(torch.equal(resumed[k], whole[k]) for k in whole), {k: (resumed[k] - whole[k]).abs().max().item() for k in whole}
    assert metrics["val_loss"] == json.loads((tmp_path / "reference/metrics.json").read_text())["val_loss"]
    curve = train_losses(output)  # both runs' points, each step once, as the uninterrupted run logged them
    assert curve == train_losses(tmp_path / "reference") and len(curve) == RESUME["max_steps"] // 4, curve[:3]
