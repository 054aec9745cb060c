"""Train a byte-level text classifier with PyTorch Lightning: the benchmark stage of dvc.yaml.

Writes into --output: model/model.ckpt (the final weights), metrics.json (losses,
accuracy, throughput, layout) and dvclive/ (per-step curves for ``dvc plots``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from experiments import data, metrics, models, peak, profiling
from experiments.args import positive
from experiments.callbacks import RankReport, StepTimer, job_resources, layout_metrics
from experiments.classifier import TextClassifier
from experiments.datawait import DataWait
from experiments.power import PowerMonitor
from experiments.requeue import REQUEUE_EXIT, CheckpointOnSignal, checkpoint_path, resume_path, slurm_plugins


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.classify", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=data.names(), default="pydoc-topics")
    parser.add_argument("--model", choices=models.names(), default="tiny")
    parser.add_argument("--num-nodes", type=positive, default=1)
    parser.add_argument("--devices", type=positive, default=1, help="processes per node: GPUs, or CPU processes")
    parser.add_argument("--max-steps", type=positive, default=30)
    parser.add_argument("--batch-size", type=positive, default=16, help="per device")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", type=Path, required=True, help="directory for model/, metrics.json and dvclive/")
    parser.add_argument("--accelerator", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--precision", help="a Lightning precision; default bf16-mixed on GPU, 32-true on CPU")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per process (the data is in memory)")
    profiling.add_options(parser)
    args = parser.parse_args(argv)
    problems = profiling.problems(args)
    try:
        peak.env_peak()  # read after training: a bad value must stop the run before it starts
    except ValueError as e:
        problems.append(str(e))
    if problems:
        parser.error("; ".join(problems))
    return args



class _Repeated(Dataset):
    """``dataset`` repeated whole until it holds at least ``samples`` items.

    Sized so that the whole run is one epoch: the small datasets would otherwise
    start a new epoch every few steps on many GPUs, and the epoch boundaries
    (sampler reshuffle, loader restart, epoch hooks) would land in the timed steps.
    Whole repeats keep every item equally likely under shuffling.
    """

    def __init__(self, dataset: Dataset, samples: int):
        self.dataset = dataset
        self.repeats = -(-samples // len(dataset))

    def __len__(self) -> int:
        return self.repeats * len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index % len(self.dataset)]


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    from experiments.plots import PlotsLogger  # here: it brings DVC in

    accelerator = args.accelerator if args.accelerator != "auto" else "gpu" if torch.cuda.is_available() else "cpu"
    precision = args.precision or ("bf16-mixed" if accelerator == "gpu" else "32-true")
    world_size = args.num_nodes * args.devices
    if accelerator == "gpu":
        # TF32 for what stays in float32 under mixed precision (Lightning suggests it too).
        torch.set_float32_matmul_precision("high")

    requeue = CheckpointOnSignal(checkpoint_path(args.output / "model"))  # first: a signal while the data loads counts
    pl.seed_everything(args.seed, workers=True)
    dataset = data.load(args.dataset)
    module = TextClassifier(args.model, dataset.vocab_size, dataset.seq_len, dataset.num_classes, args.lr)
    parameters = sum(p.numel() for p in module.parameters())
    flops_per_sample = models.flops_per_sample(models.config(args.model), dataset.seq_len, dataset.num_classes)
    timer = StepTimer(warmup_steps=args.max_steps // 10)
    wait = DataWait(warmup_steps=args.max_steps // 10)
    power = PowerMonitor()  # GPU energy while fit runs (a sampling thread; nothing on CPU)
    profiler = profiling.ProfileWindow(args.profile_steps, args.output, args.profile_trace)
    report = RankReport(
        f"num_nodes={args.num_nodes} devices={args.devices} accelerator={accelerator} precision={precision} "
        f"dataset={args.dataset} model={args.model} parameters={parameters} batch_size={args.batch_size} max_steps={args.max_steps}"
    )
    resume = resume_path(requeue.path)
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy="ddp" if world_size > 1 else "auto",  # on CPU, DDP over gloo
        precision=precision,
        max_steps=args.max_steps,
        deterministic=accelerator == "cpu",  # on GPUs, deterministic kernels would cost the speed being measured
        default_root_dir=args.output,  # whatever Lightning writes by itself stays in the output
        logger=PlotsLogger(args.output / "dvclive", resume=resume is not None),  # a resumed run keeps its curves
        log_every_n_steps=max(1, args.max_steps // 100),  # ~100 points per curve
        # DataWait last: the other callbacks' batch-end work counts as step time, not as waiting.
        callbacks=[report, timer, requeue, power, profiler, wait],
        plugins=slurm_plugins(),
        enable_checkpointing=False,  # the final model is saved explicitly below
        enable_progress_bar=sys.stdout.isatty(),  # batch logs would fill with progress bars
        enable_model_summary=False,  # the parameter count is in the start line
        # Validate once, after the last step, outside the timed steps.
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=args.max_steps,
    )
    train = _Repeated(dataset.train, args.max_steps * args.batch_size * world_size)
    trainer.fit(
        module,
        train_dataloaders=DataLoader(train, args.batch_size, shuffle=True, drop_last=True, num_workers=args.num_workers),
        val_dataloaders=DataLoader(dataset.val, args.batch_size, num_workers=args.num_workers),
        ckpt_path=resume,
    )
    if requeue.checkpointed:
        print(f"checkpointed at step {trainer.global_step} on the requeue signal; exiting {REQUEUE_EXIT} to be run again", flush=True)
        sys.exit(REQUEUE_EXIT)
    # Every rank calls these (they synchronise the ranks); only global rank 0 writes.
    trainer.save_checkpoint(args.output / "model" / "model.ckpt", weights_only=True)
    cpus, memory = job_resources(trainer)
    if not trainer.is_global_zero:
        return
    requeue.path.unlink(missing_ok=True)  # finished: the next run starts afresh
    samples_per_second = timer.timed_steps * args.batch_size * world_size / timer.elapsed_s
    logged = trainer.callback_metrics
    metrics.write(
        args.output / "metrics.json",
        {
            "train_loss": module.last_train_loss.item(),  # the last step's, on rank 0
            "val_loss": logged["val_loss"].item(),
            "val_accuracy": logged["val_accuracy"].item(),
            **metrics.throughput("sample", samples_per_second, flops_per_sample, world_size, peak.job_peak(accelerator, world_size, cpus)),
            "mean_step_time_s": timer.mean_step_time_s,
            "timed_steps": timer.timed_steps,
            "peak_memory_bytes": memory,  # the largest over the ranks
            "data_wait_share": wait.share,
            **layout_metrics(trainer, args, accelerator, precision),  # world size, nodes, devices, steps, batches, environment
            "dataset": args.dataset,
            "dataset_fingerprint": dataset.fingerprint,
            "num_classes": dataset.num_classes,
            "model": args.model,
            "parameters": parameters,
            "seed": args.seed,
            "torch_version": torch.__version__,
            "lightning_version": pl.__version__,
            **power.metrics(),  # gpu_energy_j, gpu_power_mean_w, power_source
            **profiler.metrics(),  # profile: the step-time breakdown, with --profile-steps
        },
    )


if __name__ == "__main__":
    main()
