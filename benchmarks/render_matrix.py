"""Cost of ``orchestrator render`` on a large matrix, against DVC's own resolution.

Builds a temporary DVC project (git init + dvc init) whose dvc.yaml has one matrix
stage of N items (default 1,000 = 10 datasets x 20 models x 5 device_cfgs), shaped
like this project's own dvc.yaml, with params.yaml's ``orchestrator`` section set
to cluster lumi. Times, from a cold process each run (1 warm-up round, then median
of R rounds; each round runs the three commands in turn):

* ``dvc stage list``                                 - DVC's resolution: the floor
* ``orchestrator render --out <empty folder>``       - plan, render, write every file
* ``orchestrator render --check --no-shellcheck``   - plan, render, bash-check, write:
  into an empty folder each time (every file created) and again into the same one
* ``orchestrator render``                            - plan, render, write (again)

and checks that the render wrote N scripts.

and the peak RSS of each (the kernel's rusage of that one process).

Acceptance bounds: median(render --check --no-shellcheck into an empty folder)
<= 1.5 x median(dvc stage list); and plain render into an empty folder no slower
and no bigger (peak RSS) than dvc stage list from 100,000 items (at a few hundred, both are
mostly Python's start-up). Run ``--items 100000 --plain-only`` for that bound.

Usage: python benchmarks/render_matrix.py [--items N] [--repeat R] [--profile]
(--profile: cProfile of render_matrix + check_rendered in-process after a warm-up
call, top 15 by cumulative and top 10 by own time). Writes benchmarks/out/render_matrix.json (render_matrix-N.json for other sizes).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This checkout's orchestrator, whatever copy is installed (an editable install may point elsewhere).
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
MAX_RATIO = 1.5
PLAIN_BOUND_ITEMS = 100_000  # plain render against dvc stage list (issue 22)
CFGS = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8)]
RESULT = "results/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}"
DVC_YAML = f"""\
stages:
  bench:
    matrix:
      dataset: ${{bench.datasets}}
      model: ${{bench.models}}
      device_cfg: ${{bench.device_cfgs}}
    cmd: >-
      orchestrator run
      --nodes ${{item.device_cfg.num_nodes}}
      --gpus-per-node ${{item.device_cfg.num_gpus}}
      --
      python -m experiments.classify
      --dataset ${{item.dataset}}
      --model ${{item.model}}
      --num-nodes ${{item.device_cfg.num_nodes}}
      --devices ${{item.device_cfg.num_gpus}}
      --output {RESULT}
    deps:
      - experiments
      - containers/${{orchestrator.image}}.digest
    params:
      - orchestrator.cluster
      - orchestrator.image
      - bench
    outs:
      - {RESULT}/model:
          persist: true
    metrics:
      - {RESULT}/metrics.json:
          cache: false
          persist: true
"""


def shape(n: int) -> tuple[int, int, int]:
    """datasets x models x device_cfgs with product n (n a multiple of 5)."""
    if n <= 0 or n % len(CFGS):
        sys.exit(f"--items must be a positive multiple of {len(CFGS)}")
    rest = n // len(CFGS)
    datasets = 10 if rest % 10 == 0 else 1
    return datasets, rest // datasets, len(CFGS)


def make_project(root: Path, n: int) -> None:
    d, m, _ = shape(n)
    cfgs = "\n".join(f"    - {{num_nodes: {a}, num_gpus: {b}}}" for a, b in CFGS)
    (root / "params.yaml").write_text(
        "orchestrator:\n  cluster: lumi\n  account: project_465000858\n  image: lumi\n\nbench:\n"
        f"  datasets: [{', '.join(f'ds{i:02d}' for i in range(d))}]\n"
        f"  models: [{', '.join(f'model{i:03d}' for i in range(m))}]\n  device_cfgs:\n{cfgs}\n"
    )
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "experiments").mkdir()
    # The image the lumi profile's tasks run in, as a stage dependency (as in this project's dvc.yaml).
    (root / "containers").mkdir()
    (root / "containers" / "lumi.digest").write_text("sha256:" + "0" * 64 + "\n")
    scm = shutil.which("git") is not None
    if scm:
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q", *([] if scm else ["--no-scm"])], cwd=root, check=True)


def console(name: str) -> list[str]:
    """The console script beside this interpreter (not a pyenv shim), else PATH, else -m."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return [str(beside)]
    return [shutil.which(name)] if shutil.which(name) else [sys.executable, "-m", name]


