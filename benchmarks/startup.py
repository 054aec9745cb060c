"""Start-up cost of the ``orchestrator`` command line.

Measures, for ``--help``, ``--version``, ``clusters``, ``clusters show lumi`` and
``render --cluster lumi --check --no-shellcheck`` (the latter in a temporary copy
of this project):

* the modules imported, from ``python -X importtime -m orchestrator ...``;
* every *attempt* to import torch / lightning, from a ``sys.meta_path`` finder
  installed before ``orchestrator.cli.main()`` runs (meaningful even where torch
  is not installed: importtime only lists imports that succeed);
* the wall time of ``orchestrator --help`` against ``dvc --version``
  (2 warm-up rounds, then N=10 interleaved rounds of cold processes; median, min).

Acceptance bound: none of these commands imports (or tries to import) torch,
lightning, pytorch_lightning or lightning_fabric (numpy is reported, not judged),
and median(orchestrator --help) <= 0.5 x median(dvc --version).

Usage: python benchmarks/startup.py [-n 10]; writes benchmarks/out/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FORBIDDEN = ("torch", "lightning", "pytorch_lightning", "lightning_fabric")
INFO_ONLY = ("numpy",)
COMMANDS = [
    ["--help"],
    ["--version"],
    ["clusters"],
    ["clusters", "show", "lumi"],
    ["render", "--cluster", "lumi", "--check", "--no-shellcheck"],
]
MAX_RATIO = 0.5

# Runs in a fresh interpreter: records any import attempt of a forbidden top-level
# package (find_spec probes included), then runs the CLI with argv[1:].
HOOK = r"""
import json, os, sys
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN_NAMES:
            seen.append(name)
        return None
sys.meta_path.insert(0, Spy())
sys.argv = ["orchestrator"] + sys.argv[1:]
code = 0
try:
    from orchestrator.cli import main
    main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
with open(os.environ["SPY_OUT"], "w") as f:
    json.dump({"attempts": seen, "exit": code}, f)
""".replace("FORBIDDEN_NAMES", repr(FORBIDDEN))


def make_project(tmp: Path) -> None:
    """A copy of this project's pipeline, initialised as a DVC (and git, if present) repo."""
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp / name)
    scm = shutil.which("git") is not None
    if scm:
        subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q", *([] if scm else ["--no-scm"])], cwd=tmp, check=True)
    if (ROOT / ".dvc/config").is_file() and (ROOT / ".dvc/config").read_text().strip():
        shutil.copy(ROOT / ".dvc/config", tmp / ".dvc/config")


def imported_modules(args: list[str], cwd: Path) -> tuple[set[str], int]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "orchestrator", *args], cwd=cwd, capture_output=True, text=True)
    mods = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines() if line.startswith("import time:") and "|" in line}
    mods.discard("imported package")
    return mods, p.returncode


def import_attempts(args: list[str], cwd: Path) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        subprocess.run([sys.executable, "-c", HOOK, *args], cwd=cwd, capture_output=True, env={**os.environ, "SPY_OUT": out})
        return json.loads(Path(out).read_text() or '{"attempts": ["<no report>"], "exit": -1}')
    finally:
        os.unlink(out)


def console(name: str, module: str) -> list[str]:
    """The real console script beside this interpreter (not a pyenv shim), else PATH, else -m."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return [str(beside)]
    found = shutil.which(name)
    return [found] if found else [sys.executable, "-m", module]


def wall(runs: list[list[str]], cwd: Path, n: int, warmup: int = 2) -> list[list[float]]:
    """Wall times per argv; rounds interleave the commands so load drifts hit all alike."""
    times: list[list[float]] = [[] for _ in runs]
    for i in range(warmup + n):
        for argv, ts in zip(runs, times, strict=True):
            t0 = time.perf_counter()
            subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            if i >= warmup:
                ts.append(time.perf_counter() - t0)
    return times


def is_hit(mod: str, roots: tuple[str, ...]) -> bool:
    return mod.split(".")[0] in roots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="timed runs per command (default 10)")
    n = ap.parse_args().n
    failures, rows = [], []
    with tempfile.TemporaryDirectory(prefix="orch-startup-") as td:
        tmp = Path(td)
        make_project(tmp)
        print(f"{'orchestrator ...':<52} {'exit':>4} {'modules':>7}  {'torch/lightning imported / attempted':<38} numpy")
        for args in COMMANDS:
            mods, rc = imported_modules(args, tmp)
            spy = import_attempts(args, tmp)
            bad = sorted(m for m in mods if is_hit(m, FORBIDDEN))
            info = sorted(m for m in mods if is_hit(m, INFO_ONLY))
            cmd = "orchestrator " + " ".join(args)
            rows.append(
                {
                    "command": cmd,
                    "exit": rc,
                    "modules": len(mods),
                    "forbidden_imported": bad,
                    "forbidden_attempted": spy["attempts"],
                    "hook_exit": spy["exit"],
                    "numpy": bool(info),
                }
            )
            seen = f"{','.join(bad) or 'none'} / {','.join(sorted(set(spy['attempts']))) or 'none'}"
            print(f"{' '.join(args):<52} {rc:>4} {len(mods):>7}  {seen:<38} {'yes' if info else 'no'}")
            if rc != 0 or spy["exit"] != 0:
                failures.append(f"{cmd} exited {rc} (hooked run: {spy['exit']})")
            if bad or spy["attempts"]:
                failures.append(f"{cmd} imports {sorted(set(bad + spy['attempts']))}")
        orch, dvc = console("orchestrator", "orchestrator") + ["--help"], console("dvc", "dvc") + ["--version"]
        t_orch, t_dvc = wall([orch, dvc], tmp, n)
    med_o, med_d = statistics.median(t_orch), statistics.median(t_dvc)
    ratio = med_o / med_d
    print(f"\n{f'timing (N={n}, 2 warm-ups)':<36} {'median s':>9} {'min s':>8}")
    for label, ts in (("orchestrator --help", t_orch), ("dvc --version", t_dvc)):
        print(f"{label:<36} {statistics.median(ts):>9.3f} {min(ts):>8.3f}")
    print(f"ratio orchestrator/dvc (median)      {ratio:>9.2f}  (bound <= {MAX_RATIO})")
    if ratio > MAX_RATIO:
        failures.append(f"orchestrator --help takes {ratio:.2f}x dvc --version (bound {MAX_RATIO})")
    result = {
        "commands": rows,
        "timing": {
            "orchestrator_help": {"argv": orch, "times_s": t_orch, "median_s": med_o, "min_s": min(t_orch)},
            "dvc_version": {"argv": dvc, "times_s": t_dvc, "median_s": med_d, "min_s": min(t_dvc)},
            "ratio": ratio,
            "bound": MAX_RATIO,
        },
        "python": sys.version.split()[0],
        "failures": failures,
        "ok": not failures,
    }
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "startup.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
