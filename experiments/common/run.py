"""The run skeleton both experiments share: from taking over the requeue signal to leaving the process group.

An experiment's ``main`` parses its arguments, opens a :class:`Run` before it loads
its data (so that a requeue signal during the load counts), builds its data, its
Lightning module and its trainer with the run's callbacks and logger, and hands
the trainer to :meth:`Run.fit` and :meth:`Run.finish`. What must not differ
between experiments lives here: the requeue protocol end to end (the signal, the
resume, the exit code, the marker; see :mod:`experiments.common.requeue`), the
final weights, the metrics every experiment reports, and the teardown.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from experiments.common import metrics, peak, speed
from experiments.common.callbacks import ProfileWindow, RankReport, StepTimer, job_resources, layout_metrics
from experiments.common.datawait import DataWait
from experiments.common.power import PowerMonitor
from experiments.common.requeue import REQUEUE_EXIT, CheckpointOnSignal, checkpoint_path, resume_path, slurm_plugins

# What an experiment adds to metrics.json, from what validation logged (``trainer.callback_metrics``).
Results = Callable[[Mapping[str, torch.Tensor]], Mapping[str, Any]]


class Run:
    """One training run of an experiment, from its parsed arguments to its results.

    ``args`` must carry ``output``, ``seed``, ``max_steps``, ``num_nodes``,
    ``devices``, ``batch_size``, ``model``, ``profile_steps``/``profile_trace`` and
    the resolved ``accelerator`` and ``precision``
    (:func:`experiments.common.args.resolve_device`). ``callbacks``: more Lightning
    callbacks, run before the run's own (the tests deliver the requeue signal with one).
    """

    def __init__(self, args: argparse.Namespace, callbacks: Sequence[pl.Callback] = ()) -> None:
        self.args = args
        if args.accelerator == "gpu":
            # TF32 for what stays in float32 under mixed precision (Lightning suggests it too).
            torch.set_float32_matmul_precision("high")
        self.requeue = CheckpointOnSignal(checkpoint_path(args.output / "model"))  # first: a signal while the data loads counts
        pl.seed_everything(args.seed, workers=True)
        # The checkpoint to resume from, if an earlier run of this job left one.
        self.resume = resume_path(self.requeue.path)
        self.extra = tuple(callbacks)
        # The first tenth of the steps is not timed, nor, with a compiled model, the steps in
        # which each process compiles it (tens of seconds; a resumed run compiles again).
        warmup, untimed = args.max_steps // 10, speed.untimed_steps(getattr(args, "compile_mode", None))
        self.timer = StepTimer(warmup, untimed)
        self.wait = DataWait(warmup, untimed)
        self.power = PowerMonitor()  # GPU energy while fit runs (a sampling thread; nothing on CPU)
        self.profiler = ProfileWindow(args.profile_steps, args.output, args.profile_trace)

    @property
    def world_size(self) -> int:
        return self.args.num_nodes * self.args.devices

    def callbacks(self, headline: str) -> list[pl.Callback]:
        """The trainer's callbacks: the extra ones, then the run's. ``headline``: what rank 0's start line says about the run."""
        # DataWait last: the other callbacks' batch-end work counts as step time, not as waiting.
        return [*self.extra, RankReport(headline), self.timer, self.requeue, self.power, self.profiler, self.wait]

    def logger(self) -> pl.loggers.Logger:
        """The per-step curves' logger, writing into ``dvclive/`` of the output."""
        from experiments.common.plots import PlotsLogger  # here: it brings DVC in

        return PlotsLogger(self.args.output / "dvclive", resume=self.resume is not None)  # a resumed run keeps its curves

    def fit(self, trainer: pl.Trainer, module: pl.LightningModule, **data: Any) -> None:
        """Train (``data``: fit's loaders or datamodule), from the requeue checkpoint if there is one.

        When the requeue signal stopped the run before its last step, exit with
        :data:`~experiments.common.requeue.REQUEUE_EXIT`, to be run again.
        """
        trainer.fit(module, **data, ckpt_path=self.resume)
        # A signal during the last step leaves nothing to resume: finish now instead (validation has run).
        if self.requeue.checkpointed and trainer.global_step < self.args.max_steps:
            print(f"checkpointed at step {trainer.global_step} on the requeue signal; exiting {REQUEUE_EXIT} to be run again", flush=True)
            sys.exit(REQUEUE_EXIT)

    def finish(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        *,
        unit: str,
        units_per_item: int,
        flops_per_unit: float,
        parameters: int,
        results: Results,
    ) -> None:
        """Save the final weights, close the requeue protocol, write metrics.json and leave the process group.

        Every rank calls it. ``unit`` names the throughput's unit (``token``:
        tokens_per_second, ...), of which each item of a batch holds
        ``units_per_item``; ``module`` keeps its last training loss in
        ``last_train_loss``. ``results`` adds the experiment's own metrics; it
        runs on global rank 0 only.
        """
        args = self.args
        # Every rank calls these (they synchronise the ranks); only global rank 0 writes.
        trainer.save_checkpoint(args.output / "model" / "model.ckpt", weights_only=True)
        cpus, memory = job_resources(trainer)
        if trainer.is_global_zero:
            self.requeue.path.unlink(missing_ok=True)  # finished: the next run starts afresh
            if self.requeue.checkpointed and os.environ.get("ORCH_REQUEUE_MARKER"):
                Path(os.environ["ORCH_REQUEUE_MARKER"]).unlink(missing_ok=True)  # finished after all: no requeue (see requeue.py)
            logged = trainer.callback_metrics
            per_second = self.timer.timed_steps * args.batch_size * self.world_size * units_per_item / self.timer.elapsed_s
            job_peak = peak.job_peak(args.accelerator, self.world_size, cpus)
            shared = {
                # The last step's, on rank 0; a LightningModule's own attributes are typed Tensor | Module (torch's __getattr__).
                "train_loss": module.last_train_loss.item(),  # type: ignore[operator]
                "val_loss": logged["val_loss"].item(),
                **metrics.throughput(unit, per_second, flops_per_unit, self.world_size, job_peak),
                "mean_step_time_s": self.timer.mean_step_time_s,
                "timed_steps": self.timer.timed_steps,
                "peak_memory_bytes": memory,  # the largest over the ranks
                "allocator_retries": peak.allocator_retries(trainer.strategy.root_device),  # rank 0's
                "data_wait_share": self.wait.share,
                "step_gap_share": self.wait.gap_share,  # data wait and Lightning's own work between steps
                "time_to_first_step_s": self.wait.first_step_s,  # rank 0's, from its process's start
                # World size, nodes, devices, steps, batches, cluster environment, accelerator, precision.
                **layout_metrics(trainer, args, args.accelerator, args.precision),
                "model": args.model,
                "parameters": parameters,
                # What produced these figures: the device, and what made its steps fast or not.
                "device": torch.cuda.get_device_name(trainer.strategy.root_device) if args.accelerator == "gpu" else "cpu",
                "compile": getattr(args, "compile_mode", None) or "off",
                "optimizer": speed.optimizer_form(trainer.optimizers[0]) if trainer.optimizers else None,
                "seed": args.seed,
                "torch_version": torch.__version__,
                "lightning_version": pl.__version__,
                **self.power.metrics(),  # gpu_energy_j, gpu_power_mean_w, power_source
                **self.profiler.metrics(),  # profile: the step-time breakdown, with --profile-steps
            }
            metrics.write(args.output / "metrics.json", {**shared, **results(logged)})
        leave_process_group()


