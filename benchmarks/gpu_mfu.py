"""Issue 5's GPU figures: MFU, data-wait share and tokens/s of the LM in bf16 on one GPU.

Runs the pipeline's own training command, `python -m experiments.lm` (its trainer,
callbacks, step-keyed loader and logger), on one device in bf16-mixed with a GPT of
at least 350M parameters (default `large`, 36 x 1280, ~710M with the run's 512-token
BPE vocabulary; `medium` is ~304M with it, under the bound), and reads the run's
metrics.json: `mfu` (model FLOPs, 6N + 12 L d T per token, over the device's dense
bf16 peak passed as ORCH_PEAK_TFLOPS), `data_wait_share` and `tokens_per_second`.
The first tenth of the steps is left out of the timing, as in every run.

The peak: --peak-tflops, else from the GPU's name (dense bf16 without sparsity,
NVIDIA's datasheets: H100 SXM and H200 989.4, H100 PCIe 756.5, H100 NVL 835.5,
A100 312). Bounds (issue 5): MFU >= 0.50 with a model of >= 350M parameters, data
wait <= 0.02. Anchors quoted by the issue: Megatron-LM 41-48% on H100, torchtitan
33-39%, nanoGPT about 30%.

Usage: python benchmarks/gpu_mfu.py [--model large] [--batch-size 8] [--seq-len 1024] [--steps 60]
       python benchmarks/gpu_mfu.py --smoke   (the tiny model on CPU: checks this script, gives no figures)
Writes benchmarks/out/gpu_mfu.json (or gpu_mfu_smoke.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MIN_MFU = 0.50
MAX_DATA_WAIT = 0.02
MIN_PARAMETERS = 350e6
# Dense bf16 TFLOP/s per GPU, by a substring of torch.cuda.get_device_name(); most specific first.
PEAKS = [("H100 PCIe", 756.5), ("H100 NVL", 835.5), ("H200", 989.4), ("H100", 989.4), ("A100", 312.0)]


def device_peak(name: str) -> float | None:
    return next((tflops for key, tflops in PEAKS if key in name), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="large", help="experiments/lm/gpt.py size (default large)")
    ap.add_argument("--batch-size", type=int, default=8, help="sequences per step (default 8)")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=60, help="steps, the first tenth untimed (default 60)")
    ap.add_argument("--num-workers", type=int, default=2, help="DataLoader workers (default 2)")
    ap.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak; default from its name")
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, 8 steps: checks the script only")
    args = ap.parse_args()

    import torch

    if args.smoke:
        args.model, args.batch_size, args.seq_len, args.steps = "tiny", 4, 64, 8
        accelerator, device, peak = "cpu", "cpu", None
    else:
        if not torch.cuda.is_available():
            print("no GPU here: the GPU figures cannot be measured (use --smoke to check the script on CPU)", file=sys.stderr)
            return 2
        accelerator, device = "gpu", torch.cuda.get_device_name(0)
        peak = args.peak_tflops or device_peak(device)
        if peak is None:
            print(f"no known bf16 peak for {device!r}: pass --peak-tflops", file=sys.stderr)
            return 2

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}  # one local process, whatever the shell
    if peak is not None:
        env["ORCH_PEAK_TFLOPS"] = str(peak)
    with tempfile.TemporaryDirectory(prefix="orch-gpu-mfu-") as td:
        output = Path(td) / "run"
        argv = [sys.executable, "-m", "experiments.lm", "--data", "pydoc-topics", "--model", args.model,
                "--accelerator", accelerator, "--devices", "1", "--num-nodes", "1", "--max-steps", str(args.steps),
                "--global-batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                "--num-workers", str(args.num_workers), "--output", str(output)]  # fmt: skip
        print(" ".join(argv[1:]), flush=True)
        started = time.monotonic()
        done = subprocess.run(argv, cwd=td, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-5000:], sep="\n", file=sys.stderr)
            return 1
        metrics = json.loads((output / "metrics.json").read_text())

    figures = {key: metrics.get(key) for key in ("parameters", "precision", "tokens_per_second", "mean_step_time_s", "timed_steps",
                                                 "mfu", "mfu_peak_source", "model_tflops_per_device", "data_wait_share",
                                                 "peak_memory_bytes", "torch_version", "lightning_version")}  # fmt: skip
    for key, value in figures.items():
        print(f"{key:<24} {value}")
    failures = []
    if not args.smoke:
        if metrics["parameters"] < MIN_PARAMETERS:
            failures.append(f"{metrics['parameters'] / 1e6:.0f}M parameters: the bound is for models of at least 350M")
        if metrics["mfu"] is None or metrics["mfu"] < MIN_MFU:
            failures.append(f"MFU {metrics['mfu']} below {MIN_MFU}")
        if metrics["data_wait_share"] is None or metrics["data_wait_share"] > MAX_DATA_WAIT:
            failures.append(f"data wait {metrics['data_wait_share']} above {MAX_DATA_WAIT}")
    result = {"config": {"model": args.model, "batch_size": args.batch_size, "seq_len": args.seq_len, "steps": args.steps,
                         "num_workers": args.num_workers, "smoke": args.smoke},
              "device": device, "peak_tflops_bf16": peak, "wall_s": wall, **figures,
              "bounds": {"mfu_min": MIN_MFU, "data_wait_max": MAX_DATA_WAIT, "parameters_min": MIN_PARAMETERS},
              "failures": failures, "ok": not failures}  # fmt: skip
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / ("gpu_mfu_smoke.json" if args.smoke else "gpu_mfu.json")).write_text(json.dumps(result, indent=2) + "\n")
    if args.smoke:
        print("\nsmoke run: the script works; these are not GPU figures")
        return 0
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
