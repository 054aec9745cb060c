"""Parallel layouts: the ways to split a transformer over GPUs, and what each one costs.

Pure arithmetic (no I/O, no clock, no torch): a model shape and the hardware become
every (data, tensor, pipeline) decomposition times ZeRO stage 0-3, each with its
memory per GPU and a predicted communication time per training step. The feasible
ones come back ranked, and every rejected one says why. `orchestrator layout`
(:mod:`orchestrator.cli.layout`) prints them.

What each layout costs (memory, communication, the pipeline's bubble) and the papers the
formulas come from: :mod:`~orchestrator.analysis.layout_costs`. Here: every layout of the
hardware, why a rejected one is rejected, and the ranking.

Ranking: predicted communication time plus the bubble's time, then the bubble fraction,
then memory per GPU. That is AxoNN's approach (Singh et al., SC24; seed 003): a model of
the collectives ranks the decompositions, here with the simpler 3-D ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.analysis.layout_costs import (
    ACTIVATION_BYTES,
    ADAM_K,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_INTER_NODE_GBPS,
    DEFAULT_INTRA_NODE_GBPS,
    DEFAULT_SEQ_LEN,
    DEFAULT_VOCAB,
    GB,
    GRADIENT_BYTES,
    RECOMPUTE,
    WEIGHT_BYTES,
    ZERO_STAGES,
    Comm,
    Hardware,
    Link,
    Memory,
    ModelShape,
    Recompute,
    activations_gb,
    communication,
    gb,
    human_count,
    model_states,
    ring_allreduce_s,
)
from orchestrator.errors import PlanError

__all__ = [
    "ACTIVATION_BYTES",
    "ADAM_K",
    "Comm",
    "DEFAULT_GLOBAL_BATCH",
    "DEFAULT_INTER_NODE_GBPS",
    "DEFAULT_INTRA_NODE_GBPS",
    "DEFAULT_SEQ_LEN",
    "DEFAULT_VOCAB",
    "GB",
    "GRADIENT_BYTES",
    "Hardware",
    "Layout",
    "Link",
    "Memory",
    "ModelShape",
    "RECOMPUTE",
    "Recompute",
    "WEIGHT_BYTES",
    "ZERO_STAGES",
    "activations_gb",
    "communication",
    "gb",
    "human_count",
    "model_states",
    "plan_layouts",
    "ring_allreduce_s",
]


@dataclass(frozen=True)
class Layout:
    """One way to run the job. It is feasible when ``reasons`` is empty."""

    data: int
    tensor: int
    pipeline: int
    zero: int
    micro_batch: int
    microbatches: int  # m, per data-parallel replica and step
    memory: Memory
    capacity_gb: float
    comm: Comm
    reasons: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.reasons

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity_gb

    @property
    def headroom_gb(self) -> float:
        return self.capacity_gb - self.memory.total

    @property
    def cost_s(self) -> float:
        """What the ranking minimises: communication plus the bubble's time (when known)."""
        return self.comm.total_s + (self.comm.bubble_s or 0.0)

    @property
    def label(self) -> str:
        return f"d={self.data} t={self.tensor} p={self.pipeline} ZeRO-{self.zero}"


