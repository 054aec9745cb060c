# The project of Get started, its stage already run through the orchestrator.
mkdir my-project && cd my-project && git init -q && dvc init -q
cat > train.py <<'PY'
import json, os, sys, time

lr = float(sys.argv[1])
seed = int(sys.argv[2])
started = time.perf_counter()
total = sum(i * lr for i in range(100_000))  # the "training"
throughput = 100_000 / (time.perf_counter() - started)
os.makedirs(f"out/{lr}", exist_ok=True)
with open(f"out/{lr}/metrics.json", "w") as f:
    json.dump({"lr": lr, "seed": seed, "score": round(1 - lr + seed / 100, 3), "throughput": round(throughput)}, f)
print(f"lr {lr}, seed {seed}: done")
PY
printf 'train:\n  lrs: [0.1, 0.2]\n  seed: 0\n' > params.yaml
cat > dvc.yaml <<'YAML'
stages:
  train:
    matrix:
      lr: ${train.lrs}
    cmd: orchestrator run -- python3 train.py ${item.lr} ${train.seed}
    deps: [train.py]
    params: [orchestrator.cluster, train.seed]
    metrics:
      - out/${item.lr}/metrics.json:
          cache: false
          persist: true
    outs:
      - out/${item.lr}/provenance.json:
          cache: false
          persist: true
YAML
orchestrator init > /dev/null
git add -A && git commit -q -m "my project"
