"""Container start overhead per task, and the cost of the no-op image check.

Measures, with cold processes (2 warm-ups, then N interleaved rounds; median, min):

* ``apptainer exec IMAGE true`` against the bare ``true``: what wrapping each task
  in the container adds to its start;
* ``apptainer exec IMAGE python3 -c pass`` against the host's ``python3 -c pass``
  (Debian's /usr/bin/python3 where present: the image's Python version);
* ``orchestrator container build ci`` when the image is up to date (Python start-up
  included): what `dvc repro` or a CI job pays to learn there is nothing to build.
  Bound: < 2 s (the test suite asserts the same bound).

The image is the CI image in the persistent cache the tests use
(/var/cache/orchestrator-images/ci-<content hash>.sif, or under
$ORCHESTRATOR_IMAGE_CACHE); it is built first (through the same command) if missing,
which is not timed.

Usage: python benchmarks/container_start.py [-n 10]; writes benchmarks/out/container_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = Path(os.environ.get("ORCHESTRATOR_IMAGE_CACHE", "/var/cache/orchestrator-images"))
NOOP_BOUND_S = 2.0


def build_command() -> list[str]:
    """`orchestrator container build` as a user runs it (the console script)."""
    beside = Path(sys.executable).parent / "orchestrator"
    return [str(beside) if beside.is_file() else "orchestrator", "container", "build"]


def wall(runs: list[list[str]], n: int, warmup: int = 2) -> list[list[float]]:
    times: list[list[float]] = [[] for _ in runs]
    for i in range(warmup + n):
        for argv, ts in zip(runs, times, strict=True):
            t0 = time.perf_counter()
            subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            if i >= warmup:
                ts.append(time.perf_counter() - t0)
    return times


def summary(argv: list[str], ts: list[float]) -> dict:
    return {"argv": argv, "times_s": [round(t, 4) for t in ts], "median_s": statistics.median(ts), "min_s": min(ts)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="timed runs per command (default 10)")
    n = ap.parse_args().n
    runtime = shutil.which("apptainer") or shutil.which("singularity")
    if not runtime:
        print("no apptainer or singularity on PATH (as root: bash containers/install-apptainer.sh)", file=sys.stderr)
        return 2
    from orchestrator.containers import inputs
    from orchestrator.containers.inputs import current_hash

    key = current_hash(ROOT, "ci").removeprefix(inputs.HASH_PREFIX)[:16]  # the test suite's cache key
    image = CACHE / f"ci-{key}.sif"
    digest_file = image.with_suffix(".digest")
    build = [*build_command(), "ci", "--out", str(image), "--digest-file", str(digest_file)]
    t0 = time.perf_counter()
    first = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, check=False)
    if first.returncode != 0:
        print(first.stdout + first.stderr, file=sys.stderr)
        return 1
    print(f"image: {first.stdout.strip()} [{time.perf_counter() - t0:.1f} s]")

    host_python = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys.executable
    runs = {
        "bare_true": ["true"],
        "exec_true": [runtime, "exec", str(image), "true"],
        "bare_python": [host_python, "-c", "pass"],
        "exec_python": [runtime, "exec", str(image), "python3", "-c", "pass"],
        "noop_check": build,
    }
    times = dict(zip(runs, wall(list(runs.values()), n), strict=True))
    result = {name: summary(runs[name], times[name]) for name in runs}
    med = {name: result[name]["median_s"] for name in runs}
    result["exec_overhead_s"] = {"true": med["exec_true"] - med["bare_true"], "python": med["exec_python"] - med["bare_python"]}
    result["noop_bound_s"] = NOOP_BOUND_S
    result["runtime"] = subprocess.run([runtime, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    result["image_bytes"] = image.stat().st_size
    result["n"] = n
    failures = [f"no-op check median {med['noop_check']:.2f} s > {NOOP_BOUND_S} s"] if med["noop_check"] > NOOP_BOUND_S else []
    result["failures"], result["ok"] = failures, not failures

    print(f"\n{f'timing (N={n}, 2 warm-ups)':<44} {'median s':>9} {'min s':>8}")
    labels = {
        "bare_true": "true",
        "exec_true": "apptainer exec IMAGE true",
        "bare_python": "python3 -c pass (host)",
        "exec_python": "apptainer exec IMAGE python3 -c pass",
        "noop_check": "container build ci (up to date)",
    }
    for name, label in labels.items():
        print(f"{label:<44} {med[name]:>9.3f} {result[name]['min_s']:>8.3f}")
    print(
        f"container start overhead per task: {result['exec_overhead_s']['true']:.3f} s (true), {result['exec_overhead_s']['python']:.3f} s "
        "(python)"
    )
    print(f"image: {image} ({result['image_bytes'] / 2**20:.0f} MiB), {result['runtime']}")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "container_start.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
