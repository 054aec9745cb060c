"""GPU energy measured during training, without slowing it: a Lightning callback.

Each rank reads its own device from a background thread (about once a second; the
training loop never waits for it) and integrates power over time; at the end of
``fit`` the ranks sum their energies with one all-reduce, and :meth:`PowerMonitor.metrics`
returns what the experiment merges into ``metrics.json``:

- ``gpu_energy_j``: the job's GPUs together, joules, while ``fit`` ran (start-up,
  data loading before fit and the final save are outside); None when nothing was read;
- ``gpu_power_mean_w``: mean power per measured device;
- ``power_source``: how it was read (below), or ``none`` (CPU runs, no sensor);
- ``power_devices``: how many ranks read a sensor.

Sensors, the first that answers wins:

``nvml-energy``
    NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, Volta and
    newer): exact, two reads suffice.
``nvml``
    NVML's power reading (``nvmlDeviceGetPowerUsage``, mW), sampled.
``torch``
    ``torch.cuda.power_draw`` (NVML on NVIDIA, AMD SMI on ROCm), sampled. On ROCm it
    returned watts, not the documented mW, in torch releases up to at least 2.13
    (pytorch#197553 converts it): a ROCm reading below 10,000 is taken as W, since
    an accelerator drawing under 10 W while training is not plausible.
``rocm-smi``
    ``rocm-smi --showpower --json``, every 5 s (a process per read). The card is the
    rank's device mapped through ``ROCR_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES``.

On MI250X the secondary die of each module reports no power ("N/A"); the primary
reports the whole module, so the job's sum is right when both dies of a module are
in the job, and ``power_devices`` counts only the primaries.

A requeued run resumes with the energy of the earlier runs from the checkpoint.
That state is rank 0's (only rank 0 writes checkpoints), so earlier runs count as
rank 0's energy on every rank; ``power_note`` says so when it happened.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pytorch_lightning as pl
import torch

_PLAUSIBLE_MW = 10_000  # below this, a ROCm torch.cuda.power_draw reading is in W


@dataclass(frozen=True)
class Sensor:
    name: str  # the power_source written to the metrics
    kind: Literal["power", "energy"]  # watts now, or a joules counter
    read: Callable[[], float | None]  # None: no reading this time
    interval_s: float = 1.0


def integrate(samples: Sequence[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) samples: the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(samples))


class Sampler:
    """Reads one sensor from a daemon thread until stopped."""

    def __init__(self, sensor: Sensor, clock: Callable[[], float] = time.monotonic) -> None:
        self.sensor = sensor
        self.clock = clock
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def start(self) -> None:
        self._started = self.clock()
        self._take()
        self._thread = threading.Thread(target=self._loop, name="power-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.sensor.interval_s):
            self._take()

    def _take(self) -> None:
        try:
            value = self.sensor.read()
        except Exception:  # noqa: BLE001 - a sensor that fails mid-run loses a sample, never the training
            value = None
        if value is not None:
            self.samples.append((self.clock(), value))

    def stop(self) -> tuple[float | None, float]:
        """Stop; the energy in J (None without two readings) and the seconds it covers."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take()
        if len(self.samples) < 2:
            return None, self.clock() - self._started
        duration = self.samples[-1][0] - self.samples[0][0]  # the span the energy covers
        if self.sensor.kind == "energy":
            return self.samples[-1][1] - self.samples[0][1], duration
        return integrate(self.samples), duration


