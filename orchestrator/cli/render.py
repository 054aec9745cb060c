"""`orchestrator render`: every matrix item's job script, written (and checked) without submitting."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import cluster_option, project_option, table


@click.command()
@click.argument("targets", nargs=-1)
@cluster_option()
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output folder [default: .orchestrator/scripts/CLUSTER].",
)
@click.option("--form", type=click.Choice(["sbatch", "srun", "local"]), default=None, help="Script form (default: the profile's launcher).")
@click.option("--check", "do_check", is_flag=True, help="Check every plan and script (bash -n, shellcheck); exit non-zero on any problem.")
@click.option("--no-shellcheck", is_flag=True, help="With --check: skip shellcheck.")
@project_option
def render(
    targets: tuple[str, ...], cluster: str | None, out: Path | None, form: str | None, do_check: bool, no_shellcheck: bool, project: Path
) -> None:
    """Write the job script of every matrix item that calls `orchestrator run`.

    TARGETS are stage names, item names (stage@...) or globs; default: all.
    Nothing is written unless every item could be planned (and, with --check,
    every script passed its checks).
    """
    from orchestrator.scripts import matrix
    from orchestrator.scripts.plan import safe_name
    from orchestrator.scripts.workspace import SCRIPTS_DIR
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    rendered = matrix.render_matrix(project, cluster, runner, targets, form)  # type: ignore[arg-type]
    if do_check:
        rendered = matrix.check_or_raise(rendered, runner, shellcheck=not no_shellcheck)
    out_dir = out or project / SCRIPTS_DIR / safe_name(rendered.profile.name)
    matrix.write(rendered, out_dir, replace_all=not targets)
    summary(rendered.plans)
    checked = " and checked" if do_check else ""
    click.echo(f"{len(rendered.scripts)} script(s) for {rendered.profile.name}{checked} in {out_dir}")


def summary(plans, limit: int = 40) -> None:
    """A row per item for small matrices; per layout for big ones (a table of
    thousands of rows helps no one and costs half a second)."""
    if len(plans) <= limit:
        rows = [(p.item, f"{p.nodes}x{p.tasks_per_node}", p.partition or "-", p.time or "-") for p in plans]
        table(("item", "nodes x tasks", "partition", "time"), rows)
        return
    counts: dict[tuple[str, str, str], int] = {}
    for p in plans:
        key = (f"{p.nodes}x{p.tasks_per_node}", p.partition or "-", p.time or "-")
        counts[key] = counts.get(key, 0) + 1
    table(("items", "nodes x tasks", "partition", "time"), [(str(n), *key) for key, n in counts.items()])
