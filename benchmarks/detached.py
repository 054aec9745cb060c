"""Detached, parallel submission against the blocking srun form, on the real testbed.

A matrix of 4 one-node items (each sleeps S seconds, then writes its output) on
the two-node testbed, run two ways from a cold start:

* ``dvc repro`` with the blocking ``srun`` form (seed 000's way): DVC runs the
  stages one after another, each holding its srun until the job ends;
* ``orchestrator submit``: every item submitted at once, then a recording job
  runs ``dvc repro`` in attach-only mode once they have ended. Timed until
  dvc.lock records all items; the submit command's own return time is reported.

Acceptance: submit returns within seconds, and the whole detached run takes at
most 0.6x the wall time of the blocking one. Sleeping jobs, not training: the
testbed's two "nodes" share this machine's two cores, so CPU-bound jobs would
measure core contention rather than scheduling.

Needs root (the testbed). Usage: python benchmarks/detached.py [--sleep S]
Writes benchmarks/out/detached.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MAX_RATIO = 0.6
ITEMS = ["a", "b", "c", "d"]


def project(where: Path, profile: str, items: list = ITEMS) -> Path:
    """A git + DVC project whose one-node items sleep $BENCH_SLEEP seconds, then write out/ITEM
    (also benchmarks/sweep.py's)."""
    where.mkdir(parents=True)
    (where / "params.yaml").write_text(
        yaml.safe_dump({"orchestrator": {"cluster": profile, "account": "project_465000858"}, "items": list(items)})
    )
    cmd = (
        "orchestrator run --nodes 1 --gpus-per-node 1 -- python -c "
        '\'import os, sys, time; time.sleep(float(os.environ["BENCH_SLEEP"])); '
        'os.makedirs("out", exist_ok=True); open("out/${item.x}", "w").write("done")\''
    )
    stage = {"matrix": {"x": "${items}"}, "cmd": cmd, "outs": [{"out/${item.x}": {"persist": True}}]}
    (where / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"work": stage}}, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=where, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=where, check=True)
    return where


def recorded(where: Path) -> int:
    lock = where / "dvc.lock"
    return len((yaml.safe_load(lock.read_text()) or {}).get("stages", {})) if lock.exists() else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sleep", type=float, default=20.0, help="seconds each job sleeps (default 20)")
    a = ap.parse_args()
    subprocess.run([sys.executable, "-m", "orchestrator", "testbed", "up"], check=True, capture_output=True)
    env = {**os.environ, "BENCH_SLEEP": str(a.sleep), "ORCH_POLL_MAX_S": "2"}
    with tempfile.TemporaryDirectory(prefix="orch-detached-") as td:
        tmp = Path(td)
        srun_profile = tmp / "testbed-srun.yaml"
        srun_profile.write_text(
            (ROOT / "orchestrator/config/profiles/testbed.yaml").read_text().replace("launcher: sbatch", "launcher: srun")
        )

        blocking = project(tmp / "blocking", str(srun_profile))
        t0 = time.monotonic()
        done = subprocess.run(["dvc", "repro"], cwd=blocking, env=env, capture_output=True, text=True)
        t_blocking = time.monotonic() - t0
        if done.returncode != 0 or recorded(blocking) != len(ITEMS):
            sys.exit(f"blocking dvc repro failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")

        detached = project(tmp / "detached", "testbed")
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "orchestrator", "submit"], cwd=detached, env=env, capture_output=True, text=True)
        t_return = time.monotonic() - t0
        if done.returncode != 0:
            sys.exit(f"orchestrator submit failed:\n{done.stderr[-2000:]}")
        while recorded(detached) < len(ITEMS) and time.monotonic() - t0 < 20 * a.sleep + 300:
            time.sleep(0.5)
        t_detached = time.monotonic() - t0
        ok_recorded = recorded(detached) == len(ITEMS)
        status = subprocess.run(["dvc", "status"], cwd=detached, capture_output=True, text=True).stdout

    ratio = t_detached / t_blocking
    print(f"matrix: {len(ITEMS)} one-node items sleeping {a.sleep:g} s each, testbed (2 nodes, whole-node jobs)")
    print(f"{'run':<48} {'wall s':>8}")
    print(f"{'dvc repro, blocking srun form':<48} {t_blocking:>8.1f}")
    print(f"{'orchestrator submit: returns after':<48} {t_return:>8.1f}")
    print(f"{'orchestrator submit: all items in dvc.lock after':<48} {t_detached:>8.1f}")
    print(f"ratio detached / blocking: {ratio:.2f} (bound <= {MAX_RATIO}); dvc status after: {status.strip()!r}")
    failures = []
    if not ok_recorded:
        failures.append("the recording job did not bring dvc.lock up to date")
    if ratio > MAX_RATIO:
        failures.append(f"detached run took {ratio:.2f}x the blocking one (bound {MAX_RATIO})")
    if t_return > 15:
        failures.append(f"submit took {t_return:.1f} s to return")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "detached.json").write_text(
        json.dumps(
            {
                "items": len(ITEMS),
                "sleep_s": a.sleep,
                "blocking_s": t_blocking,
                "submit_returns_s": t_return,
                "detached_s": t_detached,
                "ratio": ratio,
                "bound": MAX_RATIO,
                "failures": failures,
                "ok": not failures,
            },
            indent=2,
        )
        + "\n"
    )
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


def on_testbed(main) -> None:
    """Run a testbed benchmark's ``main`` and exit with its status (also benchmarks/sweep.py's)."""
    if shutil.which("sbatch") is None and os.geteuid() != 0:
        sys.exit("needs the testbed: run as root on a machine where `orchestrator testbed up` works")
    sys.exit(main())


if __name__ == "__main__":
    on_testbed(main)
