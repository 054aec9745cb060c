"""`orchestrator layout`: the parallel layouts of a model on some GPUs, ranked, with the reasoning.

The arithmetic lives in :mod:`~orchestrator.analysis.layout` (pure; its docstring has the formulas and their
sources), the GPUs' facts from options, a profile or defaults in :mod:`~orchestrator.analysis.layout_hardware`.
This module turns the options into its inputs and prints
its answer as a table, JSON or Markdown. Only click and :mod:`~orchestrator.analysis.layout` are imported at
start-up; the profile loader and rich come in when the command runs.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass

import click

from orchestrator.analysis import layout as lay
from orchestrator.cli.options import FiniteFloat, cluster_option

_COUNT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)(e[+-]?\d+)?\s*([kmbt]?)\s*", re.IGNORECASE)
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


class Count(click.ParamType):
    """A parameter count: 13B, 7.5e9, 350M, 1.2T, 125000000."""

    name = "count"

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        m = _COUNT.fullmatch(value)
        if m is None:
            self.fail(f"{value!r} is not a parameter count (examples: 13B, 7.5e9, 350M)", param, ctx)
        number = float(m.group(1) + (m.group(2) or "")) * _SUFFIX[m.group(3).lower()]
        if number <= 0:
            self.fail(f"{value!r}: a model has more than 0 parameters", param, ctx)
        if not number <= MAX_PARAMETERS:  # also inf, where 1e400 overflows
            self.fail(f"{value!r}: more than any model this can place (at most {MAX_PARAMETERS:.0e} parameters)", param, ctx)
        return number


# A thousand times today's largest models; past it the memory figures overflow.
MAX_PARAMETERS = 1e15


@dataclass(frozen=True)
class _Inputs:
    model: lay.ModelShape
    hardware: lay.Hardware
    sources: dict[str, str]  # hardware field -> where its value came from
    micro_batch: int
    global_batch: int
    zero_stages: tuple[int, ...]
    recompute: lay.Recompute


_POSITIVE = FiniteFloat(min=0, min_open=True)  # nan and inf would price a layout at nothing or forever


PROFILES = "the profile's"  # a value not given comes from --cluster's profile


@click.command("layout")
@click.option(
    "--parameters",
    type=Count(),
    help="Parameter count (13B, 7.5e9, 350M). Alone, a GPT-3-like shape is assumed for activations and traffic.",
)
@click.option(
    "--layers",
    type=click.IntRange(min=1),
    help="Transformer layers (with --hidden and --heads: parameters = 12 x layers x hidden^2 + vocab x hidden).",
)
@click.option("--hidden", type=click.IntRange(min=1), help="Hidden size.")
@click.option("--heads", type=click.IntRange(min=1), help="Attention heads.")
@click.option("--seq-len", type=click.IntRange(min=1), default=lay.DEFAULT_SEQ_LEN, show_default=True, help="Sequence length (tokens).")
@click.option(
    "--vocab", type=click.IntRange(min=0), default=lay.DEFAULT_VOCAB, show_default=True, help="Vocabulary size (GPT-2's by default)."
)
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs of the job (a multiple of the GPUs per node).")
@cluster_option(
    "Built-in profile name or profile file: GPUs per node, memory, peak FLOP/s (and bandwidths, when it has them)", default=None
)
@click.option("--gpus-per-node", type=click.IntRange(min=1), show_default=PROFILES, help="GPUs per node.")
@click.option("--gpu-memory-gb", type=_POSITIVE, show_default=PROFILES, help="Memory per GPU in GB.")
@click.option(
    "--intra-node-gbps",
    type=_POSITIVE,
    show_default=f"{PROFILES}, else {lay.DEFAULT_INTRA_NODE_GBPS:g}: A100 NVLink3, 12 links x 25 GB/s",
    help="GB/s per GPU, one direction, inside a node.",
)
@click.option(
    "--inter-node-gbps",
    type=_POSITIVE,
    show_default=f"{PROFILES}, else {lay.DEFAULT_INTER_NODE_GBPS:g}: one 200 Gb/s NIC per GPU",
    help="GB/s per GPU, one direction, between nodes: the node's injection bandwidth / its GPUs.",
)
@click.option("--peak-tflops", type=_POSITIVE, show_default=PROFILES, help="Dense 16-bit TFLOP/s per GPU, to price the pipeline bubble.")
@click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True, help="Sequences per micro-batch.")
@click.option(
    "--global-batch", type=click.IntRange(min=1), default=lay.DEFAULT_GLOBAL_BATCH, show_default=True, help="Sequences per optimizer step."
)
@click.option(
    "--zero", type=click.Choice(["0", "1", "2", "3", "all"]), default="all", show_default=True, help="ZeRO stage(s) to consider (3 = FSDP)."
)
@click.option("--recompute", type=click.Choice(lay.RECOMPUTE), default="none", show_default=True, help="Activation recomputation.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Feasible layouts to show.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
def layout(fmt: str, top: int, **options) -> None:
    """Rank the data x tensor x pipeline (x ZeRO) layouts of a model on GPUS GPUs.

    Each layout shows its memory per GPU (parameters, gradients, optimizer states,
    activations) and its predicted communication per step. Every rejected layout says
    why. The formulas and their sources: `python -m pydoc orchestrator.analysis.layout`.
    """
    inputs = _inputs(**options)
    layouts = lay.plan_layouts(inputs.model, inputs.hardware, inputs.micro_batch, inputs.global_batch, inputs.zero_stages, inputs.recompute)
    feasible = [x for x in layouts if x.feasible]
    rejected = [x for x in layouts if not x.feasible]
    render = {"table": _table, "json": _json, "markdown": _markdown}[fmt]
    render(inputs, feasible[:top], len(feasible), rejected)


# --- inputs --------------------------------------------------------------------------


def _inputs(
    parameters,
    layers,
    hidden,
    heads,
    seq_len,
    vocab,
    gpus,
    cluster,
    gpus_per_node,
    gpu_memory_gb,
    intra_node_gbps,
    inter_node_gbps,
    peak_tflops,
    micro_batch,
    global_batch,
    zero,
    recompute,
) -> _Inputs:
    model = _model(parameters, layers, hidden, heads, seq_len, vocab)
    hardware, sources = _hardware(gpus, cluster, gpus_per_node, gpu_memory_gb, intra_node_gbps, inter_node_gbps, peak_tflops)
    stages = lay.ZERO_STAGES if zero == "all" else (int(zero),)
    return _Inputs(model, hardware, sources, micro_batch, global_batch, stages, recompute)


def _model(parameters, layers, hidden, heads, seq_len, vocab) -> lay.ModelShape:
    shape = {"--layers": layers, "--hidden": hidden, "--heads": heads}
    missing = [name for name, value in shape.items() if value is None]
    if len(missing) < len(shape):
        if missing:
            raise click.UsageError(f"--layers, --hidden and --heads go together (missing: {', '.join(missing)})")
        return lay.ModelShape.from_architecture(layers, hidden, heads, seq_len, vocab, parameters)
    if parameters is None:
        raise click.UsageError("give the model: --parameters (e.g. 13B), or --layers, --hidden and --heads")
    return lay.ModelShape.from_parameters(parameters, seq_len)


def _hardware(gpus, cluster, gpus_per_node, memory_gb, intra, inter, peak) -> tuple[lay.Hardware, dict[str, str]]:
    from orchestrator.analysis.layout_hardware import choose

    given = {
        "gpus_per_node": gpus_per_node,
        "memory_gb": memory_gb,
        "intra_node_gbps": intra,
        "inter_node_gbps": inter,
        "peak_tflops": peak,
    }
    chosen = choose(gpus, cluster, given)
    if chosen.hardware is None:
        from orchestrator.config import profile

        missing = [_OPTION[key] for key in chosen.missing]
        raise click.UsageError(
            f"missing {' and '.join(missing)}: give them, or --cluster NAME (built-in: {', '.join(profile.builtin_names())})"
        )
    return chosen.hardware, chosen.sources


_OPTION = {"gpus_per_node": "--gpus-per-node", "memory_gb": "--gpu-memory-gb"}  # the option that gives each required value


# --- what is printed ---------------------------------------------------------------


def _context(i: _Inputs) -> list[tuple[str, str]]:
    hw, src = i.hardware, i.sources
    profiles = sorted({v for v in src.values() if v.startswith("profile ")})

    def where(key: str) -> str:
        # Marked: defaults, and options that override a profile (the line names the profile once).
        source = src.get(key, "")
        return f" ({source})" if source == "default" or (source == "option" and profiles) else ""

    nodes = f"{hw.nodes} node{'s' if hw.nodes != 1 else ''} of {hw.gpus_per_node}{where('gpus_per_node')}"
    gpus = f"{hw.gpus} GPU{'s' if hw.gpus != 1 else ''}"
    peak = f"peak {hw.peak_tflops:g} TFLOP/s{where('peak_tflops')}" if hw.peak_tflops else "peak TFLOP/s unknown"
    stages = ", ".join(map(str, i.zero_stages))
    return [
        ("model", i.model.describe()),
        (
            "hardware",
            f"{gpus} on {nodes}, {lay.gb(hw.memory_gb)} GB each{where('memory_gb')}; {peak}" + "".join(f" (from {p})" for p in profiles),
        ),
        (
            "bandwidth",
            f"{lay.gb(hw.intra_node_gbps)} GB/s per GPU in a node{where('intra_node_gbps')}, {lay.gb(hw.inter_node_gbps)} GB/s per GPU "
            f"between nodes{where('inter_node_gbps')}",
        ),
        (
            "training",
            f"micro-batch {i.micro_batch}, global batch {i.global_batch}, recompute {i.recompute}, ZeRO stage(s) {stages}; mixed-precision "
            "Adam, 2 + 2 + 12 bytes per parameter",
        ),
    ]


def _notes(i: _Inputs) -> list[str]:
    notes = []
    if i.model.assumed:
        notes.append(
            "the shape is assumed from the parameter count: t and p were not checked to divide its heads and layers; give --layers, "
            "--hidden and --heads for exact figures"
        )
    if i.hardware.peak_tflops is None:
        notes.append(
            "the pipeline bubble is not priced in seconds (no peak TFLOP/s): give --peak-tflops, or a --cluster whose profile has it"
        )
    if "default" in i.sources.values():
        notes.append(
            "default bandwidths used (see --intra-node-gbps, --inter-node-gbps); measure yours with nccl-tests/rccl-tests (bus bandwidth)"
        )
    notes.append(
        "communication is not assumed to overlap computation (an upper bound); "
        "formulas and sources: python -m pydoc orchestrator.analysis.layout"
    )
    return notes


def _seconds(value: float) -> str:
    return f"{value:.3g}"


def _with_link(seconds: float, link: str | None) -> str:
    return "-" if link is None else f"{_seconds(seconds)} {'node' if link == 'node' else 'net'}"


def _bubble(x: lay.Layout) -> str:
    if x.pipeline == 1:
        return "-"
    text = f"{x.comm.bubble:.1%}"
    return text if x.comm.bubble_s is None else f"{text} {_seconds(x.comm.bubble_s)}s"


HEADER = (
    "#",
    "d",
    "t",
    "p",
    "ZeRO",
    "params",
    "grads",
    "optim",
    "activ",
    "total GB",
    "free GB",
    "DP s",
    "TP s",
    "PP s",
    "bubble",
    "comm+bubble s",
)


def _row(rank: int, x: lay.Layout) -> tuple[str, ...]:
    m, c = x.memory, x.comm
    return (
        str(rank),
        str(x.data),
        str(x.tensor),
        str(x.pipeline),
        str(x.zero),
        lay.gb(m.parameters),
        lay.gb(m.gradients),
        lay.gb(m.optimizer),
        lay.gb(m.activations),
        lay.gb(m.total),
        lay.gb(x.headroom_gb),
        _with_link(c.data_s, c.data_link),
        _with_link(c.tensor_s, c.tensor_link),
        _with_link(c.pipeline_s, c.pipeline_link),
        _bubble(x),
        _seconds(x.cost_s),
    )


def _why(x: lay.Layout, hw: lay.Hardware) -> str:
    """The reasoning behind a layout, in words."""
    bandwidth = {"node": f"in a node, {lay.gb(hw.intra_node_gbps)} GB/s", "network": f"over the network, {lay.gb(hw.inter_node_gbps)} GB/s"}
    groups = [
        f"{what} {size} {bandwidth[link]}"
        for what, size, link in (
            ("tensor groups of", x.tensor, x.comm.tensor_link),
            ("data groups of", x.data, x.comm.data_link),
            ("pipeline of", x.pipeline, x.comm.pipeline_link),
        )
        if link is not None
    ] or ["one GPU, no communication"]
    bubble = f"; bubble {x.comm.bubble:.1%} of compute ({x.microbatches} micro-batches)" if x.pipeline > 1 else ""
    return (
        f"{x.label}: {'; '.join(groups)}. {lay.gb(x.memory.total)} of {lay.gb(x.capacity_gb)} GB per GPU ({lay.gb(x.headroom_gb)} GB "
        "free); "
        f"{_seconds(x.comm.total_s)} s of communication per step{bubble}."
    )


def _table(i: _Inputs, shown: list[lay.Layout], feasible: int, rejected: list[lay.Layout]) -> None:
    from rich.console import Console
    from rich.table import Table

    # Piped output (CI logs, files) gets whole lines; a terminal gets its own width.
    console = Console(width=None if sys.stdout.isatty() else 1000, highlight=False)
    for key, text in _context(i):
        console.print(f"{key:<10} {text}", markup=False)
    console.print(
        f"\nFeasible layouts, best first ({len(shown)} of {feasible} shown): memory per GPU in GB; seconds per step; node/net = the "
        "group's link",
        markup=False,
    )
    table = Table(*HEADER, box=None, pad_edge=False, header_style="bold")
    for rank, x in enumerate(shown, 1):
        table.add_row(*_row(rank, x))
    console.print(table)
    console.print(f"\nWhy #1: {_why(shown[0], i.hardware)}", markup=False)
    console.print(f"\nRejected ({len(rejected)}):", markup=False)
    for x in rejected:
        console.print(f"  {x.label}: {'; '.join(x.reasons)}", markup=False)
    console.print("\nNotes:", markup=False)
    for note in _notes(i):
        console.print(f"  - {note}", markup=False)


def _markdown(i: _Inputs, shown: list[lay.Layout], feasible: int, rejected: list[lay.Layout]) -> None:
    lines = [f"- **{key}**: {text}" for key, text in _context(i)]
    lines += ["", f"**Feasible layouts**, best first ({len(shown)} of {feasible} shown; memory per GPU in GB, seconds per step)", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_row(rank, x)) + " |" for rank, x in enumerate(shown, 1)]
    lines += ["", f"Why #1: {_why(shown[0], i.hardware)}", "", f"**Rejected** ({len(rejected)}):", ""]
    lines += [f"- `{x.label}`: {'; '.join(x.reasons)}" for x in rejected]
    lines += ["", "Notes:", ""] + [f"- {note}" for note in _notes(i)]
    click.echo("\n".join(lines))


def _json(i: _Inputs, shown: list[lay.Layout], feasible: int, rejected: list[lay.Layout]) -> None:
    document = {
        "model": asdict(i.model),
        "hardware": {**asdict(i.hardware), "sources": i.sources},
        "training": {
            "micro_batch": i.micro_batch,
            "global_batch": i.global_batch,
            "zero_stages": list(i.zero_stages),
            "recompute": i.recompute,
        },
        "feasible_count": feasible,
        "feasible": [_record(x, rank) for rank, x in enumerate(shown, 1)],
        "rejected": [_record(x) for x in rejected],
        "notes": _notes(i),
    }
    click.echo(json.dumps(document, indent=2))


def _record(x: lay.Layout, rank: int | None = None) -> dict:
    m, c = x.memory, x.comm
    record = {"rank": rank} if rank is not None else {}
    return record | {
        "data": x.data,
        "tensor": x.tensor,
        "pipeline": x.pipeline,
        "zero": x.zero,
        "microbatches": x.microbatches,
        "memory_gb": {k: round(v, 4) for k, v in (*asdict(m).items(), ("total", m.total))},
        "capacity_gb": x.capacity_gb,
        "headroom_gb": round(x.headroom_gb, 4),
        "comm_s": {
            "data": round(c.data_s, 6),
            "tensor": round(c.tensor_s, 6),
            "pipeline": round(c.pipeline_s, 6),
            "total": round(c.total_s, 6),
        },
        "links": {"data": c.data_link, "tensor": c.tensor_link, "pipeline": c.pipeline_link},
        "bubble": round(c.bubble, 6),
        "bubble_s": None if c.bubble_s is None else round(c.bubble_s, 6),
        "cost_s": round(x.cost_s, 6),
        "reasons": list(x.reasons),
    }
