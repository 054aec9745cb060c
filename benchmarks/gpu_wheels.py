"""Fill .whl/ with what the LM needs on a lent GPU machine beyond the packages it has.

The machine has no internet and its own Python (3.12); gpu_session.sh installs .whl/*.whl
there with --no-deps. What it needs is the installed closure of dvclive (DVC with it) and
torchao here, less the machine's packages (the list the device tool's KINDS.md gives, as a
comma-separated line after "Packages:"), each downloaded as a cp312 manylinux wheel of the
version installed here; a package with no such wheel is built here when it is pure Python
(antlr4-python3-runtime 4.9.3), else taken at its newest binary version (orjson 3.8.3 has no
cp312 wheel).
On 2026-11-27: 66 wheels, 21 MB.

Usage: python benchmarks/gpu_wheels.py PACKAGES_FILE [--out .whl]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOTS = ("dvclive", "torchao")
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux1_x86_64")  # fmt: skip


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """name -> installed version of ``roots`` and everything they require here (no extras)."""
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = norm(todo.pop())
        if name in seen:
            continue
        dist = md.distribution(name)
        seen[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if not req.marker or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def download(spec: str, out: Path) -> bool:
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
            "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(out), spec]  # fmt: skip
    return subprocess.run(argv, capture_output=True).returncode == 0


def build(spec: str, out: Path) -> bool:
    """A pure-Python wheel built here (one without compiled parts fits any Python 3)."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), spec], capture_output=True)
    if done.returncode:
        return False
    name = norm(spec.split("==")[0]).replace("-", "_")
    wheels = [w for w in out.glob("*.whl") if norm(w.name.split("-")[0]).replace("-", "_") == name]
    if any(not w.name.endswith("-py3-none-any.whl") for w in wheels):
        for w in wheels:
            w.unlink()
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packages", type=Path, help="a file whose text after 'Packages:' lists the machine's packages")
    ap.add_argument("--out", type=Path, default=Path(".whl"))
    args = ap.parse_args()
    try:
        text = args.packages.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        ap.error(f"{args.packages}: cannot read it ({exc.strerror if isinstance(exc, OSError) else 'not text'})")
    if "Packages:" not in text:
        ap.error(f"{args.packages}: no 'Packages:' line (the device tool's KINDS.md lists the machine's packages after one)")
    listed = text.split("Packages:", 1)[1].split("\n", 1)[0]
    there = {norm(n.strip().rstrip(".")) for n in listed.split(",") if n.strip()}
    need = {n: v for n, v in closure(ROOTS).items() if n not in there}
    args.out.mkdir(exist_ok=True)
    failed = []
    for name, version in sorted(need.items()):
        if download(f"{name}=={version}", args.out) or build(f"{name}=={version}", args.out) or download(name, args.out):
            continue
        failed.append(name)
    wheels = list(args.out.glob("*.whl"))
    print(f"{len(need)} packages, {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 1e6:.0f} MB in {args.out}")
    if failed:
        print("no wheel for: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
