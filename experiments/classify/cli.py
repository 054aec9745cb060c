"""Train a byte-level text classifier with PyTorch Lightning: the benchmark stage of dvc.yaml.

Writes into --output: model/model.ckpt (the final weights), metrics.json (losses,
accuracy, throughput, layout) and dvclive/ (per-step curves for ``dvc plots``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from torch.utils.data import DataLoader, Dataset, TensorDataset

from experiments.classify import data, models
from experiments.common import peak, profiling, speed
from experiments.common.args import add_accelerator, positive, resolve_device

if TYPE_CHECKING:
    import pytorch_lightning as pl


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the command line; exit 2 on a problem. On success ``accelerator`` is cpu or gpu and ``precision`` is set."""
    parser = argparse.ArgumentParser(prog="python -m experiments.classify", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=data.names(), default="pydoc-topics")
    parser.add_argument("--model", choices=models.names(), default="tiny")
    parser.add_argument("--num-nodes", type=positive, default=1)
    parser.add_argument("--devices", type=positive, default=1, help="processes per node: GPUs, or CPU processes")
    parser.add_argument("--max-steps", type=positive, default=30)
    parser.add_argument("--batch-size", type=positive, default=16, help="per device")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", type=Path, required=True, help="directory for model/, metrics.json and dvclive/")
    add_accelerator(parser)
    parser.add_argument("--precision", help="a Lightning precision; default bf16-mixed on GPU, 32-true on CPU")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per process (the data is in memory)")
    profiling.add_options(parser)
    speed.add_options(parser)
    args = parser.parse_args(argv)
    problems = resolve_device(args) + profiling.problems(args)
    if args.precision == speed.FP8:
        # Its encoder layers call their attention projections' weights directly, past any swapped Linear.
        problems.append("--precision fp8 is the language model's (python -m experiments.lm); valid here: Lightning's precisions")
    try:
        peak.env_peak()  # read after training: a bad value must stop the run before it starts
    except ValueError as e:
        problems.append(str(e))
    if problems:
        parser.error("; ".join(problems))
    args.compile_mode = speed.compile_mode(args)
    return args


class _Repeated(Dataset):
    """``dataset`` repeated whole until it holds at least ``samples`` items.

    Sized so that the whole run is one epoch: the small datasets would otherwise
    start a new epoch every few steps on many GPUs, and the epoch boundaries
    (sampler reshuffle, loader restart, epoch hooks) would land in the timed steps.
    Whole repeats keep every item equally likely under shuffling.
    """

    def __init__(self, dataset: TensorDataset, samples: int):
        self.dataset = dataset
        self.repeats = -(-samples // len(dataset))

    def __len__(self) -> int:
        return self.repeats * len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index % len(self.dataset)]


def main(argv: Sequence[str] | None = None, callbacks: Sequence[pl.Callback] = ()) -> None:
    """``callbacks``: more Lightning callbacks, run before the run's own (the tests deliver the requeue signal with one)."""
    args = parse_args(argv)
    # Lightning (~6 s of CPU to import) only once the arguments hold: a usage error answers at once.
    from experiments.classify.module import TextClassifier
    from experiments.common.run import Run, build_trainer
    from experiments.common.timedloader import TimedLoader

    run = Run(args, callbacks)
    dataset = data.load(args.dataset)
    module = TextClassifier(args.model, dataset.vocab_size, dataset.seq_len, dataset.num_classes, args.lr)
    speed.compile_in_place(module.net, args.compile_mode)
    parameters = sum(p.numel() for p in module.parameters())
    flops_per_sample = models.flops_per_sample(models.config(args.model), dataset.seq_len, dataset.num_classes)
    headline = (
        f"num_nodes={args.num_nodes} devices={args.devices} accelerator={args.accelerator} precision={args.precision} "
        f"compile={args.compile_mode or 'off'} "
        f"dataset={args.dataset} model={args.model} parameters={parameters} batch_size={args.batch_size} max_steps={args.max_steps}"
    )
    strategy = "ddp" if run.world_size > 1 else "auto"  # on CPU, DDP over gloo
    trainer = build_trainer(args, run.callbacks(headline), run.logger(), strategy=strategy)
    train = _Repeated(dataset.train, args.max_steps * args.batch_size * run.world_size)
    run.fit(
        trainer,
        module,
        train_dataloaders=TimedLoader(train, args.batch_size, shuffle=True, drop_last=True, num_workers=args.num_workers),
        val_dataloaders=DataLoader(dataset.val, args.batch_size, num_workers=args.num_workers),
    )

    def results(logged) -> dict:
        return {
            "val_accuracy": logged["val_accuracy"].item(),
            "dataset": args.dataset,
            "dataset_fingerprint": dataset.fingerprint,
            "num_classes": dataset.num_classes,
        }

    run.finish(trainer, module, unit="sample", units_per_item=1, flops_per_unit=flops_per_sample, parameters=parameters, results=results)
