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

With --image, the same fresh project then builds an image from init's own containers/images.yaml,
as docs/how-to/images.md tells it: the `ci` example uncommented (a CPU image, Debian from a mirror,
no registry), a pyproject.toml whose train extra is this repository's, `orchestrator container
build ci` (Apptainer, minutes; the definition template is the wheel's copy), then `apptainer exec`
of the image importing torch and Lightning. Its content hash is compared with this repository's
`ci` image (the same definition and values, so the same hash: the suite's CI image is this one).
Not part of the bound.

Usage: python benchmarks/adoption.py [--image] [--out FILE]
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

# docs/how-to/images.md's command that uncomments init's `ci` example (its four lines).
UNCOMMENT_CI = ["sed", "-i", "/^#   ci:$/,/^#     mirror:/ s/^#   //", "containers/images.yaml"]
IMPORTS = "import torch, pytorch_lightning; print(torch.__version__, pytorch_lightning.__version__)"
BUILD_TIMEOUT_S = 3600


def run(argv: list[str], cwd: Path, env: dict, timeout: float = 600) -> float:
    return run_out(argv, cwd, env, timeout)[0]


def run_out(argv: list[str], cwd: Path, env: dict, timeout: float = 600) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return took, done.stdout


def project(where: Path, env: dict) -> Path:
    where.mkdir(parents=True)
    (where / "train.py").write_text(TRAIN)
    (where / "dvc.yaml").write_text(DVC_YAML)
    (where / "params.yaml").write_text("train:\n  lr: 0.25\n")
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "mine"]):
        run(argv, where, env)
    return where


def image(mine: Path, env: dict) -> dict:
    """The `ci` image of init's images.yaml built in the fresh project, and what it is (see the module's docstring)."""
    from orchestrator.containers.inputs import current_hash, train_requirements

    listed = "".join(f"    {json.dumps(r)},\n" for r in train_requirements(ROOT))
    (mine / "pyproject.toml").write_text(
        f'[project]\nname = "my-project"\nversion = "0.1.0"\n\n[project.optional-dependencies]\ntrain = [\n{listed}]\n'
    )
    run(UNCOMMENT_CI, mine, env)
    probe = (
        "from pathlib import Path; from orchestrator.containers import images, inputs; "
        "print(images.select(Path('.'), 'ci').template); print(inputs.current_hash(Path('.'), 'ci'))"
    )
    _, said = run_out(["python", "-c", probe], mine, env)
    template, chash = said.split()
    build_s, built = run_out(["orchestrator", "container", "build", "ci"], mine, env, timeout=BUILD_TIMEOUT_S)
    sif = mine / ".orchestrator/images/ci.sif"
    _, versions = run_out(["apptainer", "exec", str(sif), "python", "-c", IMPORTS], mine, env)
    stamp = json.loads((mine / ".orchestrator/images/ci.sif.json").read_text())
    repository = current_hash(ROOT, "ci")
    return {
        "template": template,
        "content_hash": chash,
        "built_content_hash": stamp["content_hash"],
        "repository_ci_content_hash": repository,
        "same_as_repository_ci": chash == repository == stamp["content_hash"],
        "build_s": round(build_s, 1),
        "size_mib": round(sif.stat().st_size / 2**20),
        "imports": versions.strip(),
        "said": built.strip().splitlines()[-1:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "out" / "adoption.json")
    ap.add_argument("--image", action="store_true", help="also build init's `ci` image in the fresh project (Apptainer, minutes)")
    args = ap.parse_args()
    if not shutil.which("shellcheck"):
        print("shellcheck is needed (render --check runs it)", file=sys.stderr)
        return 2
    if args.image and not shutil.which("apptainer"):
        print("--image needs Apptainer", file=sys.stderr)
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
        built = image(mine, env) if args.image else None
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
    if built:
        result["image"] = built
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wheel built and installed in a clean venv: {install_s:.1f} s (once, not adoption)")
    for name, took in steps.items():
        print(f"  {name:<18} {took:6.1f} s")
    print(f"  {'dvc repro, plain':<18} {plain_repro_s:6.1f} s  (the stage without the orchestrator)")
    print(f"the tool's own time: {tool_s:.1f} s less the plain stage; {gross_s:.1f} s with it, an upper bound")
    print(f"bound {BOUND_S:.0f} s, judged on the upper bound: {'met' if gross_s < BOUND_S else 'NOT met'}")
    print(f"commands a person types after installing: {len(TYPED)} ({'; '.join(TYPED)})")
    if built:
        same = "the same as" if built["same_as_repository_ci"] else "NOT the same as"
        print(f"image ci from init's images.yaml ({built['template']}): built in {built['build_s']:.0f} s, {built['size_mib']} MiB")
        print(f"  torch, pytorch_lightning in it: {built['imports']}; content hash {same} this repository's ci image")
    print(f"wrote {args.out}")
    return 0 if gross_s < BOUND_S and (not built or built["same_as_repository_ci"]) else 1


if __name__ == "__main__":
    sys.exit(main())
