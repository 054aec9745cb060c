"""Job specs: what one matrix item asks for, read from its ``orchestrator run`` argv.

A DVC stage runs an item with ``cmd: orchestrator run [OPTIONS] -- COMMAND...``.
``render`` reads the same argv from the resolved ``dvc.yaml`` and ``run`` reads it
from its own command line; both go through :func:`parse_run_args`, so they cannot
disagree about what an item asks for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import click

from orchestrator.errors import PipelineError
from orchestrator.slurm import requests, times
from orchestrator.slurm.requests import Requests


@dataclass(frozen=True)
class JobSpec:
    """Resources and command of one job, independent of any cluster."""

    command: tuple[str, ...]
    nodes: int = 1
    gpus_per_node: int = 1  # one task per GPU; on CPU-only profiles, processes per node
    # A CPU job (corpus preparation, tokenising): one task per node with this many cores and
    # no GPU, on the profile's CPU partition. None: the GPU layout above.
    cpus: int | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    binds: tuple[str, ...] = ()  # extra container binds (data directories)
    container: bool = True
    # Start the stage's other stale items with this one (orchestrator.jobs.together): how
    # `dvc repro` runs a matrix's items at once. Not part of the job: no script changes.
    together: bool = False
    # Memory, QOS, reservation, constraint and sbatch options of the stage's own; the plan puts
    # them over params.yaml's (Requests.over).
    requests: Requests = Requests()


def _check_time(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Checked here, for every profile: one without Slurm ignores the limit, but the
    # same stage on a cluster would then fail only when submitted.
    if value is not None and (why := times.problem(value)):
        raise click.BadParameter(why)
    return value


def _check_gpus(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    # Slurm's -G takes [type:]N; here the profile's partition (and constraint) decides the type.
    if value is None:
        return None
    kind, _, count = value.rpartition(":")
    if not count.isdigit() or int(count) < 1:
        raise click.BadParameter(f"{value!r} is not a number of GPUs (a whole number, at least 1)")
    if kind:
        raise click.BadParameter(
            f"{value!r}: the GPU type is the profile's (its partition, or --constraint): give the count only, -G {int(count)}"
        )
    return int(count)


def run_options(f):
    """The options of ``orchestrator run``; shared by the CLI and by render."""
    options = [
        click.option("--nodes", "-N", type=click.IntRange(min=1), default=1, show_default=True, help="Number of nodes."),
        click.option(
            "--gpus",
            callback=_check_gpus,
            default=None,
            metavar="N",
            help="GPUs of the whole job, as Slurm's --gpus: spread evenly over the nodes (a count that does not divide is "
            "refused); one task runs per GPU. Not with --gpus-per-node or --cpus.",
        ),
        # Slurm's -G, its --gpus. Its own option, not an alias of --gpus: in earlier releases it
        # was --gpus-per-node, and a project written then (-N 2 -G 8: 16 GPUs) would silently get
        # half. On one node the two meanings agree; on more it is refused, naming both spellings.
        click.option(
            "-G",
            "gpus_short",
            callback=_check_gpus,
            default=None,
            metavar="N",
            help="Slurm's -G: as --gpus on one node. With -N above 1 refused (it meant GPUs per node in earlier releases): "
            "write --gpus (the job's) or --gpus-per-node.",
        ),
        click.option(
            "--gpus-per-node",
            type=click.IntRange(min=1),
            default=None,  # None: not given (then JobSpec's 1), so --cpus may be: they exclude each other
            help="GPUs per node (default 1; Slurm has no short form for it); one task runs per GPU (CPU processes on "
            "CPU-only profiles). Not with --gpus or --cpus.",
        ),
        click.option(
            "--cpus",
            "-c",  # Slurm's --cpus-per-task: here too, cores per task
            type=click.IntRange(min=1),
            default=None,
            help="A CPU job: one task per node with this many cores and no GPU, on the profile's CPU partition.",
        ),
        click.option(
            "--time", "-t", default=None, callback=_check_time, help="Time limit (Slurm format); default from params or the profile."
        ),
        click.option("--partition", "-p", default=None, help="Partition; default from params or the profile."),
        click.option("--account", "-A", default=None, help="Account; default from params (orchestrator.account)."),
        click.option(
            "--mem", default=None, metavar="SIZE", help="Memory per node (Slurm's --mem, e.g. 64G); replaces params' and the partition's."
        ),
        click.option(
            "--mem-per-gpu", default=None, metavar="SIZE", help="Memory per GPU (Slurm's --mem-per-gpu). Not with --mem or --mem-per-cpu."
        ),
        click.option(
            "--mem-per-cpu", default=None, metavar="SIZE", help="Memory per CPU (Slurm's --mem-per-cpu). Not with --mem or --mem-per-gpu."
        ),
        click.option("--qos", "-q", default=None, help="QOS; default from params (orchestrator.qos) or the partition."),
        click.option("--reservation", default=None, help="Reservation to run in; default from params (orchestrator.reservation)."),
        click.option("--constraint", "-C", default=None, help="Node features, Slurm's expression (a&b, a|b); default from params."),
        click.option(
            "--sbatch-option",
            "sbatch_options",
            multiple=True,
            metavar="--NAME[=VALUE]",
            help="An sbatch option of your own, e.g. --sbatch-option=--licenses=scratch:1 (repeatable); not one the "
            "orchestrator sets itself (layout, partition, account, time, log, array, dependency).",
        ),
        click.option("--bind", "binds", multiple=True, help="Extra directory to bind into the container (repeatable)."),
        click.option("--no-container", is_flag=True, help="Run on the host even if the profile names an image."),
        click.option(
            "--together",
            is_flag=True,
            help="Start the stage's other stale items with this one (one job array on Slurm, parallel processes here).",
        ),
        click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED),
    ]
    for option in reversed(options):
        f = option(f)
    return f


# Everything after the first word of the command belongs to the command, as in
# `orchestrator run -N 2 python train.py --devices 8`.
@click.command(name="run", add_help_option=False, context_settings={"allow_interspersed_args": False})
@run_options
def _parser(**kwargs):  # pragma: no cover - only used through make_context
    pass


def _gpus_per_node(params: dict) -> int | None:
    """The GPUs per node the options ask for: --gpus-per-node, or Slurm's -G/--gpus (the whole
    job's) spread evenly over the nodes; None where neither is given."""
    short, per_node, nodes = params["gpus_short"], params["gpus_per_node"], params["nodes"]
    total = params["gpus"] if params["gpus"] is not None else short
    given = [f"{o} {v}" for o, v in (("--gpus", params["gpus"]), ("-G", short), ("--gpus-per-node", per_node)) if v is not None]
    if len(given) > 1:
        raise click.UsageError(
            f"{' and '.join(given)} exclude each other: --gpus (Slurm's -G) is the GPUs of the whole job, "
            "--gpus-per-node those of each node; give one of them"
        )
    if total is None:
        return per_node
    if short is not None and nodes > 1:
        spread = f"{short // nodes} per node" if short % nodes == 0 else f"a multiple of {nodes} to spread evenly"
        raise click.UsageError(
            f"-G {short} with -N {nodes}: Slurm reads -G as the GPUs of the whole job ({short} in all), while earlier releases of "
            f"`orchestrator run` read it per node ({short * nodes} in all); write which you mean: --gpus {short} (the job's, "
            f"{spread}) or --gpus-per-node {short}"
        )
    if total % nodes:
        raise click.UsageError(
            f"--gpus {total} does not spread evenly over {nodes} nodes: --gpus is the GPUs of the whole job (as in Slurm), "
            f"one task per GPU and the same on every node; give a multiple of {nodes}, or --gpus-per-node"
        )
    return total // nodes


