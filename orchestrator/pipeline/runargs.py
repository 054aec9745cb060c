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
from orchestrator.slurm import times


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


def _check_time(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Checked here, for every profile: one without Slurm ignores the limit, but the
    # same stage on a cluster would then fail only when submitted.
    if value is not None and (why := times.problem(value)):
        raise click.BadParameter(why)
    return value


def run_options(f):
    """The options of ``orchestrator run``; shared by the CLI and by render."""
    options = [
        click.option("--nodes", "-N", type=click.IntRange(min=1), default=1, show_default=True, help="Number of nodes."),
        click.option(
            "--gpus-per-node",
            "-G",
            type=click.IntRange(min=1),
            default=None,  # None: not given (then JobSpec's 1), so --cpus may be: they exclude each other
            help="GPUs per node (default 1); one task runs per GPU (CPU processes on CPU-only profiles). Not with --cpus.",
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


def spec_from_options(params: dict) -> JobSpec:
    """The spec of parsed ``run`` options; click.UsageError for options that exclude each other."""
    if params["cpus"] is not None and params["gpus_per_node"] is not None:
        raise click.UsageError(
            "--cpus and --gpus-per-node exclude each other: --cpus N is a CPU job (one task per node, N cores, no GPU), "
            "--gpus-per-node G runs G tasks per node, one per GPU; give one of them"
        )
    return JobSpec(
        command=tuple(params["command"]),
        nodes=params["nodes"],
        gpus_per_node=params["gpus_per_node"] or 1,
        cpus=params["cpus"],
        time=params["time"],
        partition=params["partition"],
        account=params["account"],
        binds=tuple(params["binds"]),
        container=not params["no_container"],
        together=params["together"],
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
