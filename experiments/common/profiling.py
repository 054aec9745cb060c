"""An optional torch.profiler window over some training steps, summarised as a step-time breakdown and an operator table.

With ``--profile-steps START:COUNT`` a run profiles training steps START to
START+COUNT-1 (0-based; the step before them warms the profiler up) and writes into
its output folder:

- ``profile/breakdown.json``: where a step's wall time went, per category, as the
  PyTorch TensorBoard plugin's "Step Time Breakdown" computes it: every instant of
  the window goes to the highest-priority category active then, in the order of
  :data:`CATEGORIES`; what no event covers is ``other``. So the categories add up
  to the step time and their shares to 1.
- ``profile/operators.json``: per operator, calls and host (total and self) and
  device time per profiled step: what ``orchestrator profile-diff`` compares.
- ``profile/rank<N>.pt.trace.json.gz`` (with ``--profile-trace``): each rank's
  Chrome trace, for chrome://tracing, Perfetto or TensorBoard.

Every rank profiles, so that the ranks stay equally slow and none waits for a
profiled one; only global rank 0 summarises and writes (the traces are per rank).
The profiled steps are slower than the others (and the summary is computed at the
window's end, inside the training loop): compare throughput on unprofiled runs.
The Lightning callback that runs the window is
:class:`experiments.common.callbacks.ProfileWindow`; this module imports no Lightning, so the
commands check their options before they import it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

# Highest priority first: an instant where a kernel runs on the device is kernel
# time whatever the host does meanwhile (the TensorBoard plugin's ProfileRole order).
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "data_loader", "cpu_exec", "other")

_STEP_PREFIX = "ProfilerStep#"
_HOST_KINDS = frozenset({"cpu_op", "user_annotation"})
_RUNTIME_KINDS = frozenset({"cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver"})
# Lower-cased name fragments of collectives: c10d's ops (c10d::allreduce_), the backends'
# annotations (gloo:all_reduce, nccl:all_reduce) and NCCL/RCCL's device kernels
# (ncclDevKernel_AllReduce_...). Not a bare "broadcast": aten::broadcast_tensors is compute.
_COMMUNICATION = ("nccl", "rccl", "gloo:", "c10d::", "allreduce", "all_reduce", "all_gather", "allgather", "reduce_scatter")


@dataclass(frozen=True)
class Window:
    """Training steps ``start`` .. ``start + count - 1`` (0-based global steps)."""

    start: int
    count: int

    @property
    def end(self) -> int:
        """The number of steps a run must have for the window to close."""
        return self.start + self.count

    def __str__(self) -> str:
        return f"{self.start}:{self.count}"


def parse_window(text: str) -> Window:
    """``--profile-steps START:COUNT``, for argparse's ``type=``: its error becomes a usage error (exit 2)."""
    start, sep, count = text.partition(":")
    try:
        window = Window(int(start), int(count)) if sep else None
    except ValueError:
        window = None
    if window is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not START:COUNT (e.g. 5:3: steps 5, 6 and 7)")
    if window.start < 1 or window.count < 1:
        # Step START-1 is the profiler's warm-up: its first recorded step would carry its set-up cost.
        raise argparse.ArgumentTypeError(f"{text!r}: START and COUNT must be at least 1 (the step before START warms the profiler up)")
    return window


def add_options(parser: argparse.ArgumentParser) -> None:
    """The profiling options of an experiment's command line; check them with :func:`problems`."""
    parser.add_argument(
        "--profile-steps",
        type=parse_window,
        metavar="START:COUNT",
        help="profile COUNT training steps from step START (0-based) into OUTPUT/profile/; default: no profiling",
    )
    parser.add_argument("--profile-trace", action="store_true", help="with --profile-steps: also write each rank's Chrome trace")


def problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the profiling options given the run's ``max_steps``: a window must close before the run ends."""
    found = []
    if args.profile_steps is not None and args.profile_steps.end > args.max_steps:
        window = args.profile_steps
        found.append(
            f"--profile-steps {window} needs steps up to {window.end - 1}, "
            f"but --max-steps {args.max_steps} runs steps 0 to {args.max_steps - 1}"
        )
    if args.profile_trace and args.profile_steps is None:
        found.append("--profile-trace needs --profile-steps START:COUNT")
    return found


@dataclass(frozen=True, slots=True)
class Event:
    """One profiler event: ``kind`` is Kineto's activity type (cpu_op, user_annotation, kernel, gpu_memcpy, cuda_runtime...)."""

    name: str
    kind: str
    start_us: float
    end_us: float


