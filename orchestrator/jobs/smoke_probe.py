"""The smoke probe: what a smoke job runs on every rank in place of the stage's command.

``python probe.py EXPECT.json``. Run by path, inside the job's container, with the job's
interpreter: it imports nothing of the orchestrator (the image need not have it, nor the same
version) and only the standard library, and torch for the collective. ``orchestrator smoke``
copies this file into the project's state folder, which every job sees.

Every check runs, whatever the ones before found, so that every rank reaches the collective (a
rank that stopped early would leave the others waiting for it); each rank writes
``rank-N.json`` with what each check found, waits for the others, and exits 1 if one of its
checks failed.
"""

from __future__ import annotations

import ast
import datetime
import importlib
import importlib.util
import json
import os
import re
import site
import socket
import sys
import time
import traceback

COLLECTIVE_TIMEOUT_S = 60  # within the job's two minutes: a missing rank is named, not a time-out of the job


class Failed(Exception):
    """A check found what the plan does not say."""


def ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank): torchrun's names where set, else Slurm's own."""
    env = os.environ

    def first(*names: str) -> int:
        for name in names:
            if env.get(name, "").isdigit():
                return int(env[name])
        raise Failed(f"none of {', '.join(names)} is set: is this a task of a Slurm job step?")

    return first("RANK", "SLURM_PROCID"), first("WORLD_SIZE", "SLURM_NTASKS"), first("LOCAL_RANK", "SLURM_LOCALID")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list (``nid[005-008,010],x`` -> ``nid005``), as
    ``scontrol show hostnames | head -n 1`` gives it (there is no scontrol in a container)."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist)
    if not match or not match.group(1) and not match.group(2):
        raise Failed(f"cannot read the first host of SLURM_JOB_NODELIST={nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    return prefix + (ranges.split(",")[0].split("-")[0] if ranges else "")


def master() -> tuple[str, int]:
    """Rank 0's address and port: MASTER_ADDR/MASTER_PORT where set, else as Lightning derives
    them on Slurm (the first node; 15000 plus the job id's last four digits)."""
    env = os.environ
    addr = env.get("MASTER_ADDR") or first_host(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "")
    port = env.get("MASTER_PORT") or str(15000 + int(env.get("SLURM_JOB_ID", "0")[-4:] or 0))
    if not port.isdigit():
        raise Failed(f"MASTER_PORT={port!r} is not a port number")
    return addr, int(port)


def check_container(expect: dict) -> str:
    if not expect["container"]:
        return "no container in this profile"
    name = os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")
    if not name:
        raise Failed("not inside a container: neither APPTAINER_CONTAINER nor SINGULARITY_CONTAINER is set")
    missing = []
    for spec in expect["binds"]:
        inside = os.path.expandvars(spec.split(":")[1] if ":" in spec else spec)
        if "$" in inside:
            missing.append(f"{spec} (a variable it names is not set here)")
        elif not os.path.exists(inside):
            missing.append(inside)
    if missing:
        raise Failed(f"in container {name}: bound paths missing inside it: {', '.join(missing)}")
    return f"in container {name}, {len(expect['binds'])} bind(s) present"


def visible_gpus() -> tuple[str, int | None]:
    """(the variable that says, the GPUs it lists); ROCr's first, the lowest level on AMD."""
    for name in ("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        value = os.environ.get(name)
        if value is not None:
            return name, len([d for d in value.split(",") if d.strip()])
    return "", None


def check_devices(expect: dict, local_rank: int) -> str:
    want = expect["visible_gpus"]
    name, seen = visible_gpus()
    if want is None:
        return "GPUs not checked (stand-ins: the processes run on CPU)"
    if seen is None:
        seen = _torch_gpus()
        name = "torch.cuda.device_count()"
    if seen != want:
        raise Failed(f"sees {seen} GPU(s) ({name}), the plan gives each rank {want}")
    if want and local_rank >= seen:
        raise Failed(f"local rank {local_rank} has no GPU of its own among the {seen} it sees ({name})")
    if want:
        found = _torch_gpus()
        if found != want:
            raise Failed(f"{name} lists {seen} GPU(s), but torch finds {found}: is the container's torch built for this GPU?")
    return f"{seen} GPU(s) visible ({name or 'none set'})"


def _torch_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_cpus(expect: dict, local_rank: int) -> str:
    masks = expect["masks"]
    cores = sorted(os.sched_getaffinity(0))
    if not masks:
        return f"runs on {len(cores)} CPU(s) (no mask planned)"
    if local_rank >= len(masks):
        raise Failed(f"local rank {local_rank} has no planned CPU mask (the plan has {len(masks)})")
    planned = int(masks[local_rank], 16)
    want = [c for c in range(planned.bit_length()) if planned >> c & 1]
    if cores != want:
        raise Failed(f"runs on CPUs {_cpulist(cores)}, the plan binds local rank {local_rank} to {_cpulist(want)} ({masks[local_rank]})")
    return f"bound to CPUs {_cpulist(cores)} as planned"


def _cpulist(cores: list[int]) -> str:
    runs: list[list[int]] = []
    for c in cores:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def check_entry(expect: dict) -> str:
    """Import the stage's entry from the run directory (the staged copy, where there is one)
    without running it: a module that guards its main (``if __name__ == "__main__"``) is
    imported; a script, or a module without the guard, has the modules it imports imported."""
    entry = expect["entry"]
    kind, name = entry["kind"], entry["name"]
    here = os.getcwd()
    if kind == "none":
        return f"not checked: {name}"
    if kind == "script":
        path = os.path.join(here, name)
        if not os.path.isfile(path):
            raise Failed(f"script {name} is not in {here}{_staged_hint(expect)}")
        sys.path.insert(0, os.path.dirname(path))
        return _imports_of(path, None, expect)
    sys.path.insert(0, here)  # as `python -m` puts the working directory first
    try:
        spec = importlib.util.find_spec(name)
    except ImportError as exc:
        raise Failed(f"cannot import {name}: {exc}{_staged_hint(expect)}") from None
    if spec is None or not spec.origin:
        raise Failed(f"no module named {name!r} in {here}{_staged_hint(expect)}")
    origin, package = spec.origin, name
    if spec.submodule_search_locations is not None:  # `python -m pkg` runs pkg/__main__.py
        origin = os.path.join(os.path.dirname(origin), "__main__.py")
        name = f"{name}.__main__"
        if not os.path.isfile(origin):
            raise Failed(f"package {package} has no __main__.py to run with -m")
    else:
        package = name.rpartition(".")[0]
    _from_run_dir(origin, expect)
    if _guarded(origin):
        importlib.import_module(name)
        return f"imported {name} from {origin}"
    return _imports_of(origin, package, expect)


def _from_run_dir(origin: str, expect: dict) -> None:
    """The entry must come from the folder the job runs in (the staged copy, where there is one) or
    be installed (the image's packages): a copy elsewhere that PYTHONPATH puts first (the project
    itself, under staging; another checkout) is not the code the stage declares."""
    here, path = os.path.realpath(os.getcwd()), os.path.realpath(origin)
    installed = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    if any(path.startswith(os.path.realpath(d) + os.sep) for d in (here, *installed)):
        return
    where = "the staged copy" if expect["staged"] else "the stage's folder"
    inherited = f" (PYTHONPATH={os.environ['PYTHONPATH']} puts it first)" if os.environ.get("PYTHONPATH") else ""
    raise Failed(f"{origin} was imported, not the file in {where} {here}{inherited}")


def _staged_hint(expect: dict) -> str:
    return " (the staged copy holds the stage's deps only: is it one of them?)" if expect["staged"] else ""


def _guarded(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.dump(node.test) and "__main__" in ast.dump(node.test):
            return True
    return False


def _imports_of(path: str, package: str | None, expect: dict) -> str:
    """Import every module the file's top-level import statements name (optional ones, in a
    try block, are left alone)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names: list[tuple[str, str | None]] = []  # (module, a name imported from it)
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names += [(module, a.name) for a in node.names if a.name != "*"]
    done = []
    for module, attr in names:
        try:
            mod = importlib.import_module(module, package) if module.startswith(".") else importlib.import_module(module)
            if attr is not None and not hasattr(mod, attr):
                importlib.import_module(f"{mod.__name__}.{attr}")
        except ImportError as exc:
            where = f"{os.path.basename(path)} imports {module}{f' ({attr})' if attr else ''}"
            raise Failed(f"{where}: {type(exc).__name__}: {exc}{_staged_hint(expect)}") from None
        done.append(module)
    return f"{len(done)} import(s) of {os.path.relpath(path)} resolved"


def check_collective(expect: dict, rank: int, world: int, local_rank: int) -> tuple[str, object]:
    """One all_reduce over every rank: the sum of 1..world. Returns (message, the group's module)."""
    import torch
    import torch.distributed as dist

    if world != expect["world_size"]:
        raise Failed(f"the job step has {world} ranks, the plan {expect['world_size']}")
    addr, port = master()
    backend = expect["backend"]
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    started = time.monotonic()
    dist.init_process_group(
        backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    )
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    want = world * (world + 1) / 2
    if value.item() != want:
        raise Failed(f"all_reduce over {world} ranks ({backend}) gave {value.item():g}, not {want:g}")
    return f"all_reduce over {world} ranks ({backend} via {addr}:{port}) in {time.monotonic() - started:.1f} s", dist


def main(argv: list[str]) -> int:
    started = time.monotonic()
    del sys.path[0]  # this file's folder (the state folder): never where the stage's modules come from
    with open(argv[1], encoding="utf-8") as f:
        expect = json.load(f)
    result: dict = {"node": socket.gethostname(), "checks": []}
    rank = world = local_rank = -1
    dist = None

    def run(name: str, check) -> None:
        nonlocal dist
        try:
            message = check()
            if isinstance(message, tuple):
                message, dist = message
            result["checks"].append({"check": name, "ok": True, "message": message})
        except Failed as exc:
            result["checks"].append({"check": name, "ok": False, "message": str(exc)})
        except BaseException as exc:  # an entry module may raise anything, even SystemExit, on import
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
            result["checks"].append({"check": name, "ok": False, "message": f"{type(exc).__name__}: {exc}{where}"})

    def read_ranks() -> str:
        nonlocal rank, world, local_rank
        rank, world, local_rank = ranks()
        return f"rank {rank} of {world}, local rank {local_rank}"

    run("ranks", read_ranks)
    if rank < 0:
        rank = int(os.environ.get("SLURM_PROCID", "0"))
    run("container", lambda: check_container(expect))
    run("devices", lambda: check_devices(expect, local_rank))
    run("cpus", lambda: check_cpus(expect, local_rank))
    run("entry", lambda: check_entry(expect))
    run("collective", lambda: check_collective(expect, rank, world, local_rank))
    ok = all(c["ok"] for c in result["checks"])
    result.update(rank=rank, ok=ok, seconds=round(time.monotonic() - started, 1))
    os.makedirs(expect["results"], exist_ok=True)
    path = os.path.join(expect["results"], f"rank-{rank}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"smoke rank {rank}: {'passed' if ok else 'FAILED'}", *(f"  {c['check']}: {c['message']}" for c in result["checks"]), sep="\n")
    if dist is not None:
        # Every rank's result is written before any rank exits: a failing rank's exit makes srun kill the others.
        try:
            dist.barrier()
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the results are written; the verdict is theirs
            pass
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
