"""Issue 13's sweep figures on the real testbed: a matrix of N one-second items submitted
with `orchestrator submit` (job arrays), recorded in DVC with `orchestrator record`, and
its makespan against the same N tasks as one hand-written `sbatch --array`.

For each size N (the testbed profile with shared, not whole-node, allocations, so the two
nodes run 8 one-GPU tasks at once; no recording job: this script records, and times it):

* submit: the wall time of `orchestrator submit` and the Slurm submissions it made
  (distinct job/array ids in the ledger);
* makespan: from the start of `submit` to the end of the last task (sacct End);
* record: the wall time of `orchestrator record` once every task has ended, the items
  recorded, `dvc status` clean and every output there;
* bare: the same N tasks (`srun` of the same Python one-liner) as one hand-written
  `sbatch --array=0-(N-1)`, run alone after it, and its makespan measured the same way;
* with `--old-upto M`, sizes up to M are also recorded the old way (`dvc repro
  --keep-going` in attach-only mode, an `orchestrator run` per stage) and the two locks
  compared.

Bounds (at every size): submit <= 15 s, record <= 60 s, makespan <= 1.5x the bare one,
at most 10 submissions for up to 1,000 items.

Needs root (the testbed). Usage: python benchmarks/sweep.py [--items 256,1000] [--old-upto 0]
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
MAX_SUBMIT_S = 15.0
MAX_RATIO = 1.5
MAX_SUBMISSIONS = 10


def shared_profile(where: Path) -> Path:
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["name"] = "testbed-shared"
    data["scheduler"]["partitions"]["debug"]["whole_node"] = False
    data["scheduler"]["service_partition"] = None  # this script records, and times it
    path = where / "testbed-shared.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ended(where: Path, since: float, count: int, timeout: float) -> list[tuple[str, float]]:
    """(state, end time) of the tasks run in ``where``, once ``count`` have ended (or at the timeout)."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobID,State,End,WorkDir"]
    deadline = time.time() + timeout
    while True:
        rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()]
        mine = [(r[1].split()[0], r[2]) for r in rows if len(r) == 4 and r[3] == str(where.resolve()) and "[" not in r[0]]
        done = [(state, _epoch(end)) for state, end in mine if state in FINAL]
        if (len(done) >= count and len(done) == len(mine)) or time.time() > deadline:
            return done
        time.sleep(2)


FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


def _epoch(text: str) -> float:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return float("nan")


def submissions(where: Path) -> int:
    """Distinct Slurm submissions in the ledger: an array counts once."""
    ids = set()
    for path in (where / ".orchestrator/ledger").glob("*.json"):
        ids |= {r["job_id"].split("_")[0] for r in json.loads(path.read_text()).get("records", [])}
    return len(ids)


BARE = """#!/bin/bash
#SBATCH --job-name=bare-array
#SBATCH --account={account}
#SBATCH --partition=debug
#SBATCH --time=00:10:00
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --array=0-{last}
#SBATCH --output=logs/%A_%a.log
srun python -c 'import os, time; time.sleep({sleep}); os.makedirs("out", exist_ok=True); \
open("out/" + os.environ["SLURM_ARRAY_TASK_ID"], "w").write("done")'
"""


def bare(where: Path, n: int, sleep: float) -> tuple[float, int]:
    """Makespan of the same n tasks as one hand-written array, and how many completed."""
    where.mkdir(parents=True)
    (where / "logs").mkdir()
    script = where / "bare.sbatch"
    script.write_text(BARE.format(account=ACCOUNT, last=n - 1, sleep=sleep))
    since = time.time()
    subprocess.run(["sbatch", "--parsable", f"--chdir={where}", str(script)], check=True, capture_output=True)
    done = ended(where, since, n, timeout=120 + 3 * n)
    return max(end for _, end in done) - since, sum(1 for state, _ in done if state == "COMPLETED")


