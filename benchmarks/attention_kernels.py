"""The attention kernels PyTorch's scaled_dot_product_attention can run, timed on the LM's own shapes (issue 37).

For each model size (its heads and head width, causal, bf16, seq 1024) and each kernel
(cuDNN's, FlashAttention-2, memory-efficient), the forward and backward time and the
achieved TFLOP/s (the causal half of 4 T^2 d per forward, 2.5x that for the backward),
and how far its output and gradients are from FlashAttention-2's. It says which kernel
`--attention auto` would pick here; the training command's figures are gpu_mfu.py's.

Usage: python benchmarks/attention_kernels.py [--models large,xl] [--batch-sizes 32,16] [--out FILE]
Writes benchmarks/out/attention_kernels.json. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="large,xl")
    ap.add_argument("--batch-sizes", default="32,16", help="one per model (default 32,16: the GPU table's)")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "attention_kernels.json")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from experiments.common import speed
    from experiments.lm import gpt

    if not torch.cuda.is_available():
        print("no GPU here: attention kernels cannot be timed", file=sys.stderr)
        return 2
    kernels = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    rows = []
    for model, batch in zip(args.models.split(","), (int(b) for b in args.batch_sizes.split(",")), strict=True):
        cfg = gpt.config(model)
        heads, width, seq = cfg.n_heads, cfg.d_model // cfg.n_heads, args.seq_len
        torch.manual_seed(0)
        q, k, v = (torch.randn(batch, heads, seq, width, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        grad = torch.randn(batch, heads, seq, width, device="cuda", dtype=torch.bfloat16)
        flops_fwd = 4 * batch * heads * seq * seq * width / 2  # causal: half the square
        reference = None
        for name, backend in kernels.items():
            row = {"model": model, "batch_size": batch, "heads": heads, "head_dim": width, "kernel": name}
            try:
                with sdpa_kernel([backend]):
                    fwd_ms, bwd_ms, out, grads = _time(F.scaled_dot_product_attention, q, k, v, grad)
            except RuntimeError as e:
                rows.append({**row, "error": str(e).splitlines()[0][:200]})
                continue
            row |= {"forward_ms": fwd_ms, "backward_ms": bwd_ms, "forward_tflops": flops_fwd / fwd_ms / 1e9,
                    "backward_tflops": 2.5 * flops_fwd / bwd_ms / 1e9}  # fmt: skip
            if name == "flash":
                reference = (out, grads)
            rows.append(row | {"_out": (out, grads)})
        for row in rows:
            if "_out" in row:
                out, grads = row.pop("_out")
                if reference is not None:
                    pairs = zip((out, *grads), (reference[0], *reference[1]), strict=True)
                    row["max_abs_diff_vs_flash"] = max(float((a.float() - b.float()).abs().max()) for a, b in pairs)
    auto = speed.attention_form("auto", "gpu")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}: --attention auto -> {auto}")
    print(f"{'model':<6} {'kernel':<10} {'fwd ms':>8} {'bwd ms':>8} {'fwd TF/s':>9} {'bwd TF/s':>9} {'diff vs flash':>13}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<6} {r['kernel']:<10} failed: {r['error']}")
            continue
        diff = r.get("max_abs_diff_vs_flash")
        print(f"{r['model']:<6} {r['kernel']:<10} {r['forward_ms']:>8.3f} {r['backward_ms']:>8.3f} {r['forward_tflops']:>9.0f} "
              f"{r['backward_tflops']:>9.0f} {diff if diff is not None else '-':>13}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    result |= {"auto": auto, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _time(attention, q, k, v, grad, repeats: int = 20):
    """Mean forward and backward milliseconds (CUDA events, after warm-up), the output and the gradients."""
    import torch

    for _ in range(3):
        out = attention(q, k, v, is_causal=True)
        out.backward(grad)
    fwd = bwd = 0.0
    for _ in range(repeats):
        q.grad = k.grad = v.grad = None
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        out = attention(q, k, v, is_causal=True)
        mid.record()
        out.backward(grad)
        end.record()
        torch.cuda.synchronize()
        fwd += start.elapsed_time(mid)
        bwd += mid.elapsed_time(end)
    return fwd / repeats, bwd / repeats, out.detach(), (q.grad.clone(), k.grad.clone(), v.grad.clone())


if __name__ == "__main__":
    sys.exit(main())