def timed(runs: dict[str, list[str]], cwd: Path, repeat: int) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Wall times and peak RSS (bytes, from the kernel's rusage of that one process) per
    command; rounds interleave the commands so load drifts hit all alike."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    peaks: dict[str, list[int]] = {label: [] for label in runs}
    for i in range(repeat + 1):  # round 0 is a warm-up
        for label, argv in runs.items():
            t0 = time.perf_counter()
            with tempfile.TemporaryFile() as err:
                p = subprocess.Popen([a.format(round=i) for a in argv], cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
                _, status, usage = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                dt = time.perf_counter() - t0
                if p.returncode != 0:
                    err.seek(0)
                    sys.exit(f"{' '.join(argv)} failed ({p.returncode}):\n{err.read().decode(errors='replace')[-2000:]}")
            if i:
                times[label].append(dt)
                peaks[label].append(usage.ru_maxrss * 1024)  # Linux: kilobytes
    return times, peaks


def profile_render(root: Path, top: int = 15) -> str:
    sys.path.insert(0, str(HERE.parent))
    from orchestrator.scripts import matrix
    from orchestrator.util.runner import SubprocessRunner

    matrix.render_matrix(root, None, SubprocessRunner())  # warm-up: imports stay out of the profile
    prof = cProfile.Profile()
    prof.enable()
    rendered = matrix.render_matrix(root, None, SubprocessRunner())
    problems = matrix.check_rendered(rendered, SubprocessRunner(), shellcheck=False)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(10)
    return f"{len(rendered.scripts)} scripts, {len(problems)} problem(s)\n" + buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000, help="matrix size, a multiple of 5 (default 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per command (default 3)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the render (in-process)")
    ap.add_argument(
        "--plain-only", action="store_true", help="only dvc stage list and plain render (the 100,000-item bound; --check takes long there)"
    )
    a = ap.parse_args()
    orch = console("orchestrator")
    # "fresh": into an empty folder each round, so every script is created (the
    # bound is judged on this, the worst case); "again": re-rendering an
    # unchanged matrix into the default folder, where unchanged files stay.
    runs = {
        "dvc stage list": console("dvc") + ["stage", "list"],
        "render, fresh": orch + ["render", "--out", "plain-{round}"],
        "render --check --no-shellcheck, fresh": orch + ["render", "--check", "--no-shellcheck", "--out", "fresh-{round}"],
        "render --check --no-shellcheck, again": orch + ["render", "--check", "--no-shellcheck"],
        "render, again": orch + ["render"],
    }
    if a.plain_only:
        runs = {k: v for k, v in runs.items() if k in ("dvc stage list", "render, fresh")}
    with tempfile.TemporaryDirectory(prefix="orch-render-bench-") as td:
        root = Path(td)
        make_project(root, a.items)
        times, peaks = timed(runs, root, a.repeat)
        scripts = len(list((root / "plain-1").glob("*")))
        report = profile_render(root) if a.profile else None
    med = {k: statistics.median(v) for k, v in times.items()}
    checked = "render --check --no-shellcheck, fresh" in med
    ratio = med["render --check --no-shellcheck, fresh"] / med["dvc stage list"] if checked else None
    ratio_min = ratio_again = None
    d, m, c = shape(a.items)
    print(
        f"matrix: {a.items} items ({d} datasets x {m} models x {c} device_cfgs), cluster lumi, "
        f"{a.repeat} interleaved timed rounds after 1 warm-up, cold process each"
    )
    peak = {k: max(v) for k, v in peaks.items()}
    print(f"{'command':<38} {'median s':>9} {'min s':>8} {'ms/item':>8} {'peak MB':>8}")
    for label, ts in times.items():
        print(f"{label:<38} {med[label]:>9.3f} {min(ts):>8.3f} {1000 * med[label] / a.items:>8.2f} {peak[label] / 2**20:>8.0f}")
    plain_time = med["render, fresh"] / med["dvc stage list"]
    plain_memory = peak["render, fresh"] / peak["dvc stage list"]
    judged = (
        "bound <= 1 each"
        if a.items >= PLAIN_BOUND_ITEMS
        else f"bound judged at {PLAIN_BOUND_ITEMS:,} items, where start-up is no longer most of it"
    )
    print(f"render (fresh) / dvc stage list: time {plain_time:.2f}, peak memory {plain_memory:.2f} ({judged})")
    print(f"scripts written: {scripts} (expected {a.items})")
    if checked:
        ratio_min = min(times["render --check --no-shellcheck, fresh"]) / min(times["dvc stage list"])
        ratio_again = med["render --check --no-shellcheck, again"] / med["dvc stage list"]
        print(f"ratio render --check (fresh) / dvc stage list (median): {ratio:.2f}  (bound <= {MAX_RATIO}); on min: {ratio_min:.2f}")
        print(f"ratio render --check (again) / dvc stage list (median): {ratio_again:.2f}")
    if report:
        print("\ncProfile, render_matrix + check_rendered(shellcheck=False), in-process, warm:\n" + report.rstrip())
    failures = []
    if scripts != a.items:
        failures.append(f"render wrote {scripts} scripts, expected {a.items}")
    if ratio is not None and ratio > MAX_RATIO:
        failures.append(f"render --check takes {ratio:.2f}x dvc stage list (bound {MAX_RATIO})")
    if a.items >= PLAIN_BOUND_ITEMS and (plain_time > 1 or plain_memory > 1):
        failures.append(f"render takes {plain_time:.2f}x the time and {plain_memory:.2f}x the memory of dvc stage list (bound 1 each)")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / ("render_matrix.json" if a.items == 1000 else f"render_matrix-{a.items}.json")).write_text(
        json.dumps(
            {
                "items": a.items,
                "shape": [d, m, c],
                "repeat": a.repeat,
                "scripts_written": scripts,
                "times_s": times,
                "median_s": med,
                "peak_rss_bytes": peak,
                "render_over_dvc": {"time": plain_time, "peak_memory": plain_memory},
                "ratio": ratio,
                "ratio_min": ratio_min,
                "ratio_again": ratio_again,
                "bound": MAX_RATIO,
                "argv": runs,
                "python": sys.version.split()[0],
                "profile": report,
                "failures": failures,
                "ok": not failures,
            },
            indent=2,
        )
        + "\n"
    )
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
