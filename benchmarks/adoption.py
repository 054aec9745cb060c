"""Adopting the orchestrator in a DVC project of one's own : the tool's own time, and what a person types.

A fresh DVC project (not this repository, one trivial stage) with the orchestrator installed from
its built wheel in a clean venv (--system-site-packages: DVC and the other dependencies this
interpreter's, as on a machine that already has DVC). Timed, each as the docs give it:
`orchestrator init --wrap-all`, `orchestrator render --check` and `dvc repro` (through the
orchestrator), less the same stage's `dvc repro` without it; `dvc metrics show` is shown, not counted. The
wheel's build and install are timed apart (a one-off, not adoption). The bound: the tool's own
time under a minute.

A person's time (under ten minutes) cannot be measured by a script: the figure here is the count
of commands the person types after installing, from docs/get-started/local-run.md, to be judged
with the docs, not timed.

Usage: python benchmarks/adoption.py [--out FILE]
Writes benchmarks/out/adoption.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BOUND_S = 60.0

# The project the fresh-project test proves (tests/integration/local/test_fresh_project_from_wheel.py),
# timed here on the same files: its train.py and dvc.yaml.
sys.path.insert(0, str(ROOT / "tests"))
_spec = importlib.util.spec_from_file_location("fresh_project", ROOT / "tests/integration/local/test_fresh_project_from_wheel.py")
assert _spec and _spec.loader
_fresh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fresh)
TRAIN: str = _fresh.TRAIN
DVC_YAML: str = _fresh.DVC_YAML
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
# What a person types once the tool is installed and their DVC project exists, as docs/get-started/local-run.md
# gives it (its `cat` and `ls` only look). This script runs `init --wrap-all`, which does init and the wrap in one.
TYPED = [
    "orchestrator init",
    "orchestrator init --wrap train",
    "orchestrator render --check",
    'git add -A && git commit -q -m "Run train through the orchestrator"',
    "dvc repro",
    "dvc metrics show",
]


def run(argv: list[str], cwd: Path, env: dict) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return took


def project(where: Path, env: dict) -> Path:
    where.mkdir(parents=True)
    (where / "train.py").write_text(TRAIN)
    (where / "dvc.yaml").write_text(DVC_YAML)
    (where / "params.yaml").write_text("train:\n  lr: 0.25\n")
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "mine"]):
        run(argv, where, env)
    return where


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "out" / "adoption.json")
    args = ap.parse_args()
    if not shutil.which("shellcheck"):
        print("shellcheck is needed (render --check runs it)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="adoption-"))
    try:
        wheels, venv = tmp / "wheels", tmp / "venv"
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)], check=True, timeout=600)
        (wheel,) = wheels.glob("*.whl")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
        subprocess.run([venv / "bin/python", "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
        install_s = time.monotonic() - started
        env = {**os.environ, **GIT_ENV, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        env.pop("PYTHONPATH", None)

        # The stage's own work: the same project's dvc repro without the orchestrator.
        plain = project(tmp / "plain", env)
        plain_repro_s = run(["dvc", "repro"], plain, env)

        mine = project(tmp / "my-project", env)
        steps = {
            "init --wrap-all": run(["orchestrator", "init", "--wrap-all"], mine, env),
            "render --check": run(["orchestrator", "render", "--check"], mine, env),
            "dvc repro": run(["dvc", "repro"], mine, env),
            "dvc metrics show": run(["dvc", "metrics", "show"], mine, env),
        }
        if json.loads((mine / "metrics.json").read_text()) != {"score": 0.5}:
            raise SystemExit("the wrapped stage did not write its metrics")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # DVC's own `metrics show` is not the tool's: shown, not counted.
    gross_s = sum(took for step, took in steps.items() if step != "dvc metrics show")
    # Less the plain stage's repro: on a busy machine that one can take longer than the wrapped one, so the
    # gross figure (an upper bound: it holds DVC's own repro too) is what the bound is judged on.
    tool_s = gross_s - plain_repro_s
    result = {
        "wheel_build_and_install_s": round(install_s, 2),
        "steps_s": {k: round(v, 2) for k, v in steps.items()},
        "plain_dvc_repro_s": round(plain_repro_s, 2),
        "tool_s": round(tool_s, 2),
        "tool_gross_s": round(gross_s, 2),
        "bound_s": BOUND_S,
        "within_bound": gross_s < BOUND_S,
        "typed_commands": TYPED,
        "typed_count": len(TYPED),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wheel built and installed in a clean venv: {install_s:.1f} s (once, not adoption)")
    for name, took in steps.items():
        print(f"  {name:<18} {took:6.1f} s")
    print(f"  {'dvc repro, plain':<18} {plain_repro_s:6.1f} s  (the stage without the orchestrator)")
    print(f"the tool's own time: {tool_s:.1f} s less the plain stage; {gross_s:.1f} s with it, an upper bound")
    print(f"bound {BOUND_S:.0f} s, judged on the upper bound: {'met' if gross_s < BOUND_S else 'NOT met'}")
    print(f"commands a person types after installing: {len(TYPED)} ({'; '.join(TYPED)})")
    print(f"wrote {args.out}")
    return 0 if gross_s < BOUND_S else 1


if __name__ == "__main__":
    sys.exit(main())