def plan_layouts(
    model: ModelShape,
    hw: Hardware,
    micro_batch: int = 1,
    global_batch: int = DEFAULT_GLOBAL_BATCH,
    zero_stages: Iterable[int] = ZERO_STAGES,
    recompute: Recompute = "none",
) -> list[Layout]:
    """Every layout of ``hw.gpus`` GPUs: the feasible ones first, ranked best first, then the
    rejected ones, each with its reasons. Raises PlanError when none is feasible."""
    stages = sorted(set(zero_stages))
    problems = [f"ZeRO stage {z} does not exist (stages: 0, 1, 2, 3)" for z in stages if z not in ZERO_STAGES]
    if not stages:
        problems.append("no ZeRO stage to consider (stages: 0, 1, 2, 3)")
    if micro_batch < 1:
        problems.append(f"micro-batch must be at least 1 sequence, not {micro_batch}")
    if global_batch < micro_batch:
        problems.append(f"global batch {global_batch} is smaller than the micro-batch {micro_batch}")
    if recompute not in RECOMPUTE:
        problems.append(f"recompute {recompute!r} is not one of: {', '.join(RECOMPUTE)}")
    if problems:
        raise PlanError("impossible training settings", problems)

    layouts = []
    for tensor in _divisors(hw.gpus):
        for pipeline in _divisors(hw.gpus // tensor):
            data = hw.gpus // (tensor * pipeline)
            shape_reasons = _shape_reasons(model, hw, data, tensor, pipeline, micro_batch, global_batch)
            microbatches = max(1, global_batch // (micro_batch * data))
            for zero in stages:
                layouts.append(
                    _layout(model, hw, data, tensor, pipeline, zero, micro_batch, microbatches, global_batch, recompute, shape_reasons)
                )
    feasible = sorted(
        (x for x in layouts if x.feasible), key=lambda x: (x.cost_s, x.comm.bubble, x.memory.total, x.tensor, x.pipeline, x.zero)
    )
    if not feasible:
        raise _nothing_feasible(model, hw, layouts, stages, micro_batch, recompute)
    rejected = sorted((x for x in layouts if not x.feasible), key=lambda x: (x.tensor, x.pipeline, x.zero))
    return feasible + rejected


def _layout(model, hw, data, tensor, pipeline, zero, micro_batch, microbatches, global_batch, recompute, shape_reasons) -> Layout:
    states = model_states(model.parameters, data, zero, tensor * pipeline)
    activations = activations_gb(model, micro_batch, tensor, pipeline, microbatches, recompute)
    memory = Memory(states.parameters, states.gradients, states.optimizer, activations)
    reasons = list(shape_reasons)
    if zero and data == 1:
        reasons.append(_zero_is_stage_0(zero))
    if memory.total > hw.memory_gb:  # last, so _nothing_feasible can tell it from the others
        reasons.append(_memory_reason(memory, hw.memory_gb))
    comm = communication(model, hw, data, tensor, pipeline, zero, micro_batch, microbatches, global_batch, recompute)
    return Layout(data, tensor, pipeline, zero, micro_batch, microbatches, memory, hw.memory_gb, comm, tuple(reasons))


def _shape_reasons(
    model: ModelShape, hw: Hardware, data: int, tensor: int, pipeline: int, micro_batch: int, global_batch: int
) -> list[str]:
    """Why a decomposition cannot run at all, whatever its memory."""
    reasons = []
    if tensor > hw.gpus_per_node:
        # Tensor parallelism all-reduces activations in every layer: it needs the node's links.
        reasons.append(f"tensor degree {tensor} exceeds {hw.gpus_per_node} GPUs per node")
    elif hw.node_size % tensor:
        reasons.append(f"tensor degree {tensor} does not divide the {hw.node_size} GPUs of a node: its groups would straddle nodes")
    if model.assumed:  # the true counts are unknown, but every rank needs a head and every stage a layer
        if tensor > model.heads:
            reasons.append(
                f"tensor degree {tensor} exceeds the ~{model.heads} attention heads assumed for {human_count(model.parameters)} parameters"
            )
        if pipeline > model.layers:
            reasons.append(
                f"pipeline degree {pipeline} exceeds the ~{model.layers} layers assumed for {human_count(model.parameters)} parameters"
            )
    else:
        if model.heads % tensor:
            reasons.append(f"tensor degree {tensor} does not divide the {model.heads} attention heads")
        if model.layers % pipeline:
            reasons.append(f"pipeline degree {pipeline} does not divide the {model.layers} layers")
    if global_batch % (micro_batch * data):
        reasons.append(
            f"global batch {global_batch} is not a multiple of micro-batch {micro_batch} x data degree {data} = {micro_batch * data}"
        )
    return reasons


def _zero_is_stage_0(zero: int) -> str:
    return f"ZeRO shards over data-parallel replicas: with data degree 1, stage {zero} is stage 0"


def _memory_reason(memory: Memory, capacity_gb: float) -> str:
    return f"needs {gb(memory.total)} GB per GPU, {gb(capacity_gb)} GB available: {memory.breakdown()}"


def _nothing_feasible(
    model: ModelShape, hw: Hardware, layouts: list[Layout], stages: list[int], micro_batch: int, recompute: str
) -> PlanError:
    """The error for "no layout works", saying why; never an empty list."""
    where = f"{hw.gpus} GPU{'s' if hw.gpus != 1 else ''} of {gb(hw.memory_gb)} GB"
    memory_only = [x for x in layouts if not x.fits and len(x.reasons) == 1]
    if memory_only:
        best = min(memory_only, key=lambda x: x.memory.total)
        per_gpu = (WEIGHT_BYTES + GRADIENT_BYTES + ADAM_K) * model.parameters / hw.gpus / GB
        problems = [
            f"the least memory any layout needs is {gb(best.memory.total)} GB per GPU ({best.label}): {best.memory.breakdown()}",
            f"model states alone are 16 bytes per parameter, {gb(per_gpu)} GB per GPU even when sharded over all {hw.gpus} GPUs (ZeRO-3, "
            "or model parallelism, at its most)",
        ]
        least = math.ceil((WEIGHT_BYTES + GRADIENT_BYTES + ADAM_K) * model.parameters / (hw.memory_gb * GB))
        hints = [f"model states alone need at least {least} GPUs of {gb(hw.memory_gb)} GB; activations need more"]
        if 3 not in stages:
            hints.append(f"only ZeRO stage(s) {', '.join(map(str, stages))} were considered; stage 3 shards the most")
        if recompute != "full" or micro_batch > 1:
            hints.append("fewer activations: recompute them (selective, or full) or use a smaller micro-batch")
        return PlanError(f"{human_count(model.parameters)} parameters do not fit on {where} in any layout", problems, hints)
    # A stage-0 twin carries the same blockers, so "stage N is stage 0" only matters without stage 0.
    noise = {_zero_is_stage_0(z) for z in stages} if 0 in stages else set()
    problems = sorted({r for x in layouts for r in (x.reasons if x.fits else x.reasons[:-1])} - noise)
    suits = f"tensor degree dividing {model.heads} heads and at most {hw.gpus_per_node}, pipeline degree dividing {model.layers} layers"
    hints = [f"a GPU count whose factors suit the model ({suits}) and a global batch that splits evenly over the data-parallel replicas"]
    return PlanError(f"no layout of {human_count(model.parameters)} parameters can run on {where}", problems, hints)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]
