"""Pretrain a GPT-style causal language model with PyTorch Lightning, optionally with the goldfish loss.

Writes into --output: model/model.ckpt (the final weights) and, with the BPE
tokeniser, model/tokenizer/ (the corpus's tokenizer.json; needed to read the model's
tokens); metrics.json (losses, perplexity, throughput, MFU, memory, data wait,
layout); dvclive/ (per-step curves for ``dvc plots``). On the requeue signal it
writes model/requeue.ckpt and exits 75; run again, it resumes from there and ends
with the weights an uninterrupted run would have (fixed seed, deterministic CPU).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from experiments.common import peak, profiling, speed
from experiments.common.args import add_accelerator, non_negative, positive, resolve_device
from experiments.lm import data as lm_data
from experiments.lm import goldfish, gpt, tokenizer

if TYPE_CHECKING:
    import pytorch_lightning as pl

STRATEGIES = ("auto", "ddp", "fsdp")
RESIDUALS = ("auto", "bf16", "fp32")
# Validation sequences after training: about half a million tokens at seq_len 128, enough for a
# loss to compare runs by, and a bounded cost whatever the corpus (nanoGPT evaluates a fixed 200 batches).
VAL_ROWS = 4096


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.lm", description=__doc__.splitlines()[0])
    data_help = f"text to train on: a folder experiments.lm.prepare wrote, or {lm_data.VALID_SOURCES}"
    parser.add_argument("--data", default=lm_data.DEFAULT_SOURCE, help=data_help)
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
    add_accelerator(parser)
    parser.add_argument("--strategy", choices=STRATEGIES, default="auto", help="auto: DDP on more than one device")
    parser.add_argument(
        "--precision",
        help="a Lightning precision, or fp8 (torchao float8 linears, GPUs with FP8 matmuls); default bf16-mixed on GPU, 32-true on CPU",
    )
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--goldfish-k", type=int, default=0, help="leave about 1 in k tokens out of the loss; 0: plain loss")
    parser.add_argument("--goldfish-h", type=int, default=goldfish.DEFAULT_H, help="tokens of context the goldfish hash reads")
    tokenizer_help = "auto: a prepared corpus's; for raw text BPE when `tokenizers` is installed, else bytes"
    parser.add_argument("--tokenizer", choices=tokenizer.KINDS, default="auto", help=tokenizer_help)
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per process (each maps the token files itself)")
    parser.add_argument(
        "--val-rows",
        type=non_negative,
        default=VAL_ROWS,
        help=f"validation sequences, spread over the split (default {VAL_ROWS}; 0: all of it)",
    )
    parser.add_argument(
        "--activation-checkpointing", action="store_true", help="recompute each block's activations in the backward: larger batches fit"
    )
    parser.add_argument(
        "--residual",
        choices=RESIDUALS,
        default="auto",
        help="the residual stream's dtype; auto: bf16 under bf16-mixed and fp8 (Megatron-LM's default: "
        "about 5%% faster on an H100, the same loss), else float32",
    )
    # The option's first spelling, kept for a release: it says the new one.
    parser.add_argument("--bf16-residual", action="store_true", help=argparse.SUPPRESS)
    profiling.add_options(parser)
    speed.add_options(parser)
    speed.add_attention_option(parser)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check everything that can be checked before any process or file is made; exit 2 on a problem.

    All problems at once, on one line. On success ``batch_size`` is per device,
    ``accelerator`` is cpu or gpu, and ``precision`` is set.
    """
    args = parser.parse_args(argv)
    problems = resolve_device(args)
    world_size = args.num_nodes * args.devices
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
    if args.precision == speed.FP8:
        problems += speed.fp8_problems(args.accelerator)
    problems += profiling.problems(args)
    if args.bf16_residual:
        print("experiments.lm: --bf16-residual is now --residual bf16 (and bf16 is the default under bf16-mixed and fp8)", file=sys.stderr)
        args.residual = "bf16"
    autocast_bf16 = speed.trainer_precision(args.precision) == "bf16-mixed"
    if args.residual == "bf16" and not autocast_bf16:
        problems.append(f"--residual bf16 needs --precision bf16-mixed or fp8 (autocast to bf16); this run's is {args.precision}")
    if args.residual == "auto":
        args.residual = "bf16" if autocast_bf16 else "fp32"
    if args.attention not in ("auto", "math") and args.accelerator != "gpu":
        problems.append(f"--attention {args.attention} needs a GPU; valid on CPU: auto, math")
    if problems:
        parser.error("; ".join(problems))
    args.compile_mode = speed.compile_mode(args)
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
    from experiments.common.run import build_trainer as common_trainer

    return common_trainer(
        args,
        callbacks,
        logger,
        strategy=_strategy(args.strategy, args.num_nodes * args.devices),
        use_distributed_sampler=False,  # the training order shards itself (experiments.lm.sampler)
    )


