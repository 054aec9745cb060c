"""The environment every task of a job gets: the profile's variables, the orchestrator's
``ORCH_*``, thread counts, compile caches and the per-item folder on fast storage."""

from __future__ import annotations

import functools
import hashlib

from orchestrator.config.profile_schema import Profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import devices
from orchestrator.scripts.devices import Devices
from orchestrator.scripts.interned import shared
from orchestrator.scripts.quoting import Shell, quote, quote_runtime


def environment(
    p: Profile, job: JobSpec, item: str, tasks: int, name: str, cpus_per_task: int, device: Devices, workspace: str
) -> tuple[tuple[str, Shell], ...]:
    # A CPU job's threads are its --cpus, whatever the profile sets for the GPU jobs' tasks.
    own_threads = job.cpus is not None
    variables = sorted((k, v) for k, v in p.environment.variables.items() if not (own_threads and k == "OMP_NUM_THREADS"))
    env: list[tuple[str, Shell]] = [(k, quote_runtime(v)) for k, v in variables]
    if device.hide_gpus:
        env += [(var, quote("")) for var in devices.HIDE_GPUS]
    if own_threads or "OMP_NUM_THREADS" not in p.environment.variables:
        # One OpenMP thread per core the task owns: left unset, every task starts one
        # per core of the node, and oversubscribed OpenMP spins (10x slower steps seen
        # on a loaded 2-core machine).
        env.append(("OMP_NUM_THREADS", quote(cpus_per_task or max(1, p.node.cores // tasks))))
    env += [
        ("ORCH_ITEM", quote(item)),
        ("ORCH_PROFILE", quote(p.name)),
        ("ORCH_NUM_NODES", quote(job.nodes)),
        ("ORCH_DEVICES", quote(tasks)),
        # The training's --accelerator default (experiments.common.args): never `auto` in a job.
        ("ORCH_ACCELERATOR", quote(device.accelerator)),
    ]
    if p.uses_slurm and p.requeue_signal_name:
        env.append(("ORCH_REQUEUE_SIGNAL", quote(p.requeue_signal_name)))
    peak = p.node.gpu.peak_tflops_bf16 if p.node.gpu else device.peak_tflops_bf16
    if peak and device.accelerator == "gpu":
        # The training's MFU against the profile's (or this machine's GPU's) peak, as the report computes it.
        env.append(("ORCH_PEAK_TFLOPS", quote(f"{peak:g}")))
    for var in compile_caches(p):
        env.append((var, Shell(quote_runtime(p.storage.compile_cache or "") + quote(COMPILE_CACHES[var]))))
    if p.storage.workdir_root:
        # Per item and per workspace: the same item of two clones, or of two DVC experiments
        # running at once (each in its own copy under .dvc/tmp/exps/), never shares a folder.
        env.append(("ORCH_WORKDIR", Shell(quote_runtime(p.storage.workdir_root) + quote(f"/{name}.{workspace_tag(workspace)}"))))
    return tuple(pair if pair[0] in _PER_ITEM else shared(pair) for pair in env)


_PER_ITEM = ("ORCH_ITEM", "ORCH_WORKDIR")


@functools.lru_cache(maxsize=64)
def workspace_tag(workspace: str) -> str:
    """A short hash of the workspace's path, in the names of its per-item folders on shared storage."""
    return hashlib.sha256(workspace.encode("utf-8", "surrogatepass")).hexdigest()[:8]


# torch.compile's cache variables, each under the profile's storage.compile_cache.
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "/inductor", "TRITON_CACHE_DIR": "/triton"}


def compile_caches(p: Profile) -> tuple[str, ...]:
    """The cache variables the plan sets: those the profile's own variables leave unset."""
    if not p.storage.compile_cache:
        return ()
    return tuple(v for v in COMPILE_CACHES if v not in p.environment.variables)  # the environment's values that differ between items
