"""Options and output shared by the commands, declared once so they cannot drift."""

from __future__ import annotations

import sys
from pathlib import Path

import click

# How `run`, `render`, `submit`, `report` and `container build --push` choose a profile
# (config.selection does the choosing; this only says it).
CLUSTER_DEFAULT = "default: params.yaml's orchestrator.cluster, else the profile whose cluster_name is Slurm's ClusterName, else local"


def cluster_option(what: str = "Built-in profile name or profile file", default: str | None = CLUSTER_DEFAULT):
    """``--cluster/-c``; ``default`` says how the profile is chosen when it is not given."""
    return click.option("--cluster", "-c", default=None, help=f"{what} ({default})." if default else f"{what}.")


project_option = click.option(
    "--project",
    "project",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The DVC project (folder with dvc.yaml).",
)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(*header, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        t.add_row(*row)
    # Piped output (CI logs) gets whole lines, a terminal gets its own width.
    Console(width=None if sys.stdout.isatty() else 1000).print(t)
