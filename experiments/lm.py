"""Pretrain a GPT-style causal language model with PyTorch Lightning, optionally with the goldfish loss.

Writes into --output: model/model.ckpt (the final weights) and, with the BPE
tokeniser, model/tokenizer/ (trained on the run's text; needed to read the model's
tokens); metrics.json (losses, perplexity, throughput, MFU, memory, data wait,
layout); dvclive/ (per-step curves for ``dvc plots``). On the requeue signal it
writes model/requeue.ckpt and exits 75; run again, it resumes from there and ends
with the weights an uninterrupted run would have (fixed seed, deterministic CPU).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch

from experiments import goldfish, gpt, lm_data, metrics, peak, profiling, tokenizer
from experiments.args import positive
from experiments.callbacks import RankReport, StepTimer, job_resources, layout_metrics
from experiments.causal_lm import CausalLM
from experiments.datamodule import LMDataModule
from experiments.datawait import DataWait
from experiments.power import PowerMonitor
from experiments.requeue import REQUEUE_EXIT, CheckpointOnSignal, checkpoint_path, resume_path, slurm_plugins

STRATEGIES = ("auto", "ddp", "fsdp")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.lm", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=lm_data.DEFAULT_SOURCE, help=f"text to train on: {lm_data.VALID_SOURCES}")
    parser.add_argument("--model", choices=gpt.names(), default="tiny")
    parser.add_argument("--num-nodes", type=positive, default=1)
    parser.add_argument("--devices", type=positive, default=1, help="processes per node: GPUs, or CPU processes")
    parser.add_argument("--max-steps", type=positive, default=30)
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--batch-size", type=positive, help="sequences per device (default 8)")
    batch.add_argument("--global-batch-size", type=positive, help="sequences per step over all devices; must divide across them")
    parser.add_argument("--seq-len", type=positive, default=128, help="tokens per sequence")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", type=Path, required=True, help="directory for model/, metrics.json and dvclive/")
    parser.add_argument("--accelerator", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--strategy", choices=STRATEGIES, default="auto", help="auto: DDP on more than one device")
    parser.add_argument("--precision", help="a Lightning precision; default bf16-mixed on GPU, 32-true on CPU")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--goldfish-k", type=int, default=0, help="leave about 1 in k tokens out of the loss; 0: plain loss")
    parser.add_argument("--goldfish-h", type=int, default=goldfish.DEFAULT_H, help="tokens of context the goldfish hash reads")
    parser.add_argument("--tokenizer", choices=tokenizer.KINDS, default="auto", help="auto: BPE when `tokenizers` is installed, else bytes")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per process (the data is in memory)")
    profiling.add_options(parser)
    return parser



def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check everything that can be checked before any process or file is made; exit 2 on a problem.

    All problems at once, on one line. On success ``batch_size`` is per device,
    ``accelerator`` is cpu or gpu, and ``precision`` is set.
    """
    args = parser.parse_args(argv)
    if args.accelerator == "auto":
        args.accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    args.precision = args.precision or ("bf16-mixed" if args.accelerator == "gpu" else "32-true")
    world_size = args.num_nodes * args.devices
    problems = []
    for check in (lambda: lm_data.check_source(args.data), lambda: goldfish.check(args.goldfish_k, args.goldfish_h), peak.env_peak):
        try:
            check()
        except ValueError as e:
            problems.append(str(e))
    if args.tokenizer == "bpe" and not tokenizer.bpe_available():
        problems.append("--tokenizer bpe needs the tokenizers package (pip install tokenizers); valid without it: auto, bytes")
    if args.strategy == "fsdp" and args.accelerator != "gpu":
        problems.append("--strategy fsdp needs GPUs (Lightning runs FSDP on CUDA only); valid on CPU: auto, ddp")
    if args.global_batch_size is not None:
        if args.global_batch_size % world_size:
            problems.append(
                f"--global-batch-size {args.global_batch_size} does not divide across {world_size} devices "
                f"(--num-nodes {args.num_nodes} x --devices {args.devices}); give a multiple of {world_size}"
            )
        args.batch_size = args.global_batch_size // world_size
    elif args.batch_size is None:
        args.batch_size = 8
    problems += profiling.problems(args)
    if problems:
        parser.error("; ".join(problems))
    return args


def _strategy(name: str, world_size: int):
    if name == "fsdp":
        from pytorch_lightning.strategies import FSDPStrategy

        # One shard unit per block: each gathers its weights just before use and frees them after.
        return FSDPStrategy(auto_wrap_policy={gpt.Block})
    if name == "auto":
        return "ddp" if world_size > 1 else "auto"  # on CPU, DDP over gloo
    return name


def build_trainer(args: argparse.Namespace, callbacks: Sequence[pl.Callback], logger) -> pl.Trainer:
    """The trainer of a run (``args`` from :func:`parse_args`): also the benchmark's, so that it measures what runs."""
    return pl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=_strategy(args.strategy, args.num_nodes * args.devices),
        precision=args.precision,
        max_steps=args.max_steps,
        deterministic=args.accelerator == "cpu",  # on GPUs, deterministic kernels would cost the speed being measured
        default_root_dir=args.output,  # whatever Lightning writes by itself stays in the output
        logger=logger,
        log_every_n_steps=max(1, args.max_steps // 100),  # ~100 points per curve
        callbacks=list(callbacks),
        plugins=slurm_plugins(),
        use_distributed_sampler=False,  # the training order shards itself (experiments.sampler)
        enable_checkpointing=False,  # the final model is saved explicitly
        enable_progress_bar=sys.stdout.isatty(),  # batch logs would fill with progress bars
        enable_model_summary=False,  # the parameter count is in the start line
        # Validate once, after the last step, outside the timed steps.
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=args.max_steps,
    )


