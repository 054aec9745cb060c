"""Waves under a site's MaxSubmitJobs, on the real testbed: N one-second items submitted with
`orchestrator submit` while the user may have at most L jobs queued or running.

`submit` queues the first L-1 items (one array) and a recording job; each recording job
records its wave in dvc.lock and submits the next wave with a recording job of its own;
the last one runs the final `dvc repro`. Measured (the testbed profile with shared
allocations, 8 one-GPU tasks at once on the two nodes, and its `debug` service partition):

* submit: the wall time of the first `orchestrator submit`;
* waves: per wave its items, its tasks' span (first start to last end) and the recording
  job's run time (`orchestrator record`, then the next wave's `submit`, or the final
  `dvc repro`); the gap between one wave's last task ending and the next wave's first task
  starting, which is the price of a wave (the recording job's dependency, its own start,
  recording and submitting);
* makespan: from `submit` to the end of the last recording job, every item recorded;
* checks: each item ran once (one task per item in Slurm's accounting), every item in
  dvc.lock, `dvc status` clean, every output there, no sbatch refused for the limit.

Bounds: every check holds, and the mean gap per wave <= 60 s (a wave's overhead small
against the hours a real wave of training takes). The single-submission makespan of the
same items is benchmarks/sweep.py's (1,000 items: 1,501 s on this testbed, docs/development/benchmarks.md).

Needs root (the testbed; it sets the user's MaxSubmitJobs and clears it after).
Usage: python benchmarks/waves.py [--items 1000] [--max-submit 250] [--sleep 1]
Writes benchmarks/out/waves.json.
"""

from __future__ import annotations

import argparse
import collections
import getpass
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
from sweep import ACCOUNT, FINAL, _epoch  # noqa: E402

MAX_GAP_S = 60.0


def profile(where: Path) -> Path:
    """The testbed profile with shared allocations; its service partition runs the recording jobs."""
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["name"] = "testbed-shared"
    data["scheduler"]["partitions"]["debug"]["whole_node"] = False
    path = where / "testbed-shared.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def max_submit(value: int) -> None:
    argv = ["sacctmgr", "-i", "modify", "user", getpass.getuser(), "set", f"maxsubmitjobs={value}"]
    subprocess.run(argv, check=True, capture_output=True)


def accounting(where: Path, since: float) -> list[dict]:
    """Every job run in ``where`` (array tasks one by one): id, name, state, start and end."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    argv = ["sacct", "-X", "-n", "-P", "-S", start, "-A", ACCOUNT, "--format=JobID,JobName,State,Start,End,WorkDir"]
    rows = [line.split("|") for line in subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()]
    return [
        {"id": r[0], "name": r[1], "state": r[2].split()[0], "start": _epoch(r[3]), "end": _epoch(r[4])}
        for r in rows
        if len(r) == 6 and r[5] == str(where.resolve()) and "[" not in r[0]
    ]


def wait_for_the_chain(where: Path, since: float, items: int, timeout: float) -> list[dict]:
    """The accounting once every item's task has ended and so has the last recording job (one per
    wave: one array per wave here), the same on two polls 10 s apart: a job just submitted can
    be missing from the accounting for a few seconds."""
    deadline = time.time() + timeout
    before = None
    while True:
        jobs = accounting(where, since)
        tasks = [j for j in jobs if j["name"] != "orchestrator-record"]
        records = [j for j in jobs if j["name"] == "orchestrator-record"]
        arrays = {j["id"].split("_")[0] for j in tasks}
        settled = len(tasks) >= items and len(records) >= len(arrays) and all(j["state"] in FINAL for j in jobs)
        if (settled and before == len(jobs)) or time.time() > deadline:
            return jobs
        before = len(jobs) if settled else None
        time.sleep(10 if settled else 5)


def waves_of(jobs: list[dict]) -> list[dict]:
    """The waves in order: each array's tasks (one array per wave here) and the recording job after it."""
    arrays = collections.defaultdict(list)
    for job in jobs:
        if job["name"] != "orchestrator-record":
            arrays[job["id"].split("_")[0]].append(job)
    spans = sorted(({"start": min(t["start"] for t in ts), "end": max(t["end"] for t in ts), "items": len(ts)} for ts in arrays.values()),
                   key=lambda w: w["start"])  # fmt: skip
    records = sorted((j for j in jobs if j["name"] == "orchestrator-record"), key=lambda j: j["start"])
    for i, wave in enumerate(spans):
        rec = records[i] if i < len(records) else None
        wave["recording_s"] = rec["end"] - rec["start"] if rec else None
        wave["gap_to_next_s"] = spans[i + 1]["start"] - wave["end"] if i + 1 < len(spans) else None
    return spans