def category(event: Event) -> str | None:
    """The breakdown category of an event; None for the step markers and for what has no category (memory events)."""
    name = event.name.lower()
    if event.kind in ("kernel", "gpu_memcpy", "gpu_memset"):
        if any(fragment in name for fragment in _COMMUNICATION):
            return "communication"  # NCCL's kernels: device time spent on collectives
        return {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[event.kind]
    if event.kind in _RUNTIME_KINDS:
        return "runtime"
    if event.kind not in _HOST_KINDS or event.name.startswith(_STEP_PREFIX):
        return None
    loader_next = event.name.startswith("enumerate(DataLoader)#") and event.name.endswith(".__next__")
    if loader_next or event.name.startswith("enumerate(DataPipe)#"):
        return "data_loader"  # the fetch of a batch; the loader's __iter__ and __init__ are host work like any other
    if any(fragment in name for fragment in _COMMUNICATION):
        return "communication"
    return "cpu_exec"


@dataclass(frozen=True)
class Breakdown:
    """Milliseconds per step in each category (all of :data:`CATEGORIES`), averaged over ``steps`` steps."""

    steps: int
    ms_per_step: Mapping[str, float]

    @property
    def step_ms(self) -> float:
        return sum(self.ms_per_step.values())

    def share(self, name: str) -> float:
        return self.ms_per_step[name] / self.step_ms if self.step_ms else 0.0

    def to_json(self) -> dict:
        """The layout of ``profile/breakdown.json``."""
        return {
            "steps": self.steps,
            "step_ms": self.step_ms,
            "categories": {name: {"ms_per_step": self.ms_per_step[name], "share": self.share(name)} for name in CATEGORIES},
        }

    def metrics(self) -> dict:
        """The ``profile`` entry of metrics.json: the step time and each category's percentage of it."""
        return {"step_ms": self.step_ms, "steps": self.steps, **{f"{name}_pct": 100 * self.share(name) for name in CATEGORIES}}


def breakdown(events: Iterable[Event]) -> Breakdown:
    """The step-time breakdown of a profiling window: the ``ProfilerStep#N`` spans and everything that ran meanwhile.

    The window runs from the first step's start to the last step's end, or to the
    end of the last device event that started inside it (kernels still queued when
    the host finished the step belong to it). Events on every thread count; an
    instant goes to the highest-priority category active then (a sweep over the
    events' ends, O(n log n)), and whatever no event covers is ``other``.
    Raises ValueError without step markers.
    """
    events = list(events)
    steps = [e for e in events if e.kind in _HOST_KINDS and e.name.startswith(_STEP_PREFIX)]
    if not steps:
        raise ValueError("no ProfilerStep# events: the profiler recorded no complete step")
    start = min(e.start_us for e in steps)
    host_end = max(e.end_us for e in steps)
    device_end = max(
        (e.end_us for e in events if e.kind in ("kernel", "gpu_memcpy", "gpu_memset") and start <= e.start_us < host_end), default=host_end
    )
    end = max(host_end, device_end)
    rank = {name: i for i, name in enumerate(CATEGORIES)}
    edges = []  # (time, +1/-1, category rank), clipped to the window
    for event in events:
        name = category(event)
        lo, hi = max(event.start_us, start), min(event.end_us, end)
        if name is not None and lo < hi:
            edges += [(lo, 1, rank[name]), (hi, -1, rank[name])]
    edges.sort()
    active = [0] * len(CATEGORIES)
    totals = [0.0] * len(CATEGORIES)
    now = start
    for time, change, which in edges:
        if time > now:
            top = next((i for i, n in enumerate(active) if n), rank["other"])
            totals[top] += time - now
            now = time
        active[which] += change
    totals[rank["other"]] += end - now
    return Breakdown(len(steps), {name: totals[rank[name]] / len(steps) / 1000 for name in CATEGORIES})


def events(prof: torch.profiler.profile) -> list[Event]:
    # A profile whose window has closed (on_trace_ready): its profiler and kineto results are there.
    assert prof.profiler is not None and prof.profiler.kineto_results is not None
    return [Event(e.name(), activity_kind(e), e.start_ns() / 1000, e.end_ns() / 1000) for e in prof.profiler.kineto_results.events()]


# CUDA's and HIP's runtime and driver calls by name (cudaLaunchKernel, cuLaunchKernelEx, hipMemcpyAsync), never
# an operator's (aten::..., a module's): for PyTorch builds whose events do not say their kind.
_RUNTIME_CALL = re.compile(r"(cuda|cu|hip)[A-Z]")


def activity_kind(event) -> str:
    """Kineto's activity type of ``event`` (a ``_KinetoEvent``): ``kernel``, ``cpu_op``, ``cuda_runtime``, ...

    PyTorch 2.12 and later say it (``activity_type()``); the 2.11 of the GPU images
    does not, so there it is told from what the event does say: its device, whether
    it is an annotation, and the names CUDA gives copies, sets and its API calls.
    """
    if hasattr(event, "activity_type"):
        return event.activity_type()
    name = event.name()
    if event.device_type() != torch.autograd.DeviceType.CPU:
        return "gpu_memcpy" if name.startswith("Memcpy") else "gpu_memset" if name.startswith("Memset") else "kernel"
    if event.is_user_annotation():
        return "user_annotation"
    return "cuda_runtime" if _RUNTIME_CALL.match(name) else "cpu_op"


def operators(prof: torch.profiler.profile, steps: int) -> dict[str, dict[str, float]]:
    """Per host operator (annotations such as ProfilerStep# left out), per profiled step; times in microseconds."""
    rows = {}
    for op in prof.key_averages():
        if op.is_user_annotation or op.device_type != torch.autograd.DeviceType.CPU:
            continue
        rows[op.key] = {
            "calls": op.count / steps,
            "host_total_us": op.cpu_time_total / steps,
            "host_self_us": op.self_cpu_time_total / steps,
            "device_total_us": op.device_time_total / steps,
        }
    return dict(sorted(rows.items()))
