"""`orchestrator clusters`: the built-in cluster profiles, and one profile's topology and binding."""

from __future__ import annotations

import click

from orchestrator.cli.options import WholeGroup, table


@click.group(cls=WholeGroup, invoke_without_command=True)
@click.pass_context
def clusters(ctx: click.Context) -> None:
    """List the built-in cluster profiles (or `show` one)."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.config import profile

    rows = []
    for name in profile.builtin_names():
        p = profile.load(name).profile
        gpus = f"{p.node.gpus} x {p.node.gpu.model}" if p.node.gpus and p.node.gpu else str(p.node.gpus)
        rows.append((name, p.scheduler.kind, gpus, p.description))
    table(("name", "scheduler", "GPUs per node", "description"), rows)
    click.echo("\nDetails: orchestrator clusters show NAME; a copy to edit: orchestrator clusters show NAME --format yaml")


@clusters.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "yaml"]), default="text", show_default=True)
def clusters_show(name: str, fmt: str) -> None:
    """Show a profile's topology and derived CPU binding (NAME or a profile file)."""
    from orchestrator.config import profile, topology

    loaded = profile.load(name)
    if fmt == "yaml":
        click.echo(loaded.text, nl=False)
        return
    click.echo(topology.describe(loaded))