def _leave_process_group() -> None:
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


def main(argv: Sequence[str] | None = None, callbacks: Sequence[pl.Callback] = ()) -> None:
    """``callbacks``: more Lightning callbacks, run before the run's own (the tests deliver the requeue signal with one)."""
    parser = build_parser()
    args = parse_args(parser, argv)
    from experiments.plots import PlotsLogger  # here: it brings DVC in

    accelerator, precision = args.accelerator, args.precision
    world_size = args.num_nodes * args.devices
    if accelerator == "gpu":
        # TF32 for what stays in float32 under mixed precision (Lightning suggests it too).
        torch.set_float32_matmul_precision("high")

    requeue = CheckpointOnSignal(checkpoint_path(args.output / "model"))  # first: a signal while the data loads counts
    pl.seed_everything(args.seed, workers=True)
    try:
        # Every process reads and tokenises the data itself: identical, and before any process group.
        data = lm_data.load(args.data, args.seq_len, args.tokenizer, args.output / "model" / "tokenizer")
    except ValueError as e:
        parser.error(str(e))
    module = CausalLM(args.model, data.vocab_size, args.seq_len, args.lr, args.goldfish_k or None, args.goldfish_h)
    parameters = sum(p.numel() for p in module.parameters())
    flops_per_token = gpt.flops_per_token(gpt.config(args.model), data.vocab_size, args.seq_len)
    timer = StepTimer(warmup_steps=args.max_steps // 10)
    wait = DataWait(warmup_steps=args.max_steps // 10)
    power = PowerMonitor()  # GPU energy while fit runs (a sampling thread; nothing on CPU)
    report = RankReport(
        f"num_nodes={args.num_nodes} devices={args.devices} accelerator={accelerator} precision={precision} strategy={args.strategy} "
        f"data={args.data} tokenizer={data.tokenizer} model={args.model} parameters={parameters} batch_size={args.batch_size} "
        f"seq_len={args.seq_len} goldfish_k={args.goldfish_k} max_steps={args.max_steps}"
    )
    profiler = profiling.ProfileWindow(args.profile_steps, args.output, args.profile_trace)
    # DataWait last: the other callbacks' batch-end work counts as step time, not as waiting.
    resume = resume_path(requeue.path)
    plots = PlotsLogger(args.output / "dvclive", resume=resume is not None)  # a resumed run keeps its curves
    trainer = build_trainer(args, [*callbacks, report, timer, requeue, power, profiler, wait], plots)
    trainer.fit(module, datamodule=LMDataModule(data, args.batch_size, args.seed, args.num_workers), ckpt_path=resume)
    # A signal during the last step leaves nothing to resume: finish now instead (validation has run).
    if requeue.checkpointed and trainer.global_step < args.max_steps:
        print(f"checkpointed at step {trainer.global_step} on the requeue signal; exiting {REQUEUE_EXIT} to be run again", flush=True)
        sys.exit(REQUEUE_EXIT)
    # Every rank calls these (they synchronise the ranks); only global rank 0 writes.
    trainer.save_checkpoint(args.output / "model" / "model.ckpt", weights_only=True)
    cpus, memory = job_resources(trainer)
    if trainer.is_global_zero:
        requeue.path.unlink(missing_ok=True)  # finished: the next run starts afresh
        if requeue.checkpointed and os.environ.get("ORCH_REQUEUE_MARKER"):
            Path(os.environ["ORCH_REQUEUE_MARKER"]).unlink(missing_ok=True)  # finished after all: no requeue (see requeue.py)
        tokens_per_second = timer.timed_steps * args.batch_size * world_size * args.seq_len / timer.elapsed_s
        logged = trainer.callback_metrics
        val_loss = logged["val_loss"].item()
        metrics.write(
            args.output / "metrics.json",
            {
                "train_loss": module.last_train_loss.item(),  # the last step's, on rank 0
                "val_loss": val_loss,
                "val_perplexity": math.exp(val_loss),
                **metrics.throughput("token", tokens_per_second, flops_per_token, world_size, peak.job_peak(accelerator, world_size, cpus)),
                "mean_step_time_s": timer.mean_step_time_s,
                "timed_steps": timer.timed_steps,
                "peak_memory_bytes": memory,  # the largest over the ranks
                "data_wait_share": wait.share,
                **layout_metrics(trainer, args, accelerator, precision),  # world size, nodes, devices, steps, batches, environment
                "seq_len": args.seq_len,
                "strategy": args.strategy,
                "data": args.data,
                "data_fingerprint": data.fingerprint,
                "train_tokens": data.train.numel(),
                "tokenizer": data.tokenizer,
                "vocab_size": data.vocab_size,
                "goldfish_k": args.goldfish_k,
                "goldfish_h": args.goldfish_h,
                "model": args.model,
                "parameters": parameters,
                "seed": args.seed,
                "torch_version": torch.__version__,
                "lightning_version": pl.__version__,
                **power.metrics(),  # gpu_energy_j, gpu_power_mean_w, power_source
                **profiler.metrics(),  # profile: the step-time breakdown, with --profile-steps
            },
        )
    _leave_process_group()


if __name__ == "__main__":
    main()