def build_trainer(
    args: argparse.Namespace, callbacks: Sequence[pl.Callback], logger: pl.loggers.Logger, *, strategy: Any, **options: Any
) -> pl.Trainer:
    """A run's trainer: what every experiment sets (``args`` as for :class:`Run`), ``strategy`` and the experiment's own ``options``."""
    return pl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=strategy,
        # One of --precision's choices, Lightning's names; Lightning's Literal of them is private (_PRECISION_INPUT).
        precision=speed.trainer_precision(args.precision),  # type: ignore[arg-type]
        max_steps=args.max_steps,
        deterministic=args.accelerator == "cpu",  # on GPUs, deterministic kernels would cost the speed being measured
        default_root_dir=args.output,  # whatever Lightning writes by itself stays in the output
        logger=logger,
        log_every_n_steps=max(1, args.max_steps // 100),  # ~100 points per curve
        callbacks=list(callbacks),
        plugins=slurm_plugins(),
        enable_checkpointing=False,  # the final model is saved explicitly (Run.finish)
        enable_progress_bar=sys.stdout.isatty(),  # batch logs would fill with progress bars
        enable_model_summary=False,  # the parameter count is in the start line
        # Validate once, after the last step, outside the timed steps.
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=args.max_steps,
        **options,
    )


def leave_process_group() -> None:
    """Tear the process group down in step, once every rank is done with it (rank 0 last wrote the results).

    A rank that simply returned would let interpreter exit destroy the group's
    objects while their gloo/NCCL threads may still run and another rank still
    talks to it: C++ then aborts at exit ("terminate called without an active
    exception"), seen once on rank 1 of a 2-process gloo run under srun. The
    barrier keeps every rank in until all are done; destroying the group then
    joins its threads before the interpreter shuts down.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