def options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000, help="items in the matrix (default 1000)")
    ap.add_argument("--max-submit", type=int, default=250, help="the user's MaxSubmitJobs during the run (default 250)")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds each item sleeps (default 1)")
    a = ap.parse_args()
    if a.items < 1 or a.max_submit < 2 or a.sleep < 0:
        ap.error("--items >= 1, --max-submit >= 2 (an item and the recording job), --sleep >= 0")
    return a


def main(a: argparse.Namespace) -> int:
    subprocess.run([sys.executable, "-m", "orchestrator", "testbed", "up"], check=True, capture_output=True)
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", "PYTHONPATH": str(ROOT), "BENCH_SLEEP": str(a.sleep)}
    failures = []
    with tempfile.TemporaryDirectory(prefix="orch-waves-", dir="/tmp") as td:
        tmp = Path(td)
        where = project(tmp / "p", str(profile(tmp)), list(range(a.items)))
        since = time.time()
        max_submit(a.max_submit)
        try:
            t0 = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "orchestrator", "submit"], cwd=where, env=env, capture_output=True, text=True)
            t_submit = time.monotonic() - t0
            if done.returncode != 0:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            first_line = next((line for line in done.stderr.splitlines() if "in waves" in line), "")
            jobs = wait_for_the_chain(where, since, a.items, timeout=600 + 4 * a.items)
        finally:
            max_submit(-1)
        tasks = [j for j in jobs if j["name"] != "orchestrator-record"]
        records = [j for j in jobs if j["name"] == "orchestrator-record"]
        ran = len({j["id"] for j in tasks})
        waves = waves_of(jobs)
        makespan = max(j["end"] for j in records) - since if records else float("nan")
        lock = yaml.safe_load((where / "dvc.lock").read_text()) if (where / "dvc.lock").exists() else {}
        clean = subprocess.run(["dvc", "status"], cwd=where, capture_output=True, text=True).stdout.strip()
        outputs = sum(1 for i in range(a.items) if (where / f"out/{i}").exists())
        logs = " ".join(p.read_text() for p in (where / ".orchestrator/logs").glob("record-*.log"))
    gaps = [w["gap_to_next_s"] for w in waves if w["gap_to_next_s"] is not None]
    result = {
        "items": a.items, "max_submit": a.max_submit, "sleep_s": a.sleep, "submit_s": t_submit, "submit_said": first_line,
        "waves": waves, "recording_jobs": len(records), "tasks": len(tasks),
        "completed": sum(j["state"] == "COMPLETED" for j in tasks), "makespan_s": makespan,
        "mean_gap_s": sum(gaps) / len(gaps) if gaps else 0.0, "recorded": len(lock.get("stages", {})),
        "dvc_status_clean": clean == "Data and pipelines are up to date.", "outputs": outputs,
        "refused_for_the_limit": "job submit limit" in logs,  # sbatch's words when the limit refuses a job
    }  # fmt: skip
    if ran != a.items or result["completed"] != a.items:
        failures.append(f"{ran} tasks ran and {result['completed']} completed for {a.items} items (each item once)")
    if result["recorded"] != a.items or outputs != a.items or not result["dvc_status_clean"]:
        failures.append(f"{result['recorded']} recorded, {outputs} outputs, dvc status clean: {result['dvc_status_clean']}")
    if result["mean_gap_s"] > MAX_GAP_S:
        failures.append(f"mean gap between waves {result['mean_gap_s']:.1f} s (bound {MAX_GAP_S:g} s)")
    if result["refused_for_the_limit"]:
        failures.append("a recording job's sbatch was refused for the limit")

    print(f"{a.items} items under MaxSubmitJobs={a.max_submit}: submit {t_submit:.1f} s; {len(waves)} waves; makespan {makespan:.0f} s")
    print(f"{'wave':>4} {'items':>6} {'span s':>7} {'recording s':>12} {'gap to next s':>14}")
    for i, w in enumerate(waves, 1):
        rec = f"{w['recording_s']:.0f}" if w["recording_s"] is not None else "-"
        gap = f"{w['gap_to_next_s']:.0f}" if w["gap_to_next_s"] is not None else "-"
        print(f"{i:>4} {w['items']:>6} {w['end'] - w['start']:>7.0f} {rec:>12} {gap:>14}")
    result.update(bounds={"mean_gap_s": MAX_GAP_S}, failures=failures, ok=not failures)
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "waves.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    parsed = options()  # a bad option is a usage error wherever this runs
    on_testbed(lambda: main(parsed))
