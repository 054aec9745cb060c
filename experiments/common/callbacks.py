"""Lightning callbacks through which a run reports on itself: where its ranks run, how fast it steps,
the layout metrics every experiment writes, and the profiled window of steps.

The experiments' command lines import none of this before their arguments are checked: a usage
error answers before Lightning is imported."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from experiments.common import metrics, peak, profiling


def cluster_environment(trainer: pl.Trainer) -> str:
    """The class name of the cluster environment Lightning detected (SLURMEnvironment under Slurm).

    Read from the accelerator connector: single-device strategies have no
    ``cluster_environment`` of their own, yet Lightning still detects one.
    """
    return type(trainer._accelerator_connector.cluster_environment).__name__


def layout_metrics(trainer: pl.Trainer, args, accelerator: str, precision: str) -> dict:
    """The metrics every experiment reports about how it ran: processes, batches, devices."""
    return {
        "world_size": trainer.world_size,
        "num_nodes": args.num_nodes,
        "devices": args.devices,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "global_batch_size": args.batch_size * trainer.world_size,
        "cluster_environment": cluster_environment(trainer),
        "accelerator": accelerator,
        "precision": precision,
    }


def job_resources(trainer: pl.Trainer) -> tuple[int, int]:
    """The job's CPUs (:func:`experiments.common.peak.job_cpus`) and its peak memory, the
    largest over the ranks, in bytes. Collectives: every rank must call it."""
    device = trainer.strategy.root_device
    memory = trainer.strategy.reduce(torch.tensor(float(peak.peak_memory_bytes(device)), device=device), reduce_op="max")
    return peak.job_cpus(trainer.world_size), int(memory.item())


def log_step(module: pl.LightningModule, **values: torch.Tensor) -> None:
    """Hand this step's values to the run's logger, on the steps Lightning logs
    (every ``log_every_n_steps``, and the last). Returns at once on the others.

    Instead of ``self.log`` for per-step values: Lightning's result collection moves
    its whole state to the value's device on every call, 1.1 ms of Python a step
    here (over 1% of the tiny LM's CPU step, about a third of Lightning's overhead
    over a plain loop, benchmarks/lightning_overhead.py), and its logger connector
    turns each value into a number at once: on GPUs a host sync every logged step.
    The detached tensors go to the logger as they are; PlotsLogger reads them when
    it writes, every few seconds. ``step`` is Lightning's (optimizer steps done).
    """
    trainer = module.trainer
    step = trainer.global_step
    # log_every_n_steps: the Trainer's logger connector sets it in __init__, out of the type's sight.
    every = trainer.log_every_n_steps  # type: ignore[attr-defined]
    if module.logger is not None and ((step + 1) % every == 0 or step + 1 == trainer.max_steps):
        # Lightning's Logger types the values float; its loggers take tensors (PlotsLogger reads them late, on purpose).
        module.logger.log_metrics({name: value.detach() for name, value in values.items()}, step=step)  # type: ignore[misc]


class RankReport(pl.Callback):
    """One line from every rank once the process group is up, so a log shows the job's layout.

    The format (``rank 3/4 env=SLURMEnvironment node_rank=1 local_rank=1 cpus=1``)
    is checked by the Slurm tests; keep it stable. ``cpus`` are the CPUs the
    process may run on: the CPU mask Slurm applied.
    """

    def __init__(self, headline: str):
        self.headline = headline  # printed by global rank 0 first

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        env = cluster_environment(trainer)
        if trainer.is_global_zero:
            _print_line(f"cluster_environment={env} world_size={trainer.world_size} global_rank=0 {self.headline}")
        _print_line(
            f"rank {trainer.global_rank}/{trainer.world_size} env={env} node_rank={trainer.node_rank} local_rank={trainer.local_rank} "
            f"cpus={','.join(map(str, sorted(os.sched_getaffinity(0))))} host={socket.gethostname()} "
            f"node={os.environ.get('SLURMD_NODENAME', '-')}"
        )


def _print_line(line: str) -> None:
    """``line`` and its newline in one write: the ranks of a node share one stdout, and under PYTHONUNBUFFERED
    print's two writes (text, then newline) from two ranks interleave into one line with another's."""
    print(line + "\n", end="", flush=True)


class WarmUp:
    """Which steps a measurement leaves out: those before global step ``steps``, and the first
    ``process_steps`` of this process, wherever it starts.

    The first steps of a run pay for allocator growth, kernel selection and DDP's bucket
    set-up; the first of every process, a resumed one too, for compiling the model
    (:func:`experiments.common.speed.untimed_steps`). The last step counts whatever these
    say, so that a short run still has a figure.
    """

    def __init__(self, steps: int, process_steps: int = 0):
        self.steps = steps
        self.process_steps = process_steps
        self._first: int | None = None

    def over(self, trainer: pl.Trainer) -> bool:
        """Whether the step about to start is measured; call it at every step's start."""
        step = trainer.global_step
        if self._first is None:
            self._first = step
        return step >= self.steps and (step - self._first >= self.process_steps or step == trainer.max_steps - 1)