def timed(argv: list[str], where: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True)
    return time.monotonic() - t0, done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", default="256,1000", help="sizes, comma-separated (default 256,1000)")
    ap.add_argument("--old-upto", type=int, default=0, help="record the old way too up to this size (default 0: never)")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds each item sleeps (default 1)")
    a = ap.parse_args()
    subprocess.run([sys.executable, "-m", "orchestrator", "testbed", "up"], check=True, capture_output=True)
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", "PYTHONPATH": str(ROOT), "BENCH_SLEEP": str(a.sleep)}
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
            tasks = ended(where, since, n, timeout=120 + 3 * n)
            makespan = max((end for _, end in tasks), default=float("nan")) - since
            t_record, done = timed([sys.executable, "-m", "orchestrator", "record"], where, env)
            summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
            lock = yaml.safe_load((where / "dvc.lock").read_text()) if (where / "dvc.lock").exists() else {}
            clean = subprocess.run(["dvc", "status"], cwd=where, capture_output=True, text=True).stdout.strip()
            outputs = sum(1 for i in range(n) if (where / f"out/{i}").exists())
            t_bare, bare_done = bare(tmp / f"bare{n}", n, a.sleep)
            row = {"items": n, "submit_s": t_submit, "submissions": submissions(where),
                   "completed": sum(1 for state, _ in tasks if state == "COMPLETED"), "makespan_s": makespan,
                   "record_s": t_record, "record_summary": summary, "recorded": len(lock.get("stages", {})),
                   "dvc_status_clean": clean == "Data and pipelines are up to date.", "outputs": outputs,
                   "bare_makespan_s": t_bare, "bare_completed": bare_done, "makespan_ratio": makespan / t_bare}  # fmt: skip
            if n <= a.old_upto:
                (where / "dvc.lock").unlink(missing_ok=True)
                t_old, old = timed(["dvc", "repro", "--keep-going"], where, {**env, "ORCH_ATTACH_ONLY": "1"})
                old_lock = yaml.safe_load((where / "dvc.lock").read_text()) if (where / "dvc.lock").exists() else {}
                row.update(old_way_s=t_old, old_way_ok=old.returncode == 0, same_lock=old_lock == lock)
                if old_lock != lock:
                    failures.append(f"{n}: the lock of `record` differs from the lock of `dvc repro`")
            failures += check(row)
            rows.append(row)
            print(json.dumps(row), flush=True)

    print(f"\n{'items':>6} {'submit s':>9} {'sbatch':>7} {'record s':>9} {'makespan s':>11} {'bare s':>7} {'ratio':>6}")
    for r in rows:
        print(f"{r['items']:>6} {r['submit_s']:>9.1f} {r['submissions']:>7} {r['record_s']:>9.1f} "
              f"{r['makespan_s']:>11.1f} {r['bare_makespan_s']:>7.1f} {r['makespan_ratio']:>6.2f}")  # fmt: skip
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    bounds = {"submit_s": MAX_SUBMIT_S, "record_s": MAX_RECORD_S, "makespan_ratio": MAX_RATIO, "submissions": MAX_SUBMISSIONS}
    result = {"rows": rows, "bounds": bounds, "failures": failures, "ok": not failures}
    (out / "sweep.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


def check(row: dict) -> list[str]:
    n, found = row["items"], []
    if row["recorded"] != n or row["outputs"] != n or not row["dvc_status_clean"]:
        found.append(f"{n}: {row['recorded']} recorded, {row['outputs']} outputs, dvc status clean: {row['dvc_status_clean']}")
    if row["submit_s"] > MAX_SUBMIT_S:
        found.append(f"{n}: submit took {row['submit_s']:.1f} s (bound {MAX_SUBMIT_S:g} s)")
    if row["record_s"] > MAX_RECORD_S:
        found.append(f"{n}: recording took {row['record_s']:.1f} s (bound {MAX_RECORD_S:g} s)")
    if row["submissions"] > MAX_SUBMISSIONS:
        found.append(f"{n}: {row['submissions']} submissions (bound {MAX_SUBMISSIONS})")
    if not row["makespan_ratio"] <= MAX_RATIO:
        found.append(f"{n}: makespan {row['makespan_s']:.1f} s is {row['makespan_ratio']:.2f}x the bare array's (bound {MAX_RATIO})")
    return found


if __name__ == "__main__":
    on_testbed(main)
