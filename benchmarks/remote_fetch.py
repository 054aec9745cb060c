"""`orchestrator fetch` at the size of a real sweep: N finished items brought from the cluster's
project folder to the workstation over ssh, the way issue 20's users fetch a grid search.

An sshd of the benchmark's own on 127.0.0.1 stands in for the login node (root and openssh
needed: the same one as container_build.py's push). The workstation is a git + DVC project
whose matrix stage has N items, each with a cached output folder (``out/I``, FILES files of
SIZE bytes) and an uncached metrics file (``m/I.json``, cache: false, as the shipped pipeline
declares its metrics). It is sent with `orchestrator remote sync`; there, every item's outputs
are made and recorded with `dvc commit` (what a finished run leaves). Then, timed, each in a
fresh process:

* ``fetch`` cold: all N items into the empty workspace (rsync over the session's master);
* ``fetch`` again: everything already there;
* the floor: one plain ``rsync -a`` of the same folders over the same ssh, nothing verified;
* with ``--dvc-remote``, the same on a second project whose committed .dvc/config names a
  default DVC remote (a folder both sides reach): cached outputs through it, metrics by rsync.

After each cold fetch it checks that N stages were fetched, that the local dvc.lock holds the
cluster's entries, and the files' count. Prints one JSON line per variant and writes them all
to ``--json`` (default benchmarks/out/remote_fetch.json).

    python benchmarks/remote_fetch.py --items 1000
    python benchmarks/remote_fetch.py --items 50 --dvc-remote      # a quick look at both routes
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from container_build import loopback_sshd  # noqa: E402

sys.path.insert(0, str(ROOT))
from experiments.common.argtypes import parse_size, positive  # noqa: E402

ACCOUNT = "project_465000858"
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false"]


def run(argv: list[str], cwd: Path, env: dict | None = None, timeout: float = 3600) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed (exit {done.returncode}) in {cwd}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def profile_file(where: Path, host: str, cluster_root: Path) -> Path:
    profile = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    profile["name"] = "bench-cluster"
    profile["login"] = {"host": host, "root": str(cluster_root)}
    path = where / "bench-cluster.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def workstation(where: Path, profile: Path, items: int, dvc_remote: Path | None) -> Path:
    stage = {
        "matrix": {"i": "${items}"},
        "cmd": "python make.py ${item.i}",  # never run here: the cluster's commit stands for its run
        "outs": [{"out/${item.i}": {"persist": True}}],
        "metrics": [{"m/${item.i}.json": {"cache": False, "persist": True}}],
    }
    where.mkdir(parents=True)
    (where / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"item": stage}}, sort_keys=False))
    params = {"orchestrator": {"cluster": str(profile), "account": ACCOUNT}, "items": list(range(items))}
    (where / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (where / "make.py").write_text("import sys\n")
    (where / ".gitignore").write_text(".orchestrator/\n")
    run(["git", "init", "-q"], where)
    run(["dvc", "init", "-q"], where)
    if dvc_remote is not None:
        run(["dvc", "remote", "add", "-d", "shared", str(dvc_remote)], where)
    run(["git", "add", "-A"], where)
    run([*GIT, "commit", "-q", "-m", "the project"], where)
    return where


def finish_there(folder: Path, items: int, files: int, size: int) -> float:
    """Every item's outputs made in the cluster's folder and recorded with `dvc commit`; its seconds."""
    (folder / "m").mkdir(exist_ok=True)
    for i in range(items):
        out = folder / "out" / str(i)
        out.mkdir(parents=True, exist_ok=True)
        for k in range(files):
            (out / f"part{k}.bin").write_bytes(os.urandom(size))
        (folder / "m" / f"{i}.json").write_text(json.dumps({"loss": 1.0 / (i + 1)}) + "\n")
    start = time.perf_counter()
    run(["dvc", "commit", "-f", "-q"], folder)
    return time.perf_counter() - start


def fetch(project: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = run([sys.executable, "-m", "orchestrator", "fetch"], project, env)
    return time.perf_counter() - start, done


def variant(work: Path, name: str, host: str, env: dict, args, shared: bool) -> dict:
    root = work / name
    root.mkdir()
    cluster_root = root / "cluster"
    profile = profile_file(root, host, cluster_root)
    store = root / "dvc-store" if shared else None
    project = workstation(root / "ws" / "proj", profile, args.items, store)
    start = time.perf_counter()
    run([sys.executable, "-m", "orchestrator", "remote", "sync"], project, env)
    sync_s = time.perf_counter() - start
    commit_s = finish_there(cluster_root / "proj", args.items, args.files, args.size)

    cold_s, done = fetch(project, env)
    fetched = [line for line in done.stdout.splitlines() if line.startswith("fetched ")]
    if len(fetched) != args.items:
        raise SystemExit(f"{len(fetched)} of {args.items} items fetched:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    here = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    there = yaml.safe_load((cluster_root / "proj" / "dvc.lock").read_text())["stages"]
    if here != there:
        raise SystemExit("the local dvc.lock differs from the cluster's after the fetch")
    count = sum(1 for _ in (project / "out").rglob("*.bin"))
    if count != args.items * args.files:
        raise SystemExit(f"{count} output files here, {args.items * args.files} expected")
    routes = sorted({line.rsplit("(", 1)[-1].rstrip(")") for line in fetched if "(" in line})
    warm_s, _ = fetch(project, env)
    # The floor: one plain rsync of the same folders over the same ssh (its own connection), nothing verified.
    bare = root / "bare"
    bare.mkdir()
    start = time.perf_counter()
    ssh = env["ORCHESTRATOR_SSH"]
    run(["rsync", "-a", "-s", "-e", ssh, f"{host}:{cluster_root / 'proj'}/out", f"{host}:{cluster_root / 'proj'}/m", f"{bare}/"], root)
    bare_s = time.perf_counter() - start
    return {
        "variant": name,
        "items": args.items,
        "files": args.items * (args.files + 1),
        "bytes": args.items * (args.files * args.size + 20),
        "sync_s": round(sync_s, 2),
        "cluster_commit_s": round(commit_s, 2),
        "fetch_cold_s": round(cold_s, 2),
        "fetch_again_s": round(warm_s, 2),
        "bare_rsync_s": round(bare_s, 2),
        "items_per_s": round(args.items / cold_s, 1),
        "routes": routes[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="remote_fetch.py", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=positive, default=1000, help="items of the matrix (default 1000)")
    parser.add_argument("--files", type=positive, default=2, help="files in each item's cached output folder (default 2)")
    parser.add_argument("--size", type=parse_size, default=4096, help="bytes of each file, e.g. 4K (default 4096)")
    parser.add_argument("--dvc-remote", action="store_true", help="also fetch through a DVC remote both sides share")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/out/remote_fetch.json", help="where the figures go")
    args = parser.parse_args()
    figures = []
    with tempfile.TemporaryDirectory(prefix="remote-fetch-") as tmp:
        work = Path(tmp)
        (work / "sshd").mkdir()
        with loopback_sshd(work / "sshd") as found:
            if found is None:
                raise SystemExit("remote_fetch.py needs root, sshd and rsync (an sshd of its own on 127.0.0.1)")
            host, options = found
            env = {**os.environ, "ORCHESTRATOR_SSH": shlex.join(["ssh", *options])}
            for name, shared in [("rsync", False), *([("dvc-remote", True)] if args.dvc_remote else [])]:
                figure = variant(work, name, host, env, args, shared)
                print(json.dumps(figure), flush=True)
                figures.append(figure)
            subprocess.run(["ssh", *options, "-o", "ControlPath=~/.ssh/orchestrator-%C", "-O", "exit", host], capture_output=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