class StepTimer(pl.Callback):
    """Wall time of the training steps after the warm-up (:class:`WarmUp`), up to ``trainer.max_steps``.

    The clock reads only at the two ends (the device synchronised there), so timing
    adds nothing to the steps themselves; validation, which runs after the last step
    (eagerly, not compiled), is outside.
    """

    def __init__(self, warmup_steps: int, untimed_steps: int = 0):
        self.warmup = WarmUp(warmup_steps, untimed_steps)
        self.timed_steps = 0
        self.elapsed_s = 0.0
        self._start = 0.0
        self._first_step = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int) -> None:
        if self.warmup.over(trainer) and not self._start:
            _synchronize(pl_module.device)
            self._start = time.perf_counter()
            self._first_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step == trainer.max_steps:
            _synchronize(pl_module.device)
            self.elapsed_s = time.perf_counter() - self._start
            self.timed_steps = trainer.max_steps - self._first_step

    @property
    def mean_step_time_s(self) -> float:
        return self.elapsed_s / self.timed_steps


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ProfileWindow(pl.Callback):
    """Profiles ``window`` (see :mod:`experiments.common.profiling`) and writes its summary into ``output / "profile"``;
    no window, no profiling.

    The profiler's schedule counts from the fit's first step, so a run resumed
    past the window's warm-up step does not profile again (it says so).
    """

    def __init__(self, window: profiling.Window | None, output: Path, trace: bool = False):
        self.window = window
        self.folder = output / "profile"
        self.trace = trace
        self.result: profiling.Breakdown | None = None  # on global rank 0, once the window has closed
        self._profiler: torch.profiler.profile | None = None
        self._trainer: pl.Trainer | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.window is None:
            return
        wait = self.window.start - 1 - trainer.global_step
        if wait < 0:
            print(f"profile: resumed at step {trainer.global_step}, past the window {self.window}: not profiling", flush=True)
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if pl_module.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._trainer = trainer
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=wait, warmup=1, active=self.window.count, repeat=1),
            on_trace_ready=self._ready,
            record_shapes=False,
        )
        self._profiler.start()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        # A step here: each profiled step runs from one batch's end to the next, so it includes the next batch's fetch.
        if self._profiler is not None:
            self._profiler.step()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._profiler is not None:
            self._profiler.stop()  # idle since the window closed, unless the run stopped early (then the partial window is written)
            self._profiler = None

    def _ready(self, prof: torch.profiler.profile) -> None:
        assert self._trainer is not None  # set when the profiler starts (on_train_start)
        rank = self._trainer.global_rank
        if self.trace:
            self.folder.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(self.folder / f"rank{rank}.pt.trace.json.gz"))
        if rank != 0:
            return
        self.result = profiling.breakdown(profiling.events(prof))
        summary = {"window": str(self.window), "device": self._trainer.strategy.root_device.type, "world_size": self._trainer.world_size}
        metrics.write(self.folder / "breakdown.json", {**summary, **self.result.to_json()})
        table = profiling.operators(prof, self.result.steps)
        metrics.write(self.folder / "operators.json", {**summary, "steps": self.result.steps, "unit": "us per step", "operators": table})
        print(
            f"profile: steps {self.window} -> {self.folder}: " + json.dumps({k: round(v, 1) for k, v in self.result.metrics().items()}),
            flush=True,
        )

    def metrics(self) -> dict:
        """``{"profile": ...}`` for metrics.json once the window has closed, else nothing."""
        return {"profile": self.result.metrics()} if self.result is not None else {}
