"""The machine a local profile runs on: its cores and GPUs, found without importing torch.

The CLI's render and run paths must stay light, so GPUs are counted the way the
vendors' own tools count them (``nvidia-smi``, ``rocm-smi``), narrowed by the
visible-devices variables a launcher or the user set, which torch honours too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.util.runner import Runner

# What each vendor's runtime honours; CUDA_VISIBLE_DEVICES also narrows HIP's view.
VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_TOOL_TIMEOUT_S = 20.0  # nvidia-smi takes seconds while a driver initialises; a hung one must not hang render

# Dense bf16 TFLOP/s per device (no sparsity), by a substring of the device's name, most
# specific first: NVIDIA's and AMD's datasheets. The local profile's MFU is measured
# against it; an unknown device gets no peak (and no MFU) rather than a guess.
KNOWN_PEAKS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.5),
    ("H100 NVL", 835.5),
    ("H200", 989.4),
    ("H100", 989.4),
    ("A100", 312.0),
    ("L40S", 362.1),
    ("MI300X", 1307.4),
    ("MI250X", 191.5),  # per GCD, as Slurm and torch count devices
)


@dataclass(frozen=True)
class Machine:
    cores: int  # the cores this process may run on (its affinity), not the machine's total
    gpus: int = 0
    gpu_model: str | None = None
    source: str = "no nvidia-smi or rocm-smi found"  # how the GPUs were counted, for messages

    @property
    def peak_tflops_bf16(self) -> float | None:
        return peak_of(self.gpu_model) if self.gpu_model else None

    def describe(self) -> str:
        if not self.gpus:
            return f"no GPU here ({self.source})"
        model = f"{self.gpu_model}, " if self.gpu_model else ""
        return f"{self.gpus} GPU(s) here ({model}{self.source})"


def peak_of(model: str) -> float | None:
    return next((tflops for key, tflops in KNOWN_PEAKS if key in model), None)


def detect(runner: Runner, environ: Mapping[str, str] | None = None) -> Machine:
    environ = os.environ if environ is None else environ
    names, source = _vendor_gpus(runner)
    narrowed = _visible(environ)
    if narrowed is not None:
        var, count = narrowed
        if names is None:  # no vendor tool: the variable is all there is to go by
            return Machine(_cores(), count, None, f"{var}, no vendor tool found")
        names, source = names[:count], f"{source}, narrowed by {var}"
    names = names or []
    return Machine(_cores(), len(names), names[0] if names else None, source)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what taskset, cgroups or a batch job left us
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _vendor_gpus(runner: Runner) -> tuple[list[str] | None, str]:
    """The devices' names by the vendor tool that is installed, or None with no tool."""
    if runner.which("nvidia-smi"):
        out = _ask(runner, ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        # No driver loaded, or no device: the tool exits non-zero; either way no GPU to use.
        return [line.strip() for line in (out or "").splitlines() if line.strip()], "counted by nvidia-smi"
    if runner.which("rocm-smi"):
        out = _ask(runner, ["rocm-smi", "--showproductname", "--csv"])
        names = []
        for line in (out or "").splitlines():
            if re.match(r"card\d+,", line):
                fields = line.split(",")
                names.append(next((f.strip() for f in fields[1:] if f.strip()), "AMD GPU"))
        return names, "counted by rocm-smi"
    return None, "no nvidia-smi or rocm-smi found"


def _ask(runner: Runner, argv: list[str]) -> str | None:
    try:
        done = runner.run(argv, timeout=_TOOL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a broken or hung tool means no usable GPU, never a failed render
        return None
    return done.stdout if done.returncode == 0 else None


def _visible(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """(variable, devices it leaves) for the narrowest visible-devices variable that is set."""
    found = []
    for var in VISIBLE_VARS:
        if var not in environ:
            continue
        value = environ[var].strip()
        # CUDA stops at the first entry that is not a device ("-1" hides all of them).
        entries = []
        for entry in value.split(",") if value else []:
            entry = entry.strip()
            if not entry or entry.startswith("-") or entry == "NoDevFiles":
                break
            entries.append(entry)
        found.append((var, len(entries)))
    return min(found, key=lambda f: f[1]) if found else None