def main(argv: Sequence[str] | None = None, callbacks: Sequence[pl.Callback] = ()) -> None:
    """``callbacks``: more Lightning callbacks, run before the run's own (the tests deliver the requeue signal with one)."""
    parser = build_parser()
    args = parse_args(parser, argv)
    # Lightning (~6 s of CPU to import) only once the arguments hold: a usage error answers at once.
    from experiments.common.run import Run
    from experiments.lm.datamodule import LMDataModule
    from experiments.lm.module import CausalLM

    run = Run(args, callbacks)
    try:
        # Every process opens the corpus itself, before any process group; the first on a node prepares a raw source.
        data = lm_data.load(args.data, args.seq_len, args.tokenizer, args.output / "model" / "tokenizer")
    except ValueError as e:
        parser.error(str(e))
    module = CausalLM(args.model, data.vocab_size, args.seq_len, args.lr, args.goldfish_k or None, args.goldfish_h)
    module.net.activation_checkpointing = args.activation_checkpointing
    if args.residual == "bf16":
        module.net.residual_dtype = torch.bfloat16
    if args.precision == speed.FP8:
        speed.float8_in_place(module.net)
    speed.compile_in_place(module.net, args.compile_mode)
    parameters = sum(p.numel() for p in module.parameters())
    flops_per_token = gpt.flops_per_token(gpt.config(args.model), data.vocab_size, args.seq_len)
    headline = (
        f"num_nodes={args.num_nodes} devices={args.devices} accelerator={args.accelerator} precision={args.precision} "
        f"compile={args.compile_mode or 'off'} attention={speed.attention_form(args.attention, args.accelerator)} "
        f"strategy={args.strategy} data={args.data} tokenizer={data.tokenizer} model={args.model} parameters={parameters} "
        f"batch_size={args.batch_size} seq_len={args.seq_len} goldfish_k={args.goldfish_k} max_steps={args.max_steps}"
    )
    trainer = build_trainer(args, run.callbacks(headline), run.logger())
    with speed.attention_kernels(args.attention, args.accelerator):
        run.fit(trainer, module, datamodule=LMDataModule(data, args.batch_size, args.seed, args.num_workers, args.val_rows))

    def results(logged) -> dict:
        return {
            "val_perplexity": math.exp(logged["val_loss"].item()),
            "seq_len": args.seq_len,
            "val_rows": min(args.val_rows or len(data.val), len(data.val)),
            "strategy": args.strategy,
            "data": args.data,
            "data_fingerprint": data.fingerprint,
            "train_tokens": data.train_tokens,
            "tokenizer": data.tokenizer,
            "vocab_size": data.vocab_size,
            "goldfish_k": args.goldfish_k,
            "goldfish_h": args.goldfish_h,
            "activation_checkpointing": args.activation_checkpointing,
            "residual": args.residual,
            "attention": speed.attention_form(args.attention, args.accelerator),
        }

    run.finish(
        trainer, module, unit="token", units_per_item=args.seq_len, flops_per_unit=flops_per_token, parameters=parameters, results=results
    )
