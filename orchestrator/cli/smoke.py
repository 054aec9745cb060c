"""`orchestrator smoke`: one short job per job shape, before the sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.options import cluster_option, project_option


@click.command()
@click.argument("targets", nargs=-1)
@cluster_option(old_short=False)
@click.option(
    "--partition",
    "-p",
    default=None,
    show_default="the profile's scheduler.smoke_partition",
    help="The partition the smoke jobs run in (CPU jobs keep their own).",
)
@project_option
def smoke(targets: tuple[str, ...], cluster: str | None, partition: str | None, project: Path) -> None:
    """Smoke-test every job shape of TARGETS: one two-minute job each, on the debug queue.

    TARGETS are stage names, item names (stage@...) or globs; default: all. The items are
    grouped by shape (stage x nodes x tasks per node x devices x partition x image), and each
    shape's first item runs its own job script (container, binds, CPU masks, staging,
    environment) with its command replaced by a probe. On every rank the probe checks the
    container and its binds, the GPUs and CPU mask the rank sees against the plan, that the
    stage's entry module imports from the (staged) run folder, and one all_reduce over all
    ranks. The jobs run in the profile's scheduler.smoke_partition, as many at once as the
    site allows; the command waits for them and prints a verdict per shape, naming a failing
    rank and what it found. Exit status 1 when a shape failed.

    Nothing of a smoke job touches the items' outputs, the ledger or dvc.lock. The verdicts
    are kept in .orchestrator/smoke/verdicts/ and `orchestrator submit` says which shapes
    passed and when.
    """
    from orchestrator.jobs import smoke as sm
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    planned = sm.plan(project, cluster, runner, targets, partition)
    click.echo(f"{len(planned.jobs)} shape(s) to smoke-test on {planned.ws.cluster}, each for at most two minutes")
    verdicts = sm.run(planned, runner, say=lambda text: click.echo(text, err=True))
    for v in verdicts:
        click.echo(sm.line(v))
    failed = [v for v in verdicts if not v.passed]
    click.echo(f"{len(verdicts) - len(failed)} of {len(verdicts)} shape(s) passed")
    if failed:
        sys.exit(1)
