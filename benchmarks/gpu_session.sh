#!/usr/bin/env bash
# Issue 37's GPU figures in one call on a lent GPU machine, the most wanted first, each run
# writing its JSON as it ends, so a call cut off by its time limit keeps what ran:
#   1-4. `large` (batch 32) and `xl` (batch 16), 40 steps, each with --bf16-residual and with
#        the command's defaults, profiled in the untimed warm-up: what a bf16 residual stream
#        brings (the lease of 2026-11-27 found the fused memory-bound kernels at a quarter of
#        `large`'s step, and Inductor's kernel tuning no help: docs/development/benchmarks.md);
#   5. `large` with --precision fp8, 200 steps: tokens/s and the loss over 200 steps, against
#      the 200-step bf16 row of benchmarks/records/gpu_mfu-h100-2026-11-27.json (--report);
#   6. all rows judged together (gpu_mfu.py --report): PASS or FAIL, and FP8 against bf16.
# Each run may use all of the budget left: an FP8 `large` run compiles for minutes (over 200 s
# in all on 2026-11-27, cut off there), and a run cut off writes nothing.
# The speed-only runs validate on 256 rows (the command's --val-rows) to save the lease's time.
# Packages the machine lacks travel as wheels in .whl/ (the device tool's README).
# Usage, from the repository root: OUT=folder BUDGET=seconds bash benchmarks/gpu_session.sh
set -uo pipefail
OUT=${OUT:-benchmarks/out/gpu_session}
BUDGET=${BUDGET:-550}
mkdir -p "$OUT"
log="$OUT/session.log"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
{
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv
  python3 -c "import torch, torchao, dvclive, pytorch_lightning as pl; print('torch', torch.__version__, 'torchao', torchao.__version__, 'lightning', pl.__version__)"
} 2>&1 | tee "$log"
short="--steps 40 --val-rows 256 --profile-steps 2:2"
runs=(
  "large-bf16res --models large --batch-sizes 32 $short --command-options=--bf16-residual"
  "large-bf16 --models large --batch-sizes 32 $short"
  "xl-bf16res --models xl --batch-sizes 16 $short --command-options=--bf16-residual"
  "xl-bf16 --models xl --batch-sizes 16 $short"
  "large-fp8 --models large --batch-sizes 32 --steps 200 --precision fp8"
)
done_files=()
for spec in "${runs[@]}"; do
  read -r name options <<<"$spec"
  limit=$(left)
  if ((limit < 60)); then
    echo "skipped $name: ${limit}s of the budget left" | tee -a "$log"
    continue
  fi
  echo "== $name (up to ${limit}s)" | tee -a "$log"
  # shellcheck disable=SC2086  # options: words of the spec above
  timeout "$limit" python3 benchmarks/gpu_mfu.py --compile on $options --out "$OUT/$name.json" 2>&1 | tail -n 25 | tee -a "$log"
  [ -f "$OUT/$name.json" ] && done_files+=("$OUT/$name.json")
done
earlier=benchmarks/records/gpu_mfu-h100-2026-11-27.json  # the 200-step bf16 `large` FP8 is held against
((${#done_files[@]})) && python3 benchmarks/gpu_mfu.py --report "${done_files[@]}" "$earlier" --out "$OUT/gpu_mfu.json" 2>&1 | tee -a "$log"
