"""Lightning's overhead per training step: `experiments.lm` through Lightning versus a plain PyTorch loop.

Both train the same GPT (same seed, so the same initial weights) on the same
batches (the run's own data, tokeniser and step-keyed order) with the same
optimizer and loss, on CPU, in this one process. The Lightning side is the
trainer `python -m experiments.lm` builds (experiments.lm.cli.build_trainer) with the
run's per-step callbacks and its DVCLive logger, so the figure includes what a
run pays for them; the plain side is fetch, forward, backward, step, zero_grad.
Both run under torch.use_deterministic_algorithms(True), as a CPU run does.

A step's time is from the start of one step to the start of the next (the last
step: to its end), so the work between steps (fetching the next batch,
Lightning's bookkeeping and logging) is inside. The logger buffers its points
and writes them every few seconds (here: at the end); those writes are timed
and their mean per step added to every Lightning step. Repeats interleave the two
sides, alternating which goes first, so load drifts hit both alike.

The figure: the ratio of the two sides' lower deciles over all timed steps of
all repeats. The machines this runs on are shared (2 cores, other processes,
other VMs): interference only ever adds time, by up to several times a step,
and single repeats' medians move by +-10%; a low quantile of many steps is the
undisturbed step time, and Lightning's overhead, a fixed amount of work per
step, is in it as much as in any other. The ratios of the medians (all steps,
and the median of each repeat's own ratio) are printed and recorded beside it.

Acceptance bound: lower decile(Lightning) <= 1.03 x lower decile(plain) per step.

Usage: python benchmarks/lightning_overhead.py [-n 20] [--steps 30] [--model tiny] [--batch-size 8] [--seq-len 128];
writes benchmarks/out/lightning_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
MAX_RATIO = 1.03
SEED = 42


def step_times(starts: list[float], end: float, warmup: int) -> list[float]:
    """Each timed step's duration, from its start to the next step's start (the last: to ``end``)."""
    bounds = [*starts, end]
    return [bounds[i + 1] - bounds[i] for i in range(warmup, len(starts))]


def lightning_side(args, data, workdir: Path) -> tuple[list[float], float]:
    """Step times of a run through experiments.lm's trainer and callbacks, and its logger's write time per step."""
    import pytorch_lightning as pl

    from experiments.common.callbacks import StepTimer
    from experiments.common.datawait import DataWait
    from experiments.common.plots import PlotsLogger
    from experiments.common.requeue import CheckpointOnSignal, checkpoint_path
    from experiments.lm import cli as lm
    from experiments.lm.datamodule import LMDataModule
    from experiments.lm.module import CausalLM

    class Stamps(pl.Callback):
        def __init__(self):
            self.starts, self.end = [], 0.0

        def on_train_batch_start(self, *_):
            self.starts.append(time.perf_counter())

        def on_train_batch_end(self, *_):
            self.end = time.perf_counter()

    argv = [
        "--output",
        str(workdir),
        "--accelerator",
        "cpu",
        "--model",
        args.model,
        "--max-steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--seq-len",
        str(args.seq_len),
        "--seed",
        str(SEED),
    ]
    run = lm.parse_args(lm.build_parser(), argv)
    pl.seed_everything(SEED, verbose=False)
    module = CausalLM(args.model, data.vocab_size, args.seq_len, run.lr)
    stamps = Stamps()
    # The run's per-step callbacks, in its order (RankReport, which only prints at set-up, left out).
    callbacks = [
        stamps,
        StepTimer(warmup_steps=args.warmup),
        CheckpointOnSignal(checkpoint_path(workdir / "model")),
        DataWait(warmup_steps=args.warmup),
    ]
    logger = PlotsLogger(workdir / "dvclive")
    flushes = []  # the logger writes its buffered points outside the steps (at the end of so short a run): timed here
    flush = logger.flush

    def timed_flush():
        start = time.perf_counter()
        flush()
        flushes.append(time.perf_counter() - start)

    logger.flush = timed_flush
    trainer = lm.build_trainer(run, callbacks, logger)
    trainer.fit(module, datamodule=LMDataModule(data, args.batch_size, SEED))
    return step_times(stamps.starts, stamps.end, args.warmup), sum(flushes) / len(stamps.starts)


def plain_side(args, data) -> list[float]:
    """Step times of the same training in a plain loop."""
    import pytorch_lightning as pl
    import torch

    from experiments.lm import goldfish, gpt
    from experiments.lm.sampler import StepBatchSampler, StepLoader

    pl.seed_everything(SEED, verbose=False)
    net = gpt.build(args.model, data.vocab_size, args.seq_len)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.95))  # as CausalLM.configure_optimizers
    loader = StepLoader(data.train, StepBatchSampler(len(data.train), args.batch_size, 0, 1, SEED, 0, args.steps))
    net.train()
    starts = []
    for batch in loader:
        starts.append(time.perf_counter())
        loss = goldfish.loss(net(batch[:, :-1]), batch[:, 1:], None)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step_times(starts, time.perf_counter(), args.warmup)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="repeats of each side (default 20)")
    ap.add_argument("--steps", type=int, default=30, help="steps per repeat, warm-up included (default 30, as params.yaml's runs)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()
    args.warmup = args.steps // 10  # as experiments.lm's StepTimer

    import logging
    import warnings

    import pytorch_lightning as pl
    import torch

    from experiments.lm import data as lm_data

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)  # what the Lightning side's trainer sets for CPU runs
    runs: dict[str, list[list[float]]] = {"lightning": [], "plain": []}
    flush_per_step: list[float] = []
    with tempfile.TemporaryDirectory(prefix="orch-overhead-") as td:
        tmp = Path(td)
        os.chdir(tmp)  # DVCLive outside any Git or DVC project
        data = lm_data.load(lm_data.DEFAULT_SOURCE, args.seq_len, tokenizer_dir=tmp / "tokenizer")
        print(
            f"model={args.model} batch={args.batch_size} seq_len={args.seq_len} steps={args.steps} (warm-up {args.warmup}) "
            f"tokenizer={data.tokenizer} threads={torch.get_num_threads()}; median s/step per repeat\n"
        )
        print(f"{'repeat':<8} {'lightning':>10} {'plain':>10} {'ratio':>7}")
        for i in range(args.n):
            for name in ("lightning", "plain") if i % 2 == 0 else ("plain", "lightning"):
                if name == "lightning":
                    times, flush = lightning_side(args, data, tmp / f"run{i}")
                    flush_per_step.append(flush)
                else:
                    times = plain_side(args, data)
                runs[name].append(times)
            light, plain = (statistics.median(runs[name][-1]) for name in ("lightning", "plain"))
            print(f"{i:<8} {light:>10.4f} {plain:>10.4f} {light / plain:>7.3f}")
    pooled = {name: [t for times in repeats for t in times] for name, repeats in runs.items()}
    # The logger's buffered writes happen outside the timed steps (here at the run's end; in a long run every
    # few seconds, in one step): their mean cost per step is charged to every Lightning step.
    flush = statistics.mean(flush_per_step)
    pooled["lightning"] = [t + flush for t in pooled["lightning"]]
    decile = {name: statistics.quantiles(times, n=10)[0] for name, times in pooled.items()}
    median = {name: statistics.median(times) for name, times in pooled.items()}
    per_repeat = [
        (statistics.median(light) + f) / statistics.median(plain)
        for light, f, plain in zip(runs["lightning"], flush_per_step, runs["plain"], strict=True)
    ]
    ratio = decile["lightning"] / decile["plain"]
    print(f"{'decile':<8} {decile['lightning']:>10.4f} {decile['plain']:>10.4f} {ratio:>7.3f}  (bound <= {MAX_RATIO}), all steps")
    print(f"{'median':<8} {median['lightning']:>10.4f} {median['plain']:>10.4f} {median['lightning'] / median['plain']:>7.3f}  all steps")
    print(f"{'paired':<8} {'':>10} {'':>10} {statistics.median(per_repeat):>7.3f}  median of the repeats' ratios")
    print(f"logger writes: {1e3 * flush:.3f} ms per step (buffered, outside the steps; included above)")
    failures = [] if ratio <= MAX_RATIO else [f"Lightning takes {ratio:.3f}x the plain loop per step (bound {MAX_RATIO})"]
    result = {
        "config": {
            "model": args.model,
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "steps": args.steps,
            "warmup_steps": args.warmup,
            "repeats": args.n,
            "tokenizer": data.tokenizer,
            "threads": torch.get_num_threads(),
        },
        "step_s": runs,
        "lower_decile_step_s": decile,
        "median_step_s": median,
        "ratio": ratio,
        "overhead_percent": 100 * (ratio - 1),
        "ratio_of_medians": median["lightning"] / median["plain"],
        "median_of_repeat_ratios": statistics.median(per_repeat),
        "logger_flush_s_per_step": flush,
        "bound": MAX_RATIO,
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "python": sys.version.split()[0],
        "failures": failures,
        "ok": not failures,
    }
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "lightning_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
