#!/usr/bin/env bash
# Issue 37's GPU figures in one call on a lent GPU machine, the most wanted first, each run
# writing its JSON as it ends, so a call cut off by its time limit keeps what ran:
#   1. the attention kernels on the LM's shapes (benchmarks/attention_kernels.py);
#   2. `large` (batch 32) and `xl` (batch 16) with the command's defaults, 200 steps, a
#      profiled window in the untimed warm-up: the MFU bounds and where a step's time goes;
#   3. the same with --precision fp8: tokens/s and the loss over 200 steps against bf16;
#   4. all rows judged together (gpu_mfu.py --report): PASS or FAIL, and FP8 against bf16.
# Packages the machine lacks travel as wheels in .whl/ (the device tool's README).
# Usage, from the repository root: OUT=folder BUDGET=seconds bash benchmarks/gpu_session.sh
set -uo pipefail
OUT=${OUT:-benchmarks/out/gpu_session}
BUDGET=${BUDGET:-570}
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
  timeout 90 python3 benchmarks/attention_kernels.py --out "$OUT/attention.json"
} 2>&1 | tee "$log"
runs=(
  "large-bf16 --models large --batch-sizes 32 --profile-steps 5:2"
  "xl-bf16 --models xl --batch-sizes 16 --profile-steps 5:2"
  "xl-fp8 --models xl --batch-sizes 16 --precision fp8"
  "large-fp8 --models large --batch-sizes 32 --precision fp8"
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
  timeout "$limit" python3 benchmarks/gpu_mfu.py --compile on --steps 200 $options --out "$OUT/$name.json" 2>&1 | tail -n 25 | tee -a "$log"
  [ -f "$OUT/$name.json" ] && done_files+=("$OUT/$name.json")
done
((${#done_files[@]})) && python3 benchmarks/gpu_mfu.py --report "${done_files[@]}" --out "$OUT/gpu_mfu.json" 2>&1 | tee -a "$log"
