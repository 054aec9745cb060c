"""Issue 13's recording figures: recording N finished items in DVC, in one process
(`orchestrator record`) against today's other way (`dvc repro --keep-going` in attach-only
mode, an `orchestrator run` per stage), on the real testbed.

For each size N: a matrix of N one-second items (benchmarks/detached.py's) (the testbed profile with shared, not
whole-node, allocations, so the two nodes run many at once) is submitted with `orchestrator
submit` (timed: its return, and the number of sbatch calls, one per item today), run to
the end, then recorded with `orchestrator record` (timed). With `--old-upto M`, sizes up to
M are also recorded the old way from the same finished jobs (dvc.lock removed first), and
the two locks are compared.

Job arrays (one sbatch for many items) and the 1,000-item makespan against a bare
`sbatch --array` are not built yet (issue 13, parts 2-3): this measures part 4.

Needs root (the testbed). Usage: python benchmarks/sweep.py [--items 64,128,256] [--old-upto 128]
Writes benchmarks/out/sweep.json.
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

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from detached import on_testbed, project  # noqa: E402 - the same matrix of sleeping one-node items

ACCOUNT = "project_465000858"
MAX_RECORD_S = 60.0


def shared_profile(where: Path) -> Path:
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["name"] = "testbed-shared"
    data["scheduler"]["partitions"]["debug"]["whole_node"] = False
    data["scheduler"]["service_partition"] = None  # this script records, and times it
    path = where / "testbed-shared.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ended(where: Path, since: float, count: int, timeout: float) -> list[str]:
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobIDRaw,State,WorkDir"]
    deadline = time.time() + timeout
    while True:
        rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()]
        states = [r[1] for r in rows if len(r) == 3 and r[2] == str(where.resolve())]
        if (len(states) >= count and all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for s in states)) or time.time() > deadline:
            return states
        time.sleep(2)


def timed(argv: list[str], where: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True)
    return time.monotonic() - t0, done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", default="64,128,256", help="sizes, comma-separated (default 64,128,256)")
    ap.add_argument("--old-upto", type=int, default=128, help="record the old way too up to this size (default 128)")
    a = ap.parse_args()
    subprocess.run([sys.executable, "-m", "orchestrator", "testbed", "up"], check=True, capture_output=True)
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", "PYTHONPATH": str(ROOT), "BENCH_SLEEP": "1"}
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="orch-sweep-", dir="/tmp") as td:
        tmp = Path(td)
        profile = shared_profile(tmp)
        for n in [int(x) for x in a.items.split(",")]:
            where = project(tmp / f"n{n}", str(profile), list(range(n)))
            since = time.time()
            t_submit, done = timed([sys.executable, "-m", "orchestrator", "submit"], where, env)
            if done.returncode != 0:
                failures.append(f"{n}: submit failed: {done.stderr[-500:]}")
                continue
            sbatches = sum(1 for line in done.stdout.splitlines() if line.startswith("work@"))
            states = ended(where, since, n, timeout=60 + 5 * n)
            t_record, done = timed([sys.executable, "-m", "orchestrator", "record"], where, env)
            summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
            lock = yaml.safe_load((where / "dvc.lock").read_text()) if (where / "dvc.lock").exists() else {}
            row = {"items": n, "submit_s": t_submit, "sbatch_calls": sbatches, "completed": states.count("COMPLETED"),
                   "record_s": t_record, "record_summary": summary, "recorded": len(lock.get("stages", {}))}  # fmt: skip
            if n <= a.old_upto:
                (where / "dvc.lock").unlink(missing_ok=True)
                t_old, old = timed(["dvc", "repro", "--keep-going"], where, {**env, "ORCH_ATTACH_ONLY": "1"})
                old_lock = yaml.safe_load((where / "dvc.lock").read_text()) if (where / "dvc.lock").exists() else {}
                row.update(old_way_s=t_old, old_way_ok=old.returncode == 0, same_lock=old_lock == lock)
                if old_lock != lock:
                    failures.append(f"{n}: the lock of `record` differs from the lock of `dvc repro`")
            if row["recorded"] != n:
                failures.append(f"{n}: {row['recorded']} of {n} items recorded ({summary})")
            if t_record > MAX_RECORD_S:
                failures.append(f"{n}: recording took {t_record:.1f} s (bound {MAX_RECORD_S:g} s)")
            rows.append(row)
            print(json.dumps(row), flush=True)

    print(f"\n{'items':>6} {'submit s':>9} {'sbatch':>7} {'record s':>9} {'old way s':>10} {'same lock':>10}")
    for r in rows:
        old = f"{r['old_way_s']:.1f}" if "old_way_s" in r else "-"
        same = str(r.get("same_lock", "-"))
        print(f"{r['items']:>6} {r['submit_s']:>9.1f} {r['sbatch_calls']:>7} {r['record_s']:>9.1f} {old:>10} {same:>10}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    result = {"rows": rows, "bound_record_s": MAX_RECORD_S, "failures": failures, "ok": not failures}
    (out / "sweep.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    on_testbed(main)