def _run_spelling(field: str) -> str:
    """A Requests field as `run` spells it."""
    return "--sbatch-option" if field == "sbatch_options" else f"--{field.replace('_', '-')}"


def spec_from_options(params: dict) -> JobSpec:
    """The spec of parsed ``run`` options; click.UsageError for options that exclude each other."""
    gpus_per_node = _gpus_per_node(params)
    if params["cpus"] is not None and gpus_per_node is not None:
        gpus = next(o for o, k in (("--gpus", "gpus"), ("-G", "gpus_short"), ("--gpus-per-node", "gpus_per_node")) if params[k] is not None)
        raise click.UsageError(
            f"--cpus and {gpus} exclude each other: --cpus N is a CPU job (one task per node, N cores, no GPU), "
            f"{gpus} runs one task per GPU; give one of them"
        )
    asked = Requests(
        mem=params["mem"],
        mem_per_gpu=params["mem_per_gpu"],
        mem_per_cpu=params["mem_per_cpu"],
        qos=params["qos"],
        reservation=params["reservation"],
        constraint=params["constraint"],
        sbatch_options=tuple(params["sbatch_options"]),
    )
    if found := requests.problems(asked, _run_spelling):
        raise click.UsageError("; ".join(found))
    return JobSpec(
        command=tuple(params["command"]),
        nodes=params["nodes"],
        gpus_per_node=gpus_per_node or 1,
        cpus=params["cpus"],
        time=params["time"],
        partition=params["partition"],
        account=params["account"],
        binds=tuple(params["binds"]),
        container=not params["no_container"],
        together=params["together"],
        requests=asked,
    )


def parse_run_args(args: Sequence[str], where: str) -> JobSpec:
    """Parse the arguments after ``orchestrator run``; PipelineError starts with ``where``."""
    try:
        ctx = _parser.make_context("orchestrator run", list(args))
        return spec_from_options(ctx.params)
    except click.ClickException as exc:
        raise PipelineError(f"{where}: {exc.format_message()}") from exc


def run_args_of(argv: Sequence[str]) -> list[str] | None:
    """The arguments after ``orchestrator run`` if ``argv`` invokes it, else None.

    Accepts ``orchestrator run ...`` and ``python -m orchestrator run ...``.
    """
    if len(argv) >= 2 and os.path.basename(argv[0]) == "orchestrator" and argv[1] == "run":
        return list(argv[2:])
    if len(argv) >= 4 and re.fullmatch(r"python[0-9.]*", os.path.basename(argv[0])) and argv[1:4] == ["-m", "orchestrator", "run"]:
        return list(argv[4:])
    return None


_DEVICES = ("--devices", "--trainer.devices")
_NODES = ("--num-nodes", "--num_nodes", "--trainer.num_nodes")


def lightning_layout(command: Sequence[str]) -> tuple[str | None, str | None]:
    """The (devices, num_nodes) a training command passes to Lightning, if visible."""
    return _flag_value(command, _DEVICES), _flag_value(command, _NODES)


def _flag_value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    found = None
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in names:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    return found
