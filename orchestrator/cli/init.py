"""`orchestrator init`: what an existing DVC project needs to run its stages through the orchestrator.

The options, one call to :func:`orchestrator.project.adopt.adopt` (which owns what is added and
what is refused), and what it did, printed: a line per file, a line per stage of dvc.yaml saying
whether it runs through `orchestrator run` and, if not, how to make it (``--wrap STAGE`` /
``--wrap-all``). Run twice, the second run changes nothing and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.options import cluster_option, project_option

if TYPE_CHECKING:
    from orchestrator.pipeline.wrap import Stage


@click.command()
@cluster_option("The profile this workspace runs on, written to params.yaml", default="local")
@click.option("--account", default=None, help="Your Slurm account on that cluster, written to params.yaml (needed on a Slurm cluster).")
@click.option(
    "--image",
    default=None,
    help="What the tasks run in there, written to params.yaml: a containers/images.yaml entry or your image file "
    "(a path ending .sif); needed where the profile runs tasks in a container.",
)
@click.option(
    "--wrap",
    "wrap",
    multiple=True,
    metavar="STAGE",
    help="Run this stage through the orchestrator: its cmd after `orchestrator run --`, its outputs persist: true, "
    "provenance.json declared beside its metrics, orchestrator.cluster among its params (dvc.yaml rewritten in one "
    "rename, its comments kept). Repeatable.",
)
@click.option("--wrap-all", is_flag=True, help="--wrap every stage that can be wrapped (the others are named, with why).")
@project_option
def init(cluster: str | None, account: str | None, image: str | None, wrap: tuple[str, ...], wrap_all: bool, project: Path) -> None:
    """Add what an existing DVC project needs (params, ignores, images.yaml); change nothing else.

    Appends the `orchestrator:` section to params.yaml unless it has one, adds
    `.orchestrator/` to .gitignore and .dvcignore unless they ignore it, and
    writes containers/images.yaml unless it exists. Says of each stage whether it
    runs through `orchestrator run`, and how to make it (--wrap). Idempotent.
    """
    from orchestrator.project.adopt import adopt

    done = adopt(project, cluster, account=account, image=image, wrap=wrap, wrap_all=wrap_all)
    for c in done.changes:
        click.echo(f"{c.path}: {c.what}")
    for line in stage_lines(done.stages):
        click.echo(line)
    if not done.changed:
        click.echo("nothing to do: this project is set up already")
        return
    click.echo("next: `orchestrator render --check` (and `--cluster NAME` for another cluster), then `dvc repro`")


def stage_lines(stages: Sequence[Stage]) -> list[str]:
    """A line per stage of dvc.yaml: orchestrated or not, and what to do about it."""
    from orchestrator.pipeline import wrap

    lines = []
    for s in stages:
        if s.wrapped and not s.todo:
            lines.append(f"stage {s.name}: runs through `orchestrator run`")
        elif s.wrapped:
            lines.append(
                f"stage {s.name}: runs through `orchestrator run`, but needs {'; '.join(s.todo)}: `orchestrator init --wrap {s.name}`"
            )
        elif s.problem:
            lines.append(f"stage {s.name}: runs on this machine as DVC runs it; init cannot wrap it: {s.problem}")
        else:
            lines.append(
                f"stage {s.name}: runs on this machine as DVC runs it; to run it as a job, its cmd must start with "
                f"`{wrap.PREFIX}` (then `orchestrator run --help` for nodes, GPUs, time): `orchestrator init --wrap {s.name}` does it"
            )
    if not stages:
        lines.append("dvc.yaml has no stages yet: add one (dvc stage add), then `orchestrator init --wrap STAGE`")
    return lines