class PowerMonitor(pl.Callback):
    """Samples the rank's GPU while ``fit`` runs; :meth:`metrics` after ``fit`` (every rank calls fit)."""

    def __init__(self, interval_s: float = 1.0, sensor: Sensor | None = None) -> None:
        self.interval_s = interval_s
        self._given = sensor
        self._sampler: Sampler | None = None
        self._earlier_j = 0.0  # earlier runs of a requeued job (from the checkpoint)
        self._result: dict[str, Any] = {"gpu_energy_j": None, "gpu_power_mean_w": None, "power_source": "none", "power_devices": 0}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sensor = self._given or find_sensor(pl_module.device, self.interval_s)
        if sensor is not None:
            self._sampler = Sampler(sensor)
            self._sampler.start()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        energy, duration = self._sampler.stop() if self._sampler is not None else (None, 0.0)
        measured = energy is not None
        # One all-reduce for the four sums (every rank calls on_fit_end).
        own = torch.tensor(
            [energy or 0.0, self._earlier_j if measured else 0.0, duration if measured else 0.0, float(measured)],
            dtype=torch.float64,
            device=pl_module.device,
        )
        this_run_j, earlier_j, seconds, devices = (float(x) for x in trainer.strategy.reduce(own, reduce_op="sum").cpu())
        if not devices:
            return  # the result stays "none"
        self._result = {
            "gpu_energy_j": this_run_j + earlier_j,
            "gpu_power_mean_w": this_run_j / seconds if seconds > 0 else None,
            "power_source": self._sampler.sensor.name if self._sampler is not None and measured else "partial",
            "power_devices": int(devices),
        }
        if earlier_j:
            self._result["power_note"] = "includes earlier runs of the requeued job, counted as rank 0's energy on every rank"

    def state_dict(self) -> dict[str, Any]:
        energy = None
        if self._sampler is not None and len(self._sampler.samples) >= 2:
            s = self._sampler.samples
            energy = s[-1][1] - s[0][1] if self._sampler.sensor.kind == "energy" else integrate(s)
        return {"energy_j": self._earlier_j + (energy or 0.0)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._earlier_j = float(state_dict.get("energy_j", 0.0))

    def metrics(self) -> dict[str, Any]:
        """What to merge into metrics.json (after fit)."""
        return dict(self._result)


# --- sensors ---------------------------------------------------------------------


def find_sensor(device: torch.device, interval_s: float = 1.0) -> Sensor | None:
    """The first sensor that reads ``device`` (a CUDA/ROCm device), or None (CPU, or nothing answers)."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    for make in (_nvml, _torch_power, _rocm_smi):
        try:
            sensor = make(index, interval_s)
        except Exception:  # noqa: BLE001 - a missing library or an unsupported query: try the next
            sensor = None
        if sensor is not None and sensor.read() is not None:
            return sensor
    return None


def _nvml(index: int, interval_s: float) -> Sensor | None:
    if torch.version.hip:
        return None
    import pynvml

    pynvml.nvmlInit()
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    # NVML numbers devices physically; CUDA_VISIBLE_DEVICES renumbers them: match by UUID.
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return Sensor("nvml-energy", "energy", lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000, interval_s)
    except pynvml.NVMLError:
        return Sensor("nvml", "power", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, interval_s)


def _torch_power(index: int, interval_s: float) -> Sensor | None:
    if not hasattr(torch.cuda, "power_draw"):
        return None
    hip = bool(torch.version.hip)
    return Sensor("torch", "power", lambda: torch_watts(torch.cuda.power_draw(index), hip), interval_s)


def torch_watts(value: float, hip: bool) -> float | None:
    """W from ``torch.cuda.power_draw`` (mW on NVIDIA; W or mW on ROCm, see the module doc); None for no reading."""
    if value is None or value <= 0:
        return None
    return value / 1000 if not hip or value >= _PLAUSIBLE_MW else float(value)


def _rocm_smi(index: int, interval_s: float) -> Sensor | None:
    tool = shutil.which("rocm-smi")
    card = physical_index(index, os.environ)
    if tool is None or card is None:
        return None

    def read() -> float | None:
        done = subprocess.run([tool, "--showpower", "--json"], capture_output=True, text=True, timeout=30, check=False)
        return rocm_smi_watts(done.stdout, card) if done.returncode == 0 else None

    return Sensor("rocm-smi", "power", read, max(interval_s, 5.0))


def physical_index(logical: int, env: Mapping[str, str]) -> int | None:
    """The physical GPU behind the process's ``logical`` device (HIP's list indexes ROCr's), or None."""
    index = logical
    for var in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        listed = [x.strip() for x in env.get(var, "").split(",") if x.strip()]
        if not listed:
            continue
        if index >= len(listed) or not listed[index].isdigit():
            return None  # UUIDs or a short list: cannot tell which card
        index = int(listed[index])
    return index


def rocm_smi_watts(text: str, card: int) -> float | None:
    """The power of ``card`` from ``rocm-smi --showpower --json`` (None: N/A, e.g. a secondary die)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    entry = data.get(f"card{card}") if isinstance(data, dict) else None
    for key, value in (entry or {}).items():
        if "Power" in key and "(W)" in key:
            try:
                return float(value)
            except (TypeError, ValueError):
                return None
    return None
